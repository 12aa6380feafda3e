"""Model weight files: one ``model.safetensors``, or compact shards that leave out what the base model ships.

A compact save writes ``model.safetensors.index.json`` plus ``model-NNNNN.safetensors`` shards, each at most
``max_shard_mb`` MiB (a tensor larger than that is split by rows across shards), optionally in float16 or int8
(weight matrices quantized per row, symmetric, with a float32 scale per row; small tensors float16; the token
filter always float32, so that it keeps the same tokens as the model that built an index), or
``int8-phrase`` (the phrase encoder int8, the query side float16: a phrase encoder that came from an int8 copy
and was frozen since, as in query-side fine-tuning, is stored exactly, and the fine-tuned query side loses
nothing), and
optionally without the tensors that are bit-identical to the base model's (the frozen word embeddings of a
model trained from ``minilm``): those are recorded by base key and SHA-256 and read back from the base model
at load time, which must then be installed. Everything is safetensors and JSON; nothing is unpickled.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import torch

from .._util.atomic import file_sha256, write_file_atomic
from .._util.lazy import require
from .._util.nofollow import refuse_symlink
from ..errors import InvalidParameterError, ModelLoadError
from .registry import resolve_base

WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
WEIGHTS_FORMAT = "dphr-weights"
WEIGHTS_FORMAT_VERSION = 1
ENCODER_PREFIXES = ("phrase_encoder.", "query_start_encoder.", "query_end_encoder.", "query_encoder.")
SHARD_HEADER_ROOM = 64 * 1024
DTYPES = {"float32": torch.float32, "float16": torch.float16, "int8": torch.int8}
# Storage options mixing dtypes by key prefix (first match; otherwise the last entry's dtype).
MIXED_DTYPES = {"int8-phrase": (("phrase_encoder.", "int8"), ("", "float16"))}
STORAGE_DTYPES = (*DTYPES, *MIXED_DTYPES)
INT8_MIN_ELEMENTS = 4096  # matrices at least this large are quantized; biases and LayerNorms stay float16
# Stored in float32 under every option: the token filter decides which tokens an index keeps, and a logit rounded
# across the threshold would keep another set than the model that built the index (it is a few hundred KB at most).
EXACT_PREFIXES = ("filter_linear.",)
SCALE_SUFFIX = "::scale"


def tensor_sha256(tensor: torch.Tensor) -> str:
    """SHA-256 of a tensor's dtype, shape and bytes."""
    tensor = tensor.detach().cpu().contiguous()
    digest = hashlib.sha256(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
    if tensor.numel():
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())  # the tensor's own bytes, not a copy
    return digest.hexdigest()


def _save_safetensors(safetensors_torch, tensors: dict[str, torch.Tensor], file: Path) -> None:
    """One safetensors file, written under a fresh temporary name and renamed (never through a symbolic link)."""
    metadata = {"format": "pt", "dphr": "1"}
    write_file_atomic(file, lambda tmp: safetensors_torch.save_file(tensors, str(tmp), metadata=metadata), fsync=False)


