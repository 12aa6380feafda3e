"""A store directory shared by every :class:`~dphr_haystack.nodes.PhraseDocumentStore` opened on it, in any process.

Same layout as a directory written by ``save()`` (``phrase_store.json``, ``documents-N.jsonl``, ``labels-N.jsonl``,
``phrases-N/``), kept up to date write by write:

- the documents and labels files are **journals**: append-only JSON lines, each a stored document or label (written
  or overwritten) or an operation ``{"dphr_op": "delete" | "meta", ...}``; a saved snapshot is a journal of writes
  only; deleting a whole index starts a new journal;
- phrase indexes are committed in place (their own append-only commits);
- ``phrase_store.json`` records how many bytes of each journal are committed and a generation number; replacing it
  atomically is the commit of a store write.

A writer holds the directory's inter-process lock for one write (:class:`~dphr_haystack._util.lock.WriterLock`),
first catching up with other writers' commits, then appends, commits the phrase indexes' additions, replaces the
manifest, and only then deletes the phrases of the documents the write deleted or changed (a kill in between leaves
phrases that readers leave out and the next write deletes, never a stored document without its phrases). A phrase
folder that is a symbolic link is refused. A reader compares the manifest's identity before each read and, when it
changed, replays the appended journal lines and refreshes the phrase indexes. Readers never take the lock and never
write.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from haystack.errors import DocumentStoreError

from .._util.atomic import fsync_directory, write_file_atomic
from .._util.lock import WriterLock
from .._util.nofollow import open_no_follow
from .persistence import STORE_FILE, empty_manifest, read_manifest

OP_KEY = "dphr_op"


def manifest_stamp(path: Path) -> tuple[int, int, int] | None:
    """Identity of the committed store manifest (each commit renames a new file into place); None when absent."""
    try:
        info = os.stat(path / STORE_FILE)
    except OSError:
        return None
    return (info.st_ino, info.st_mtime_ns, info.st_size)


class StoreDirectory:
    """The files of a live store directory: its lock, manifest and journals.

    Args:
        path: The directory (created on the first write when missing).
        lock_timeout: Seconds a write waits for another writer before DirectoryLockedError.
    """

    def __init__(self, path: Path, lock_timeout: float | None) -> None:
        self.path = Path(path).absolute()
        self.lock = WriterLock(self.path, lock_timeout)
        self.manifest: dict[str, Any] | None = None
        self.stamp: tuple[int, int, int] | None = None
        self._pending: dict[str, list[bytes]] = {}

    def exists(self) -> bool:
        return (self.path / STORE_FILE).is_file()

    def changed(self) -> bool:
        """Whether another writer committed since this object last read or wrote the manifest."""
        return manifest_stamp(self.path) != self.stamp

    def read(self) -> dict[str, Any]:
        """The committed manifest (remembered with its identity)."""
        stamp = manifest_stamp(self.path)
        manifest = read_manifest(self.path)
        bytes_ = manifest.setdefault("bytes", {})
        if not isinstance(bytes_, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in bytes_.values()
        ):
            raise DocumentStoreError(f"{self.path / STORE_FILE} is corrupted: bytes must map files to lengths")
        self.manifest, self.stamp = manifest, stamp
        return manifest

    def create(self, config: dict[str, Any]) -> dict[str, Any]:
        """Write the manifest of an empty store (the caller holds the lock)."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.manifest = {**empty_manifest(config), "bytes": {}, "generation": 0}
        self.commit()
        return self.manifest

    @contextmanager
    def writing(self) -> Iterator[bool]:
        """Hold the writer lock for one write; yields True when this call took it (then catch up first)."""
        with self.lock.hold() as first:
            if first:
                self._pending = {}
            try:
                yield first
            except BaseException:
                if first:
                    self._pending = {}  # a failed write journals nothing
                raise

    # ----------------------------------------------------------------- journals
    def journal_file(self, kind: str, index: str) -> str:
        """The journal of ``kind`` (documents or labels) of ``index``, named in the manifest on first use."""
        assert self.manifest is not None
        files = self.manifest[kind]
        if index not in files:
            used = {*self.manifest["documents"].values(), *self.manifest["labels"].values()}
            n = 0
            while f"{kind}-{n}.jsonl" in used or (self.path / f"{kind}-{n}.jsonl").exists():
                n += 1
            files[index] = f"{kind}-{n}.jsonl"
        return files[index]

    def append(self, kind: str, index: str, lines: list[str]) -> None:
        """Stage journal lines for the commit of the current write."""
        if lines:
            name = self.journal_file(kind, index)
            self._pending.setdefault(name, []).extend(line.encode("utf-8") + b"\n" for line in lines)

    def forget(self, kind: str, index: str) -> str | None:
        """Drop ``index``'s journal of ``kind`` from the manifest (deleted with the commit); returns its name."""
        assert self.manifest is not None
        name = self.manifest[kind].pop(index, None)
        if name is not None:
            self.manifest["bytes"].pop(name, None)
            self._pending.pop(name, None)
        return name

    def commit(self) -> None:
        """Append the staged journal lines (fsynced), then replace the manifest: the write is committed."""
        assert self.manifest is not None
        sizes = self.manifest.setdefault("bytes", {})
        for name, lines in self._pending.items():
            committed = sizes.get(name, 0)
            payload = b"".join(lines)
            with open_no_follow(self.path / name, "r+b") as handle:  # a symbolic link is refused, not followed
                handle.truncate(committed)  # bytes of a write that never committed
                handle.seek(committed)
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            sizes[name] = committed + len(payload)
        self._pending = {}
        self.manifest["generation"] = int(self.manifest.get("generation", 0)) + 1
        write_file_atomic(self.path / STORE_FILE, json.dumps(self.manifest, indent=1))
        fsync_directory(self.path)
        self.stamp = manifest_stamp(self.path)

    def remove_unlisted(self) -> None:
        """Delete journals and phrase folders the manifest no longer names (after a delete_all commit)."""
        import shutil

        assert self.manifest is not None
        listed = {*self.manifest["documents"].values(), *self.manifest["labels"].values()}
        listed |= set(self.manifest["phrases"].values())
        for entry in self.path.iterdir():
            stale_journal = entry.suffix == ".jsonl" and entry.name.split("-")[0] in ("documents", "labels")
            stale_phrases = entry.is_dir() and entry.name.startswith("phrases-")
            if (stale_journal or stale_phrases) and entry.name not in listed:
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)


