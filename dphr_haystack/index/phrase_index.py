"""PhraseIndex: stored token vectors + their metadata + a FAISS index, in a self-describing directory.

Layout of an index directory::

    manifest.json     format version, model fingerprint and config, dim, codec, filter threshold,
                      FAISS factory, counts, byte lengths and SHA-256 of the metadata files
    vectors.bin       token vectors (float16 / int8), row = FAISS id, consecutive per passage
    tokens.bin        per token: passage, subword position, char start, char end
    passages.jsonl    one record per passage: id, document_id, title, text, meta
    tombstones.bin    passage rows deleted (int64)
    faiss-N.index     the trained FAISS index (only for non-flat types; flat ones are rebuilt from vectors)
    faiss-N.ivfdata   inverted lists kept on disk and memory-mapped (``reindex(..., on_disk=True)``, IVF types)

Files are append-only and the manifest records how much of each is valid, so an add commits by
appending, then atomically replacing ``manifest.json``; a crash before that leaves the previous state.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._util import atomic as _atomic
from .._util.lazy import require
from .._util.lock import WriterLock
from .._util.memory import release_free_memory
from .._util.nofollow import make_temp_dir, open_no_follow, refuse_symlink
from ..corpus import CorpusStats, Passage, read_corpus
from ..encode.dump import calibration_sample, chunked, encode_shard, encode_shard_stream
from ..errors import (
    DphrError,
    EmptyCorpusError,
    IndexLoadError,
    InvalidParameterError,
    ModelMismatchError,
    SettingsConflictError,
)
from ..index.shards import TOKEN_DTYPE, PhraseShard, ShardPiece
from ..params import check_param
from . import auto
from . import structures as index_types
from .backends import FaissSearch
from .codec import VectorCodec
from .merge import merge_dump
from .storage import (
    FILES,
    INDEX_FORMAT,
    INDEX_FORMAT_VERSION,
    MANIFEST,
    Column,
    check_manifest,
    check_token_offsets,
    check_tombstones,
    is_flat,
    remove_uncommitted_files,
    search_params_problem,
    sha256_prefix,
    write_faiss,
)

logger = logging.getLogger(__name__)

DUPLICATE_POLICIES = ("fail", "skip", "overwrite")
# Stored vectors buffered before an append (an fsynced write) to the column files: the most a write holds besides one
# piece of the passage being encoded (benchmarks/bench_long_passage_memory.py).
APPEND_BYTES = 16 << 20
_LOAD_ATTEMPTS = 5  # loads retried when a writer committed while they read (see PhraseIndex.load)


def _writes(method):
    """Method decorator: run as one write transaction of the index (see :meth:`PhraseIndex._writing`)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._writing():
            return method(self, *args, **kwargs)

    return wrapper


def _stamp(file: Path) -> tuple[int, int, int] | None:
    """Identity of a committed manifest (every commit renames a new file into place), None when absent."""
    try:
        info = os.stat(file)
    except OSError:
        return None
    return (info.st_ino, info.st_mtime_ns, info.st_size)


@contextlib.contextmanager
def _load_errors(path: Path) -> Iterator[None]:
    """Turn any failure reading the index directory ``path`` into IndexLoadError (typed errors pass through)."""
    try:
        yield
    except DphrError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError, RuntimeError) as exc:
        raise IndexLoadError(f"{path} is corrupted: {type(exc).__name__}: {exc}") from exc  # RecursionError too
    except OSError as exc:  # unreadable files, a file a concurrent commit replaced, a directory where a file goes
        raise IndexLoadError(f"{path}: {type(exc).__name__}: {exc}") from exc


