"""How a :class:`~dphr_haystack.index.phrase_index.PhraseIndex` directory is laid out and kept consistent.

Layout of an index directory::

    manifest.json     format version, model fingerprint and config, dim, codec, filter threshold,
                      FAISS factory, counts, byte lengths and SHA-256 of the metadata files
                      (:mod:`~dphr_haystack.index.manifest`)
    vectors.bin       token vectors (float16 / int8), row = FAISS id (without keys), consecutive per passage
    tokens.bin        per token: passage, subword position, char start, char end
    passages.jsonl    one record per passage: id, document_id, title, text, meta
    tombstones.bin    passage rows deleted (int64)
    keys.bin          with ``key_vectors=B``: each passage's B key vectors (its stored dtype), what FAISS searches
    key_rows.bin      the stored row each key vector stands for (int64)
    faiss-N.index     the trained FAISS index (only for non-flat types; flat ones are rebuilt from the searched
                      vectors: the stored ones, or the key vectors)
    faiss-N.ivfdata   inverted lists kept on disk and memory-mapped (``reindex(..., on_disk=True)``, IVF types)

Files are append-only and the manifest records how much of each is valid, so an add commits by
appending, then atomically replacing ``manifest.json``; a crash before that leaves the previous state.
:class:`IndexStorage` owns these files (or their in-memory stand-ins): the manifest, the vector codec, the
append-only columns, the passage records and every check a load makes of them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .._util import atomic
from .._util.lock import directory_entries
from .._util.nofollow import is_temp_name, open_no_follow
from ..errors import DphrError, IndexLoadError, InvalidParameterError, ModelMismatchError, SettingsConflictError
from .auto import AUTO
from .codec import VectorCodec
from .columns import Column
from .keys import KEY_ROW_DTYPE, key_vectors
from .manifest import MANIFEST, manifest_stamp
from .structures import write_faiss_file

# One stored token (a row of ``tokens.bin``, of a dump shard's tokens.npy): its passage row, subword position and
# character span in the passage's text.
TOKEN_DTYPE = np.dtype([("passage", "<i8"), ("position", "<i4"), ("char_start", "<i4"), ("char_end", "<i4")])
FILES = {
    "vectors": "vectors.bin",
    "tokens": "tokens.bin",
    "passages": "passages.jsonl",
    "tombstones": "tombstones.bin",
    "keys": "keys.bin",
    "key_rows": "key_rows.bin",
}


def is_flat(factory: str) -> bool:
    """Whether a FAISS factory string is exact inner product over the stored vectors."""
    return factory.replace(" ", "") in ("Flat", "IDMap,Flat")


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
        entries = directory_entries(path)  # the writer lock file is the lock's, not the index's
        if entries and all(e.is_file() and (e.name.endswith(".tmp") or is_temp_name(e.name)) for e in entries):
            for entry in entries:
                entry.unlink(missing_ok=True)


def write_faiss(index, file: Path) -> None:
    """Write a FAISS index file atomically (fsynced, then renamed into place), through Python writes: a full disk
    raises OSError with errno ENOSPC (see :func:`~dphr_haystack.index.structures.write_faiss_to`)."""
    atomic.write_file_atomic(file, lambda tmp: write_faiss_file(index, tmp))


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


# Stored vectors buffered before an append (an fsynced write) to the column files: the most a write holds besides one
# piece of the passage being encoded (benchmarks/memory/long_passage.py).
APPEND_BYTES = 16 << 20
LOAD_ATTEMPTS = 5  # loads retried when a writer committed while they read (see PhraseIndex.load)


@contextlib.contextmanager
def load_errors(path: Path) -> Iterator[None]:
    """Turn any failure reading the index directory ``path`` into IndexLoadError (typed errors pass through)."""
    try:
        yield
    except DphrError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError, RuntimeError) as exc:
        raise IndexLoadError(f"{path} is corrupted: {type(exc).__name__}: {exc}") from exc  # RecursionError too
    except OSError as exc:  # unreadable files, a file a concurrent commit replaced, a directory where a file goes
        raise IndexLoadError(f"{path}: {type(exc).__name__}: {exc}") from exc


def passage_lines(records: list[dict[str, Any]]) -> bytes:
    """Passage records as ``passages.jsonl`` stores them: one UTF-8 JSON object a line."""
    return b"".join(json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n" for r in records)


def committed_rows(counts: dict[str, int]) -> dict[str, int]:
    """The rows of each column (by file key) a manifest's ``counts`` commit: a token and a vector per stored row, a
    key row per key vector."""
    vectors, keys = counts.get("vectors", 0), counts.get("keys", 0)
    return {
        "vectors": vectors,
        "tokens": vectors,
        "tombstones": counts.get("tombstones", 0),
        "keys": keys,
        "key_rows": keys,
    }


class IndexStorage:
    """The manifest, codec, append-only columns and passage records of one index, on disk at ``path`` or in memory.

    The manifest says how much of each file is committed; :meth:`commit` makes what was appended since durable by
    atomically replacing it. Readers check everything they read and raise IndexLoadError on anything inconsistent.
    """

    def __init__(self, manifest: dict[str, Any], path: Path | None) -> None:
        self.manifest = manifest
        self.path = path
        self.codec = VectorCodec(**manifest["codec"])
        self.dim = int(manifest["dim"])
        rows = committed_rows(manifest.get("counts", {}))
        file = (lambda key: path / FILES[key]) if path is not None else (lambda key: None)
        self.vectors = Column(self.codec.numpy_dtype, self.dim, file("vectors"), rows["vectors"])
        self.tokens = Column(TOKEN_DTYPE, None, file("tokens"), rows["tokens"])
        self.tombstones = Column(np.int64, None, file("tombstones"), rows["tombstones"])
        self.keys = Column(self.codec.numpy_dtype, self.dim, file("keys"), rows["keys"])
        self.key_rows = Column(KEY_ROW_DTYPE, None, file("key_rows"), rows["key_rows"])
        self.passage_bytes = int(manifest.get("passages_bytes", 0))

    def file(self, key: str) -> Path:
        """The path of one of the index's files (``vectors``, ``tokens``, ``passages``, ``tombstones``, ``keys``,
        ``key_rows``)."""
        assert self.path is not None
        return self.path / FILES[key]

    def where(self, key: str) -> str:
        """The file ``key`` for messages (``index`` for an in-memory index)."""
        return str(self.file(key)) if self.path is not None else "index"

    @property
    def auto_structure(self) -> bool:
        """Whether the index chooses its FAISS structure by size (``faiss_factory="auto"``)."""
        return (self.manifest.get("structure") or {}).get("policy") == "auto"

    @property
    def key_budget(self) -> int | None:
        """Key vectors a passage that FAISS searches (:mod:`~dphr_haystack.index.keys`); None: every stored vector."""
        return self.manifest.get("key_vectors")

    @property
    def searched(self) -> Column:
        """The vectors the FAISS structure holds, row for row: the key vectors, or every stored vector."""
        return self.keys if self.key_budget else self.vectors

    def stored_rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows of :attr:`searched` (FAISS ids, -1 for none) as the stored rows they stand for."""
        if not self.key_budget:
            return ids
        rows = self.key_rows.view()
        return np.where(ids >= 0, rows[np.maximum(ids, 0)], -1) if len(rows) else np.full_like(ids, -1)

    def columns(self) -> dict[str, Column]:
        """The append-only columns, by file key."""
        return {
            "vectors": self.vectors,
            "tokens": self.tokens,
            "tombstones": self.tombstones,
            "keys": self.keys,
            "key_rows": self.key_rows,
        }

    def check_settings(
        self,
        dtype: str | None = None,
        filter_threshold: float | str | None = None,
        faiss_factory: str | None = None,
        key_vectors: int | None = None,
    ) -> None:
        """Raise SettingsConflictError when a setting asked of a resumed index differs from what it was built with.

        Args:
            dtype: Stored vector dtype (``float16``, ``int8``); None: not asked.
            filter_threshold: Filter threshold, or ``"none"`` for no filtering; None: not asked.
            faiss_factory: ``auto`` or a FAISS factory string; None: not asked.
            key_vectors: Key vectors a passage; None: not asked.
        """
        built_factory, threshold = self.manifest["faiss_factory"], self.manifest["filter_threshold"]
        asked: list[tuple[str, Any, Any]] = []
        if dtype is not None:
            asked.append(("dtype", dtype, self.codec.dtype))
        if filter_threshold is not None:
            wanted = None if filter_threshold == "none" else float(filter_threshold)
            built_threshold = "none" if threshold is None else threshold
            asked.append(("filter_threshold", "none" if wanted is None else wanted, built_threshold))
        if faiss_factory is not None:
            built = AUTO if self.auto_structure else built_factory
            same = (faiss_factory == AUTO) == self.auto_structure and (
                self.auto_structure or faiss_factory.replace(" ", "") == built_factory.replace(" ", "")
            )
            asked.append(("faiss_factory", faiss_factory, faiss_factory if same else built))
        if key_vectors is not None:
            asked.append(("key_vectors", key_vectors, self.key_budget))
        for name, wanted, built in asked:
            if wanted != built:
                raise SettingsConflictError(
                    f"{self.path or 'this index'} was built with {name}={built!r}; this run asks {name}={wanted!r}. "
                    "Resume with the index's settings (or leave the option out), or write a new index elsewhere"
                )

    # ----------------------------------------------------------------- codec
    @property
    def codec_calibrated(self) -> bool:
        """False only for an int8 index whose codec is still to be fitted on its first vectors."""
        return bool(self.manifest.get("codec_calibrated", True))

    def set_codec(self, codec: VectorCodec) -> None:
        """Record the calibrated codec (committed with the next commit)."""
        self.codec = codec
        self.manifest["codec"], self.manifest["codec_calibrated"] = codec.to_dict(), True

    def codec_state(self) -> tuple[VectorCodec, Any, Any]:
        """What :meth:`restore_codec` puts back (an append that fails after calibrating)."""
        return (self.codec, self.manifest.get("codec"), self.manifest.get("codec_calibrated"))

    def restore_codec(self, state: tuple[VectorCodec, Any, Any]) -> None:
        self.codec, self.manifest["codec"] = state[:2]
        if state[2] is not None:
            self.manifest["codec_calibrated"] = state[2]

    # ----------------------------------------------------------------- reading and checking
    def check_files(self, verify: bool) -> None:
        """Raise IndexLoadError when a file is shorter than the manifest says or (``verify``) its checksum differs."""
        assert self.path is not None
        rows = committed_rows(self.manifest["counts"])
        expected = {key: rows[key] * column.row_bytes for key, column in self.columns().items()}
        expected["passages"] = self.passage_bytes
        for key, size in expected.items():
            file = self.file(key)
            actual = file.stat().st_size if file.exists() else 0
            if actual < size:
                raise IndexLoadError(f"{file} is truncated: {actual} bytes, manifest says {size}")
        if verify:
            for key, digest in self.manifest.get("checksums", {}).items():
                file = self.file(key)
                if sha256_prefix(file, expected[key]) != digest:
                    raise IndexLoadError(f"{file} is corrupted: its checksum does not match {MANIFEST}")

    def check_key_rows(self, start: int) -> None:
        """Raise IndexLoadError unless each key row from ``start`` is a stored row (or keys are not kept)."""
        if not self.key_budget and not self.keys.length:
            return
        rows = self.key_rows.view()[start:]
        if self.key_budget is None or (len(rows) and (rows.min() < 0 or rows.max() >= self.vectors.length)):
            raise IndexLoadError(
                f"{self.where('key_rows')} is corrupted: key rows outside the {self.vectors.length} stored vectors"
            )

    def read_passage_records(self, start: int, end: int) -> list[dict[str, Any]]:
        """The passage records stored in bytes ``start:end`` of ``passages.jsonl``, checked."""
        file = self.file("passages")
        data = b""
        if end > start:  # no file yet before the first passage (an index killed right after create)
            with file.open("rb") as handle:
                handle.seek(start)
                data = handle.read(end - start)
        records = []
        for line_no, line in enumerate(data.splitlines(), 1):
            try:
                records.append(json.loads(line))
            except (ValueError, RecursionError) as exc:
                raise IndexLoadError(f"{file}:{line_no} is corrupted: {exc}") from exc
        if not all(
            isinstance(r, dict)
            and all(isinstance(r.get(k), str) for k in ("id", "document_id", "text"))
            and isinstance(r.get("title", ""), str)
            and isinstance(r.get("meta", {}), dict)
            for r in records
        ):
            raise IndexLoadError(f"{file} is corrupted: every line must be a passage object (id, document_id, text)")
        return records

    def read_passages(self) -> tuple[list[dict[str, Any]], np.ndarray]:
        """Every committed passage record and its count of stored tokens, checked against the token file."""
        file = self.file("passages")
        records = self.read_passage_records(0, self.passage_bytes)
        if len(records) != self.manifest["counts"]["passages"]:
            raise IndexLoadError(
                f"{file}: {len(records)} passages, manifest says {self.manifest['counts']['passages']}"
            )
        rows = self.tokens.view()["passage"]
        if len(rows) and (rows[0] < 0 or rows[-1] >= len(records) or np.any(np.diff(rows) < 0)):
            raise IndexLoadError(f"{self.file('tokens')} is corrupted: token rows are not consecutive per passage")
        lengths = np.fromiter((len(r["text"]) for r in records), dtype=np.int64, count=len(records))
        check_token_offsets(self.tokens.view(), lengths, self.file("tokens"))
        counts = np.bincount(rows, minlength=len(records)) if self.vectors.length else np.zeros(len(records))
        return records, counts[: len(records)]

    def extends(self, fresh: dict[str, Any], num_passages: int) -> bool:
        """Whether ``fresh`` is this storage's manifest with only passages and tombstones appended."""
        mine, counts = self.manifest, fresh["counts"]
        same = all(
            fresh.get(key) == mine.get(key)
            for key in ("uid", "created", "dim", "faiss_factory", "faiss_generation", "model_fingerprint")
        )
        return (
            same
            and (fresh["codec"] == mine["codec"] or self.vectors.length == 0)
            and counts["vectors"] >= self.vectors.length
            and counts["passages"] >= num_passages
            and counts["tombstones"] >= self.tombstones.length
            and counts.get("keys", 0) >= self.keys.length
            and fresh.get("key_vectors") == self.key_budget
            and fresh["passages_bytes"] >= self.passage_bytes
        )

    def catch_up(self, fresh: dict[str, Any], num_passages: int) -> tuple[list[dict[str, Any]], np.ndarray]:
        """Take the manifest ``fresh`` (which :meth:`extends` this one) and read what other writers appended.

        Returns the appended passage records and their counts of stored tokens, checked.
        """
        old_vectors, old_bytes = self.vectors.length, self.passage_bytes
        counts = fresh["counts"]
        self.manifest, self.codec = fresh, VectorCodec(**fresh["codec"])
        self.vectors.dtype = self.keys.dtype = np.dtype(self.codec.numpy_dtype)
        old_keys = self.keys.length
        rows = committed_rows(counts)
        for key, column in self.columns().items():
            column.extend_to(rows[key])
        self.passage_bytes = fresh["passages_bytes"]
        self.check_files(False)
        self.check_key_rows(old_keys)
        records = self.read_passage_records(old_bytes, fresh["passages_bytes"])
        rows = self.tokens.view()["passage"][old_vectors:]
        first = num_passages
        if len(rows) and (rows[0] < first or rows[-1] >= first + len(records) or np.any(np.diff(rows) < 0)):
            raise IndexLoadError(f"{self.file('tokens')} is corrupted: appended token rows out of order")
        if first + len(records) != counts["passages"]:
            raise IndexLoadError(f"{self.file('passages')}: appended passages do not match the manifest")
        lengths = np.zeros(first + len(records), dtype=np.int64)
        lengths[first:] = [len(r["text"]) for r in records]
        check_token_offsets(self.tokens.view()[old_vectors:], lengths, self.file("tokens"))
        return records, np.bincount(rows - first, minlength=len(records))[: len(records)]

    # ----------------------------------------------------------------- writing
    def append_passage_records(self, records: list[dict[str, Any]]) -> None:
        """Append passage records to ``passages.jsonl`` past its committed bytes (nothing for an in-memory index)."""
        if self.path is None:
            return
        payload = passage_lines(records)
        with open_no_follow(self.file("passages"), "r+b") as handle:  # a symbolic link here is refused, not followed
            handle.truncate(self.passage_bytes)
            handle.seek(self.passage_bytes)
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        self.passage_bytes += len(payload)

    def append_pieces(
        self, pieces: Iterable[Any], codec: VectorCodec, num_records: int, first_row: int, keep: bool
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Append the kept tokens of ``num_records`` new passages (rows from ``first_row``) to the columns.

        ``pieces`` are :class:`~dphr_haystack.index.shards.ShardPiece` in passage and token order, their vectors
        coded by ``codec`` (re-coded when it is not this index's; an uncalibrated int8 codec is fitted on the
        first piece). They are buffered up to :data:`APPEND_BYTES` and appended past the committed lengths; should
        the pieces fail (an encoding error), the columns and codec are rolled back. Returns each passage's count
        of stored tokens and, with ``keep``, the stored vectors appended.
        """
        start, start_tokens = self.vectors.length, self.tokens.length
        codec_before = self.codec_state()
        counts = np.zeros(num_records, dtype=np.int64)
        added: list[np.ndarray] = []
        buffer: list[tuple[np.ndarray, np.ndarray]] = []

        def flush() -> None:
            if buffer:
                self.vectors.append(np.concatenate([v for v, _ in buffer]))
                self.tokens.append(np.concatenate([t for _, t in buffer]))
                buffer.clear()

        buffered = 0
        try:
            for piece in pieces:
                if piece.vectors.shape[1:] != (self.dim,):
                    raise ModelMismatchError(f"shard vectors have dim {piece.vectors.shape[1:]}, index {self.dim}")
                if not self.codec_calibrated:
                    self.set_codec(VectorCodec.calibrate(self.codec.dtype, codec.decode(piece.vectors[:20000])))
                stored = piece.vectors if codec == self.codec else self.codec.encode(codec.decode(piece.vectors))
                tokens = np.array(piece.tokens, dtype=TOKEN_DTYPE, copy=True)
                if len(tokens) and (tokens["passage"].min() < 0 or tokens["passage"].max() >= num_records):
                    raise InvalidParameterError("shard token rows point outside the shard's passages")
                counts += np.bincount(tokens["passage"], minlength=num_records)
                tokens["passage"] += first_row
                buffer.append((stored, tokens))
                buffered += stored.nbytes
                if keep:
                    added.append(stored)
                if buffered >= APPEND_BYTES:
                    flush()
                    buffered = 0
            flush()
        except BaseException:
            self.vectors.truncate(start)
            self.tokens.truncate(start_tokens)
            self.restore_codec(codec_before)
            raise
        return counts, added

    def append_keys(self, counts: np.ndarray, first_row: int) -> np.ndarray:
        """Append the key vectors of the passages just appended (``counts`` stored vectors each, from ``first_row``;
        :mod:`~dphr_haystack.index.keys`); returns them in the stored dtype, for the FAISS structure."""
        stored = self.vectors.view()[first_row:]
        vectors, rows = key_vectors(stored, counts, first_row, int(self.key_budget or 0), self.codec.decode)
        coded = self.codec.encode(vectors)
        self.keys.append(coded)
        self.key_rows.append(rows)
        return coded

    def counts(self, num_passages: int) -> dict[str, int]:
        counts = {"vectors": self.vectors.length, "passages": num_passages, "tombstones": self.tombstones.length}
        if self.key_budget:
            counts["keys"] = self.keys.length
        return counts

    def update_counts(self, num_passages: int) -> None:
        """Record the current lengths in the manifest (in memory)."""
        self.manifest["counts"] = self.counts(num_passages)
        self.manifest["passages_bytes"] = self.passage_bytes
        self.manifest["updated"] = time.time()

    def commit(self, num_passages: int) -> tuple[int, int, int] | None:
        """Checksum the committed prefixes and atomically replace the manifest; returns its :func:`manifest_stamp`."""
        self.update_counts(num_passages)
        if self.path is None:
            return None
        self.manifest["checksums"] = {
            key: sha256_prefix(self.file(key), size)
            for key, size in (
                ("tokens", self.tokens.length * self.tokens.row_bytes),
                ("passages", self.passage_bytes),
                ("tombstones", self.tombstones.length * 8),
                *((("key_rows", self.key_rows.length * 8),) if self.key_budget else ()),
            )
        }
        atomic.write_file_atomic(self.path / MANIFEST, json.dumps(self.manifest, indent=1))
        return manifest_stamp(self.path / MANIFEST)

    def write_copy(
        self, tmp: Path, records: list[dict[str, Any]], write_structure: Callable[[Path, dict[str, Any]], None]
    ) -> None:
        """Write every file of a complete copy into the fresh, empty directory ``tmp``.

        ``records`` are the passage records; ``write_structure(tmp, manifest)`` writes the FAISS files of the copy
        and names them in its manifest.
        """
        self.vectors.write_to(tmp / FILES["vectors"])
        self.tokens.write_to(tmp / FILES["tokens"])
        self.tombstones.write_to(tmp / FILES["tombstones"])
        checked = ["tokens", "passages", "tombstones"]
        if self.key_budget:
            self.keys.write_to(tmp / FILES["keys"])
            self.key_rows.write_to(tmp / FILES["key_rows"])
            checked.append("key_rows")
        payload = passage_lines(records)
        with open_no_follow(tmp / FILES["passages"], "xb") as handle:
            handle.write(payload)
        manifest = json.loads(json.dumps(self.manifest))
        manifest["uid"] = uuid.uuid4().hex  # another directory: its readers must not take it for this one
        manifest["passages_bytes"] = len(payload)
        manifest["counts"] = self.counts(len(records))
        manifest["faiss_file"] = None
        write_structure(tmp, manifest)
        manifest["checksums"] = {key: sha256_prefix(tmp / FILES[key], None) for key in checked}
        for file in tmp.iterdir():
            atomic.fsync_file(file)
        atomic.write_file_atomic(tmp / MANIFEST, json.dumps(manifest, indent=1))
