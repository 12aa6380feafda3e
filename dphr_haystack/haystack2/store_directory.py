"""The directory of a Haystack 2 :class:`~dphr_haystack.haystack2.PhraseDocumentStore`.

``documents.jsonl`` (every stored document, replaced atomically by each write) and ``phrases/`` (a phrase index,
committed in place by the core). Every store object on the directory, in any process, writes under its
inter-process writer lock (:class:`~dphr_haystack._util.lock.WriterLock`) after catching up with what the others
committed; the documents file's identity says when another writer replaced it. Opening never writes: a directory
that cannot be opened without losing something (documents file missing beside phrases, not a regular file, a
symbolic link in place of ``phrases/``) is refused.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .._util.atomic import fsync_directory, write_file_atomic
from .._util.lock import WriterLock
from .._util.nofollow import open_no_follow, temp_name_parts
from ..documents.validation import check_storable
from ..errors import IndexLoadError, InvalidDocumentError, InvalidParameterError, UnsafePathError

DOCUMENTS_FILE = "documents.jsonl"
PHRASES_DIR = "phrases"


def _stamp(file: Path) -> tuple[int, int, int] | None:
    try:
        info = os.stat(file)
    except FileNotFoundError:
        return None
    return (info.st_ino, info.st_mtime_ns, info.st_size)


class StoreDirectory:
    """The files and the writer lock of one store directory.

    Args:
        path: The directory (created by the first open when missing).
        lock_timeout: Seconds a write waits for another writer before DirectoryLockedError (None: the default).
    """

    def __init__(self, path: Path, lock_timeout: float | None = None) -> None:
        self.path = Path(path).absolute()
        self.lock = WriterLock(self.path, lock_timeout)
        self.stamp: tuple[int, int, int] | None = None  # the documents file this object last read or wrote
        self.count = 0  # documents it held

    @property
    def documents_file(self) -> Path:
        return self.path / DOCUMENTS_FILE

    @property
    def phrases_dir(self) -> Path:
        return self.path / PHRASES_DIR

    def check(self) -> None:
        """Refuse a directory that opening would damage or that redirects writes elsewhere; writes nothing.

        Raises:
            InvalidParameterError: The path exists and is not a directory.
            IndexLoadError: The documents file is missing beside a phrase index, or is not a regular file.
            UnsafePathError: ``phrases/`` is a symbolic link.
        """
        if self.path.exists() and not self.path.is_dir():
            raise InvalidParameterError(f"path {self.path} exists and is not a directory")
        self.check_phrases_dir()
        file = self.documents_file
        try:
            info = os.stat(file)
        except FileNotFoundError:
            if (self.phrases_dir / "manifest.json").exists():
                raise IndexLoadError(
                    f"{file} is missing but {self.phrases_dir} holds phrases: restore the documents file (opening "
                    "would drop every phrase); nothing was changed"
                ) from None
            return
        if not stat.S_ISREG(info.st_mode):
            raise IndexLoadError(f"{file} is not a regular file; refusing to open the store (nothing was changed)")

    def check_phrases_dir(self) -> Path:
        """``phrases/``, unless it is a symbolic link (UnsafePathError) or not a directory (IndexLoadError)."""
        folder = self.phrases_dir
        if folder.is_symlink():
            raise UnsafePathError(f"{folder} is a symbolic link; refusing to read or write phrases through it")
        if folder.exists() and not folder.is_dir():
            raise IndexLoadError(f"{folder} is not a directory")
        return folder

    def has_phrases(self) -> bool:
        return (self.check_phrases_dir() / "manifest.json").is_file()

    def changed(self) -> bool:
        """Whether the documents file was replaced since this object last read or wrote it."""
        return _stamp(self.documents_file) != self.stamp

    def read_documents(self) -> list[dict[str, Any]]:
        """The stored documents as dicts (none when the file does not exist yet); remembers the file's identity."""
        file = self.documents_file
        stamp = _stamp(file)
        if stamp is None:
            if self.count or (self.phrases_dir / "manifest.json").exists():
                raise IndexLoadError(
                    f"{file} is missing (it held {self.count} documents, or phrases exist): restore it; reading it "
                    "as empty would drop every document and phrase"
                )
            self.stamp = None
            return []
        if not file.is_file():
            raise IndexLoadError(f"{file} is not a regular file")
        try:  # replaced meanwhile: the newer file is read under the older identity, so it is read again later
            with file.open(encoding="utf-8") as handle:
                docs = [json.loads(line) for line in handle if line.strip()]
        except (OSError, ValueError, RecursionError) as exc:
            raise IndexLoadError(f"{file} cannot be read: {exc}") from exc
        for number, doc in enumerate(docs, 1):
            check_stored_document(doc, f"{file}: document {number}")
        self.stamp, self.count = stamp, len(docs)
        return docs

    def write_documents(self, lines: Iterable[str]) -> None:
        """Replace the documents file with these JSON lines (atomically, fsynced); the caller holds the lock."""
        file = self.documents_file
        count = 0

        def write(tmp: Path) -> None:
            nonlocal count
            with open_no_follow(tmp, "w", encoding="utf-8") as handle:
                for line in lines:
                    handle.write(line + "\n")
                    count += 1

        write_file_atomic(file, write)  # a fresh temporary name per call; a symbolic link at ``file`` is refused
        fsync_directory(self.path)
        self.stamp, self.count = _stamp(file), count

    def remove_leftovers(self) -> None:
        """Delete temporary documents files of writes killed before their rename (the caller holds the lock)."""
        for leftover in self.path.glob(f".{DOCUMENTS_FILE}.tmp-*"):
            if temp_name_parts(leftover.name) is not None and leftover.is_file() and not leftover.is_symlink():
                leftover.unlink(missing_ok=True)


__all__ = ["DOCUMENTS_FILE", "PHRASES_DIR", "StoreDirectory"]


def check_stored_document(doc: Any, where: str) -> None:
    """Raise IndexLoadError unless ``doc`` is a document as this store writes them: an object with a string id,
    text or null content, an object (or no) meta, and no value a store refuses to keep (NaN, lone surrogates)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("id"), str):
        raise IndexLoadError(f"{where} is not a document object with a string id (the file is damaged)")
    if not isinstance(doc.get("content"), str | None) or not isinstance(doc.get("meta", {}), dict):
        raise IndexLoadError(f"{where}: content must be text or null and meta an object (the file is damaged)")
    try:
        check_storable(doc["id"], doc.get("content"), doc.get("meta", {}))
    except InvalidDocumentError as exc:
        raise IndexLoadError(f"{where}: {exc} (the file is damaged)") from exc
