"""Store directories written by earlier versions, converted to the store database on open.

Two formats came before :mod:`~dphr_haystack.documents.database`:

- Haystack 1.x: ``phrase_store.json`` (settings, which journal holds each index's documents and labels, committed
  byte counts) with append-only JSON-line journals ``documents-N.jsonl`` / ``labels-N.jsonl`` and ``phrases-N/``;
- Haystack 2.x: ``documents.jsonl`` (every document, one JSON line each) and ``phrases/``.

:func:`convert_legacy` reads one of them whole, checks it (a journal line that does not parse, a documents file
cut mid-line, empty, or missing documents that the phrase index holds: refused, nothing changed), and writes a
complete database beside it, built under a temporary name and linked into place in one step, so a reader never sees
half a conversion. The old files are left as they are (they are no longer read); nothing is deleted.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._util.nofollow import make_temp_dir
from ..errors import IndexLoadError
from .database import DATABASE_FILE, StoreDatabase, encode_body

HS1_MANIFEST = "phrase_store.json"
HS2_DOCUMENTS = "documents.jsonl"
HS2_PHRASES = "phrases"
DEFAULT_COLLECTION = "document"


@dataclass
class LegacyStore:
    """What a legacy directory holds: settings, document and label bodies per collection, phrase folders."""

    kind: str
    config: dict[str, Any] = field(default_factory=dict)
    documents: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    labels: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    phrases: dict[str, str] = field(default_factory=dict)


def legacy_kind(path: Path) -> str | None:
    """``haystack1`` / ``haystack2`` for a directory in an earlier format (and no database yet), else None."""
    path = Path(path)
    if (path / DATABASE_FILE).exists():
        return None
    if (path / HS1_MANIFEST).is_file():
        return "haystack1"
    if (path / HS2_DOCUMENTS).exists() or (path / HS2_PHRASES / "manifest.json").is_file():
        return "haystack2"
    return None


def read_legacy(path: Path) -> LegacyStore:
    """The content of a legacy directory (IndexLoadError when it is damaged)."""
    kind = legacy_kind(path)
    if kind == "haystack1":
        return _read_hs1(Path(path))
    if kind == "haystack2":
        return _read_hs2(Path(path))
    raise IndexLoadError(f"{path} holds no store of an earlier format")


def convert_legacy(path: Path, lock_timeout: float = 60.0) -> bool:
    """Write the store database of a legacy directory (the caller holds the directory's writer lock). Returns
    False when there was nothing to convert."""
    path = Path(path).absolute()
    if legacy_kind(path) is None:
        return False
    legacy = read_legacy(path)
    work = make_temp_dir(path / DATABASE_FILE)
    try:
        db = StoreDatabase(work, lock_timeout, config={legacy.kind: legacy.config})
        with db.transaction():
            for collection, docs in legacy.documents.items():
                db.put(collection, list(docs.values()))
            for collection, labels in legacy.labels.items():
                db.replace_labels(collection, labels)
            for collection, folder in legacy.phrases.items():
                db.set_phrase_folder(collection, folder)
                db.claim(folder)
            db.claim(f"converted from {legacy.kind}")
        db.note("converted_from", legacy.kind)
        db.close()  # the last connection checkpoints the WAL into the file
        try:
            os.link(work / DATABASE_FILE, path / DATABASE_FILE)  # never replaces a database another process made
        except FileExistsError:
            pass
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return True


# ----------------------------------------------------------------- Haystack 1.x journals
def _read_hs1(path: Path) -> LegacyStore:
    file = path / HS1_MANIFEST
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise IndexLoadError(f"{file} is corrupted: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != "dphr-phrase-document-store":
        raise IndexLoadError(f"{file}: not a store manifest of an earlier version")
    sizes = manifest.get("bytes") or {}
    store = LegacyStore("haystack1", config=dict(manifest.get("config") or {}))
    for kind in ("documents", "labels", "phrases"):
        entries = manifest.get(kind) or {}
        if not isinstance(entries, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and Path(v).name == v and not v.startswith(".")
            for k, v in entries.items()
        ):
            raise IndexLoadError(f"{file} is corrupted: {kind} must map index names to files of {path}")
    for collection, name in manifest["documents"].items():
        store.documents[collection] = _replay(path / name, sizes.get(name))
    for collection, name in manifest["labels"].items():
        store.labels[collection] = list(_replay(path / name, sizes.get(name)).values())
    store.phrases = dict(manifest["phrases"])
    return store


def _replay(file: Path, size: int | None) -> dict[str, dict[str, Any]]:
    """The items of a journal after its committed lines: writes, overwrites, ``delete`` and ``meta`` operations."""
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        data = b""
    except OSError as exc:
        raise IndexLoadError(f"cannot read {file}: {exc}") from exc
    if size is not None:
        if len(data) < size:
            raise IndexLoadError(f"{file} is truncated: {len(data)} bytes, its store manifest says {size}")
        data = data[:size]
    items: dict[str, dict[str, Any]] = {}
    for number, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw.decode("utf-8"))
            if not isinstance(line, dict):
                raise ValueError("not an object")
            op = line.get("dphr_op")
            if op == "delete":
                for doc_id in line["ids"]:
                    items.pop(str(doc_id), None)
            elif op == "meta":
                if str(line["id"]) in items:
                    items[str(line["id"])].setdefault("meta", {}).update(dict(line["meta"]))
            elif op is None:
                line.pop("score", None)
                items.pop(str(line["id"]), None)  # an overwrite moves to the end, as it was written
                items[str(line["id"])] = line
            else:
                raise ValueError(f"unknown operation {op!r}")
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError) as exc:
            raise IndexLoadError(f"{file}: line {number} is corrupted ({type(exc).__name__}: {exc})") from exc
    return items


# ----------------------------------------------------------------- Haystack 2.x documents file
def _read_hs2(path: Path) -> LegacyStore:
    file = path / HS2_DOCUMENTS
    if file.is_symlink() or (file.exists() and not file.is_file()):
        raise IndexLoadError(f"{file} is not a regular file; refusing to open the store (nothing was changed)")
    try:
        data = file.read_bytes() if file.exists() else None
    except OSError as exc:
        raise IndexLoadError(f"cannot read {file}: {exc}") from exc
    if data and not data.endswith(b"\n"):
        raise IndexLoadError(f"{file} ends mid-line (cut short): restore it; nothing was changed")
    docs: dict[str, dict[str, Any]] = {}
    for number, raw in enumerate((data or b"").splitlines(), 1):
        if not raw.strip():
            continue
        try:
            doc = json.loads(raw.decode("utf-8"))
            if not isinstance(doc, dict) or not isinstance(doc.get("id"), str):
                raise ValueError("not a document object with a string id")
            if not isinstance(doc.get("content"), str | None) or not isinstance(doc.get("meta", {}), dict):
                raise ValueError("content must be text or null and meta an object")
            encode_body(doc)  # NaN, infinities, lone surrogates: nothing the database would refuse later
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise IndexLoadError(f"{file}: document {number} is damaged ({exc})") from exc
        doc.pop("score", None)
        docs[doc["id"]] = doc
    store = LegacyStore("haystack2")
    phrases = path / HS2_PHRASES
    if phrases.is_symlink():
        raise IndexLoadError(f"{phrases} is a symbolic link; refusing to read phrases through it")
    if (phrases / "manifest.json").is_file():
        live = _live_passage_ids(phrases)
        missing = [pid for pid in live if pid not in docs]
        if missing:
            raise IndexLoadError(
                f"{file} lacks {len(missing)} of the {len(live)} documents whose phrases {phrases} holds "
                f"(e.g. {missing[:3]}): it is empty, cut short or missing; restore it (nothing was changed)"
            )
        store.phrases[DEFAULT_COLLECTION] = HS2_PHRASES
    if docs:
        store.documents[DEFAULT_COLLECTION] = docs
    return store


def _live_passage_ids(folder: Path) -> list[str]:
    from ..index.phrase_index import PhraseIndex

    return list(PhraseIndex.load(folder, verify=False).live_passage_ids())


__all__ = ["LegacyStore", "convert_legacy", "legacy_kind", "read_legacy"]
