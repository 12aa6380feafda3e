"""The store directory of a :class:`~dphr_haystack.nodes.PhraseDocumentStore` on disk: one
:class:`~dphr_haystack.documents.database.StoreDatabase` (documents and labels per Haystack index, the settings under
``"haystack1"``, the phrase folder of each index) beside its ``phrases-N`` folders.

Opening converts a directory of an earlier format first (:mod:`~dphr_haystack.documents.legacy`, its old files left as
they are). :func:`save_store` replaces what another directory holds with a complete copy in one database commit;
:func:`read_snapshot` reads a directory whole (:meth:`PhraseDocumentStore.load`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from haystack.schema import Document, Label

from .._util.lock import WriterLock
from .._util.write_errors import write_errors
from ..documents.database import StoreDatabase, is_store_directory
from ..documents.legacy import convert_legacy, legacy_kind, read_legacy
from ..errors import ReadOnlyStoreError
from ..index.phrase_index import PhraseIndex
from .store_checks import document_line

logger = logging.getLogger("dphr_haystack.nodes.document_store")

LAYER = "haystack1"  # the database config key of this layer's settings
_DOCUMENT_KEYS = ("id", "content", "content_type", "meta", "embedding", "id_hash_keys")


# ----------------------------------------------------------------- stored bodies
def document_body(doc: Document, index: str) -> dict[str, Any]:
    """The stored JSON body of a document (DocumentStoreError when it is not JSON)."""
    body = json.loads(document_line(doc, index))
    body.pop("score", None)
    return body


def document_from_body(body: dict[str, Any]) -> Document:
    """A Haystack 1.x document from a stored body (the keys it knows; a body without text has empty text)."""
    data = {key: body[key] for key in _DOCUMENT_KEYS if key in body}
    data["content_type"] = data.get("content_type") or "text"
    if data.get("content") is None:
        data["content"] = ""
    doc = Document.from_dict(data)
    if doc.embedding is not None:
        doc.embedding = np.asarray(doc.embedding, dtype=np.float32)
    return doc


def label_body(label: Label) -> dict[str, Any]:
    return json.loads(label.to_json())


# ----------------------------------------------------------------- opening
def open_database(path: Path, lock_timeout: float, config: dict[str, Any] | None = None) -> StoreDatabase:
    """The database of the store directory ``path``: an earlier format converted first, a new one created (with
    ``config`` under :data:`LAYER`), both under the directory's writer lock."""
    path = Path(path).absolute()
    if is_store_directory(path):
        return StoreDatabase(path, lock_timeout, create=False)
    with WriterLock(path, lock_timeout).hold():  # two first writers make one database
        if legacy_kind(path) is not None:
            convert_legacy(path, lock_timeout)
        return StoreDatabase(path, lock_timeout, config={LAYER: config or {}})


def saved_settings(path: Path, lock_timeout: float) -> dict[str, Any]:
    """The settings a store directory was written with (none for a directory that holds no store yet)."""
    path = Path(path)
    if is_store_directory(path):
        db = StoreDatabase(path, lock_timeout, create=False)
        try:
            return dict(db.config.get(LAYER) or {})
        finally:
            db.close()
    if legacy_kind(path) is None:
        return {}
    try:
        db = open_database(path, lock_timeout)
    except ReadOnlyStoreError:
        return dict(read_legacy(path).config)  # read where it is, never converted
    try:
        return dict(db.config.get(LAYER) or {})
    finally:
        db.close()


@dataclass
class Snapshot:
    """What a store directory holds: document and label bodies per index, the phrase folder per index."""

    documents: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    labels: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    phrases: dict[str, str] = field(default_factory=dict)


def read_snapshot(path: Path, lock_timeout: float) -> Snapshot:
    """Everything a store directory holds (an earlier format converted first; read in place when read-only)."""
    path = Path(path).absolute()
    if not is_store_directory(path) and legacy_kind(path) is not None:
        try:
            open_database(path, lock_timeout).close()
        except ReadOnlyStoreError:
            legacy = read_legacy(path)
            return Snapshot(
                {c: list(d.values()) for c, d in legacy.documents.items()}, dict(legacy.labels), dict(legacy.phrases)
            )
    db = StoreDatabase(path, lock_timeout, create=False)
    try:
        with db.snapshot():
            return Snapshot(
                {c: db.items(c) for c in db.collections()},
                {c: db.items(c, "labels") for c in db.collections("labels")},
                db.phrase_folders(),
            )
    finally:
        db.close()


# ----------------------------------------------------------------- saving a copy
def save_store(
    target: Path,
    config: dict[str, Any],
    collections: list[tuple[str, dict[str, Any]]],
    phrase_indexes: dict[str, PhraseIndex],
    lock_timeout: float,
) -> dict[str, str]:
    """Replace what the store directory ``target`` holds with these documents, labels, phrase indexes and settings:
    phrase indexes copied into fresh folders, then one database commit; the folders it stopped naming are removed
    after it. A failure at any point leaves ``target``'s previous committed state (a full disk: IndexWriteError).
    Returns the phrase folder of each index."""
    with write_errors("document store", target), WriterLock(target, lock_timeout).hold():
        db = StoreDatabase(target, lock_timeout)
        try:
            before = set(db.phrase_folders().values())
            folders: dict[str, str] = {}
            try:
                for name, phrase_index in sorted(phrase_indexes.items()):
                    folder = db.new_folder()
                    folders[name] = folder.name
                    phrase_index.save(folder)
                _replace_content(db, config, collections, folders)
            except BaseException:
                db.remove_unnamed_folders(folders.values())
                raise
            db.remove_unnamed_folders(before - set(folders.values()))
        finally:
            db.close()
    return folders


def _replace_content(
    db: StoreDatabase, config: dict[str, Any], collections: list[tuple[str, dict[str, Any]]], folders: dict[str, str]
) -> None:
    """One commit: every document and label of ``db`` replaced, the phrase folders named, the settings recorded."""
    with db.transaction():
        for collection in db.collections():
            db.drop(collection)
        for collection in db.collections("labels"):
            db.drop(collection, "labels")
        for name, items in collections:
            values = list(items.values())
            if values and isinstance(values[0], Label):
                db.replace_labels(name, [label_body(label) for label in values])
            elif values:
                db.put(name, [document_body(doc, name) for doc in values])
        for name in db.phrase_folders():
            if name not in folders:
                db.set_phrase_folder(name, None)
        for name, folder in folders.items():
            db.set_phrase_folder(name, folder)
        db.set_config({**db.config, LAYER: config})


def index_passages(
    phrase_index: PhraseIndex, title_field: str, document_id_field: str
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(passage record, document meta)`` of each live passage of a phrase index: the record's own meta with its
    title and document id under the store's meta fields (the documents :class:`~dphr_haystack.documents.passages.
    PassageRule` turns back into the same passages)."""
    live = set(phrase_index.live_passage_ids())
    out = []
    for record in phrase_index.passages:
        if record["id"] in live:
            meta = dict(record.get("meta") or {})
            meta[title_field] = record.get("title", "")
            meta[document_id_field] = record.get("document_id", record["id"])
            out.append((record, meta))
    return out


def is_store(path: Path) -> bool:
    """Whether ``path`` holds a store directory (of this format or an earlier one)."""
    return is_store_directory(path) or legacy_kind(path) is not None


__all__ = ["LAYER", "Snapshot", "document_body", "document_from_body", "is_store", "open_database", "save_store"]
