"""The database of a store directory, one format for both Haystack layers.

A store directory holds ``store.sqlite3`` (SQLite in WAL mode) and one phrase index folder per document collection
(a Haystack 1.x ``index``; the Haystack 2 store has one collection). The database keeps:

- ``store``: the format, a random store id (a new database on the same path is a new store to every reader), the
  store's settings;
- ``documents`` / ``labels``: one row per stored item, its JSON body and a CRC-32 of it (a damaged row is refused,
  never served changed);
- ``changes``: a log of what each write changed (a document, a whole collection, the labels of a collection, the
  phrase folders), numbered by an ``AUTOINCREMENT`` key that never reuses a number, so a reader that remembers the
  last number it applied catches up with exactly what other writers committed since;
- ``phrases``: which folder holds the phrase index of each collection; ``created``: every folder the store made in
  its directory, the only ones it may ever delete.

Writes run in one SQLite transaction each (``BEGIN IMMEDIATE``, fsynced commit): a process killed at any point
leaves the last committed state, and a file that is not a store database is refused, never replaced. Phrase indexes
stay FAISS files committed by the index itself, before the database commit that names them; a store leaves out of
results the phrases whose document the database does not hold as encoded (see ``passages.stale_passage_ids``).
The caller serialises its writers with the directory's :class:`~dphr_haystack._util.lock.WriterLock` (it also
covers the phrase folders); SQLite's own lock (``busy_timeout``) guards the database beside it.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
import threading
import uuid
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DirectoryLockedError, IndexLoadError, IndexWriteError, ReadOnlyStoreError, UnsafePathError

DATABASE_FILE = "store.sqlite3"
FORMAT = "dphr-store"
FORMAT_VERSION = 1
KEEP_CHANGES = 200_000  # change rows kept; a reader further behind reads everything again
_CHUNK = 500  # ids per IN (...) query

_SCHEMA = """
CREATE TABLE IF NOT EXISTS store (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    collection TEXT NOT NULL, id TEXT NOT NULL, body TEXT NOT NULL, crc INTEGER NOT NULL,
    PRIMARY KEY (collection, id));
CREATE TABLE IF NOT EXISTS labels (
    collection TEXT NOT NULL, id TEXT NOT NULL, body TEXT NOT NULL, crc INTEGER NOT NULL,
    PRIMARY KEY (collection, id));
