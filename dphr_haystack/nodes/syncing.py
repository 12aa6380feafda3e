"""The directories of a :class:`~dphr_haystack.nodes.PhraseDocumentStore`: restoring a snapshot written by ``save``
and keeping a shared store directory (``path``) in step with other writers: what they committed applied to the inner
store and the phrase indexes before each read, each write committed under the directory's writer lock."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from haystack.schema import Document, Label

from .._util.nofollow import refuse_symlink
from .._util.write_errors import write_errors
from ..documents.database import Changes, StoreDatabase
from ..documents.index_settings import settings_of_index
from ..errors import DphrError, IndexLoadError
from ..index.phrase_index import PhraseIndex
from .live import StoreDirectory
from .persistence import LAYER, document_body, document_from_body, index_passages, label_body, read_snapshot
from .phrases import PhraseIndexing

logger = logging.getLogger("dphr_haystack.nodes.document_store")

Mark = tuple[Path | None, int, str]  # a phrase index's folder, passage rows and committed counts


@dataclass
class Touched:
    """What one write of a shared store changed: documents per index (in order), indexes emptied, label indexes."""

    documents: dict[str, dict[str, None]] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)
    labels: set[str] = field(default_factory=set)


class DirectorySync(PhraseIndexing):
    """Snapshot restore and shared-directory catch-up and commits of the store (mixed into it)."""

    _settings: dict[str, Any]
    _component_config: dict[str, Any]
    _touched: Touched | None = None

    @property
    def in_memory(self) -> bool:
        """True when documents live in the embedded in-memory store."""
        return self._inner.in_memory

    @property
    def _config(self) -> dict[str, Any]:
        """The settings :meth:`save` records: the constructor's arguments (a saved directory's settings filled in
        for those not given, then defaults), without the paths and the Elasticsearch password."""
        return dict(self._settings)

    # ----------------------------------------------------------------- opening
    def _restore(self, path: Path) -> None:
        """Read a saved directory whole (``load_path``); its phrase indexes stay on disk (see the class)."""
        snapshot = read_snapshot(path, self.lock_timeout)
        for name, bodies in snapshot.documents.items():
            self._load_documents(name, bodies)
        for name, bodies in snapshot.labels.items():
            self._load_labels(name, bodies)
        for name, folder in snapshot.phrases.items():
            refuse_symlink(path / folder)  # a linked folder would take this store's phrase writes elsewhere
            self._phrase_indexes[name] = phrase_index = PhraseIndex.load(path / folder, lock_timeout=self.lock_timeout)
            self._snapshots.add((path / folder).resolve())
            self._hide_orphan_phrases(name, phrase_index)

    def _open_index(self, path: Path) -> None:
        """Documents and phrases from a phrase index directory (``dphr index --out``, another store's phrase index):
        each live passage of its passage table becomes a document of the default index (same id, text and meta, the
        title and document id in the ``title_field`` and ``document_id_field`` meta fields), served by the index. The
        directory is never written: the store's first phrase change moves its phrases to a private copy."""
        phrase_index = PhraseIndex.load(path, lock_timeout=self.lock_timeout)
        docs = [
            Document(content=record["text"], id=record["id"], meta=meta)
            for record, meta in index_passages(phrase_index, self.title_field, self.document_id_field)
        ]
        index = self.index
        if docs:
            self._inner.write(index, lambda: self.inner.write_documents(docs, index=index, duplicate_documents="fail"))
        assert phrase_index.path is not None
        self._phrase_indexes[index] = phrase_index
        self._read_only.add(phrase_index.path.resolve())
        passed = self._component_config.get("params", {})
        for name, value in settings_of_index(phrase_index).items():  # an index rebuilt later is built as this one
            if name not in passed:
                setattr(self, name, value)
                self._settings[name] = value

    def _open_shared(self, path: Path) -> None:
        """Open (or create) the shared store directory and read what it holds."""
        self._live = StoreDirectory(path, self.lock_timeout, self._config)
        with self._lock.write():
            self._catch_up()

    # ----------------------------------------------------------------- following other writers
    def _follow(self) -> None:
        """Before a read: catch up with writes other store objects or processes committed to the directory (not
        inside a read or write this thread already holds: that one sees one state throughout)."""
        if self._live is not None and not self._lock.held_by_me() and self._live.db.changed():
            with self._lock.write():
                self._catch_up()

    def _catch_up(self) -> None:
        """Apply what other writers committed since this object last looked (store write lock held)."""
        assert self._live is not None
        changes = self._live.db.changes()
        if changes:
            self._apply(changes)

    def _apply(self, changes: Changes) -> None:
        db = self._db
        if self.in_memory and changes.everything:
            for name, items in self._inner.saved_collections():
                self._reset(name, labels=any(isinstance(item, Label) for item in items.values()))
            changes.collections, changes.labels = set(db.collections()), set(db.collections("labels"))
        if self.in_memory:
            for name in changes.collections:
                self._reset(name, labels=False)
                self._load_documents(name, db.items(name))
            for name, bodies in changes.documents.items():
                self._upsert(name, bodies)
            for name in changes.labels:
                self._reset(name, labels=True)
                self._load_labels(name, db.items(name, "labels"))
        full = changes.everything or changes.phrases or bool(changes.collections)
        self._refresh_phrases(None if full else {name: set(bodies) for name, bodies in changes.documents.items()})

    @property
    def _db(self) -> StoreDatabase:
        assert self._live is not None
        return self._live.db

    def _reset(self, name: str, labels: bool) -> None:
        if labels:
            self.inner.delete_labels(index=name)
        else:
            self._inner.write(name, lambda: self.inner.delete_documents(index=name))

    def _load_documents(self, name: str, bodies: Iterable[dict[str, Any]]) -> None:
        docs = [_parsed(document_from_body, body, name) for body in bodies]
        if docs:
            write = functools.partial(self.inner.write_documents, docs, index=name, duplicate_documents="overwrite")
            self._inner.write(name, write)

    def _load_labels(self, name: str, bodies: Iterable[dict[str, Any]]) -> None:
        labels = [_parsed(Label.from_dict, body, name) for body in bodies]
        if labels:
            self.inner.write_labels(labels, index=name)

    def _upsert(self, name: str, bodies: dict[str, dict[str, Any] | None]) -> None:
        """Apply changed documents: one write of the current bodies, one deletion of the others."""
        gone = [doc_id for doc_id, body in bodies.items() if body is None]
        if gone:
            self._inner.write(name, lambda: self.inner.delete_documents(index=name, ids=gone))
        self._load_documents(name, [body for body in bodies.values() if body is not None])

    def _refresh_phrases(self, changed: dict[str, set[str]] | None) -> None:
        """Phrase indexes as the database names them, caught up, their phrases of documents not stored as encoded
        left out of results (``changed``: only those of these documents need checking, unless a phrase index
        changed; None: all)."""
        live = self._live
        assert live is not None
        folders = self._db.phrase_folders()
        for name in [n for n in self._phrase_indexes if n not in folders]:
            del self._phrase_indexes[name]
        for name, folder in folders.items():
            where = live.path / folder
            refuse_symlink(where)  # a linked folder would take this store's phrase writes elsewhere
            current = self._phrase_indexes.get(name)
            if current is not None and current.path == where and not current.hidden_passage_ids():
                moved = current.refresh()  # (with hidden phrases: read afresh, some may belong to documents read now)
                if not moved and changed is not None:
                    self._hide_orphan_phrases(name, current, changed.get(name, set()))
                    continue
            else:
                current = PhraseIndex.load(where, verify=False, lock_timeout=self.lock_timeout)
                self._phrase_indexes[name] = current
            self._hide_orphan_phrases(name, current)

    # ----------------------------------------------------------------- writes
    def _touch(self, index: str, ids: Iterable[str]) -> None:
        """Record documents a write changed (committed with it)."""
        if self._touched is not None:
            self._touched.documents.setdefault(index, {}).update(dict.fromkeys(ids))

    def _touch_all(self, index: str, labels: bool = False) -> None:
        """Record that a write emptied ``index`` (and its labels)."""
        if self._touched is not None:
            self._touched.dropped.add(index)
            self._touched.documents.pop(index, None)
            if labels:
                self._touched.labels.add(index)

    def _touch_labels(self, index: str) -> None:
        if self._touched is not None:
            self._touched.labels.add(index)

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One write of a shared store: hold the directory's writer lock, catch up, write, commit (the caller holds
        the store's write lock). A write that fails before its commit (a full disk included: IndexWriteError) is
        rolled back, in memory and in the phrase indexes, to the directory's committed state. Without a directory,
        just the write."""
        live = self._live
        if live is None:
            yield
            return
        with live.writing() as first:
            if not first:
                yield
                return
            with write_errors("document store", live.path):
                self._begin_write()
            marks = {name: _mark(p) for name, p in self._phrase_indexes.items()}
            self._touched = Touched()
            try:
                with write_errors("document store", live.path):  # a full disk says so, as a typed error
                    yield
                    stale = self._commit(marks)
            except BaseException:
                self._roll_back(marks)
                raise
            finally:
                self._touched = None
            self._delete_hidden_phrases()  # the documents first, then the phrases of deleted or changed ones
            live.remove_unnamed(stale | set(live.new_folders))

    def _begin_write(self) -> None:
        """Catch up; refuse phrase folders turned into links; delete the phrases left out of results (a crashed
        writer's phrases without documents, read afresh under the lock)."""
        if self._db.changed():
            self._catch_up()
        for name, phrase_index in list(self._phrase_indexes.items()):
            refuse_symlink(phrase_index.path)  # planted since the open: writes would land elsewhere
            if phrase_index.hidden_passage_ids():
                phrase_index = self._reload_phrase_index(name, phrase_index)
            hidden = phrase_index.hidden_passage_ids()
            if hidden:
                phrase_index.delete_passages(hidden)

    def _commit(self, marks: dict[str, Mark]) -> set[str]:
        """Commit the write in one database transaction; returns the phrase folders it stopped naming."""
        db, touched = self._db, self._touched
        assert touched is not None and self._live is not None
        with db.transaction():
            if self.in_memory:
                for index in touched.dropped:
                    db.drop(index)
                for index, ids in touched.documents.items():
                    self._commit_documents(db, index, list(ids))
                for index in touched.labels:
                    labels = self.inner.get_all_labels(index=index) if index in self.inner.indexes else []
                    db.replace_labels(index, [label_body(label) for label in labels])
            before = db.phrase_folders()
            folders = {}
            for name, phrase_index in self._phrase_indexes.items():
                assert phrase_index.path is not None and phrase_index.path.parent == self._live.path
                folders[name] = phrase_index.path.name
            for name in before:
                if name not in folders:
                    db.set_phrase_folder(name, None)
            for name, folder in folders.items():
                if before.get(name) != folder:
                    db.set_phrase_folder(name, folder)
            if any(_mark(p) != marks.get(name) for name, p in self._phrase_indexes.items()):
                db.phrases_changed()
            if LAYER not in db.config:
                db.set_config({**db.config, LAYER: self._config})
        db.prune()
        return set(before.values()) - set(folders.values())

    def _commit_documents(self, db: StoreDatabase, index: str, ids: list[str]) -> None:
        stored = self._inner.stored_documents(index) or {}
        present = [stored[i] for i in ids if isinstance(stored.get(i), Document)]
        db.put(index, [document_body(doc, index) for doc in present])
        db.delete(index, [i for i in ids if not isinstance(stored.get(i), Document)])

    def _roll_back(self, marks: dict[str, Mark]) -> None:
        """After a write that failed before its commit: remove the phrases it committed to phrase indexes the
        directory already named and the folders it made (best effort), then read the directory's committed state
        afresh, in memory."""
        assert self._live is not None
        for name, phrase_index in list(self._phrase_indexes.items()):
            path, rows, _ = marks.get(name, (None, 0, ""))
            if phrase_index.path is None or phrase_index.path != path or len(phrase_index.passages) <= rows:
                continue  # a phrase index the failed write created is named by no commit: removed below
            live_ids = set(phrase_index.live_passage_ids())
            added = [p["id"] for p in phrase_index.passages[rows:] if p["id"] in live_ids]
            try:
                phrase_index.delete_passages(added)
            except (DphrError, OSError) as exc:
                logger.warning("phrases of %d documents of a failed write stay on disk: %s", len(added), exc)
        try:
            self._live.remove_unnamed(set(self._live.new_folders))
        except DphrError as exc:
            logger.warning("folders of a failed write stay on disk: %s", exc)
        self._phrase_indexes = {}
        self._apply(Changes(everything=True, phrases=True))

    def _delete_hidden_phrases(self) -> None:
        """After a commit: delete the phrases the write left out of results (on failure they stay out of results,
        and the next write deletes them)."""
        for name, phrase_index in list(self._phrase_indexes.items()):
            hidden = phrase_index.hidden_passage_ids()
            if not hidden:
                continue
            try:
                phrase_index.delete_passages(hidden)
            except (DphrError, OSError) as exc:
                logger.warning(
                    "phrases of %d changed documents stay on disk until the next write: %s", len(hidden), exc
                )
                self._reload_phrase_index(name, phrase_index)

    def _reload_phrase_index(self, name: str, phrase_index: PhraseIndex) -> PhraseIndex:
        """The committed state of a shared store's phrase index, phrases of missing or changed documents left out."""
        assert phrase_index.path is not None
        fresh = PhraseIndex.load(phrase_index.path, verify=False, lock_timeout=self.lock_timeout)
        self._phrase_indexes[name] = fresh
        self._hide_orphan_phrases(name, fresh)
        return fresh


def _mark(phrase_index: PhraseIndex) -> Mark:
    """What tells whether a write changed a phrase index: its folder, rows and committed counts."""
    manifest = phrase_index.manifest
    counts = json.dumps([manifest.get("counts"), manifest.get("faiss_file")], sort_keys=True)
    return (phrase_index.path, len(phrase_index.passages), counts)


def _parsed(parse, body: dict[str, Any], name: str):
    """A stored body as a Haystack object (IndexLoadError when it is not one)."""
    try:
        return parse(dict(body))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise IndexLoadError(f"a stored item of {name!r} is not a Haystack 1.x item: {exc}") from exc


__all__ = ["DirectorySync"]
