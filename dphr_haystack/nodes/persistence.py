"""Saving and loading a :class:`~dphr_haystack.nodes.PhraseDocumentStore` directory.

Layout: ``phrase_store.json`` (format, version, the store's settings and what each file holds),
``documents-N.jsonl`` / ``labels-N.jsonl`` (in-memory store only; Elasticsearch keeps its own) and one phrase-index
directory ``phrases-N`` per Haystack index. The directory is written complete and fsynced, then swapped in
(:func:`~dphr_haystack._util.atomic.replace_directory`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from haystack.errors import DocumentStoreError
from haystack.schema import Document, Label

from .._util.atomic import fsync_directory, recover_directory, replace_directory
from .._util.lock import WriterLock
from .._util.nofollow import make_temp_dir, open_no_follow
from .._util.write_errors import write_errors
from ..index.phrase_index import PhraseIndex

STORE_FILE = "phrase_store.json"
STORE_FORMAT = "dphr-phrase-document-store"
STORE_FORMAT_VERSION = 1


def save_store(
    path: Path,
    config: dict[str, Any],
    collections: list[tuple[str, dict[str, Any]]],
    phrase_indexes: dict[str, PhraseIndex],
    lock: WriterLock,
) -> dict[str, Any]:
    """Replace ``path`` with a complete snapshot (:func:`write_snapshot` into a fresh sibling, then swapped in), under
    ``lock``, the writer lock of ``path``: other writers of the directory wait, and the copy swapped in stays locked
    until the save ends. A failure leaves ``path`` as it was (a full disk: IndexWriteError). Returns the manifest."""
    with write_errors("document store", path), lock.hold():
        tmp = make_temp_dir(path)
        try:
            manifest = write_snapshot(tmp, config, collections, phrase_indexes)
            lock.lock_replacement(tmp)
            replace_directory(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return manifest


def write_snapshot(
    tmp: Path,
    config: dict[str, Any],
    collections: list[tuple[str, dict[str, Any]]],
    phrase_indexes: dict[str, PhraseIndex],
) -> dict[str, Any]:
    """Write a store into the empty directory ``tmp`` (fsynced) and return its manifest.

    Args:
        tmp: The directory to fill.
        config: The store's settings (rebuilt with them on load).
        collections: ``(index, {id: document or label})`` of the inner store; empty ones are skipped.
        phrase_indexes: The phrase index of each Haystack index.

    Raises:
        DocumentStoreError: A document or label cannot be written as JSON.
    """
    manifest = empty_manifest(config)
    for n, (name, items) in enumerate(collections):
        values = list(items.values())
        if not values:
            continue
        kind = "labels" if isinstance(values[0], Label) else "documents"
        file = f"{kind}-{n}.jsonl"
        with open_no_follow(tmp / file, "x", encoding="utf-8") as handle:
            for item in values:
                try:
                    line = item.to_json()
                except (TypeError, ValueError, RecursionError) as exc:
                    raise DocumentStoreError(
                        f"cannot save {kind[:-1]} {item.id!r} of index {name!r}: "
                        f"its content or meta is not JSON ({exc})"
                    ) from exc
                handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        manifest[kind][name] = file
    for n, (name, phrase_index) in enumerate(sorted(phrase_indexes.items())):
        phrase_index.save(tmp / f"phrases-{n}")
        manifest["phrases"][name] = f"phrases-{n}"
    with open_no_follow(tmp / STORE_FILE, "x", encoding="utf-8") as handle:
        handle.write(json.dumps(manifest, indent=1))
        handle.flush()
        os.fsync(handle.fileno())
    fsync_directory(tmp)
    return manifest


def empty_manifest(config: dict[str, Any]) -> dict[str, Any]:
    """The manifest of a store with nothing in it yet, saved with ``config``."""
    return {
        "format": STORE_FORMAT,
        "format_version": STORE_FORMAT_VERSION,
        "config": config,
        "documents": {},
        "labels": {},
        "phrases": {},
    }


def read_manifest(path: Path) -> dict[str, Any]:
    file = path / STORE_FILE
    recover_directory(path)  # a save() killed mid-swap (platforms without an atomic exchange)
    if not file.is_file():
        raise DocumentStoreError(f"{file} not found: not a directory written by PhraseDocumentStore.save")
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise DocumentStoreError(f"{file} is corrupted: {exc}") from exc
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != STORE_FORMAT
        or manifest.get("format_version") != STORE_FORMAT_VERSION
    ):
        raise DocumentStoreError(f"{file}: not a {STORE_FORMAT} v{STORE_FORMAT_VERSION} manifest")
    if not isinstance(manifest.get("config"), dict):
        raise DocumentStoreError(f"{file} is corrupted: no store settings")
    for kind in ("documents", "labels", "phrases"):
        entries = manifest.get(kind)
        if not isinstance(entries, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and Path(v).name == v and not v.startswith(".")
            for k, v in entries.items()
        ):
            raise DocumentStoreError(f"{file} is corrupted: {kind} must map index names to files of {path}")
    return manifest


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


def document_from_json(line: str) -> Document:
    data = json.loads(line)
    doc = Document.from_dict(data)
    if isinstance(doc.embedding, list):
        doc.embedding = np.asarray(doc.embedding, dtype=np.float32)
    return doc
