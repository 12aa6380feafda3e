"""The manifest of a phrase index directory (``manifest.json``): what a new index records, how a committed one is
read and checked, and the stamp that tells one commit from the next. Every commit atomically replaces it (see
:mod:`~dphr_haystack.index.storage`)."""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from pathlib import Path
from typing import Any

from ..errors import IndexLoadError, InvalidParameterError, ModelMismatchError
from .codec import VectorCodec

INDEX_FORMAT = "dphr-phrase-index"
INDEX_FORMAT_VERSION = 1
# An index of key vectors (``key_vectors``): a version of its own, so that a library from before key vectors refuses
# it instead of writing passages without their keys.
KEYED_FORMAT_VERSION = 2
MANIFEST = "manifest.json"

_MANIFEST_TYPES: dict[str, tuple[type, ...]] = {
    "model_fingerprint": (str,),
    "dim": (int,),
    "codec": (dict,),
    "faiss_factory": (str,),
    "counts": (dict,),
    "passages_bytes": (int,),
    "checksums": (dict,),
    "filter_threshold": (int, float, type(None)),
    "faiss_file": (str, type(None)),
    "model_path": (str, type(None)),
    "model_config": (dict,),
}


def check_manifest(manifest: dict[str, Any], manifest_path: Path) -> None:
    """Raise IndexLoadError on a manifest whose fields have the wrong types or impossible values."""
    for key, types in _MANIFEST_TYPES.items():
        value = manifest.get(key)
        if key not in manifest or not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise IndexLoadError(f"{manifest_path} is corrupted: {key}={value!r:.80}")
    counts = manifest["counts"]
    if (
        manifest["dim"] < 1
        or manifest["passages_bytes"] < 0
        or not all(
            isinstance(counts.get(k), int) and not isinstance(counts.get(k), bool) and counts[k] >= 0
            for k in ("vectors", "passages", "tombstones")
        )
    ):
        raise IndexLoadError(f"{manifest_path} is corrupted: dim {manifest['dim']!r}, counts {counts!r:.120}")
    for key in ("faiss_file", "faiss_ivfdata"):
        name = manifest.get(key)
        if name is not None and (not isinstance(name, str) or Path(name).name != name or name.startswith(".")):
            raise IndexLoadError(f"{manifest_path} is corrupted: {key}={name!r:.80} is not a file of the index")
    try:
        VectorCodec(**manifest["codec"])
    except (TypeError, InvalidParameterError) as exc:
        raise IndexLoadError(f"{manifest_path} is corrupted: codec {manifest['codec']!r:.80} ({exc})") from exc
    problem = search_params_problem(manifest.get("search_params"))
    if problem:
        raise IndexLoadError(f"{manifest_path} is corrupted: {problem}")
    budget, keys = manifest.get("key_vectors"), counts.get("keys", 0)
    if (budget is not None and (not isinstance(budget, int) or isinstance(budget, bool) or budget < 1)) or (
        not isinstance(keys, int) or isinstance(keys, bool) or keys < 0
    ):
        raise IndexLoadError(f"{manifest_path} is corrupted: key_vectors {budget!r:.40}, {keys!r:.40} keys")


_MAX_SEARCH_PARAM = 2**31 - 1  # FAISS takes its search parameters as C ints or doubles


def search_params_problem(params: Any) -> str | None:
    """What is wrong with search parameters, or None: names mapped to finite numbers in FAISS' range (0 to
    2**31 - 1), ``refine`` (dphr's, not FAISS') an integer ≥ 1."""
    if params is None:
        return None
    if not isinstance(params, dict):
        return f"search_params={params!r:.80} is not a mapping"
    for name, value in params.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not isinstance(name, str) or not (number and math.isfinite(value) and 0 <= value <= _MAX_SEARCH_PARAM):
            return f"search parameter {name!s:.40}={value!r:.40} is not a number from 0 to {_MAX_SEARCH_PARAM}"
        if name == "refine" and (value < 1 or value != int(value)):
            return f"search parameter refine={value!r} is not an integer ≥ 1"
    return None


def manifest_stamp(file: Path) -> tuple[int, int, int] | None:
    """Identity of a committed manifest (every commit renames a new file into place), None when absent."""
    try:
        info = os.stat(file)
    except OSError:
        return None
    return (info.st_ino, info.st_mtime_ns, info.st_size)


def new_manifest(
    dim: int,
    model_fingerprint: str,
    model_config: dict[str, Any],
    model_path: str | None,
    codec: VectorCodec,
    codec_calibrated: bool,
) -> dict[str, Any]:
    """The manifest of a new, empty index: exact search (``Flat``) without filtering until the caller says more."""
    return {
        "format": INDEX_FORMAT,
        "format_version": INDEX_FORMAT_VERSION,
        "model_fingerprint": model_fingerprint,
        "model_path": model_path,
        "model_config": model_config,
        "dim": dim,
        "codec": codec.to_dict(),
        "codec_calibrated": codec_calibrated,
        "filter_threshold": None,
        "faiss_factory": "Flat",
        "metric": "inner_product",
        "counts": {"vectors": 0, "passages": 0, "tombstones": 0},
        "passages_bytes": 0,
        "faiss_file": None,
        "checksums": {},
        "created": time.time(),
        "uid": uuid.uuid4().hex,
        "structure": {"policy": "fixed"},
    }


def read_manifest(path: Path) -> dict[str, Any]:
    """The checked manifest of the index directory ``path``."""
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise IndexLoadError(f"{manifest_path} not found: not a phrase index directory")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise IndexLoadError(f"{manifest_path} is corrupted: {exc}") from exc
    except RecursionError as exc:  # e.g. 100,000 nested brackets
        raise IndexLoadError(f"{manifest_path} is corrupted: JSON nested too deeply") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != INDEX_FORMAT:
        raise IndexLoadError(f"{manifest_path}: not a {INDEX_FORMAT} manifest")
    version = manifest.get("format_version")
    if version not in (INDEX_FORMAT_VERSION, KEYED_FORMAT_VERSION) or (version == KEYED_FORMAT_VERSION) != bool(
        manifest.get("key_vectors")
    ):
        raise IndexLoadError(
            f"{manifest_path}: index format version {version!r} (key_vectors {manifest.get('key_vectors')!r}); "
            f"this library reads versions {INDEX_FORMAT_VERSION} and {KEYED_FORMAT_VERSION} (with key vectors): "
            "rebuild the index"
        )
    check_manifest(manifest, manifest_path)
    return manifest


def check_model(manifest: dict[str, Any], manifest_path: Path, dim: int, phrase_fingerprint: str) -> None:
    """Raise ModelMismatchError unless a model of this dimension and phrase fingerprint made the index's vectors."""
    if dim != manifest["dim"]:
        raise ModelMismatchError(
            f"{manifest_path}: the index holds {manifest['dim']}-dimensional vectors, the "
            f"given model makes {dim}-dimensional ones"
        )
    if phrase_fingerprint != manifest["model_fingerprint"]:
        raise ModelMismatchError(
            f"{manifest_path}: the index was built with another phrase encoder (fingerprint "
            f"{manifest['model_fingerprint'][:12]}…, given model {phrase_fingerprint[:12]}…)"
        )