def write_weights(
    state: dict[str, torch.Tensor],
    path: Path,
    dtype: str = "float32",
    max_shard_mb: float | None = None,
    base_state: dict[str, torch.Tensor] | None = None,
    base_model: str = "",
) -> dict[str, Any]:
    """Write ``state`` to ``path``; returns a summary (files, bytes, tensors taken from the base).

    Without ``max_shard_mb``, ``dtype="float32"`` and ``base_state`` this is the single ``model.safetensors``.
    """
    safetensors_torch = require("safetensors.torch")
    if dtype not in STORAGE_DTYPES:
        raise InvalidParameterError(f"weights dtype {dtype!r}; valid: {', '.join(STORAGE_DTYPES)}")
    if max_shard_mb is not None and not max_shard_mb > 0:
        raise InvalidParameterError(f"max_shard_mb must be > 0, got {max_shard_mb}")
    stale_files = [path / WEIGHTS_FILE, path / WEIGHTS_INDEX_FILE, *path.glob("model-*.safetensors")]
    for stale in stale_files:
        refuse_symlink(stale)  # a planted link means someone else's files are here: stop before changing any
    for stale in stale_files:
        stale.unlink(missing_ok=True)
    from_base = _base_references(state, base_state) if base_state is not None else {}
    stored: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key not in from_base:
            stored.update(_encode(key, value, _dtype_of(key, dtype)))
    if max_shard_mb is None and dtype == "float32" and not from_base:
        _save_safetensors(safetensors_torch, stored, path / WEIGHTS_FILE)
        return {"files": [WEIGHTS_FILE], "bytes": (path / WEIGHTS_FILE).stat().st_size, "from_base": 0}
    # safetensors adds a JSON header (tensor names, shapes, offsets) to each shard: keep room for it
    limit = max(1, int(max_shard_mb * 2**20) - SHARD_HEADER_ROOM) if max_shard_mb is not None else None
    pieces, split = _split_rows(stored, limit)
    shards = _pack(pieces, limit)
    weight_map: dict[str, str] = {}
    files = []
    for number, shard in enumerate(shards, 1):
        name = f"model-{number:05d}.safetensors"
        _save_safetensors(safetensors_torch, shard, path / name)
        weight_map.update({key: name for key in shard})
        files.append(name)
    index = {
        "format": WEIGHTS_FORMAT,
        "format_version": WEIGHTS_FORMAT_VERSION,
        "dtype": dtype,
        "base_model": base_model,
        "weight_map": weight_map,
        "split": split,
        "from_base": from_base,
        "files_sha256": {name: file_sha256(path / name) for name in files},
    }
    write_file_atomic(path / WEIGHTS_INDEX_FILE, json.dumps(index, indent=1, sort_keys=True), fsync=False)
    return {
        "files": files + [WEIGHTS_INDEX_FILE],
        "bytes": sum((path / f).stat().st_size for f in files),
        "from_base": len(from_base),
    }


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The float32 state dict saved in ``path`` by :func:`write_weights` (single file or compact shards)."""
    if (path / WEIGHTS_FILE).is_file():
        return _read_safetensors(path / WEIGHTS_FILE)
    index_file = path / WEIGHTS_INDEX_FILE
    try:
        index = json.loads(index_file.read_text())
        if not isinstance(index, dict) or index.get("format") != WEIGHTS_FORMAT:
            raise ValueError("not a dphr weights index")
        if index.get("format_version") != WEIGHTS_FORMAT_VERSION:
            raise ValueError(
                f"format version {index.get('format_version')!r}, this library reads {WEIGHTS_FORMAT_VERSION}"
            )
        weight_map, split, from_base = index["weight_map"], index["split"], index["from_base"]
        files = sorted(set(weight_map.values()))
        sums = index["files_sha256"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"cannot read {index_file}: {exc}") from exc
    pieces: dict[str, torch.Tensor] = {}
    for name in files:
        file = path / name
        if Path(name).name != name or not file.is_file() or file_sha256(file) != sums.get(name):
            raise ModelLoadError(f"{file} is missing or corrupted (checksum mismatch with {index_file.name})")
        pieces.update(_read_safetensors(file))
    try:
        state = {}
        for key in {k.split("::part")[0] for k in pieces}:
            parts = split.get(key)
            state[key] = torch.cat([pieces[f"{key}::part{i}"] for i in range(parts)]) if parts else pieces[key]
        state = _decode(state)
    except (KeyError, TypeError, RuntimeError) as exc:
        raise ModelLoadError(f"{index_file} does not match its shards: {type(exc).__name__}: {exc}") from exc
    if from_base:
        state.update(
            {k: v.float() for k, v in _read_from_base(index.get("base_model", ""), from_base, index_file).items()}
        )
    return state


def read_base_state(base_model: str) -> dict[str, torch.Tensor]:
    """The safetensors weights of a base model directory (``minilm`` resolves to the offline package)."""

    try:
        directory = Path(resolve_base(base_model))
    except ImportError as exc:
        raise ModelLoadError(f"base model {base_model!r} is not installed ({exc})") from exc
    if not (directory / WEIGHTS_FILE).is_file():
        raise ModelLoadError(f"base model {base_model!r}: {directory / WEIGHTS_FILE} not found")
    return _read_safetensors(directory / WEIGHTS_FILE)


def _base_references(state: dict[str, torch.Tensor], base: dict[str, torch.Tensor]) -> dict[str, dict[str, str]]:
    """Keys of ``state`` whose tensor equals the base's (encoder prefix removed): {key: {base_key, sha256}}."""
    out = {}
    for key, value in state.items():
        prefix = next((p for p in ENCODER_PREFIXES if key.startswith(p)), None)
        base_key = key[len(prefix) :] if prefix else None
        reference = base.get(base_key) if base_key else None
        if (
            reference is not None
            and reference.shape == value.shape
            and reference.dtype == value.dtype
            and torch.equal(reference, value.detach().cpu())
        ):
            out[key] = {"base_key": base_key, "sha256": tensor_sha256(reference)}
    return out


