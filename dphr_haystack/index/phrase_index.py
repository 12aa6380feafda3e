"""PhraseIndex: stored token vectors + their metadata + a FAISS index, in a self-describing directory.

The directory layout and its consistency are :mod:`~dphr_haystack.index.storage`'s (:class:`IndexStorage`), the
passage rows and deletions :mod:`~dphr_haystack.index.passages`' (:class:`PassageTable`), the FAISS structure
:mod:`~dphr_haystack.index.faiss_structure`'s (:class:`FaissStructure`). :class:`PhraseIndex` puts them together
behind one API and owns the write transactions: the writer lock, catching up with other writers, commits.
Encoding passages into an index is :func:`dphr_haystack.encode.add.add_passages`; merging a dump
:func:`dphr_haystack.index.merge.merge_dump`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .._util import atomic
from .._util.lock import WriterLock, directory_entries
from .._util.nofollow import make_temp_dir, refuse_symlink
from ..errors import IndexLoadError, IndexWriteError, InvalidParameterError, ModelMismatchError
from ..model.registry import loaded_model_reference
from . import auto
from . import structures as index_types
from .codec import VectorCodec
from .faiss_structure import FaissStructure
from .keys import check_key_budget
from .manifest import KEYED_FORMAT_VERSION, MANIFEST, check_model, manifest_stamp, new_manifest, read_manifest
from .passages import PassageTable, RowCache
from .private import private_copy
from .reindexing import Reindexing
from .rounds import SearchedRows
from .shards import PhraseShard, ShardPiece
from .storage import LOAD_ATTEMPTS, IndexStorage, check_tombstones, load_errors, remove_uncommitted_files
from .transaction import Transactions, write_errors, writes

logger = logging.getLogger(__name__)


class PhraseIndex(Reindexing):
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
        >>> from dphr_haystack.encode.add import add_passages
        >>> index = PhraseIndex.create(model)                      # in memory, flat inner product
        >>> add_passages(index, model, "corpus.jsonl")
        >>> index.save("my-index")
        >>> index = PhraseIndex.load("my-index", model=model)      # checks the model fingerprint
    """

    def __init__(self, manifest: dict[str, Any], path: Path | None, lock_timeout: float | None = None) -> None:
        self.storage = IndexStorage(manifest, path)
        self.table = PassageTable()
        self.structure = FaissStructure(self.storage)
        self._writer = WriterLock(path, lock_timeout) if path is not None else None
        self._stamp: tuple[int, int, int] | None = None  # the committed manifest this object reflects
        self._transactions = Transactions()

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
        key_vectors: int | None = None,
    ) -> PhraseIndex:
        """A new, empty index for ``model``'s phrase vectors; on disk at ``path`` (must not exist) or in memory.

        ``faiss_factory``: ``auto`` (exact while small, then a structure chosen and tuned for the size: see
        :mod:`~dphr_haystack.index.auto`) or any FAISS factory string, kept whatever the size.
        ``model_path``: the model the index records (what ``dphr search`` loads without ``--model``); by default the
        shipped name or directory ``model`` was loaded from, None for a model built in memory.
        ``lock_timeout``: how long this object's writes wait for another writer of ``path`` (see the class).
        ``key_vectors``: FAISS searches this many k-means centroids of each passage's vectors instead of every vector,
        and a search reads the passages they hit whole (:mod:`~dphr_haystack.index.keys`: about a quarter of the
        structure's RAM at 8, within 1 EM point); None searches every stored vector."""
        return cls.create_for_encoder(
            model.hidden_size,
            model.phrase_fingerprint(),
            model.config.to_dict(),
            path,
            faiss_factory=faiss_factory,
            filter_threshold=filter_threshold,
            dtype=dtype,
            model_path=model_path if model_path is not None else loaded_model_reference(model),
            codec=codec,
            lock_timeout=lock_timeout,
            key_vectors=key_vectors,
        )

    @classmethod
    def create_for_encoder(
        cls,
        dim: int,
        model_fingerprint: str,
        model_config: dict[str, Any],
        path: str | Path | None,
        faiss_factory: str = auto.AUTO,
        filter_threshold: float | None = None,
        dtype: str = "float16",
        model_path: str | None = None,
        codec: VectorCodec | None = None,
        lock_timeout: float | None = None,
        key_vectors: int | None = None,
    ) -> PhraseIndex:
        """:meth:`create` from what it needs of a model: its dimension, phrase fingerprint and config (a dump's
        settings, when merging one)."""
        policy = "auto" if faiss_factory == auto.AUTO else "fixed"
        faiss_factory = "Flat" if policy == "auto" else faiss_factory
        index_types.make_faiss_index(dim, faiss_factory)  # validates the factory string
        calibrated = codec is not None or dtype != "int8"
        manifest = new_manifest(
            dim, model_fingerprint, model_config, model_path, codec or VectorCodec(dtype), calibrated
        )
        manifest.update({"filter_threshold": filter_threshold, "faiss_factory": faiss_factory})
        key_vectors = check_key_budget(key_vectors)
        if key_vectors:
            manifest.update({"key_vectors": key_vectors, "format_version": KEYED_FORMAT_VERSION})
        manifest["structure"] = {"policy": policy}
        index = cls(manifest, Path(path) if path is not None else None, lock_timeout)
        index.structure.reset()
        if index._writer is not None:
            with write_errors(index.path), index._writer.hold():  # two creators of one path: the second waits
                remove_uncommitted_files(index.path)  # a create killed before its first commit leaves only these
                if directory_entries(index.path):  # (the lock's own file aside)
                    raise InvalidParameterError(
                        f"{index.path} exists and is not empty; load it or choose another path"
                    )
                index.path.mkdir(parents=True, exist_ok=True)
                index.commit()
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
        for attempt in range(LOAD_ATTEMPTS):
            stamp = manifest_stamp(path / MANIFEST)
            try:
                index = cls._load_once(path, model, verify, flat_search, lock_timeout)
            except IndexLoadError:
                if attempt + 1 == LOAD_ATTEMPTS or manifest_stamp(path / MANIFEST) == stamp:
                    raise  # not a commit racing the read: the directory is damaged
                continue
            index._stamp = stamp
            break
        if device != "cpu":
            index.to(device)
        return index

    @classmethod
    def _load_once(cls, path: Path, model, verify: bool, flat_search: str, lock_timeout: float | None) -> PhraseIndex:
        atomic.recover_directory(path)  # only when the directory is missing: a save() killed mid-swap (platforms
        # without an atomic exchange); an existing directory is never written by a load
        manifest = read_manifest(path)
        if model is not None:
            check_model(manifest, path / MANIFEST, model.hidden_size, model.phrase_fingerprint())
        with load_errors(path):
            index = cls(manifest, path, lock_timeout)
            index.structure.flat_search = flat_search
            index.storage.check_files(verify)
            index.storage.check_key_rows(0)
            records, counts = index.storage.read_passages()
            index.table.register(records, counts, len(index))
            index._apply_tombstones(0)
            index.table.check_live_ids(index.storage.where("passages"))
            index.structure.load()
        return index

    def _apply_tombstones(self, start: int) -> None:
        """Mark the passages of tombstones ``start:`` deleted (each must be a passage row)."""
        tomb = self.storage.tombstones.view()[start:]
        if self.path is not None:
            check_tombstones(tomb, self.num_passages, self.storage.file("tombstones"))
        self.table.delete(tomb)

    # ----------------------------------------------------------------- other writers
    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """One write transaction: hold the directory's writer lock, catch up with other writers' commits, write.

        Should the block fail before it commits (a full disk, an encoding error), this object is rolled back to
        where the block began (or to its last commit) and the next write starts from the committed state; an
        OSError is raised as :class:`~dphr_haystack.errors.IndexWriteError` (see :mod:`.transaction`). In-memory
        indexes have no directory and no lock. Re-entrant: a write inside a write is a nested transaction.
        """
        with write_errors(self.path), self._writer.hold() if self._writer else contextlib.nullcontext(False) as first:
            if first:
                self.refresh()
            with self._transactions.run(self.storage, self.table, self.structure, self._stamp):
                try:
                    yield
                except BaseException:
                    self._stamp = self._transactions.stamp
                    raise

    def refresh(self) -> bool:
        """Catch up with what other writers committed to this directory since it was loaded or last refreshed.

        Appended passages and deletions are read incrementally; anything else (a reindex, a replaced directory)
        reloads the index. Returns whether anything changed. Never writes.
        """
        if self.path is None:
            return False
        for attempt in range(LOAD_ATTEMPTS):
            stamp = manifest_stamp(self.path / MANIFEST)
            if stamp == self._stamp:
                return False
            try:
                fresh = read_manifest(self.path)
                if self.storage.extends(fresh, self.num_passages):
                    with load_errors(self.path):
                        self._catch_up(fresh)
                else:
                    self._adopt(PhraseIndex._load_once(self.path, None, False, self.structure.flat_search, None))
            except IndexLoadError:
                if attempt + 1 == LOAD_ATTEMPTS or manifest_stamp(self.path / MANIFEST) == stamp:
                    raise
                continue
            self._stamp = stamp
            return True
        return False

    def _catch_up(self, fresh: dict[str, Any]) -> None:
        """Read the passages, vectors and tombstones other writers appended (``fresh`` extends this index)."""
        old_searched, old_tombstones = self.num_searched_vectors, self.storage.tombstones.length
        previous_file = self.manifest.get("faiss_file")
        records, counts = self.storage.catch_up(fresh, self.num_passages)
        self.table.register(records, counts, len(self))
        self._apply_tombstones(old_tombstones)
        self.table.check_live_ids(self.storage.where("passages"))
        if fresh.get("faiss_file") != previous_file and fresh.get("faiss_file"):
            self.structure.load()  # the writer saved its trained structure with the new vectors
        elif self.structure.index is not None:
            self.structure.add(self.storage.searched.view()[old_searched:])
        self.structure.refresh_backend()

    def _adopt(self, other: PhraseIndex) -> None:
        """Take over the state of a fresh load of this directory (keeping this object's lock and device)."""
        writer, device, backend = self._writer, self.structure.device, self.structure.backend
        transactions = self._transactions
        self.__dict__.update(other.__dict__)
        self._writer, self._transactions = writer, transactions
        if backend is not None or device != "cpu":
            self.to(device)

    # ----------------------------------------------------------------- properties
    def __len__(self) -> int:
        """Number of stored token vectors (deleted passages included until compaction)."""
        return self.storage.vectors.length

    @property
    def num_searched_vectors(self) -> int:
        """Vectors the FAISS structure holds: the key vectors (:attr:`key_vectors`), or every stored vector."""
        return self.storage.searched.length

    @property
    def key_vectors(self) -> int | None:
        """Key vectors a passage that FAISS searches (the searcher reads the passages they hit whole); None: every
        stored vector is searched."""
        return self.storage.key_budget

    @property
    def manifest(self) -> dict[str, Any]:
        """The index's manifest (what the last commit wrote, plus what is pending)."""
        return self.storage.manifest

    @property
    def path(self) -> Path | None:
        """The index directory, None for an in-memory index."""
        return self.storage.path

    @property
    def codec(self) -> VectorCodec:
        """How the stored vectors are coded (float16, int8)."""
        return self.storage.codec

    @property
    def dim(self) -> int:
        return self.storage.dim

    @property
    def passages(self) -> list[dict[str, Any]]:
        """Passage records by row (deleted rows included)."""
        return self.table.passages

    def passage_cache(self, name: str, derive: Callable[[dict[str, Any]], Any]) -> RowCache:
        """Values derived from the passage records by row (``derive(record)``), each computed once and shared by
        every search of this index (e.g. a passage's words for the answer features); a reload starts afresh. It
        grows with every passage read, up to :data:`~dphr_haystack.index.passages.MAX_CACHED_ROWS` of them, the
        least recently read dropped first (the answer words of all SQuAD-open-small's 20,598 passages: 55 MiB,
        ``benchmarks/memory/store.py``)."""
        return self.table.cache(name, derive)

    @property
    def deleted(self) -> np.ndarray:
        """Per passage row, whether it is deleted (or hidden)."""
        return self.table.deleted

    @property
    def num_passages(self) -> int:
        return len(self.table)

    @property
    def num_live_passages(self) -> int:
        return self.table.num_live

    @property
    def num_live_vectors(self) -> int:
        """Stored token vectors of the live passages (what searches can return)."""
        return self.table.num_live_vectors

    @property
    def faiss_factory(self) -> str:
        return self.manifest["faiss_factory"]

    @property
    def auto_structure(self) -> bool:
        """Whether the index chooses its FAISS structure by size (``faiss_factory="auto"``)."""
        return self.storage.auto_structure

    def check_settings(
        self,
        dtype: str | None = None,
        filter_threshold: float | str | None = None,
        faiss_factory: str | None = None,
        key_vectors: int | None = None,
    ) -> None:
        """Raise SettingsConflictError when a setting asked of a resumed index differs from what it was built with
        (see :meth:`IndexStorage.check_settings`)."""
        self.storage.check_settings(dtype, filter_threshold, faiss_factory, key_vectors)

    @property
    def filter_threshold(self) -> float | None:
        return self.manifest["filter_threshold"]

    @property
    def model_fingerprint(self) -> str:
        return self.manifest["model_fingerprint"]

    @property
    def faiss_index(self):
        """The CPU FAISS structure (None for a flat index loaded with ``flat_search="mmap"``)."""
        return self.structure.index

    @property
    def search_params(self) -> dict[str, Any]:
        """FAISS search parameters applied on load (``nprobe``, ``efSearch``, …)."""
        return self.structure.search_params

    @property
    def search_device(self) -> str:
        """Where token search runs: ``cpu`` or ``cuda[:N]``."""
        return self.structure.device

    @property
    def tokens(self) -> np.ndarray:
        return self.storage.tokens.view()

    @property
    def first_token(self) -> np.ndarray:
        return self.table.first_token

    @property
    def num_tokens(self) -> np.ndarray:
        return self.table.num_tokens

    def vectors(self, rows: np.ndarray | slice | None = None) -> np.ndarray:
        """Decoded float32 vectors of the given rows (all rows when None)."""
        view = self.storage.vectors.view()
        return self.codec.decode(view if rows is None else view[rows])

    def passage_row(self, passage_id: str) -> int | None:
        """Row of the live passage with this id, or None."""
        return self.table.row(passage_id)

    def live_passage_ids(self) -> list[str]:
        return self.table.live_ids()

    # ----------------------------------------------------------------- token search (MIPS)
    def search_tokens(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, rows) by inner product for each query vector (FAISS semantics: row -1 = none)."""
        return self.structure.search(queries, k)

    def search_token_rows(self, queries: np.ndarray, largest: int) -> SearchedRows | None:
        """One token search for up to ``largest`` rows per query, whose ``rows(k, which)`` are the rows
        :meth:`search_tokens` returns for a smaller k (None where a search of its own is needed); None when the
        structure's results depend on k."""
        return self.structure.search_rows(queries, largest)

    def to(self, device: str = "auto") -> PhraseIndex:
        """Run token search on ``device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``); returns self.

        On CUDA: faiss-gpu when installed, else exact torch matmul top-k for flat indexes (vectors resident
        on the GPU in fp16); other index types without faiss-gpu, or no usable GPU, stay on the CPU with a
        :class:`~dphr_haystack.index.backends.DeviceFallbackWarning`.
        """
        self.structure.to(device)
        return self

    def set_search_params(self, *, persist: bool = True, **params: Any) -> None:
        """Set FAISS search parameters, e.g. ``set_search_params(nprobe=64)`` or ``efSearch=256``.

        With ``persist`` (the default) they are committed, as one write transaction; ``persist=False`` applies
        them to this object only and writes nothing (a later commit of this object records them).
        """
        with self.writing() if persist else contextlib.nullcontext():
            self.structure.set_params(params)
            if self.structure.backend is not None:
                self.to(self.structure.device)
            if persist and self.path is not None:
                self.commit()

    # ----------------------------------------------------------------- writing
    @writes
    def add_shard(self, shard: PhraseShard) -> None:
        """Append a dumped shard (its vectors re-coded if its codec differs) and commit."""
        self.append_shard(shard)

    def append_shard(self, shard: PhraseShard, merging: bool = False) -> None:
        """:meth:`add_shard` inside a write transaction; while ``merging`` a dump, without adding to the FAISS
        structure and without a commit (the merge commits once and builds the structure from all vectors)."""
        if shard.vectors.shape[1:] != (self.dim,):
            raise ModelMismatchError(f"shard vectors have dim {shard.vectors.shape[1:]}, index {self.dim}")
        self.append_stream(shard.passages, [ShardPiece(shard.vectors, shard.tokens)], shard.codec, merging)

    def append_stream(
        self, passages: list[dict[str, Any]], pieces: Iterable[ShardPiece], codec: VectorCodec, merging: bool = False
    ) -> None:
        """Append passages whose kept tokens come in ``pieces`` (in passage and token order), then commit; call it
        inside :meth:`writing`.

        Pieces are appended to the column files past their committed length as they come
        (:meth:`IndexStorage.append_pieces`), so memory stays bounded however long a passage is. Appending,
        registering and committing are one transaction (a nested :meth:`writing`): should any step before the
        manifest is replaced fail (an encoding error, a full disk), the passages, vectors, FAISS structure and codec
        are rolled back and nothing is committed. Once the manifest is replaced the passages are committed; should
        the size's new ``auto`` structure then fail to build, it is retried at the next add. ``merging``: see
        :meth:`append_shard`.
        """
        with self.writing():
            self._append_stream(passages, pieces, codec, merging)

    def _append_stream(
        self, passages: list[dict[str, Any]], pieces: Iterable[ShardPiece], codec: VectorCodec, merging: bool
    ) -> None:
        ids = [r["id"] for r in passages]
        clashes = [pid for pid in ids if self.table.row(pid) is not None]
        if clashes or len(set(ids)) != len(ids):
            raise InvalidParameterError(f"duplicate passage ids: {(clashes or ids)[:5]}")
        if not merging:
            self.structure.check_appendable()
        records = [{k: r[k] for k in ("id", "document_id", "title", "text", "meta") if k in r} for r in passages]
        try:  # fail before anything is appended, so a bad record never leaves half a shard behind
            json.dumps(records, ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidParameterError(f"shard passages cannot be stored as JSON: {exc}") from exc
        start = len(self)
        keep = self.path is None and not merging and not self.key_vectors  # FAISS's new rows, when in memory
        counts, added = self.storage.append_pieces(pieces, codec, len(records), self.num_passages, keep)
        if self.key_vectors:  # FAISS gets the new passages' key vectors instead of their vectors
            new = [self.storage.append_keys(counts, start)]
        else:
            new = added if self.path is None else [self.storage.vectors.view()[start:]]
        if not merging:
            for block in new:
                self.structure.train_if_needed(block)
                self.structure.add(block)
        self.storage.append_passage_records(records)
        self.table.register(records, counts, len(self))
        if not merging:
            self.commit()
            self.structure.refresh_backend(faiss_only=True)  # a GPU copy does not see CPU adds
            if self.auto_structure and auto.needs_rebuild(self.manifest, self.num_searched_vectors, self.dim):
                try:
                    self.build_auto_structure(progress=False)
                except IndexWriteError as exc:  # rolled back to the committed add (see writing)
                    logger.warning("the passages are committed; the structure for the new size is not: %s", exc)

    @writes
    def delete_passages(self, passage_ids: Iterable[str], *, commit: bool = True) -> int:
        """Tombstone the live (or hidden) passages with these ids; their phrases vanish from results. Returns the
        count. ``commit=False`` (inside :meth:`writing`) leaves the commit to the write that follows, so both land
        together or, should it fail, neither (an overwrite)."""
        return self._delete_rows(self.table.rows_of_ids(passage_ids), commit)

    def hide_passages(self, passage_ids: Iterable[str]) -> int:
        """Leave these live passages out of this object's results without writing anything (a reader's view of
        phrases whose documents it does not hold); :meth:`delete_passages` still deletes them. Returns the count."""
        return self.table.hide(passage_ids)

    def hidden_passage_ids(self) -> list[str]:
        """Ids of the passages :meth:`hide_passages` left out of results."""
        return list(self.table.hidden)

    @writes
    def delete_documents(self, document_ids: Iterable[str]) -> int:
        """Tombstone every live passage of these documents."""
        return self._delete_rows(self.table.rows_of_documents(document_ids))

    def _delete_rows(self, rows: list[int], commit: bool = True) -> int:
        if not rows:
            return 0
        self.storage.tombstones.append(np.asarray(rows, dtype=np.int64))
        self.table.delete(rows)
        if commit:
            self.commit()
        return len(rows)

    # ----------------------------------------------------------------- persistence
    def commit(self) -> None:
        """Make the in-place state durable: write the FAISS file if any, then replace the manifest. Call it inside
        :meth:`writing` (every public write does): a failure before the replacement rolls the write back; the
        replacement is the commit point, after which only the superseded FAISS file is removed (best effort)."""
        old_faiss = self.manifest.get("faiss_file")
        self.structure.write_file()
        stamp = self.storage.commit(self.num_passages)
        if self.path is not None:
            self._stamp = stamp  # our own commit: nothing to catch up with
        self._transactions.committed(self.storage, self.table, self.structure, self._stamp)
        if self.path is not None and old_faiss and old_faiss != self.manifest.get("faiss_file"):
            with contextlib.suppress(OSError):
                (self.path / old_faiss).unlink(missing_ok=True)

    def private_copy(self) -> PhraseIndex:
        """A copy of this index in a temporary directory, removed once the copy is garbage: what a store writes to
        instead of a directory it opened but must not change (:func:`~dphr_haystack.index.private.private_copy`)."""
        return private_copy(self)

    def save(self, path: str | Path) -> None:
        """Write a complete copy to ``path`` atomically (temporary directory, then rename).

        Should it fail (a full disk: :class:`~dphr_haystack.errors.IndexWriteError`), ``path`` keeps what it held
        and no temporary directory is left; this index is unchanged."""
        path = refuse_symlink(Path(path).absolute())  # a link there would be replaced through, elsewhere
        if self.path is not None and path.resolve() == self.path.resolve():
            with self.writing():
                self.commit()
            return
        lock = WriterLock(path)
        with write_errors(path), lock.hold():  # the copy replaces a directory other writers may use
            tmp = make_temp_dir(path)
            try:
                self.storage.write_copy(tmp, self.passages, self._write_structure_copy)
                lock.lock_replacement(tmp)  # the copy swapped in stays locked until this write ends
                atomic.replace_directory(tmp, path)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)  # the new copy, or the old one an exchange swapped out
                atomic.recover_directory(path)  # a two-rename swap that failed half-way
                raise
