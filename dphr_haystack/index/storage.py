"""How a :class:`~dphr_haystack.index.phrase_index.PhraseIndex` directory is laid out and kept consistent.

Append-only columns (``vectors.bin``, ``tokens.bin``, ``tombstones.bin``) whose valid length the manifest records,
the manifest's schema check, the FAISS file write and the checksums of committed prefixes.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from .._util import atomic as _atomic
from .._util.lazy import require
from .._util.nofollow import is_temp_name, open_no_follow
from ..errors import IndexLoadError, InvalidParameterError
from .codec import VectorCodec

INDEX_FORMAT = "dphr-phrase-index"
INDEX_FORMAT_VERSION = 1
MANIFEST = "manifest.json"
FILES = {
    "vectors": "vectors.bin",
    "tokens": "tokens.bin",
    "passages": "passages.jsonl",
    "tombstones": "tombstones.bin",
}


def is_flat(factory: str) -> bool:
    """Whether a FAISS factory string is exact inner product over the stored vectors."""
    return factory.replace(" ", "") in ("Flat", "IDMap,Flat")


class Column:
    """An append-only array, in memory or in a raw file whose valid length the manifest records."""

    def __init__(self, dtype: np.dtype, width: int | None, path: Path | None = None, length: int = 0) -> None:
        self.dtype, self.width, self.path, self.length = np.dtype(dtype), width, path, length
        self._parts: list[np.ndarray] = []
        self._cache: np.ndarray | None = None

    @property
    def row_bytes(self) -> int:
        return self.dtype.itemsize * (self.width or 1)

    def append(self, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values, dtype=self.dtype)
        if self.path is None:
            self._parts.append(values.copy())
        else:
            with open_no_follow(self.path, "r+b") as handle:  # a symbolic link here is refused, not followed
                handle.truncate(self.length * self.row_bytes)  # drop bytes of an append that never committed
                handle.seek(self.length * self.row_bytes)
                handle.write(values.tobytes())
                handle.flush()
                os.fsync(handle.fileno())
        self.length += len(values)
        self._cache = None

    def truncate(self, length: int) -> None:
        """Forget rows past ``length`` (an append that will not be committed); a file's bytes past it are dropped
        by the next append, and are never read before (the manifest records the committed length)."""
        if length >= self.length:
            return
        if self.path is None:
            self._parts = [self.view()[:length].copy()]
        self.length = length
        self._cache = None

    def view(self) -> np.ndarray:
        if self._cache is not None:
            return self._cache
        shape = (self.length, self.width) if self.width else (self.length,)
        if self.length == 0:
            self._cache = np.zeros(shape, dtype=self.dtype)
        elif self.path is None:
            self._cache = np.concatenate(self._parts) if len(self._parts) > 1 else self._parts[0]
            self._parts = [self._cache]
        else:
            self._cache = np.memmap(self.path, dtype=self.dtype, mode="r", shape=shape)
        return self._cache

    def write_to(self, path: Path) -> None:
        with open_no_follow(path, "wb") as handle:
            view = self.view()
            for start in range(0, len(view), 1 << 20):
                handle.write(np.ascontiguousarray(view[start : start + (1 << 20)]).tobytes())


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


def check_tombstones(tombstones: np.ndarray, num_passages: int, file: Path) -> None:
    """Raise IndexLoadError unless every tombstone is a passage row, ``0 <= row < num_passages``."""
    bad = (tombstones < 0) | (tombstones >= num_passages)
    if bad.any():
        value = int(tombstones[bad][0])
        raise IndexLoadError(
            f"{file} is corrupted: tombstone {value} is not a passage row (the index has {num_passages} passages)"
        )


def check_token_offsets(tokens: np.ndarray, text_lengths: np.ndarray, file: Path, block: int = 1 << 20) -> None:
    """Raise IndexLoadError unless each token's character span lies in its passage: 0 <= start <= end <= len(text).

    ``tokens['passage']`` must already be known to index ``text_lengths``. Checked ``block`` rows at a time, so
    memory stays bounded for memory-mapped token files.
    """
    for first in range(0, len(tokens), block):
        part = np.asarray(tokens[first : first + block])
        starts, ends = part["char_start"].astype(np.int64), part["char_end"].astype(np.int64)
        limits = text_lengths[part["passage"]]
        bad = (starts < 0) | (ends < starts) | (ends > limits) | (part["position"] < 0)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise IndexLoadError(
                f"{file} is corrupted: token {first + row} (passage row {int(part['passage'][row])}, subword "
                f"{int(part['position'][row])}) spans characters {int(starts[row])}..{int(ends[row])}, outside its "
                f"passage's text of {int(limits[row])} characters"
            )


def remove_uncommitted_files(path: Path) -> None:
    """Delete a directory's temporary files when it holds nothing else (what a killed create() leaves)."""
    if path.is_dir():
        entries = list(path.iterdir())
        if entries and all(e.is_file() and (e.name.endswith(".tmp") or is_temp_name(e.name)) for e in entries):
            for entry in entries:
                entry.unlink(missing_ok=True)


def write_faiss(index, file: Path) -> None:
    """Write a FAISS index file atomically (fsynced, then renamed into place)."""
    faiss = require("faiss")
    _atomic.write_file_atomic(file, lambda tmp: faiss.write_index(index, str(tmp)))


def sha256_prefix(file: Path, size: int | None) -> str:
    """SHA-256 of the first ``size`` bytes of ``file`` (all of it with None; an absent file hashes as empty)."""
    digest = hashlib.sha256()
    if not file.exists():
        return digest.hexdigest()
    remaining = file.stat().st_size if size is None else size
    with file.open("rb") as handle:
        while remaining > 0:
            block = handle.read(min(remaining, 1 << 22))
            if not block:
                break
            digest.update(block)
            remaining -= len(block)
    return digest.hexdigest()
