"""Phrase dump: passages → filtered token vectors with character offsets, in resumable shards.

A shard is a directory holding ``vectors.npy`` (float16 or int8, consecutive per passage),
``tokens.npy`` (per stored token: passage, subword position, char start, char end), ``passages.jsonl``
and, written last, ``shard.json`` (counts, codec and the SHA-256 of the other files and of itself). A shard
without an intact ``shard.json`` or whose files do not match it is incomplete and is redone on resume.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from .._util.atomic import file_sha256, write_file_atomic
from .._util.memory import pin_malloc_thresholds, release_free_memory
from ..errors import EmptyCorpusError, IndexLoadError, InvalidParameterError, ModelMismatchError
from ..index.codec import VectorCodec
from ..model.phrase_model import PhraseModel
from ..params import check_param
from .corpus import CorpusStats, Passage, read_corpus

logger = logging.getLogger(__name__)

TOKEN_DTYPE = np.dtype([("passage", "<i8"), ("position", "<i4"), ("char_start", "<i4"), ("char_end", "<i4")])
DUMP_FORMAT_VERSION = 1


@dataclass
class PhraseShard:
    """Stored token vectors of a run of passages. ``tokens['passage']`` indexes ``passages`` (local)."""

    vectors: np.ndarray  # (n, d) stored dtype
    tokens: np.ndarray  # (n,) TOKEN_DTYPE
    passages: list[dict[str, Any]]  # id, document_id, title, text, meta, num_context_tokens
    codec: VectorCodec = field(default_factory=VectorCodec)

    def __len__(self) -> int:
        return len(self.tokens)

    def save(self, path: str | Path) -> None:
        """Write the shard atomically: a temporary directory renamed into place."""
        path = Path(path)
        tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        np.save(tmp / "vectors.npy", self.vectors, allow_pickle=False)
        np.save(tmp / "tokens.npy", self.tokens, allow_pickle=False)
        with (tmp / "passages.jsonl").open("w", encoding="utf-8") as handle:
            for record in self.passages:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        meta = {
            "format_version": DUMP_FORMAT_VERSION,
            "num_vectors": len(self.tokens),
            "num_passages": len(self.passages),
            "codec": self.codec.to_dict(),
            "passage_ids_sha256": passage_ids_digest(r["id"] for r in self.passages),
            "files_sha256": {name: file_sha256(tmp / name) for name in _SHARD_FILES},
        }
        meta["sha256"] = _meta_digest(meta)
        (tmp / "shard.json").write_text(json.dumps(meta, indent=1))
        shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path, verify: bool = True) -> PhraseShard:
        """Read a shard; with ``verify``, its files must match the SHA-256 sums in ``shard.json``."""
        path = Path(path)
        meta_path = path / "shard.json"
        try:
            meta = json.loads(meta_path.read_text())
            if not isinstance(meta, dict):
                raise ValueError(f"{meta_path} is not a JSON object")
            if meta.get("format_version") != DUMP_FORMAT_VERSION:
                raise IndexLoadError(
                    f"{meta_path}: dump format {meta.get('format_version')!r}, expected {DUMP_FORMAT_VERSION}"
                )
            if verify:
                _verify_shard(path, meta)
            # allow_pickle=False: a .npy holding objects (a pickle) is refused, never unpickled
            vectors = np.load(path / "vectors.npy", mmap_mode="r", allow_pickle=False)
            tokens = np.load(path / "tokens.npy", allow_pickle=False)
            with (path / "passages.jsonl").open(encoding="utf-8") as handle:
                passages = [json.loads(line) for line in handle]
            codec = VectorCodec(**meta["codec"])
            counts_match = len(vectors) == meta["num_vectors"] == len(tokens) and len(passages) == meta["num_passages"]
        except IndexLoadError:
            raise
        except (OSError, ValueError, KeyError, TypeError, EOFError) as exc:  # DphrError's ValueErrors included
            raise IndexLoadError(f"incomplete or corrupted shard {path}: {exc}") from exc
        if not counts_match:
            raise IndexLoadError(f"{path}: shard files disagree with {meta_path} (truncated?)")
        if vectors.ndim != 2 or tokens.dtype != TOKEN_DTYPE or vectors.dtype != codec.numpy_dtype:
            raise IndexLoadError(
                f"{path}: vectors {vectors.dtype}{vectors.shape} / tokens {tokens.dtype} are not "
                f"what a {codec.dtype} shard holds"
            )
        if not all(isinstance(r, dict) and isinstance(r.get("id"), str) for r in passages):
            raise IndexLoadError(f"{path / 'passages.jsonl'}: every line must be a passage object with an id")
        if len(tokens) and (tokens["passage"].min() < 0 or tokens["passage"].max() >= len(passages)):
            raise IndexLoadError(f"{path / 'tokens.npy'}: token rows point outside the shard's passages")
        return cls(vectors, tokens, passages, codec)


def passage_ids_digest(ids: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for pid in ids:
        digest.update(pid.encode("utf-8") + b"\0")
    return digest.hexdigest()


def encode_shard(
    model: PhraseModel,
    passages: Sequence[Passage],
    codec: VectorCodec,
    filter_threshold: float | None = None,
    batch_size: int = 32,
) -> PhraseShard:
    """Encode passages and keep the tokens whose start or end filter logit exceeds ``filter_threshold``.

    With no threshold every context token is kept. A passage whose tokens are all filtered keeps its
    first token (as DensePhrases does), so every passage stays retrievable.
    """
    encoded = model.encode_passages([p.text for p in passages], [p.title for p in passages], batch_size=batch_size)
    vec_parts, tok_parts, records = [], [], []
    for local, (passage, enc) in enumerate(zip(passages, encoded)):
        n = len(enc.vectors)
        keep = select_tokens(enc.filter_logits, filter_threshold)
        tokens = np.zeros(len(keep), dtype=TOKEN_DTYPE)
        tokens["passage"] = local
        tokens["position"] = keep
        tokens["char_start"] = enc.char_offsets[keep, 0]
        tokens["char_end"] = enc.char_offsets[keep, 1]
        vec_parts.append(enc.vectors[keep])
        tok_parts.append(tokens)
        records.append(
            {
                "id": passage.id,
                "document_id": passage.document_id,
                "title": passage.title,
                "text": passage.text,
                "meta": dict(passage.meta),
                "num_context_tokens": n,
            }
        )
    d = model.hidden_size
    vectors = np.concatenate(vec_parts) if vec_parts else np.zeros((0, d), np.float32)
    tokens = np.concatenate(tok_parts) if tok_parts else np.zeros(0, TOKEN_DTYPE)
    return PhraseShard(codec.encode(vectors), tokens, records, codec)


def select_tokens(filter_logits: np.ndarray, threshold: float | None) -> np.ndarray:
    """Token indices kept: start or end filter logit above ``threshold`` (all when None; at least the first)."""
    n = len(filter_logits)
    if threshold is None or n == 0:
        return np.arange(n)
    keep = np.nonzero(filter_logits.max(axis=1) > threshold)[0]
    return keep if keep.size else np.zeros(1, dtype=np.int64)


def chunked(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


@dataclass
class DumpSummary:
    """What a dump run did."""

    shards: list[Path]
    encoded_shards: int
    skipped_shards: int
    passages: int
    skipped_empty: int
    vectors: int


def dump_phrases(
    model: PhraseModel,
    corpus: str | Path | Iterable[Any],
    out_dir: str | Path,
    shard_size: int = 1000,
    filter_threshold: float | None = None,
    dtype: str = "float16",
    batch_size: int = 32,
    progress: bool = True,
    worker: int = 0,
    num_workers: int = 1,
) -> DumpSummary:
    """Encode a corpus into shards under ``out_dir``; re-running skips every complete shard.

    Shard ``i`` holds passages ``[i·shard_size, (i+1)·shard_size)`` of the corpus; worker ``w`` of
    ``num_workers`` encodes the shards with ``i % num_workers == w``, so independent processes (or
    machines) can split one dump. ``dump.json`` records the model fingerprint and settings; resuming
    with another model or other settings fails instead of mixing vectors. Memory stays flat however large
    the corpus: one shard is in memory at a time, and on glibc the process's malloc thresholds are pinned
    (see :mod:`dphr_haystack._util.memory`).
    """
    from tqdm.auto import tqdm

    shard_size, batch_size = check_param("shard_size", shard_size), check_param("batch_size", batch_size)
    num_workers = check_param("num_workers", num_workers)
    worker = check_param("worker", worker, high=num_workers - 1, why=f"workers are numbered 0 to {num_workers - 1}")
    pin_malloc_thresholds()  # a dump's memory stays flat however large the corpus (see _memory.py)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fingerprint = model.phrase_fingerprint()
    settings = {
        "model_fingerprint": fingerprint,
        "filter_threshold": filter_threshold,
        "dtype": dtype,
        "shard_size": shard_size,
        "model_config": model.config.to_dict(),
        "dim": model.hidden_size,
        "format_version": DUMP_FORMAT_VERSION,
    }
    _check_or_write_dump_settings(out / "dump.json", settings)
    stats = CorpusStats()
    codec: VectorCodec | None = _existing_codec(out) if dtype == "int8" else VectorCodec(dtype)
    shards, encoded, skipped, vectors = [], 0, 0, 0
    bar = tqdm(desc="phrase dump", unit="passage", disable=not progress)
    for shard_no, chunk in enumerate(chunked(read_corpus(corpus, stats), shard_size)):
        if shard_no % num_workers != worker:
            continue
        path = out / f"shard-{shard_no:06d}"
        digest = passage_ids_digest(p.id for p in chunk)
        done = _complete_shard_meta(path / "shard.json")
        if done.get("passage_ids_sha256") == digest and isinstance(done.get("num_vectors"), int):
            skipped += 1
            vectors += done["num_vectors"]
        else:
            if codec is None:
                first = model.encode_passages([p.text for p in chunk[:64]], [p.title for p in chunk[:64]], batch_size)
                codec = VectorCodec.calibrate("int8", np.concatenate([e.vectors for e in first]))
            shard = encode_shard(model, chunk, codec, filter_threshold, batch_size)
            shard.save(path)
            encoded += 1
            vectors += len(shard)
            del shard
            release_free_memory()  # flat peak memory however many shards (see _memory.py)
        shards.append(path)
        bar.update(len(chunk))
    bar.close()
    if stats.passages == 0:
        raise EmptyCorpusError(f"the corpus has no passage with text ({stats.skipped_empty} empty ones skipped)")
    return DumpSummary(shards, encoded, skipped, stats.passages, stats.skipped_empty, vectors)


def _complete_shard_meta(meta_path: Path) -> dict[str, Any]:
    """A shard's ``shard.json`` when the shard is complete and intact, else {} (the shard is encoded again).

    Resuming therefore reads every finished shard once to check its sums: far cheaper than encoding it.
    """
    try:
        meta = json.loads(meta_path.read_text())
        if not isinstance(meta, dict):
            return {}
        _verify_shard(meta_path.parent, meta)
    except (OSError, ValueError, TypeError, AttributeError):  # IndexLoadError included (an OSError)
        return {}
    return meta


_SHARD_FILES = ("vectors.npy", "tokens.npy", "passages.jsonl")


def _meta_digest(meta: dict[str, Any]) -> str:
    body = {k: v for k, v in meta.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()


def _verify_shard(path: Path, meta: dict[str, Any]) -> None:
    """Raise IndexLoadError unless ``shard.json`` and the shard's files match their recorded SHA-256 sums."""
    if meta.get("sha256") != _meta_digest(meta):
        raise IndexLoadError(
            f"{path / 'shard.json'} is corrupted (or from a dump without checksums): "
            "delete the shard directory and resume the dump to encode it again"
        )
    sums = meta.get("files_sha256")
    if not isinstance(sums, dict) or set(sums) != set(_SHARD_FILES):
        raise IndexLoadError(f"{path / 'shard.json'} lists no checksums for {', '.join(_SHARD_FILES)}")
    for name in _SHARD_FILES:
        if not (path / name).is_file() or file_sha256(path / name) != sums[name]:
            raise IndexLoadError(
                f"{path / name} is missing or corrupted (checksum mismatch): delete "
                f"{path} and resume the dump to encode it again"
            )