CREATE TABLE IF NOT EXISTS changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, collection TEXT NOT NULL, id TEXT);
CREATE TABLE IF NOT EXISTS phrases (collection TEXT PRIMARY KEY, folder TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS created (name TEXT PRIMARY KEY);
"""


@dataclass
class Changes:
    """What other writers committed since a reader last looked.

    ``everything``: read the whole store again (another database at the path, or a log pruned past the reader);
    ``collections``: collections to read again whole (deleted or replaced); ``documents``: per collection, the
    current body of each changed document (None: deleted); ``labels``: collections whose labels changed;
    ``phrases``: the phrase folders or their contents may have changed."""

    everything: bool = False
    collections: set[str] = field(default_factory=set)
    documents: dict[str, dict[str, dict[str, Any] | None]] = field(default_factory=dict)
    labels: set[str] = field(default_factory=set)
    phrases: bool = False

    def __bool__(self) -> bool:
        return bool(self.everything or self.collections or self.documents or self.labels or self.phrases)


def encode_body(body: dict[str, Any]) -> tuple[str, int]:
    """The stored form of a document or label: JSON text (no NaN) and its CRC-32."""
    text = json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text, zlib.crc32(text.encode("utf-8"))


def is_store_directory(path: Path) -> bool:
    """Whether ``path`` holds a store database."""
    return (Path(path) / DATABASE_FILE).is_file()


class StoreDatabase:
    """One open connection to a store directory's database.

    Args:
        path: The store directory (created, parents included, when missing and ``create`` is true).
        lock_timeout: Seconds a write waits for SQLite's own lock before DirectoryLockedError.
        create: Create the directory and the database when missing (else IndexLoadError).
        config: Settings recorded when the database is created.
    """

    def __init__(
        self, path: Path, lock_timeout: float = 60.0, create: bool = True, config: dict[str, Any] | None = None
    ) -> None:
        self.path = Path(path).absolute()
        self.file = self.path / DATABASE_FILE
        self.lock_timeout = lock_timeout
        self.read_only = False
        self._mutex = threading.RLock()
        self._depth = 0
        self.store_id: str | None = None
        self.seq = 0  # the last change this object applied
        self._connection = self._open(create, config or {})

    # ----------------------------------------------------------------- opening
    def _open(self, create: bool, config: dict[str, Any]) -> sqlite3.Connection:
        connection = self._connect(create)
        self._connection = connection
        try:
            self._prepare(create, config)
        except BaseException:
            connection.close()
            raise
        self._identity = _identity(self.file)  # the file this connection reads (a new file at the path: reopened)
        return connection

    def _reopen(self) -> None:
        """Connect to the database file now at the path (the directory was removed and made again); when there is
        none, IndexLoadError and this object keeps its connection."""
        old = self._connection
        try:
            self._connection = self._open(create=False, config={})
        except BaseException:
            self._connection = old
            raise
        old.close()

    def _connect(self, create: bool) -> sqlite3.Connection:
        if self.file.is_symlink() or (self.file.exists() and not self.file.is_file()):
            raise IndexLoadError(f"{self.file} is not a regular file; refusing to open the store (nothing changed)")
        for suffix in ("-wal", "-shm", "-journal"):  # SQLite would write through a link planted there
            side = self.file.with_name(self.file.name + suffix)
            if side.is_symlink() or (side.exists() and not side.is_file()):
                raise UnsafePathError(f"{side} is not a regular file; refusing to write the store through it")
        if not self.file.exists():
            if not create:
                raise IndexLoadError(f"{self.file} not found: {self.path} is not a store directory")
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise _write_error(exc, self.path, "create the store directory") from exc
        if not os.access(self.path, os.W_OK):
            if not self.file.exists():
                raise ReadOnlyStoreError(f"cannot create a store in {self.path}: the directory is read-only")
            self.read_only = True  # a read-only mount or directory: read the committed state, never write
            uri = f"file:{self.file}?mode=ro&immutable=1"
            return sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        try:
            connection = sqlite3.connect(
                self.file, timeout=self.lock_timeout, isolation_level=None, check_same_thread=False
            )
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as exc:
            raise _database_error(exc, self.file) from exc
        return connection

    def _prepare(self, create: bool, config: dict[str, Any]) -> None:
        tables = {row[0] for row in self._query("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "store" not in tables:
            if tables:
                raise IndexLoadError(f"{self.file} is an SQLite database of another program; refusing to use it")
            if self.read_only or not create:
                raise IndexLoadError(f"{self.file} holds no store")
            with self._begin():
                if self._connection.execute("SELECT 1 FROM sqlite_master WHERE name = 'store'").fetchone():
                    return self._prepare(create, config)  # another process created it meanwhile
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self._connection.execute(statement)
                for key, value in (
                    ("format", FORMAT),
                    ("format_version", str(FORMAT_VERSION)),
                    ("store_id", uuid.uuid4().hex),
                    ("config", json.dumps(config, ensure_ascii=False)),
                ):
                    self._connection.execute("INSERT INTO store VALUES (?, ?)", (key, value))
                self._connection.execute("INSERT INTO created VALUES (?)", (DATABASE_FILE,))
        values = dict(self._query("SELECT key, value FROM store"))
        if values.get("format") != FORMAT or values.get("format_version") != str(FORMAT_VERSION):
            raise IndexLoadError(
                f"{self.file}: not a {FORMAT} v{FORMAT_VERSION} database "
                f"(format {values.get('format')!r} v{values.get('format_version')!r})"
            )
        self.store_id = values.get("store_id")

    def close(self) -> None:
        with self._mutex:
            self._connection.close()

    # ----------------------------------------------------------------- low level
    def _query(self, sql: str, args: Iterable[Any] = ()) -> list[tuple]:
        with self._mutex:
            try:
                return self._connection.execute(sql, tuple(args)).fetchall()
            except sqlite3.Error as exc:
                raise _database_error(exc, self.file) from exc

    @contextmanager
    def _begin(self, immediate: bool = True) -> Iterator[None]:
        """One SQLite transaction (nested calls join the outer one); rolled back on any exception."""
        with self._mutex:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            if immediate and self.read_only:
                raise ReadOnlyStoreError(f"{self.path} is read-only (a read-only mount or directory): cannot write")
            try:
                self._connection.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
            except sqlite3.Error as exc:
                raise _database_error(exc, self.file, self.lock_timeout) from exc
            self._depth = 1
            try:
                yield
                self._connection.execute("COMMIT")
            except BaseException as exc:
                try:
                    self._connection.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                if isinstance(exc, sqlite3.Error):
                    raise _database_error(exc, self.file, self.lock_timeout) from exc
                raise
            finally:
                self._depth = 0

    @contextmanager
    def transaction(self) -> Iterator[StoreDatabase]:
        """One write: everything done in the block commits together (fsynced) or not at all; this object's change
        cursor then points past the write's own changes (the caller applied them already). Nested calls join."""
        with self._mutex, self._begin():
            yield self
            if self._depth == 1:
                self.seq = self._last_seq()

    @contextmanager
    def snapshot(self) -> Iterator[StoreDatabase]:
        """A consistent read of several queries (one read transaction)."""
        with self._mutex, self._begin(immediate=False):
            yield self

    def _last_seq(self) -> int:
        row = self._query("SELECT seq FROM sqlite_sequence WHERE name = 'changes'")
        return int(row[0][0]) if row else 0

    # ----------------------------------------------------------------- settings
    @property
    def config(self) -> dict[str, Any]:
        """The settings the store was created with."""
        rows = self._query("SELECT value FROM store WHERE key = 'config'")
        try:
            config = json.loads(rows[0][0]) if rows else {}
        except ValueError as exc:
            raise IndexLoadError(f"{self.file}: the store settings are damaged ({exc})") from exc
        if not isinstance(config, dict):
            raise IndexLoadError(f"{self.file}: the store settings are damaged")
        return config

    def set_config(self, config: dict[str, Any]) -> None:
        with self.transaction():
            self._connection.execute(
                "INSERT OR REPLACE INTO store VALUES ('config', ?)", (json.dumps(config, ensure_ascii=False),)
            )

    def note(self, key: str, value: str) -> None:
        """Record a fact about the store (e.g. the legacy directory it was converted from)."""
        with self.transaction():
            self._connection.execute("INSERT OR REPLACE INTO store VALUES (?, ?)", (f"note:{key}", value))

    def notes(self) -> dict[str, str]:
        return {k[5:]: v for k, v in self._query("SELECT key, value FROM store WHERE key LIKE 'note:%'")}

    # ----------------------------------------------------------------- reads
    def collections(self, table: str = "documents") -> list[str]:
        """Collections with at least one stored document (or label)."""
        return [row[0] for row in self._query(f"SELECT DISTINCT collection FROM {_table(table)} ORDER BY 1")]

    def items(self, collection: str, table: str = "documents") -> list[dict[str, Any]]:
        """Every stored body of ``collection``, in insertion order."""
        rows = self._query(
            f"SELECT id, body, crc FROM {_table(table)} WHERE collection = ? ORDER BY rowid", (collection,)
        )
        return [self._decode(collection, row) for row in rows]

    def items_by_id(self, collection: str, ids: list[str], table: str = "documents") -> dict[str, dict[str, Any]]:
        """The stored bodies of these ids (missing ids left out)."""
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            rows = self._query(
                f"SELECT id, body, crc FROM {_table(table)} WHERE collection = ? AND id IN "
                f"({','.join('?' * len(chunk))})",
                (collection, *chunk),
            )
            found.update((row[0], self._decode(collection, row)) for row in rows)
        return found

    def count(self, collection: str, table: str = "documents") -> int:
        return int(self._query(f"SELECT count(*) FROM {_table(table)} WHERE collection = ?", (collection,))[0][0])

    def _decode(self, collection: str, row: tuple) -> dict[str, Any]:
        doc_id, body, crc = row
        if zlib.crc32(body.encode("utf-8")) != crc:
            raise IndexLoadError(
                f"{self.file}: the stored row of {doc_id!r:.80} in {collection!r} is damaged (checksum mismatch); "
                "restore the directory from a backup"
            )
        try:
            return json.loads(body)
        except ValueError as exc:
            raise IndexLoadError(f"{self.file}: the stored row of {doc_id!r:.80} is damaged ({exc})") from exc

    def phrase_folders(self) -> dict[str, str]:
        """The phrase index folder of each collection that has one."""
        return dict(self._query("SELECT collection, folder FROM phrases ORDER BY 1"))

    def created(self) -> set[str]:
        """Names of the entries this store created in its directory (the only ones it may delete)."""
        return {row[0] for row in self._query("SELECT name FROM created")}

    # ----------------------------------------------------------------- following other writers
    def changed(self) -> bool:
        """Whether a change was committed since this object last applied changes (a cheap check)."""
        if _identity(self.file) != self._identity:
            return True
        try:
            return self._last_seq() != self.seq or self._current_store_id() != self.store_id
        except IndexLoadError:
            return True

    def _current_store_id(self) -> str | None:
        rows = self._query("SELECT value FROM store WHERE key = 'store_id'")
        return rows[0][0] if rows else None

    def _reopened(self) -> bool:
        """Reconnect when another file is now at the path (the directory was removed and made again)."""
        if _identity(self.file) == self._identity:
            return False
        with self._mutex:
            self._reopen()
        return True

    def changes(self) -> Changes:
        """What was committed since this object last applied changes; advances its cursor past them."""
        if self._reopened():
            self.seq = self._last_seq()
            return Changes(everything=True, phrases=True)
        with self.snapshot():
            last = self._last_seq()
            store_id = self._current_store_id()
            pruned = self._query("SELECT value FROM store WHERE key = 'pruned'")
            if store_id != self.store_id or (pruned and int(pruned[0][0]) > self.seq):
                self.store_id, self.seq = store_id, last
                return Changes(everything=True, phrases=True)
            rows = self._query("SELECT kind, collection, id FROM changes WHERE seq > ? ORDER BY seq", (self.seq,))
            changes = Changes()
            ids: dict[str, set[str]] = {}
            for kind, collection, doc_id in rows:
                if kind == "collection":
                    changes.collections.add(collection)
                elif kind == "document":
                    ids.setdefault(collection, set()).add(doc_id)
                elif kind == "labels":
                    changes.labels.add(collection)
                elif kind == "phrases":
                    changes.phrases = True
            for collection, changed_ids in ids.items():
                if collection in changes.collections:
                    continue
                current = self.items_by_id(collection, sorted(changed_ids))
                changes.documents[collection] = {i: current.get(i) for i in changed_ids}
            self.seq = last
        return changes

    def reload(self, collection: str) -> list[dict[str, Any]]:
        """Every stored body of ``collection``, with this object's cursor moved to the same state (a full read)."""
        self._reopened()
        with self.snapshot():
            self.store_id, self.seq = self._current_store_id(), self._last_seq()
            return self.items(collection)

    # ----------------------------------------------------------------- writes (inside transaction())
    def put(self, collection: str, bodies: list[dict[str, Any]], table: str = "documents") -> None:
        """Store these bodies (each with a string ``id``), replacing stored ones of the same id."""
        rows = []
        for body in bodies:
            text, crc = encode_body(body)
            rows.append((collection, str(body["id"]), text, crc))
        self._write(f"INSERT OR REPLACE INTO {_table(table)} VALUES (?, ?, ?, ?)", rows)
        if table == "documents":
            self._write_log("document", collection, [row[1] for row in rows])

    def delete(self, collection: str, ids: list[str]) -> None:
        """Delete these documents of ``collection``."""
        self._write("DELETE FROM documents WHERE collection = ? AND id = ?", [(collection, i) for i in ids])
        self._write_log("document", collection, ids)

    def drop(self, collection: str, table: str = "documents") -> None:
        """Delete every document (or label) of ``collection``."""
        self._write(f"DELETE FROM {_table(table)} WHERE collection = ?", [(collection,)])
        self._write_log("collection" if table == "documents" else "labels", collection, [None])

    def replace_labels(self, collection: str, bodies: list[dict[str, Any]]) -> None:
        """Replace every label of ``collection`` (labels are few)."""
        self._write("DELETE FROM labels WHERE collection = ?", [(collection,)])
        self.put(collection, bodies, table="labels")
        self._write_log("labels", collection, [None])

    def set_phrase_folder(self, collection: str, folder: str | None) -> None:
        """Name (or, None, forget) the phrase index folder of ``collection``."""
        if folder is None:
            self._write("DELETE FROM phrases WHERE collection = ?", [(collection,)])
        else:
            self._write("INSERT OR REPLACE INTO phrases VALUES (?, ?)", [(collection, folder)])
        self.phrases_changed()

    def phrases_changed(self) -> None:
        """Tell readers that phrase indexes changed (they refresh them)."""
        self._write_log("phrases", "", [None])

    def claim(self, name: str) -> None:
        """Record that the store created ``name`` in its directory (committed on its own, before it is filled)."""
        with self._mutex:
            if self._depth:
                self._write("INSERT OR IGNORE INTO created VALUES (?)", [(name,)])
                return
            with self._begin():
                self._write("INSERT OR IGNORE INTO created VALUES (?)", [(name,)])

    def new_folder(self, prefix: str = "phrases") -> Path:
        """A fresh ``<prefix>-N`` folder name in the directory (nothing there by that name, none registered),
        claimed as the store's own."""
        taken = set(self.phrase_folders().values()) | self.created()
        n = 0
        while f"{prefix}-{n}" in taken or os.path.lexists(self.path / f"{prefix}-{n}"):
            n += 1
        self.claim(f"{prefix}-{n}")
        return self.path / f"{prefix}-{n}"

    def prune(self) -> None:
        """Keep the change log at most :data:`KEEP_CHANGES` rows (readers further behind read everything again)."""
        last = self._last_seq()
        if last > KEEP_CHANGES:
            with self.transaction():
                self._write("DELETE FROM changes WHERE seq <= ?", [(last - KEEP_CHANGES,)])
                self._write("INSERT OR REPLACE INTO store VALUES ('pruned', ?)", [(str(last - KEEP_CHANGES),)])

    def _write(self, sql: str, rows: list[tuple]) -> None:
        if not self._depth:
            raise RuntimeError("StoreDatabase writes run inside transaction()")
        try:
            self._connection.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise _database_error(exc, self.file) from exc

    def _write_log(self, kind: str, collection: str, ids: list[str | None]) -> None:
        self._write(
            "INSERT INTO changes (kind, collection, id) VALUES (?, ?, ?)", [(kind, collection, i) for i in ids]
        )

    # ----------------------------------------------------------------- folders
    def remove_unnamed_folders(self, names: Iterable[str]) -> None:
        """Delete those of ``names`` that the store created and no commit names (best effort; a symbolic link or
        anything not a folder is left alone). Called after the commit that stopped naming them."""
        created, named = self.created(), set(self.phrase_folders().values())
        for name in names:
            folder = self.path / name
            if name in created and name not in named and folder.is_dir() and not folder.is_symlink():
                shutil.rmtree(folder, ignore_errors=True)


def _identity(file: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(file)
    except OSError:
        return None
    return (info.st_dev, info.st_ino)


def _table(name: str) -> str:
    if name not in ("documents", "labels"):
        raise ValueError(f"unknown table {name!r}")
    return name


def _write_error(exc: OSError, path: Path, what: str) -> Exception:
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        error: Exception = ReadOnlyStoreError(f"cannot {what} {path}: {exc.strerror or exc} (read-only or not yours)")
    else:
        error = IndexWriteError(f"cannot {what} {path}: {exc.strerror or exc}")
    error.errno = exc.errno  # type: ignore[attr-defined]
    return error


def _database_error(exc: sqlite3.Error, file: Path, lock_timeout: float | None = None) -> Exception:
    """A typed error for an SQLite failure: locked, full, read-only or damaged."""
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return DirectoryLockedError(
            f"{file}: another writer held the store database for more than {lock_timeout or 0:g} s ({exc})"
        )
    if "full" in text:
        error = IndexWriteError(f"cannot write the document store {file.parent}: the disk is full ({exc})")
        error.errno = errno.ENOSPC
        return error
    if "readonly" in text or "read-only" in text:
        return ReadOnlyStoreError(f"{file.parent} is read-only: cannot write ({exc})")
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return IndexLoadError(f"{file} is damaged or not a store database ({exc}); nothing was changed")
    if "unable to open" in text or "disk i/o" in text:
        error = IndexWriteError(f"cannot use the store database {file}: {exc}")
        error.errno = errno.EIO
        return error
    return IndexLoadError(f"{file}: {exc}")


__all__ = ["DATABASE_FILE", "Changes", "StoreDatabase", "encode_body", "is_store_directory"]