def _read_from_base(base_model: str, from_base: dict[str, Any], index_file: Path) -> dict[str, torch.Tensor]:
    if not base_model:
        raise ModelLoadError(f"{index_file} takes tensors from a base model but names none")
    base = read_base_state(base_model)
    out = {}
    for key, ref in from_base.items():
        tensor = base.get(ref.get("base_key")) if isinstance(ref, dict) else None
        if tensor is None or tensor_sha256(tensor) != ref.get("sha256"):
            raise ModelLoadError(
                f"{index_file}: {key} comes from base model {base_model!r}, whose "
                f"{ref.get('base_key') if isinstance(ref, dict) else ref!r} is missing or differs "
                "(another version of the base is installed)"
            )
        out[key] = tensor
    return out


def _dtype_of(key: str, dtype: str) -> str:
    """The plain dtype ``key`` is stored in under the storage option ``dtype``."""
    rules = MIXED_DTYPES.get(dtype)
    if rules is None:
        return dtype
    return next((plain for prefix, plain in rules if key.startswith(prefix)), rules[-1][1])


def _encode(key: str, tensor: torch.Tensor, dtype: str) -> dict[str, torch.Tensor]:
    """One tensor as stored: cast to float16, or (int8) rows quantized symmetrically with a float32 scale per row."""
    tensor = tensor.detach().cpu()
    if not tensor.is_floating_point():
        return {key: tensor.contiguous()}
    if key.startswith(EXACT_PREFIXES):
        return {key: tensor.float().contiguous()}
    if dtype != "int8":
        return {key: tensor.to(DTYPES[dtype]).contiguous()}
    if tensor.dim() != 2 or tensor.numel() < INT8_MIN_ELEMENTS:
        return {key: tensor.to(torch.float16).contiguous()}
    scale = tensor.float().abs().amax(dim=1).clamp_min(1e-12) / 127.0
    codes = torch.round(tensor.float() / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return {key: codes.contiguous(), key + SCALE_SUFFIX: scale.contiguous()}


def _decode(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Float32 tensors back from :func:`_encode`'s output."""
    out = {}
    for key, tensor in state.items():
        if key.endswith(SCALE_SUFFIX):
            continue
        scale = state.get(key + SCALE_SUFFIX)
        if scale is not None:
            if tensor.dtype != torch.int8 or scale.shape != tensor.shape[:1]:
                raise ModelLoadError(
                    f"{key}: int8 codes {tuple(tensor.shape)} do not match scales {tuple(scale.shape)}"
                )
            tensor = torch.mul(tensor, scale.float()[:, None])  # int8 * float32 -> float32 in one pass
        elif tensor.dtype == torch.int8:
            raise ModelLoadError(f"{key}: int8 weights without their {SCALE_SUFFIX} row scales")
        out[key] = tensor.float() if tensor.is_floating_point() else tensor
    return out


def _split_rows(state: dict[str, torch.Tensor], limit: int | None) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
    """Tensors larger than ``limit`` bytes become row ranges ``key::partI``; returns pieces and part counts."""
    pieces, split = {}, {}
    for key, tensor in state.items():
        size = tensor.numel() * tensor.element_size()
        if limit is None or size <= limit or tensor.dim() == 0 or len(tensor) < 2:
            pieces[key] = tensor
            continue
        rows_per_part = max(1, limit // max(1, size // len(tensor)))
        parts = math.ceil(len(tensor) / rows_per_part)
        for i in range(parts):
            pieces[f"{key}::part{i}"] = tensor[i * rows_per_part : (i + 1) * rows_per_part].clone()
        split[key] = parts
    return pieces, split


def _pack(pieces: dict[str, torch.Tensor], limit: int | None) -> list[dict[str, torch.Tensor]]:
    """Greedy, in key order: each shard holds tensors totalling at most ``limit`` bytes."""
    shards: list[dict[str, torch.Tensor]] = [{}]
    used = 0
    for key in sorted(pieces):
        size = pieces[key].numel() * pieces[key].element_size()
        if limit is not None and shards[-1] and used + size > limit:
            shards.append({})
            used = 0
        shards[-1][key] = pieces[key]
        used += size
    return shards


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    safetensors_torch = require("safetensors.torch")
    try:
        return safetensors_torch.load_file(str(path))
    except Exception as exc:
        raise ModelLoadError(f"cannot read {path}: corrupted or not a safetensors file ({exc})") from exc