class PhraseIndex:
    """Phrase vectors of a corpus, searchable by maximum inner product.

    Thread safety: any number of threads may search one index at once; adding or deleting passages while
    other threads search it needs a lock around both (PhraseDocumentStore holds one).

    Processes: an index on disk has one writer at a time. Every write (``add_passages`` chunk by chunk,
    ``add_shard``, deletions, ``reindex``, ``set_search_params``) takes an exclusive inter-process lock on the
    directory (a second writer waits up to ``lock_timeout`` seconds, then gets a
    :class:`~dphr_haystack.errors.DirectoryLockedError` naming the holder), catches up with what other writers
    committed, writes and commits. Loading and searching never write and never wait for writers;
    :meth:`refresh` catches a loaded index up with later commits.

    Example:
        >>> index = PhraseIndex.create(model)                      # in memory, flat inner product
        >>> index.add_passages("corpus.jsonl")
        >>> index.save("my-index")
        >>> index = PhraseIndex.load("my-index", model=model)      # checks the model fingerprint
    """

    def __init__(self, manifest: dict[str, Any], path: Path | None, lock_timeout: float | None = None) -> None:
        self.manifest = manifest
        self.path = path
        self._writer = WriterLock(path, lock_timeout) if path is not None else None
        self._stamp: tuple[int, int, int] | None = None  # the committed manifest this object reflects
        self.codec = VectorCodec(**manifest["codec"])
        self.dim = int(manifest["dim"])
        cols = manifest.get("counts", {})
        file = (lambda key: path / FILES[key]) if path is not None else (lambda key: None)
        self._vectors = Column(self.codec.numpy_dtype, self.dim, file("vectors"), cols.get("vectors", 0))
        self._tokens = Column(TOKEN_DTYPE, None, file("tokens"), cols.get("vectors", 0))
        self._tombstones = Column(np.int64, None, file("tombstones"), cols.get("tombstones", 0))
        self.passages: list[dict[str, Any]] = []
        self._first_token = np.zeros(0, np.int64)
        self._num_tokens = np.zeros(0, np.int64)
        self.deleted = np.zeros(0, dtype=bool)
        self._live_by_id: dict[str, int] = {}
        self._hidden: dict[str, int] = {}  # passages left out of results by this object only (hide_passages)
        self._faiss = None
        self._passage_bytes = int(manifest.get("passages_bytes", 0))
        self._flat_search = "faiss"  # or "mmap": exact torch top-k over vectors.bin, no in-RAM FAISS flat
        self._device = "cpu"
        self._search = None  # accel backend (GPU FAISS / torch top-k); None = the CPU FAISS index

    # ----------------------------------------------------------------- creation and loading
    @classmethod
    def create(
        cls,
        model,
        path: str | Path | None = None,
        faiss_factory: str = auto.AUTO,
        filter_threshold: float | None = None,
        dtype: str = "float16",
        model_path: str | None = None,
        codec: VectorCodec | None = None,
        lock_timeout: float | None = None,
    ) -> PhraseIndex:
        """A new, empty index for ``model``'s phrase vectors; on disk at ``path`` (must not exist) or in memory.

        ``faiss_factory``: ``auto`` (exact while small, then a structure chosen and tuned for the size: see
        :mod:`~dphr_haystack.index.auto`) or any FAISS factory string, kept whatever the size.
        ``lock_timeout``: how long this object's writes wait for another writer of ``path`` (see the class)."""
        return cls._create(
            model.hidden_size,
            model.phrase_fingerprint(),
            model.config.to_dict(),
            path,
            faiss_factory=faiss_factory,
            filter_threshold=filter_threshold,
            dtype=dtype,
            model_path=model_path,
            codec=codec,
            lock_timeout=lock_timeout,
        )

    @classmethod
    def _create(
        cls,
        dim: int,
        model_fingerprint: str,
        model_config: dict[str, Any],
        path: str | Path | None,
        faiss_factory: str,
        filter_threshold: float | None,
        dtype: str,
        model_path: str | None,
        codec: VectorCodec | None,
        lock_timeout: float | None = None,
    ) -> PhraseIndex:
        """:meth:`create` from what it needs of a model: its dimension, phrase fingerprint and config."""
        faiss = require("faiss")
        policy = "auto" if faiss_factory == auto.AUTO else "fixed"
        faiss_factory = "Flat" if policy == "auto" else faiss_factory
        try:
            probe = faiss.index_factory(dim, faiss_factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as exc:
            raise InvalidParameterError(f"invalid FAISS factory string {faiss_factory!r}: {exc}") from exc
        del probe
        manifest = {
            "format": INDEX_FORMAT,
            "format_version": INDEX_FORMAT_VERSION,
            "model_fingerprint": model_fingerprint,
            "model_path": model_path,
            "model_config": model_config,
            "dim": dim,
            "codec": (codec or VectorCodec(dtype)).to_dict(),
            "codec_calibrated": codec is not None or dtype != "int8",
            "filter_threshold": filter_threshold,
            "faiss_factory": faiss_factory,
            "metric": "inner_product",
            "counts": {"vectors": 0, "passages": 0, "tombstones": 0},
            "passages_bytes": 0,
            "faiss_file": None,
            "checksums": {},
            "created": time.time(),
            "uid": uuid.uuid4().hex,
            "structure": {"policy": policy},
        }
        index = cls(manifest, Path(path) if path is not None else None, lock_timeout)
        index._faiss = index._new_faiss()
        if index._writer is not None:
            with index._writer.hold():  # two creators of one path: the second finds it not empty
                remove_uncommitted_files(index.path)  # a create killed before its first commit leaves only these
                if index.path.exists() and any(index.path.iterdir()):
                    raise InvalidParameterError(
                        f"{index.path} exists and is not empty; load it or choose another path"
                    )
                index.path.mkdir(parents=True, exist_ok=True)
                index._commit()
        return index

    @classmethod
    def load(
        cls,
        path: str | Path,
        model=None,
        verify: bool = True,
        flat_search: str = "faiss",
        device: str = "cpu",
        lock_timeout: float | None = None,
    ) -> PhraseIndex:
        """Open an index directory. With ``model``, its phrase fingerprint must match the index's.

        ``flat_search="mmap"`` searches a flat index by exact torch top-k over the memory-mapped vectors
        instead of rebuilding an in-RAM FAISS flat (for indexes larger than RAM); ``device`` places the
        search (see :meth:`to`); ``lock_timeout`` is how long this object's writes wait for another writer.
        Loading never writes to the directory. A load that overlaps a commit of another process is retried.
        """
        if flat_search not in ("faiss", "mmap"):
            raise InvalidParameterError(f"flat_search={flat_search!r}; valid: faiss, mmap")
        path = Path(path)
        for attempt in range(_LOAD_ATTEMPTS):
            stamp = _stamp(path / MANIFEST)
            try:
                index = cls._load_once(path, model, verify, flat_search, lock_timeout)
            except IndexLoadError:
                if attempt + 1 == _LOAD_ATTEMPTS or _stamp(path / MANIFEST) == stamp:
                    raise  # not a commit racing the read: the directory is damaged
                continue
            index._stamp = stamp
            break
        if device != "cpu":
            index.to(device)
        return index

    @classmethod
    def _read_manifest(cls, path: Path) -> dict[str, Any]:
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
        if manifest.get("format_version") != INDEX_FORMAT_VERSION:
            raise IndexLoadError(
                f"{manifest_path}: index format version {manifest.get('format_version')!r}; "
                f"this library reads version {INDEX_FORMAT_VERSION}: rebuild the index"
            )
        check_manifest(manifest, manifest_path)
        return manifest

    @classmethod
    def _load_once(cls, path: Path, model, verify: bool, flat_search: str, lock_timeout: float | None) -> PhraseIndex:
        _atomic.recover_directory(path)  # only when the directory is missing: a save() killed mid-swap (platforms
        # without an atomic exchange); an existing directory is never written by a load
        manifest = cls._read_manifest(path)
        manifest_path = path / MANIFEST
        if model is not None and model.hidden_size != manifest["dim"]:
            raise ModelMismatchError(
                f"{manifest_path}: the index holds {manifest['dim']}-dimensional vectors, the "
                f"given model makes {model.hidden_size}-dimensional ones"
            )
        if model is not None and model.phrase_fingerprint() != manifest["model_fingerprint"]:
            raise ModelMismatchError(
                f"{manifest_path}: the index was built with another phrase encoder (fingerprint "
                f"{manifest['model_fingerprint'][:12]}…, given model {model.phrase_fingerprint()[:12]}…)"
            )
        with _load_errors(path):
            index = cls(manifest, path, lock_timeout)
            index._flat_search = flat_search
            index._check_files(verify)
            index._read_passages()
            index._apply_tombstones(0)
            index._check_live_ids()
            index._load_faiss()
        return index

    def _apply_tombstones(self, start: int) -> None:
        """Mark the passages of tombstones ``start:`` deleted (each must be a passage row)."""
        tomb = self._tombstones.view()[start:]
        if self.path is not None:
            check_tombstones(tomb, self.num_passages, self.path / FILES["tombstones"])
        self.deleted[tomb] = True
        self._forget_rows(tomb)

    def _check_live_ids(self) -> None:
        """Raise IndexLoadError when two live passages share an id (a valid index tombstones the older one)."""
        if len(self._live_by_id) == self.num_live_passages:  # hidden passages are in neither
            return
        seen: dict[str, int] = {}
        for row in np.flatnonzero(~self.deleted):
            pid = self.passages[row]["id"]
            if pid in seen:
                raise IndexLoadError(
                    f"{self.path / FILES['passages'] if self.path else 'index'} is corrupted: passage id {pid!r:.80} "
                    f"is live at rows {seen[pid]} and {row}"
                )
            seen[pid] = int(row)

    def _forget_rows(self, rows: Iterable[int]) -> None:
        """Drop deleted rows from the id look-ups (a newer row with the same id stays)."""
        for row in rows:
            pid = self.passages[row]["id"]
            if self._live_by_id.get(pid) == row:
                del self._live_by_id[pid]
            if self._hidden.get(pid) == row:
                del self._hidden[pid]

    # ----------------------------------------------------------------- other writers
    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One write transaction: hold the directory's writer lock, catch up with other writers' commits, write.

        In-memory indexes have no directory and no lock. Re-entrant: a write inside a write runs in the same
        transaction.
        """
        if self._writer is None:
            yield
            return
        with self._writer.hold() as first:
            if first:
                self.refresh()
            yield

    def refresh(self) -> bool:
        """Catch up with what other writers committed to this directory since it was loaded or last refreshed.

        Appended passages and deletions are read incrementally; anything else (a reindex, a replaced directory)
        reloads the index. Returns whether anything changed. Never writes.
        """
        if self.path is None:
            return False
        for attempt in range(_LOAD_ATTEMPTS):
            stamp = _stamp(self.path / MANIFEST)
            if stamp == self._stamp:
                return False
            try:
                fresh = self._read_manifest(self.path)
                if self._extended_by(fresh):
                    with _load_errors(self.path):
                        self._catch_up(fresh)
                else:
                    self._adopt(PhraseIndex._load_once(self.path, None, False, self._flat_search, None))
            except IndexLoadError:
                if attempt + 1 == _LOAD_ATTEMPTS or _stamp(self.path / MANIFEST) == stamp:
                    raise
                continue
            self._stamp = stamp
            return True
        return False

    def _extended_by(self, fresh: dict[str, Any]) -> bool:
        """Whether ``fresh`` is this index's manifest with only passages and tombstones appended."""
        mine, counts = self.manifest, fresh["counts"]
        same = all(
            fresh.get(key) == mine.get(key)
            for key in ("uid", "created", "dim", "faiss_factory", "faiss_generation", "model_fingerprint")
        )
        return (
            same
            and (fresh["codec"] == mine["codec"] or len(self) == 0)
            and counts["vectors"] >= len(self)
            and counts["passages"] >= self.num_passages
            and counts["tombstones"] >= self._tombstones.length
            and fresh["passages_bytes"] >= self._passage_bytes
        )

    def _catch_up(self, fresh: dict[str, Any]) -> None:
        """Read the passages, vectors and tombstones other writers appended (``fresh`` extends this index)."""
        old_vectors, old_tombstones, old_bytes = len(self), self._tombstones.length, self._passage_bytes
        counts = fresh["counts"]
        previous = self.manifest
        self.manifest, self.codec = fresh, VectorCodec(**fresh["codec"])
        self._vectors.dtype = np.dtype(self.codec.numpy_dtype)
        for column, length in (
            (self._vectors, counts["vectors"]),
            (self._tokens, counts["vectors"]),
            (self._tombstones, counts["tombstones"]),
        ):
            column.length, column._cache = length, None
        self._passage_bytes = fresh["passages_bytes"]
        self._check_files(False)
        records = self._read_passage_records(old_bytes, fresh["passages_bytes"])
        rows = self._tokens.view()["passage"][old_vectors:]
        first = self.num_passages
        if len(rows) and (rows[0] < first or rows[-1] >= first + len(records) or np.any(np.diff(rows) < 0)):
            raise IndexLoadError(f"{self.path / FILES['tokens']} is corrupted: appended token rows out of order")
        if first + len(records) != counts["passages"]:
            raise IndexLoadError(f"{self.path / FILES['passages']}: appended passages do not match the manifest")
        lengths = np.zeros(first + len(records), dtype=np.int64)
        lengths[first:] = [len(r["text"]) for r in records]
        check_token_offsets(self._tokens.view()[old_vectors:], lengths, self.path / FILES["tokens"])
        self._register_passages(records, np.bincount(rows - first, minlength=len(records))[: len(records)])
        self._apply_tombstones(old_tombstones)
        self._check_live_ids()
        if fresh.get("faiss_file") != previous.get("faiss_file") and fresh.get("faiss_file"):
            self._load_faiss()  # the writer saved its trained structure with the new vectors
        elif self._faiss is not None:
            self._faiss_add(self._vectors.view()[old_vectors:])
        if self._search is not None:
            self._search = self._make_search(self._device)

    def _adopt(self, other: PhraseIndex) -> None:
        """Take over the state of a fresh load of this directory (keeping this object's lock and device)."""
        writer, device, search = self._writer, self._device, self._search
        self.__dict__.update(other.__dict__)
        self._writer = writer
        if search is not None or device != "cpu":
            self.to(device)

    def _check_files(self, verify: bool) -> None:
        assert self.path is not None
        counts = self.manifest["counts"]
        expected = {
            "vectors": counts["vectors"] * self._vectors.row_bytes,
            "tokens": counts["vectors"] * self._tokens.row_bytes,
            "passages": self._passage_bytes,
            "tombstones": counts["tombstones"] * 8,
        }
        for key, size in expected.items():
            file = self.path / FILES[key]
            actual = file.stat().st_size if file.exists() else 0
            if actual < size:
                raise IndexLoadError(f"{file} is truncated: {actual} bytes, manifest says {size}")
        if verify:
            for key, digest in self.manifest.get("checksums", {}).items():
                file = self.path / FILES[key]
                if sha256_prefix(file, expected[key]) != digest:
                    raise IndexLoadError(f"{file} is corrupted: its checksum does not match {MANIFEST}")

    def _read_passage_records(self, start: int, end: int) -> list[dict[str, Any]]:
        """The passage records stored in bytes ``start:end`` of ``passages.jsonl``, checked."""
        assert self.path is not None
        file = self.path / FILES["passages"]
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

    def _read_passages(self) -> None:
        assert self.path is not None
        file = self.path / FILES["passages"]
        records = self._read_passage_records(0, self._passage_bytes)
        if len(records) != self.manifest["counts"]["passages"]:
            raise IndexLoadError(
                f"{file}: {len(records)} passages, manifest says {self.manifest['counts']['passages']}"
            )
        rows = self._tokens.view()["passage"]
        if len(rows) and (rows[0] < 0 or rows[-1] >= len(records) or np.any(np.diff(rows) < 0)):
            raise IndexLoadError(
                f"{self.path / FILES['tokens']} is corrupted: token rows are not consecutive per passage"
            )
        lengths = np.fromiter((len(r["text"]) for r in records), dtype=np.int64, count=len(records))
        check_token_offsets(self._tokens.view(), lengths, self.path / FILES["tokens"])
        counts = np.bincount(rows, minlength=len(records)) if len(self) else np.zeros(len(records))
        self._register_passages(records, counts[: len(records)])

    def _load_faiss(self) -> None:
        name = self.manifest.get("faiss_file")
        if name:
            file = self.path / name
            ivfdata = self.manifest.get("faiss_ivfdata")
            if ivfdata and not (self.path / ivfdata).is_file():
                raise IndexLoadError(f"{self.path / ivfdata} (the on-disk inverted lists of {file}) is missing")
            try:
                self._faiss = index_types.read_faiss(file, ondisk=bool(ivfdata))
            except RuntimeError as exc:
                raise IndexLoadError(f"cannot read FAISS index {file}: {exc}") from exc
            if self._faiss.ntotal != len(self) or self._faiss.d != self.dim:
                raise IndexLoadError(
                    f"{file}: {self._faiss.ntotal} vectors of dim {self._faiss.d}, expected {len(self)} of {self.dim}"
                )
            try:
                index_types.apply_search_params(self._faiss, self.search_params)
            except InvalidParameterError as exc:
                raise IndexLoadError(f"{self.path / MANIFEST}: {exc}") from exc
        elif is_flat(self.faiss_factory) and self._flat_search == "mmap":
            self._faiss = None  # searched by exact torch top-k over the memory-mapped vectors
        else:
            self._faiss = self._new_faiss()
            self._faiss_add(self._vectors.view())

    # ----------------------------------------------------------------- properties
    def __len__(self) -> int:
        """Number of stored token vectors (deleted passages included until compaction)."""
        return self._vectors.length

    @property
    def num_passages(self) -> int:
        return len(self.passages)

    @property
    def num_live_passages(self) -> int:
        return int((~self.deleted).sum())

    @property
    def num_live_vectors(self) -> int:
        """Stored token vectors of the live passages (what searches can return)."""
        return int(self._num_tokens[~self.deleted].sum())

    @property
    def faiss_factory(self) -> str:
        return self.manifest["faiss_factory"]

    @property
    def auto_structure(self) -> bool:
        """Whether the index chooses its FAISS structure by size (``faiss_factory="auto"``)."""
        return (self.manifest.get("structure") or {}).get("policy") == "auto"

    def check_settings(
        self, dtype: str | None = None, filter_threshold: float | str | None = None, faiss_factory: str | None = None
    ) -> None:
        """Raise SettingsConflictError when a setting asked of a resumed index differs from what it was built with.

        Args:
            dtype: Stored vector dtype (``float16``, ``int8``); None: not asked.
            filter_threshold: Filter threshold, or ``"none"`` for no filtering; None: not asked.
            faiss_factory: ``auto`` or a FAISS factory string; None: not asked.
        """
        asked: list[tuple[str, Any, Any]] = []
        if dtype is not None:
            asked.append(("dtype", dtype, self.codec.dtype))
        if filter_threshold is not None:
            wanted = None if filter_threshold == "none" else float(filter_threshold)
            built_threshold = "none" if self.filter_threshold is None else self.filter_threshold
            asked.append(("filter_threshold", "none" if wanted is None else wanted, built_threshold))
        if faiss_factory is not None:
            built = auto.AUTO if self.auto_structure else self.faiss_factory
            same = (faiss_factory == auto.AUTO) == self.auto_structure and (
                self.auto_structure or faiss_factory.replace(" ", "") == self.faiss_factory.replace(" ", "")
            )
            asked.append(("faiss_factory", faiss_factory, faiss_factory if same else built))
        for name, wanted, built in asked:
            if wanted != built:
                raise SettingsConflictError(
                    f"{self.path or 'this index'} was built with {name}={built!r}; this run asks {name}={wanted!r}. "
                    "Resume with the index's settings (or leave the option out), or write a new index elsewhere"
                )

    @property
    def filter_threshold(self) -> float | None:
        return self.manifest["filter_threshold"]

    @property
    def model_fingerprint(self) -> str:
        return self.manifest["model_fingerprint"]

    @property
    def faiss_index(self):
        """The CPU FAISS structure (None for a flat index loaded with ``flat_search="mmap"``)."""
        return self._faiss

    @property
    def search_params(self) -> dict[str, Any]:
        """FAISS search parameters applied on load (``nprobe``, ``efSearch``, …)."""
        return dict(self.manifest.get("search_params") or {})

    @property
    def search_device(self) -> str:
        """Where token search runs: ``cpu`` or ``cuda[:N]``."""
        return self._device

    @property
    def tokens(self) -> np.ndarray:
        return self._tokens.view()

    @property
    def first_token(self) -> np.ndarray:
        return self._first_token

    @property
    def num_tokens(self) -> np.ndarray:
        return self._num_tokens

    def vectors(self, rows: np.ndarray | slice | None = None) -> np.ndarray:
        """Decoded float32 vectors of the given rows (all rows when None)."""
        view = self._vectors.view()
        return self.codec.decode(view if rows is None else view[rows])

    def passage_row(self, passage_id: str) -> int | None:
        """Row of the live passage with this id, or None."""
        return self._live_by_id.get(passage_id)

    def live_passage_ids(self) -> list[str]:
        return list(self._live_by_id)

    # ----------------------------------------------------------------- token search (MIPS)
    def search_tokens(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, rows) by inner product for each query vector (FAISS semantics: row -1 = none)."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if self._search is None and self._faiss is None:
            self._search = self._make_search("cpu")
        backend = self._search if self._search is not None else self._faiss
        refine = int(self.search_params.get("refine", 1))
        if refine <= 1:
            return backend.search(queries, k)
        _, ids = backend.search(queries, min(k * refine, max(len(self), k)))
        return index_types.refine_exact(queries, ids, k, self._vectors.view(), self.codec.decode)

    def to(self, device: str = "auto") -> PhraseIndex:
        """Run token search on ``device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``); returns self.

        On CUDA: faiss-gpu when installed, else exact torch matmul top-k for flat indexes (vectors resident
        on the GPU in fp16); other index types without faiss-gpu, or no usable GPU, stay on the CPU with a
        :class:`~dphr_haystack.index.backends.DeviceFallbackWarning`.
        """
        from .backends import resolve_device

        self._search = self._make_search(resolve_device(device))
        self._device = str(getattr(self._search, "device", "cpu"))  # None: the CPU FAISS index
        return self

    def _make_search(self, device: str):
        from .backends import FaissSearch, make_search_backend

        backend = make_search_backend(
            self._faiss,
            is_flat(self.faiss_factory),
            self._vectors.view,
            self.codec,
            device,
            self.search_params,
            self._flat_search,
        )
        if isinstance(backend, FaissSearch) and backend.index is self._faiss:
            return None  # plain CPU FAISS: searched directly
        return backend

    @_writes
    def set_search_params(self, **params: Any) -> None:
        """Set and persist FAISS search parameters, e.g. ``set_search_params(nprobe=64)`` or ``efSearch=256``."""
        problem = search_params_problem({**self.search_params, **params})
        if problem:
            raise InvalidParameterError(problem)
        if self._faiss is not None:
            index_types.apply_search_params(self._faiss, params)
        self.manifest["search_params"] = {**self.search_params, **params}
        if self._search is not None:
            self.to(self._device)
        if self.path is not None:
            self._commit()

    # ----------------------------------------------------------------- writing
    def add_passages(
        self,
        corpus: str | Path | Iterable[Any],
        model,
        batch_size: int = 32,
        chunk_size: int = 512,
        duplicates: str = "fail",
        progress: bool = True,
    ) -> CorpusStats:
        """Encode passages and add them, committing every ``chunk_size`` passages.

        ``duplicates`` decides what an id already in the index does: ``fail`` (raise), ``skip`` (keep the
        stored one) or ``overwrite`` (delete the stored one, add the new one). Passages without text are
        skipped and counted in the returned stats.
        """
        from tqdm.auto import tqdm

        if duplicates not in DUPLICATE_POLICIES:
            raise InvalidParameterError(f"duplicates={duplicates!r}; valid: {', '.join(DUPLICATE_POLICIES)}")
        batch_size, chunk_size = check_param("batch_size", batch_size), check_param("chunk_size", chunk_size)
        if model.phrase_fingerprint() != self.model_fingerprint:
            raise ModelMismatchError(
                "add_passages: the model's phrase encoder differs from the one this index was built with"
            )
        stats = CorpusStats()
        bar = tqdm(desc="indexing phrases", unit="passage", disable=not progress)
        for chunk in chunked(read_corpus(corpus, stats), chunk_size):
            with self._writing():  # one transaction per chunk: other writers interleave between chunks
                kept = self._apply_duplicate_policy(chunk, duplicates)
                if kept:
                    self._ensure_codec(model, kept, batch_size)
                    self._add_encoded(model, kept, batch_size)
            if kept:
                release_free_memory()  # flat peak memory however many chunks (see _memory.py)
            bar.update(len(chunk))
        bar.close()
        if stats.passages == 0 and self.num_passages == 0:
            raise EmptyCorpusError(f"the corpus has no passage with text ({stats.skipped_empty} empty ones skipped)")
        return stats

    def _apply_duplicate_policy(self, chunk: list[Passage], policy: str) -> list[Passage]:
        clashes = [p.id for p in chunk if p.id in self._live_by_id]
        if not clashes:
            return chunk
        if policy == "fail":
            raise InvalidParameterError(f"passage ids already in the index: {clashes[:5]} (duplicates='fail')")
        if policy == "skip":
            return [p for p in chunk if p.id not in self._live_by_id]
        self.delete_passages(clashes)
        return chunk

    def _ensure_codec(self, model, chunk: Sequence[Passage], batch_size: int) -> None:
        if self.manifest.get("codec_calibrated", True):
            return
        self.codec = VectorCodec.calibrate(self.codec.dtype, calibration_sample(model, chunk, batch_size))
        self.manifest["codec"] = self.codec.to_dict()
        self.manifest["codec_calibrated"] = True

    def _add_encoded(self, model, passages: Sequence[Passage], batch_size: int) -> None:
        """Encode passages and append them in one commit. On disk their pieces are appended as they are encoded
        (:func:`~dphr_haystack.encode.dump.encode_shard_stream`), so memory stays bounded however long a passage is;
        in memory the index holds every vector anyway."""
        if self.path is None:
            self.add_shard(encode_shard(model, passages, self.codec, self.filter_threshold, batch_size))
            return
        records, pieces = encode_shard_stream(model, passages, self.codec, self.filter_threshold, batch_size)
        self._append_stream(records, pieces, self.codec, merging=False)

    @_writes
    def add_shard(self, shard: PhraseShard) -> None:
        """Append a dumped shard (its vectors re-coded if its codec differs) and commit."""
        self._append_shard(shard, merging=False)

    def _append_shard(self, shard: PhraseShard, merging: bool) -> None:
        """:meth:`add_shard`; while ``merging`` a dump, without FAISS adds and without a commit per shard."""
        if shard.vectors.shape[1:] != (self.dim,):
            raise ModelMismatchError(f"shard vectors have dim {shard.vectors.shape[1:]}, index {self.dim}")
        self._append_stream(shard.passages, [ShardPiece(shard.vectors, shard.tokens)], shard.codec, merging)

    def _append_stream(
        self, passages: list[dict[str, Any]], pieces: Iterable[ShardPiece], codec: VectorCodec, merging: bool
    ) -> None:
        """Append passages whose kept tokens come in ``pieces`` (in passage and token order), then commit.

        Pieces are buffered up to :data:`APPEND_BYTES` and appended to the column files past their committed length;
        should the pieces fail (an encoding error), the columns are rolled back and nothing is committed.
        """
        ids = [r["id"] for r in passages]
        clashes = [pid for pid in ids if pid in self._live_by_id]
        if clashes or len(set(ids)) != len(ids):
            raise InvalidParameterError(f"duplicate passage ids: {(clashes or ids)[:5]}")
        if not merging and self._faiss is not None and index_types.has_ondisk_lists(self._faiss):
            raise InvalidParameterError(
                "this index keeps its FAISS inverted lists on disk, which are read-only: add to an index with "
                "in-RAM lists (reindex(factory) without on_disk), then reindex(factory, on_disk=True) again"
            )
        records = [{k: r[k] for k in ("id", "document_id", "title", "text", "meta") if k in r} for r in passages]
        try:  # fail before anything is appended, so a bad record never leaves half a shard behind
            json.dumps(records, ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidParameterError(f"shard passages cannot be stored as JSON: {exc}") from exc
        start, start_tokens = len(self), self._tokens.length
        codec_before = (self.codec, self.manifest.get("codec"), self.manifest.get("codec_calibrated"))
        counts = np.zeros(len(records), dtype=np.int64)
        added: list[np.ndarray] = []  # the stored vectors, kept for FAISS only when the index is in memory
        buffer: list[tuple[np.ndarray, np.ndarray]] = []

        def flush() -> None:
            if buffer:
                self._vectors.append(np.concatenate([v for v, _ in buffer]))
                self._tokens.append(np.concatenate([t for _, t in buffer]))
                buffer.clear()

        buffered = 0
        try:
            for piece in pieces:
                if piece.vectors.shape[1:] != (self.dim,):
                    raise ModelMismatchError(f"shard vectors have dim {piece.vectors.shape[1:]}, index {self.dim}")
                if not self.manifest.get("codec_calibrated", True):
                    self.codec = VectorCodec.calibrate(self.codec.dtype, codec.decode(piece.vectors[:20000]))
                    self.manifest["codec"], self.manifest["codec_calibrated"] = self.codec.to_dict(), True
                stored = piece.vectors if codec == self.codec else self.codec.encode(codec.decode(piece.vectors))
                tokens = np.array(piece.tokens, dtype=TOKEN_DTYPE, copy=True)
                if len(tokens) and (tokens["passage"].min() < 0 or tokens["passage"].max() >= len(records)):
                    raise InvalidParameterError("shard token rows point outside the shard's passages")
                counts += np.bincount(tokens["passage"], minlength=len(records))
                tokens["passage"] += self.num_passages
                buffer.append((stored, tokens))
                buffered += stored.nbytes
                if self.path is None and not merging:
                    added.append(stored)
                if buffered >= APPEND_BYTES:
                    flush()
                    buffered = 0
            flush()
        except BaseException:
            self._vectors.truncate(start)
            self._tokens.truncate(start_tokens)
            self.codec, self.manifest["codec"] = codec_before[:2]
            if codec_before[2] is not None:
                self.manifest["codec_calibrated"] = codec_before[2]
            raise
        if not merging:
            new = added if self.path is None else [self._vectors.view()[start:]]
            for block in new:
                self._train_faiss_if_needed(block)
                self._faiss_add(block)
        self._register_appended(records, counts)
        if not merging:
            self._commit()
            if isinstance(self._search, FaissSearch):
                self._search = self._make_search(self._device)  # a GPU copy does not see CPU adds
            if self.auto_structure and auto.needs_rebuild(self.manifest, len(self)):
                self._build_auto_structure(progress=False)

    def _register_appended(self, records: list[dict[str, Any]], counts: np.ndarray) -> None:
        """Append passage records (``counts`` stored tokens each, already appended) to the passages file."""
        if self.path is not None:
            file = self.path / FILES["passages"]
            payload = b"".join(json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n" for r in records)
            with open_no_follow(file, "r+b") as handle:  # a symbolic link here is refused, not followed
                handle.truncate(self._passage_bytes)
                handle.seek(self._passage_bytes)
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            self._passage_bytes += len(payload)
        self._register_passages(records, counts)

    def _register_passages(self, records: list[dict[str, Any]], counts: np.ndarray) -> None:
        """Track new passage records whose stored tokens (``counts`` each) end the vector file."""
        start = len(self.passages)
        counts = np.asarray(counts, dtype=np.int64)
        base = len(self) - int(counts.sum())
        firsts = base + np.concatenate([[0], np.cumsum(counts)[:-1]]) if len(counts) else counts
        self.passages.extend(records)
        self._first_token = np.concatenate([self._first_token, firsts.astype(np.int64)])
        self._num_tokens = np.concatenate([self._num_tokens, counts])
        self.deleted = np.concatenate([self.deleted, np.zeros(len(records), dtype=bool)])
        for offset, record in enumerate(records):
            self._live_by_id[record["id"]] = start + offset

    @_writes
    def delete_passages(self, passage_ids: Iterable[str]) -> int:
        """Tombstone the live (or hidden) passages with these ids; their phrases vanish from results. Returns the
        count."""
        rows = set()
        for pid in passage_ids:
            for row in (self._live_by_id.get(pid), self._hidden.pop(pid, None)):
                if row is not None:
                    rows.add(row)
        return self._delete_rows(sorted(rows))

    def hide_passages(self, passage_ids: Iterable[str]) -> int:
        """Leave these live passages out of this object's results without writing anything (a reader's view of
        phrases whose documents it does not hold); :meth:`delete_passages` still deletes them. Returns the count."""
        hidden = 0
        for pid in passage_ids:
            row = self._live_by_id.pop(pid, None)
            if row is not None:
                self._hidden[pid] = row
                self.deleted[row] = True
                hidden += 1
        return hidden

    def hidden_passage_ids(self) -> list[str]:
        """Ids of the passages :meth:`hide_passages` left out of results."""
        return list(self._hidden)

    @_writes
    def delete_documents(self, document_ids: Iterable[str]) -> int:
        """Tombstone every live passage of these documents."""
        wanted = set(document_ids)
        rows = [row for row in self._live_by_id.values() if self.passages[row]["document_id"] in wanted]
        return self._delete_rows(sorted(rows))

    def _delete_rows(self, rows: list[int]) -> int:
        if not rows:
            return 0
        self._tombstones.append(np.asarray(rows, dtype=np.int64))
        self.deleted[rows] = True
        self._forget_rows(rows)
        self._commit()
        return len(rows)

    # ----------------------------------------------------------------- FAISS
    def _train_faiss_if_needed(self, stored: np.ndarray) -> None:
        """Train an untrained FAISS structure on a sized sample of the first stored-dtype vectors added.

        Training on the first batch only is a convenience for small corpora; for large ones build flat (or
        dump shards), then :meth:`reindex`, which samples the whole index (see ``index_types``).
        """
        if self._faiss is None or self._faiss.is_trained or len(stored) == 0:
            return
        index_types.train_faiss(self._faiss, self.faiss_factory, stored, self.codec.decode)
        self.manifest["search_params"] = {**index_types.default_search_params(self._faiss), **self.search_params}
        index_types.apply_search_params(self._faiss, self.search_params)

    def _new_faiss(self):
        """An empty structure of this index's type: for exact types, the one over the stored codes."""
        if is_flat(self.faiss_factory):
            return index_types.make_exact_index(self.dim, self.codec)
        return index_types.make_faiss_index(self.dim, self.faiss_factory)

    def _faiss_add(self, stored: np.ndarray, chunk: int = 65536) -> None:
        """Add stored-dtype vectors to FAISS a chunk at a time."""
        if self._faiss is None:
            return
        if is_flat(self.faiss_factory):
            if self._faiss.ntotal == 0:
                self._faiss = self._new_faiss()  # an int8 codec is calibrated on the first vectors added
            index_types.add_exact(self._faiss, self.codec, stored, chunk)
            return
        for start in range(0, len(stored), chunk):
            self._faiss.add(np.ascontiguousarray(self.codec.decode(stored[start : start + chunk])))

    def _faiss_file_name(self) -> str:
        generation = int(self.manifest.get("faiss_generation", 0))  # bumped by reindex: a new name, crash-safe
        return f"faiss-{len(self)}-{self._tombstones.length}" + (f"-g{generation}" if generation else "") + ".index"

    # ----------------------------------------------------------------- other FAISS structures, merging dumps
    @_writes
    def reindex(
        self,
        faiss_factory: str,
        path: str | Path | None = None,
        on_disk: bool = False,
        train_size: int | None = None,
        max_train: int = index_types.DEFAULT_MAX_TRAIN,
        search_params: dict[str, Any] | None = None,
        progress: bool = True,
        pq_max_train: int | None = None,
    ) -> PhraseIndex:
        """Build another FAISS structure (any factory string) from the stored vectors, without re-encoding.

        In place when ``path`` is None, else on a copy written to ``path`` (this index stays as it is); returns
        the reindexed index. Training samples all stored vectors (``index_types.training_sample_size``, or
        ``train_size``). ``on_disk`` (IVF types, indexes on disk) writes the inverted lists to an
        ``.ivfdata`` file that searches memory-map, so the structure never has to fit in RAM; ``pq_max_train``
        caps OPQ/PQ codebook training points (see ``index_types.make_faiss_index``). The swap is atomic: the new
        FAISS file is written under a new name before the manifest points to it.

        ``faiss_factory="auto"`` lets the index choose and tune its structure for its size from then on (see
        :mod:`~dphr_haystack.index.auto`); any other factory is kept whatever the size.

        Example:
            >>> index.reindex(index_types.factory_for("opq-ivf-pq", len(index), index.dim), path="idx-opq")
        """
        if faiss_factory == auto.AUTO and path is None:
            return self._build_auto_structure(progress)
        if path is not None:
            self.save(path)
            copy = PhraseIndex.load(path, verify=False, flat_search="mmap")
            return copy.reindex(
                faiss_factory, None, on_disk, train_size, max_train, search_params, progress, pq_max_train
            )
        if on_disk and self.path is None:
            raise InvalidParameterError(
                "on_disk=True keeps inverted lists in a file: save the index first or pass path"
            )
        index_types.make_faiss_index(self.dim, faiss_factory)  # validates the factory string
        if len(self) == 0 and not is_flat(faiss_factory):
            raise InvalidParameterError(f"cannot train FAISS {faiss_factory!r} on an empty index: add passages first")
        started = time.perf_counter()
        generation = int(self.manifest.get("faiss_generation", 0)) + 1
        old_ivfdata = self.manifest.get("faiss_ivfdata")
        ivfdata = f"faiss-g{generation}.ivfdata" if on_disk else None
        stored = self._vectors.view()
        if is_flat(faiss_factory):
            if on_disk:
                raise InvalidParameterError(
                    "on_disk applies to IVF types; a flat index can be searched memory-mapped "
                    "instead: PhraseIndex.load(path, flat_search='mmap')"
                )
            new = None
            if self._flat_search != "mmap":
                new = index_types.make_exact_index(self.dim, self.codec)
                index_types.add_exact(new, self.codec, stored, progress=progress)
            trained_on = 0
        else:
            new, trained_on = index_types.build_faiss(
                faiss_factory,
                self.dim,
                stored,
                self.codec.decode,
                max_train=max_train,
                train_size=train_size,
                ivfdata=self.path / ivfdata if ivfdata else None,
                progress=progress,
                pq_max_train=pq_max_train,
            )
        params = {**(index_types.default_search_params(new) if new is not None else {}), **(search_params or {})}
        if new is not None:
            index_types.apply_search_params(new, params)
        self._faiss = new
        old_file = self.manifest.get("faiss_file")
        if not self._building_auto:
            self.manifest["structure"] = {"policy": "fixed"}
        self.manifest.update(
            {
                "faiss_factory": faiss_factory,
                "faiss_generation": generation,
                "faiss_ivfdata": ivfdata,
                "search_params": params,
                "faiss_file": None if is_flat(faiss_factory) else old_file,
                "faiss_build": {
                    "train_vectors": int(trained_on),
                    "seconds": round(time.perf_counter() - started, 3),
                    "on_disk": bool(on_disk),
                },
            }
        )
        self._commit()  # writes the new FAISS file under a new name, then the manifest
        if self.path is not None:
            for stale in (old_file, old_ivfdata):
                if stale and stale not in (self.manifest.get("faiss_file"), ivfdata):
                    (self.path / stale).unlink(missing_ok=True)
        self._search = None
        if self._device != "cpu":
            self.to(self._device)
        return self

    _building_auto = False

    def _build_auto_structure(self, progress: bool = True) -> PhraseIndex:
        """Build the structure ``auto`` picks for the current size and tune its ``nprobe`` (see ``auto``)."""
        factory = auto.auto_factory(len(self))
        self._building_auto = True
        try:
            self.reindex(factory, progress=progress)
        finally:
            self._building_auto = False
        structure: dict[str, Any] = {"policy": "auto", "built_for": len(self)}
        if not is_flat(factory):
            ivf = index_types.ivf_of(self._faiss)
            tuned = auto.tune_nprobe(self._probe_search, self._vectors.view(), self.codec.decode, ivf.nlist)
            structure.update({key: tuned.pop(key) for key in ("probe_recall", "probe_queries", "probe_k")})
            self.manifest["structure"] = structure
            self.set_search_params(**tuned)  # commits
        else:
            self.manifest["structure"] = structure
            self._commit()
        return self

    def _probe_search(self, queries: np.ndarray, k: int, nprobe: int) -> np.ndarray:
        """Rows of a search with ``nprobe`` lists and ``auto``'s exact re-ranking (for tuning)."""
        index_types.apply_search_params(self._faiss, {"nprobe": nprobe})
        _, ids = self._faiss.search(queries, min(k * auto.REFINE, len(self)))
        return index_types.refine_exact(queries, ids, k, self._vectors.view(), self.codec.decode)[1]

    from_dump = classmethod(merge_dump)

    # ----------------------------------------------------------------- persistence
    def _commit(self) -> None:
        """Make the in-place state durable: write the FAISS file if any, then replace the manifest."""
        if self.path is None:
            self._update_manifest_counts()
            return
        old_faiss = self.manifest.get("faiss_file")
        if not is_flat(self.faiss_factory) and self._faiss is not None and self._faiss.is_trained:
            name = self._faiss_file_name()
            if name != old_faiss:
                write_faiss(self._faiss, self.path / name)
                self.manifest["faiss_file"] = name
        self._update_manifest_counts()
        self.manifest["checksums"] = {
            key: sha256_prefix(self.path / FILES[key], size)
            for key, size in (
                ("tokens", self._tokens.length * self._tokens.row_bytes),
                ("passages", self._passage_bytes),
                ("tombstones", self._tombstones.length * 8),
            )
        }
        _atomic.write_file_atomic(self.path / MANIFEST, json.dumps(self.manifest, indent=1))
        self._stamp = _stamp(self.path / MANIFEST)  # our own commit: nothing to catch up with
        if old_faiss and old_faiss != self.manifest.get("faiss_file"):
            (self.path / old_faiss).unlink(missing_ok=True)

    def _update_manifest_counts(self) -> None:
        self.manifest["counts"] = {
            "vectors": len(self),
            "passages": self.num_passages,
            "tombstones": self._tombstones.length,
        }
        self.manifest["passages_bytes"] = self._passage_bytes
        self.manifest["updated"] = time.time()

    def save(self, path: str | Path) -> None:
        """Write a complete copy to ``path`` atomically (temporary directory, then rename)."""
        path = refuse_symlink(Path(path).absolute())  # a link there would be replaced through, elsewhere
        if self.path is not None and path.resolve() == self.path.resolve():
            with self._writing():
                self._commit()
            return
        with WriterLock(path).hold():  # the copy replaces a directory other writers may be using
            self._save_copy(path)

    def _save_copy(self, path: Path) -> None:
        tmp = make_temp_dir(path)
        try:
            self._write_copy(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _atomic.replace_directory(tmp, path)

    def _write_copy(self, tmp: Path) -> None:
        """Write every file of a complete copy of this index into the fresh, empty directory ``tmp``."""
        self._vectors.write_to(tmp / FILES["vectors"])
        self._tokens.write_to(tmp / FILES["tokens"])
        self._tombstones.write_to(tmp / FILES["tombstones"])
        payload = b"".join(json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n" for r in self.passages)
        with open_no_follow(tmp / FILES["passages"], "xb") as handle:
            handle.write(payload)
        manifest = json.loads(json.dumps(self.manifest))
        manifest["uid"] = uuid.uuid4().hex  # another directory: its readers must not take it for this one
        manifest["passages_bytes"] = len(payload)
        manifest["counts"] = {
            "vectors": len(self),
            "passages": self.num_passages,
            "tombstones": self._tombstones.length,
        }
        manifest["faiss_file"] = None
        if not is_flat(self.faiss_factory) and self._faiss.is_trained:
            manifest["faiss_file"] = self._faiss_file_name()
            write_faiss(self._faiss, tmp / manifest["faiss_file"])
            if manifest.get("faiss_ivfdata"):  # on-disk inverted lists: the header names this file, same dir
                index_types.copy_ivfdata(self.path / manifest["faiss_ivfdata"], tmp / manifest["faiss_ivfdata"])
        manifest["checksums"] = {
            key: sha256_prefix(tmp / FILES[key], None) for key in ("tokens", "passages", "tombstones")
        }
        for file in tmp.iterdir():
            _atomic.fsync_file(file)
        _atomic.write_file_atomic(tmp / MANIFEST, json.dumps(manifest, indent=1))