def _check_or_write_dump_settings(path: Path, settings: dict[str, Any]) -> None:
    if path.is_file():
        try:
            previous = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise IndexLoadError(f"{path} is corrupted ({exc}); remove the dump directory and start again") from exc
        if not isinstance(previous, dict):
            raise IndexLoadError(f"{path} is corrupted (not a JSON object); remove the dump directory and start again")
        for key in ("model_fingerprint", "filter_threshold", "dtype", "shard_size", "dim"):
            if previous.get(key) != settings[key]:
                raise ModelMismatchError(
                    f"{path}: existing dump has {key}={previous.get(key)!r}, this run {settings[key]!r}; "
                    "use another output directory or the same settings"
                )
        return
    write_file_atomic(path, json.dumps(settings, indent=1), fsync=False)


def _existing_codec(out: Path) -> VectorCodec | None:
    for meta_path in sorted(out.glob("shard-*/shard.json")):
        codec = _complete_shard_meta(meta_path).get("codec")
        if isinstance(codec, dict):
            try:
                return VectorCodec(**codec)
            except (TypeError, InvalidParameterError):
                continue
    return None


def list_shards(dump_dir: str | Path) -> list[Path]:
    """Complete shards of a dump directory, in corpus order."""
    return sorted(p.parent for p in Path(dump_dir).glob("shard-*/shard.json"))