def committed_bytes(path: Path, manifest: dict[str, Any], name: str) -> int:
    """How many bytes of the journal ``name`` are committed: the manifest says so, or (a snapshot written by
    ``save()``) the whole file."""
    size = manifest.get("bytes", {}).get(name)
    if size is None:
        file = path / name
        size = file.stat().st_size if file.exists() else 0
    return size


def read_journal(file: Path, start: int, end: int) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of the bytes ``start:end`` of a journal (numbered from the first line read)."""
    if end <= start:
        return
    try:
        with file.open("rb") as handle:
            handle.seek(start)
            data = handle.read(end - start)
    except OSError as exc:
        raise DocumentStoreError(f"cannot read {file}: {exc}") from exc
    if len(data) < end - start:
        raise DocumentStoreError(f"{file} is truncated: {start + len(data)} bytes, its store manifest says {end}")
    for line_no, raw in enumerate(data.splitlines(), 1):
        try:
            yield line_no, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DocumentStoreError(f"{file}: line {line_no} after byte {start} is not UTF-8: {exc}") from exc


def op_line(op: str, **fields: Any) -> str:
    """A journal operation line."""
    return json.dumps({OP_KEY: op, **fields}, ensure_ascii=False)


def parse_op(line: str) -> dict[str, Any] | None:
    """The operation of a journal line, or None when the line is a stored document or label."""
    if OP_KEY not in line:
        return None
    data = json.loads(line)
    return data if isinstance(data, dict) and OP_KEY in data else None


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
