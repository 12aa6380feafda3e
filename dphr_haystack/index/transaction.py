"""Write transactions of a phrase index: the savepoint a failed write rolls back to, and typed write errors.

A write (an add, a delete, a reindex, a commit) changes the index in memory and appends to its files past their
committed lengths; only the atomic replacement of ``manifest.json`` makes it durable. :class:`Transactions` takes a
:class:`Savepoint` when a write begins and whenever a commit lands; should the write fail before its commit (a full
disk, an encoding error), everything is put back to the savepoint: the manifest and codec, the columns' lengths,
the passage table, the FAISS structure. The bytes past the committed lengths are truncated where possible (and are
ignored and overwritten by the next append anyway), and a FAISS file no committed manifest names is removed. A
failure after the manifest replacement is no failure of the write: it stays committed.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._util.lazy import require
from .._util.write_errors import write_errors as disk_write_errors
from . import structures as index_types
from .faiss_structure import FaissStructure
from .passages import PassageTable
from .storage import FILES, IndexStorage


def write_errors(path: Path | None) -> contextlib.AbstractContextManager[None]:
    """Raise any untyped OSError of the block as :class:`IndexWriteError` naming the index (typed errors pass)."""
    return disk_write_errors("phrase index", path)


@dataclass
class Savepoint:
    """What an index holds at one moment of a write transaction."""

    manifest: dict[str, Any]
    codec: Any
    lengths: dict[str, int]  # rows of each column (vectors, tokens, tombstones, keys, key rows)
    passage_bytes: int
    table: tuple[int, np.ndarray, dict[str, int]]
    structure: Any
    ntotal: int
    trained: bool
    backend: Any
    stamp: Any


def take_savepoint(storage: IndexStorage, table: PassageTable, structure: FaissStructure, stamp: Any) -> Savepoint:
    index = structure.index
    return Savepoint(
        manifest=copy.deepcopy(storage.manifest),
        codec=storage.codec,
        lengths={key: column.length for key, column in storage.columns().items()},
        passage_bytes=storage.passage_bytes,
        table=table.mark(),
        structure=index,
        ntotal=int(index.ntotal) if index is not None else 0,
        trained=bool(index.is_trained) if index is not None else True,
        backend=structure.backend,
        stamp=stamp,
    )


def roll_back(point: Savepoint, storage: IndexStorage, table: PassageTable, structure: FaissStructure) -> None:
    """Put the index back to ``point``: in memory, and (best effort) the bytes past it on disk."""
    written = {storage.manifest.get(key) for key in ("faiss_file", "faiss_ivfdata")}
    params = storage.manifest.get("search_params")
    storage.manifest, storage.codec = copy.deepcopy(point.manifest), point.codec
    for key, column in storage.columns().items():
        column.truncate(point.lengths[key])
    storage.passage_bytes = point.passage_bytes
    table.roll_back(point.table)
    _roll_back_structure(point, storage, structure, params)
    if storage.path is not None:
        _drop_uncommitted_bytes(storage, written - {point.manifest.get(k) for k in ("faiss_file", "faiss_ivfdata")})


def _roll_back_structure(point: Savepoint, storage: IndexStorage, structure: FaissStructure, params: Any) -> None:
    structure.index, structure.backend = point.structure, point.backend
    index = structure.index
    if index is None:
        return
    if params != point.manifest.get("search_params") and point.manifest.get("search_params"):
        index_types.apply_search_params(index, point.manifest["search_params"])
    if not point.trained and index.is_trained:
        structure.reset()  # trained on the failed write's vectors: untrained again, as committed
    elif index.ntotal > point.ntotal and not _remove_tail(index, point.ntotal):
        if storage.path is not None:
            structure.load()  # the committed FAISS file (or a flat structure rebuilt from the stored vectors)
        else:
            index.reset()  # keeps the training
            structure.add(storage.searched.view())


def _remove_tail(index, ntotal: int) -> bool:
    """Remove the vectors past ``ntotal`` from a FAISS structure; False when its type cannot (HNSW)."""
    faiss = require("faiss")
    try:
        index.remove_ids(faiss.IDSelectorRange(ntotal, int(index.ntotal)))
    except RuntimeError:
        return False
    return int(index.ntotal) == ntotal


def _drop_uncommitted_bytes(storage: IndexStorage, stale_files: set[Any]) -> None:
    """Free what a failed write left on disk: bytes past the savepoint's lengths, FAISS files it wrote."""
    assert storage.path is not None
    sizes = {key: column.length * column.row_bytes for key, column in storage.columns().items()}
    sizes["passages"] = storage.passage_bytes
    for key, size in sizes.items():
        file = storage.path / FILES[key]
        with contextlib.suppress(OSError):
            if file.is_file() and not file.is_symlink() and file.stat().st_size > size:
                with file.open("r+b") as handle:
                    handle.truncate(size)
    for name in stale_files:
        if name:
            with contextlib.suppress(OSError):
                (storage.path / name).unlink(missing_ok=True)


class Transactions:
    """The nested write transactions of one index and their savepoints (see the module)."""

    def __init__(self) -> None:
        self.savepoints: list[Savepoint] = []

    @contextlib.contextmanager
    def run(self, storage: IndexStorage, table: PassageTable, structure: FaissStructure, stamp: Any) -> Iterator[None]:
        """One (possibly nested) transaction: on any failure, roll back to its savepoint and re-raise (an
        untyped OSError as :class:`IndexWriteError`)."""
        self.savepoints.append(take_savepoint(storage, table, structure, stamp))
        try:
            with write_errors(storage.path):
                yield
        except BaseException:
            roll_back(self.savepoints[-1], storage, table, structure)
            raise
        finally:
            self.savepoints.pop()

    def committed(self, storage: IndexStorage, table: PassageTable, structure: FaissStructure, stamp: Any) -> None:
        """A commit landed: every open transaction now rolls back to it, never past it."""
        if self.savepoints:
            point = take_savepoint(storage, table, structure, stamp)
            self.savepoints[:] = [point] * len(self.savepoints)

    @property
    def stamp(self) -> Any:
        """The manifest stamp of the innermost savepoint (what a rollback restores)."""
        return self.savepoints[-1].stamp if self.savepoints else None


def writes(method):
    """Method decorator: run as one write transaction of the index (see ``PhraseIndex.writing``)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self.writing():
            return method(self, *args, **kwargs)

    return wrapper
