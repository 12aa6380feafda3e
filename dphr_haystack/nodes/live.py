"""A store directory shared by every :class:`~dphr_haystack.nodes.PhraseDocumentStore` opened on it, in any process.

The directory holds one :class:`~dphr_haystack.documents.database.StoreDatabase` and the phrase folders it names. A
writer holds the directory's inter-process lock for one write (:class:`~dphr_haystack._util.lock.WriterLock`, which
also covers the phrase folders), catches up with other writers' commits, writes, commits its phrase indexes and then
everything else of the write in one database transaction; only then are the phrases of deleted or changed documents
deleted and the folders the commit stopped naming removed. Readers never take the lock and never write: before each
read they ask the database whether anything was committed since they last looked.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .._util.lock import WriterLock
from ..errors import ReadOnlyStoreError
from .persistence import open_database


class StoreDirectory:
    """The database and the writer lock of a shared store directory (created when missing).

    Args:
        path: The directory.
        lock_timeout: Seconds a write waits for another writer before DirectoryLockedError.
        config: The settings recorded when the store is created.
    """

    def __init__(self, path: Path, lock_timeout: float, config: dict[str, Any]) -> None:
        self.path = Path(path).absolute()
        self.lock = WriterLock(self.path, lock_timeout)
        self.db = open_database(self.path, lock_timeout, config)
        self.new_folders: list[str] = []  # phrase folders made by the write under way

    @contextmanager
    def writing(self) -> Iterator[bool]:
        """Hold the writer lock for one write; yields True when this call took it (then catch up first).

        Raises:
            ReadOnlyStoreError: The directory is read-only (nothing is changed).
        """
        if self.db.read_only:
            raise ReadOnlyStoreError(f"{self.path} is read-only (a read-only mount or directory): cannot write")
        with self.lock.hold() as first:
            if first:
                self.new_folders = []
            yield first

    def new_folder(self) -> Path:
        """A fresh phrase folder, the store's own (removed again should the write fail)."""
        folder = self.db.new_folder()
        self.new_folders.append(folder.name)
        return folder

    def remove_unnamed(self, names: set[str]) -> None:
        """Remove those of ``names`` that no committed state names (folders the store created)."""
        self.db.remove_unnamed_folders(names)


def store_read(method):
    """Store method decorator: catch up with other writers' commits, then run under the store's read lock."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        self._follow()
        with self._lock.read():
            return method(self, *args, **kwargs)

    return wrapper


def store_write(method):
    """Store method decorator: run under the store's write lock as one committed write of its directory."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock.write(), self._transaction():
            return method(self, *args, **kwargs)

    return wrapper
