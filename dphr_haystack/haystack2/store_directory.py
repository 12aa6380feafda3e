"""The directory of a Haystack 2 :class:`~dphr_haystack.haystack2.PhraseDocumentStore`: one store database and the
phrase index folder it names, the format the Haystack 1.x store keeps too.

The documents are the collection ``document`` of :class:`~dphr_haystack.documents.database.StoreDatabase` (the
Haystack 1.x store's default index, so a 1.x store opened on the directory serves them), the settings its config key
``haystack2``, the phrases the folder the database names for that collection. A directory of an earlier format
(``documents.jsonl`` + ``phrases/``, or 1.x journals) is converted on open under the writer lock, its files left as
they were; a damaged one is refused untouched. Writers hold the directory's
:class:`~dphr_haystack._util.lock.WriterLock` (it also covers the phrase folder); readers never write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from haystack import Document

from .._util.lock import WriterLock
from ..documents.database import Changes, StoreDatabase
from ..documents.legacy import convert_legacy, legacy_kind
from ..errors import IndexLoadError, InvalidParameterError, UnsafePathError

COLLECTION = "document"  # the Haystack 1.x store's default index
CONFIG_KEY = "haystack2"
BODY_KEYS = ("id", "content", "meta", "embedding", "blob", "sparse_embedding")


def document_body(doc: Document) -> dict[str, Any]:
    """The stored body of a document: ``to_dict(flatten=False)`` without its score."""
    body = doc.to_dict(flatten=False)
    body.pop("score", None)
    return body


def body_document(body: Any) -> Document:
    """The Document of a stored body (either layer's), built from the known keys only; a 1.x body whose
    ``content_type`` is not ``text`` has no content here. IndexLoadError for a body of the wrong shape."""
    if not isinstance(body, dict) or not isinstance(body.get("id"), str):
        raise IndexLoadError("a stored document is not an object with a string id (the database is damaged)")
    if not isinstance(body.get("content"), str | None) or not isinstance(body.get("meta") or {}, dict):
        raise IndexLoadError(f"stored document {body['id']!r:.80}: content must be text or null and meta an object")
    data = {key: body[key] for key in BODY_KEYS if body.get(key) is not None}
    if body.get("content_type", "text") != "text":
        data.pop("content", None)
    try:
        return Document.from_dict(data)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise IndexLoadError(f"stored document {body['id']!r:.80} cannot be read: {exc}") from exc


def check_folder(folder: Path) -> Path:
    """``folder``, unless it is a symbolic link (UnsafePathError) or something other than a directory."""
    if folder.is_symlink():
        raise UnsafePathError(f"{folder} is a symbolic link; refusing to read or write phrases through it")
    if folder.exists() and not folder.is_dir():
        raise IndexLoadError(f"{folder} is not a directory")
    return folder


class StoreDirectory:
    """The database, the writer lock and the phrase folder of one store directory.

    Args:
        path: The directory (created, parents included, when missing).
        lock_timeout: Seconds a write waits for another writer before DirectoryLockedError.
        settings: The store's settings, recorded when the database is created.
    """

    def __init__(self, path: Path, lock_timeout: float, settings: dict[str, Any]) -> None:
        self.path = Path(path).absolute()
        if self.path.exists() and not self.path.is_dir():
            raise InvalidParameterError(f"path {self.path} exists and is not a directory")
        self.lock = WriterLock(self.path, lock_timeout)
        if legacy_kind(self.path) is not None:
            with self.lock.hold():  # a damaged directory: IndexLoadError, nothing written
                convert_legacy(self.path, lock_timeout)
        self.db = StoreDatabase(self.path, lock_timeout, config={CONFIG_KEY: settings})
        self.retired: set[str] = set()  # folders this object stopped naming or abandoned

    @property
    def read_only(self) -> bool:
        return self.db.read_only

    # ----------------------------------------------------------------- reads
    def documents(self) -> list[Document]:
        """Every stored document; the change cursor moves to the state read."""
        return [body_document(body) for body in self.db.reload(COLLECTION)]

    def changed(self) -> bool:
        return self.db.changed()

    def changes(self) -> Changes:
        return self.db.changes()

    def phrase_folder(self) -> Path | None:
        """The phrase index folder the database names (None: no phrases yet)."""
        name = self.db.phrase_folders().get(COLLECTION)
        if name is None:
            return None
        if Path(name).name != name or name.startswith("."):
            raise IndexLoadError(f"{self.db.file}: the phrase folder {name!r:.80} is not a folder of {self.path}")
        return check_folder(self.path / name)

    # ----------------------------------------------------------------- writes (the lock held)
    def new_phrase_folder(self) -> Path:
        """A fresh folder name for a phrase index, recorded as the store's own (named by a later commit)."""
        folder = self.db.new_folder()
        self.retired.add(folder.name)  # deleted unless a commit names it
        return check_folder(folder)

    def commit(
        self, put: list[Document], deleted: list[str], dropped: bool, phrases: bool, folder: Path | None
    ) -> None:
        """One database transaction: the documents written and deleted (``dropped``: every earlier one first),
        and that phrases changed (``folder``: the collection's new phrase folder)."""
        bodies = [document_body(doc) for doc in put]
        with self.db.transaction() as db:
            if dropped:
                db.drop(COLLECTION)
            if deleted:
                db.delete(COLLECTION, deleted)
            if bodies:
                db.put(COLLECTION, bodies)
            if folder is not None:
                db.set_phrase_folder(COLLECTION, folder.name)
            elif phrases:
                db.phrases_changed()
        self.db.prune()

    def retire(self, folder: Path | None) -> None:
        """Delete ``folder`` once no commit names it (see :meth:`remove_retired`)."""
        if folder is not None and folder.parent == self.path:
            self.retired.add(folder.name)

    def remove_retired(self) -> None:
        """Delete the retired folders that the store created and its database no longer names."""
        if self.retired:
            self.db.remove_unnamed_folders(self.retired)
            self.retired.clear()


__all__ = ["COLLECTION", "StoreDirectory", "body_document", "check_folder", "document_body"]
