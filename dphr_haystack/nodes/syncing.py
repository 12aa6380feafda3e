"""The directories of a :class:`~dphr_haystack.nodes.PhraseDocumentStore`: restoring a snapshot written by ``save``
and keeping a shared store directory (``path``) in step with other writers: journals replayed into the inner store,
phrase indexes refreshed, each write committed under the directory's writer lock."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from haystack.errors import DocumentStoreError
from haystack.schema import Document, Label

from .._util.nofollow import refuse_symlink
from .._util.write_errors import write_errors
from ..errors import DphrError
from ..index.phrase_index import PhraseIndex
from .live import StoreDirectory, committed_bytes, parse_op, read_journal
from .persistence import document_from_json, index_passages, read_manifest
from .phrases import PhraseIndexing
from .store_checks import document_line

logger = logging.getLogger("dphr_haystack.nodes.document_store")


class DirectorySync(PhraseIndexing):
    """Snapshot restore and shared-directory catch-up, journals and commits of the store (mixed into it)."""

    _journal_read: dict[str, int]
    _settings: dict[str, Any]

    @property
    def in_memory(self) -> bool:
        """True when documents live in the embedded in-memory store."""
        return self._inner.in_memory

    @property
    def _config(self) -> dict[str, Any]:
        """The settings :meth:`save` records: the constructor's arguments (a saved directory's settings filled in
        for those not given, then defaults), without the paths and the Elasticsearch password."""
        return dict(self._settings)

    def _restore(self, path: Path) -> None:
        manifest = read_manifest(path)
        for kind in ("documents", "labels"):
            for name, file in manifest[kind].items():
                self._replay(kind, name, path / file, 0, committed_bytes(path, manifest, file))
        for name, folder in manifest["phrases"].items():
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

    def _open_shared(self, path: Path) -> None:
        """Open (or create, under the writer lock) the shared store directory and read what it holds."""
        self._live = StoreDirectory(path, self.lock_timeout)
        if not self._live.exists():
            with self._live.writing():
                if not self._live.exists():
                    self._live.create(self._config)
        with self._lock.write():
            self._catch_up()

    def _follow(self) -> None:
        """Before a read: catch up with writes other store objects or processes committed to the directory (not
        inside a read or write this thread already holds: that one sees one state throughout)."""
        if self._live is not None and not self._lock.held_by_me() and self._live.changed():
            with self._lock.write():
                if self._live.changed():
                    self._catch_up()

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One write of a shared store: hold the directory's writer lock, catch up, write, commit (the caller holds
        the store's write lock). A write that fails before its commit (a full disk included: IndexWriteError) is
        rolled back, in memory and in the phrase indexes, to the directory's committed state. Without a directory,
        just the write."""
        if self._live is None:
            yield
            return
        with self._live.writing() as first:
            if first:
                if self._live.changed():
                    self._catch_up()
                for name, phrase_index in list(self._phrase_indexes.items()):
                    refuse_symlink(phrase_index.path)  # planted since the open: writes would land elsewhere
                    if phrase_index.hidden_passage_ids():  # read afresh: what is stale now, under the lock
                        phrase_index = self._reload_phrase_index(name, phrase_index)
                    hidden = phrase_index.hidden_passage_ids()  # a crashed writer's phrases without documents
                    if hidden:
                        phrase_index.delete_passages(hidden)
            if not first:
                yield
                return
            marks = {name: (p.path, len(p.passages)) for name, p in self._phrase_indexes.items()}
            try:
                with write_errors("document store", self._live.path):  # a full disk says so, as a typed error
                    yield
                    live = self._live
                    for name, phrase_index in self._phrase_indexes.items():
                        assert phrase_index.path is not None and phrase_index.path.parent == live.path
                        live.manifest["phrases"][name] = phrase_index.path.name
                    for name in [n for n in live.manifest["phrases"] if n not in self._phrase_indexes]:
                        del live.manifest["phrases"][name]
                    live.commit()  # the documents first, then the phrases of deleted or changed ones
            except BaseException:
                self._roll_back(marks)  # nothing of the write was committed: back to the directory's state
                raise
            self._delete_hidden_phrases()
            live.remove_unlisted()

    def _roll_back(self, marks: dict[str, tuple[Path | None, int]]) -> None:
        """After a write that failed before its commit: remove the phrases it committed to phrase indexes the
        directory already named (best effort), then read the directory's committed state afresh, in memory."""
        assert self._live is not None
        for name, phrase_index in list(self._phrase_indexes.items()):
            path, rows = marks.get(name, (None, 0))
            if phrase_index.path is None or phrase_index.path != path or len(phrase_index.passages) <= rows:
                continue  # a phrase index the failed write created is named by no commit: left out below
            live_ids = set(phrase_index.live_passage_ids())
            added = [p["id"] for p in phrase_index.passages[rows:] if p["id"] in live_ids]
            try:
                phrase_index.delete_passages(added)
            except (DphrError, OSError) as exc:
                logger.warning("phrases of %d documents of a failed write stay on disk: %s", len(added), exc)
        for name, items in self._inner.saved_collections():
            kind = "labels" if any(isinstance(item, Label) for item in items.values()) else "documents"
            self._reset_collection(kind, name)
        self._phrase_indexes = {}
        self._journal_read = {}
        self._live.manifest, self._live.stamp = None, None
        self._catch_up()

    def _delete_hidden_phrases(self) -> None:
        """After a commit: delete the phrases the write left out of results (on failure they stay out of results,
        and the next write deletes them)."""
        assert self._live is not None
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

    def _catch_up(self) -> None:
        """Apply what other writers committed since this object last read the directory (store write lock held)."""
        live = self._live
        assert live is not None
        before = live.manifest or {"documents": {}, "labels": {}, "phrases": {}}
        manifest = live.read()
        for kind in ("documents", "labels"):
            for name, file in before[kind].items():
                if manifest[kind].get(name) != file:  # deleted or replaced by a delete_index
                    self._reset_collection(kind, name)
                    self._journal_read.pop(file, None)
            for name, file in manifest[kind].items():
                start = self._journal_read.get(file, 0) if before[kind].get(name) == file else 0
                end = committed_bytes(live.path, manifest, file)
                if end < start:
                    self._reset_collection(kind, name)
                    start = 0
                self._replay(kind, name, live.path / file, start, end)
                self._journal_read[file] = end
        for name in [n for n in self._phrase_indexes if n not in manifest["phrases"]]:
            del self._phrase_indexes[name]
        for name, folder in manifest["phrases"].items():
            refuse_symlink(live.path / folder)  # a linked folder would take this store's phrase writes elsewhere
            current = self._phrase_indexes.get(name)
            if current is not None and current.path == live.path / folder and not current.hidden_passage_ids():
                current.refresh()  # (with hidden phrases: read afresh, some may belong to documents read now)
            else:
                current = PhraseIndex.load(live.path / folder, verify=False, lock_timeout=self.lock_timeout)
                self._phrase_indexes[name] = current
            self._hide_orphan_phrases(name, current)

    def _reset_collection(self, kind: str, index: str) -> None:
        if kind == "documents":
            self._inner.write(index, lambda: self.inner.delete_documents(index=index))
        else:
            self.inner.delete_labels(index=index)

    def _replay(self, kind: str, index: str, file: Path, start: int, end: int) -> None:
        """Apply the journal lines of ``file`` in bytes ``start:end`` to the inner store."""
        parse = document_from_json if kind == "documents" else Label.from_json
        batch: list = []
        batch_ids: set[str] = set()

        def flush() -> None:
            if batch and kind == "documents":
                docs = list(batch)
                self._inner.write(
                    index,
                    functools.partial(self.inner.write_documents, docs, index=index, duplicate_documents="overwrite"),
                )
            elif batch:
                self.inner.write_labels(list(batch), index=index)
            batch.clear()
            batch_ids.clear()

        for line_no, line in read_journal(file, start, end):
            if not line.strip():
                continue
            try:
                op = parse_op(line)
                if op is None:
                    item = parse(line)
                    if item.id in batch_ids:  # an overwrite: Haystack keeps the first of one batch's duplicates
                        flush()
                    batch.append(item)
                    batch_ids.add(item.id)
                    continue
                flush()
                self._apply_op(kind, index, op)
            except DphrError:
                raise
            except Exception as exc:
                raise DocumentStoreError(
                    f"{file}: line {line_no} after byte {start} is corrupted: {type(exc).__name__}: {exc}"
                ) from exc
        flush()

    def _apply_op(self, kind: str, index: str, op: dict[str, Any]) -> None:
        name = op["dphr_op"]
        if name == "delete" and kind == "documents":
            ids = [str(i) for i in op["ids"]]
            self._inner.write(index, lambda: self.inner.delete_documents(index=index, ids=ids))
        elif name == "meta" and kind == "documents":
            if self._inner.has_document(index, op["id"]):
                self.inner.update_document_meta(op["id"], dict(op["meta"]), index=index)
        else:
            raise ValueError(f"unknown journal operation {name!r}")

    def _journal(self, kind: str, index: str, lines: list[str]) -> None:
        """Stage journal lines for the commit of the current write (shared directories over the in-memory store;
        Elasticsearch shares its documents and labels itself)."""
        if self._live is not None and self.in_memory:
            self._live.append(kind, index, lines)

    def _journal_documents(self, index: str, ids: list[str]) -> None:
        """Journal the stored state of these documents (after a write: what the duplicate policy kept)."""
        if self._live is None or not self.in_memory:
            return
        docs = self._inner.documents_by_id(ids, index, batch_size=10_000)
        self._journal("documents", index, [document_line(doc, index) for doc in docs])

    def _journal_labels(self, index: str) -> None:
        """Journal all labels of ``index`` anew (labels are few; their journal is rewritten on each change)."""
        if self._live is None or not self.in_memory:
            return
        self._live.forget("labels", index)
        self._journal("labels", index, [label.to_json() for label in self.inner.get_all_labels(index=index)])


__all__ = ["DirectorySync"]
