"""The phrase index of a Haystack 2 :class:`~dphr_haystack.haystack2.PhraseDocumentStore` and its write
transactions, kept in step with the store directory (:mod:`~dphr_haystack.haystack2.store_directory`).

A write holds the directory's writer lock, catches up with what other writers committed, changes the documents in
memory, then commits what it changed in one database transaction (phrase files first, committed by the index
itself); phrases of documents deleted or changed are left out of results, then deleted after the commit. A write
that fails before its commit reads the committed state again. A read first asks the database whether anything was
committed (a cheap check) and applies only what changed. A phrase index directory the store was opened from
(``phrase_index``) is copied before the store's first phrase change, so that directory is never written.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from haystack import Document
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.types import DuplicatePolicy

from .._util.write_errors import write_errors
from ..documents.passages import PassageRule, stale_passage_ids
from ..errors import DphrError, ReadOnlyStoreError
from ..index.phrase_index import PhraseIndex
from .store_directory import COLLECTION, StoreDirectory, body_document, check_folder

logger = logging.getLogger("dphr_haystack.haystack2.document_store")  # the store's logger


class StoreSync:
    """The store's phrase index, its write transactions and its catch-up with other writers.

    Args:
        store: The in-memory store whose ``storage`` holds the documents (changed through
            ``InMemoryDocumentStore``'s own methods).
        rule: The document → passage rule.
        directory: The store directory (None: in memory).
    """

    def __init__(self, store: InMemoryDocumentStore, rule: PassageRule, directory: StoreDirectory | None) -> None:
        self.store = store
        self.rule = rule
        self.directory = directory
        self.index: PhraseIndex | None = None
        self.index_read_only = False  # the index is a directory the store was opened from (never written)
        self.lock = threading.RLock()  # one write, encoding commit or phrase search at a time
        self.depth = 0
        self.touched: dict[str, None] = {}  # ids the write in progress wrote or deleted, in order
        self.dropped = False  # the write deleted every document first
        self.phrases_changed = False
        self.new_folder: Path | None = None  # the phrase folder the write made

    def passage_of(self, doc_id: str) -> dict[str, str] | None:
        """The passage of the stored document ``doc_id`` (None: not stored, or without text)."""
        doc = self.store.storage.get(doc_id)
        return self.rule.passage(doc.id, doc.content, doc.meta) if doc is not None else None

    def touch(self, ids: Iterable[str]) -> None:
        self.touched.update(dict.fromkeys(ids))

    # ----------------------------------------------------------------- a phrase index directory as the source
    def open_index(self, path: Path) -> None:
        """Documents and phrases from a phrase index directory (``dphr index --out``, another store's phrase index):
        each live passage becomes a document (same id, text and meta; its title and document id in the rule's meta
        fields), served by the index, nothing encoded again."""
        index = PhraseIndex.load(path)
        live = set(index.live_passage_ids())
        docs = []
        for record in index.passages:
            if record["id"] in live:
                meta = dict(record.get("meta") or {})
                meta[self.rule.title_field] = record.get("title", "")
                meta[self.rule.document_id_field] = record.get("document_id", record["id"])
                docs.append(Document(id=record["id"], content=record["text"], meta=meta))
        InMemoryDocumentStore.write_documents(self.store, docs, policy=DuplicatePolicy.FAIL)
        self.index, self.index_read_only = index, True

    def writable_index(self) -> PhraseIndex | None:
        """The phrase index, for a phrase write: one the store was opened from is first copied (see the module)."""
        index = self.index
        if index is not None and self.index_read_only:
            self.index, self.index_read_only = index.private_copy(), False
            logger.info("phrases moved from %s to a private copy (the index directory is never written)", index.path)
        return self.index

    def create_index(self, model, faiss_factory: str, dtype: str, key_vectors: int | None = None) -> PhraseIndex:
        """A new phrase index for ``model`` (in a fresh folder of the directory, named by the write's commit)."""
        directory = self.directory
        folder = directory.new_phrase_folder() if directory is not None else None
        self.index = PhraseIndex.create(
            model,
            path=folder,
            faiss_factory=faiss_factory,
            filter_threshold=model.config.filter_threshold,
            dtype=dtype,
            lock_timeout=directory.lock.timeout if directory is not None else None,
            key_vectors=key_vectors,
        )
        self.new_folder, self.phrases_changed = folder, True
        return self.index

    def replace_index(self, index: PhraseIndex) -> None:
        """Serve ``index`` from now on (a store with a directory keeps a copy of it in a fresh folder)."""
        directory = self.directory
        if directory is not None:
            folder = directory.new_phrase_folder()
            index.save(folder)
            index = PhraseIndex.load(folder, verify=False, lock_timeout=directory.lock.timeout)
            directory.retire(self.index.path if self.index is not None else None)
            self.new_folder = folder
        self.index, self.index_read_only, self.phrases_changed = index, False, True

    # ----------------------------------------------------------------- following the directory
    def load(self) -> None:
        """Read the directory whole: the phrase index it names first, then the documents (a document newer than
        its phrases waits for them; phrases of documents changed since are left out)."""
        assert self.directory is not None
        self.index = None
        self._refresh_index()
        docs = self.directory.documents()
        InMemoryDocumentStore.delete_all_documents(self.store)
        InMemoryDocumentStore.write_documents(self.store, docs, policy=DuplicatePolicy.OVERWRITE)
        self._hide_stale(None)

    def follow(self) -> None:
        """Before a read: apply what other writers committed (not inside a write of this store)."""
        if self.directory is not None:
            with self.lock:
                if self.depth == 0 and self.directory.changed():
                    self._catch_up()

    def _catch_up(self) -> None:
        assert self.directory is not None
        refreshed = self._refresh_index()
        changes = self.directory.changes()
        if changes.everything or COLLECTION in changes.collections:
            self.load()
            return
        bodies = changes.documents.get(COLLECTION, {})
        gone = [doc_id for doc_id, doc in bodies.items() if doc is None]
        InMemoryDocumentStore.delete_documents(self.store, gone)
        docs = [doc for doc in bodies.values() if doc is not None]
        InMemoryDocumentStore.write_documents(
            self.store, [body_document(doc) for doc in docs], policy=DuplicatePolicy.OVERWRITE
        )
        self._hide_stale(None if refreshed else bodies)

    def _refresh_index(self) -> bool:
        """Serve the phrase folder the database names, caught up; whether the phrases changed."""
        assert self.directory is not None
        folder = self.directory.phrase_folder()
        if folder is None:
            changed, self.index = self.index is not None, None
            return changed
        if self.index is None or self.index.path is None or self.index.path.absolute() != folder:
            self.index = PhraseIndex.load(folder, lock_timeout=self.directory.lock.timeout)
            self.index_read_only = False
            return True
        return self.index.refresh()

    def _hide_stale(self, ids: Iterable[str] | None) -> None:
        """Leave out of results the phrases of these documents (None: all) that are not their current text."""
        index = self.index
        if index is not None:
            index.hide_passages(
                stale_passage_ids(index, index.live_passage_ids() if ids is None else ids, self.passage_of)
            )

    # ----------------------------------------------------------------- write transactions
    @contextmanager
    def writing(self) -> Iterator[None]:
        """One write (nested calls join it): under the writer lock, caught up, committed at the end or, should it
        fail before its commit, rolled back to the committed state."""
        with self.lock:
            directory = self.directory
            if directory is not None and directory.read_only:
                raise ReadOnlyStoreError(
                    f"{directory.path} is read-only (a read-only mount or directory): cannot write"
                )
            with directory.lock.hold() if directory is not None else nullcontext():
                if self.depth == 0 and directory is not None:  # a failure here changes nothing
                    self._prepare()
                mark = self._phrase_mark()
                self.depth += 1
                try:
                    with write_errors("document store", directory.path if directory is not None else None):
                        try:
                            yield
                        except BaseException:
                            if self.depth == 1 and directory is None:
                                self._commit()  # in memory: what the failed write changed stands
                            raise
                        if self.depth == 1:
                            self._commit()
                except BaseException:
                    if self.depth == 1 and directory is not None:
                        self._roll_back(mark)
                    raise
                finally:
                    self.depth -= 1

    def _prepare(self) -> None:
        """Catch up under the lock and delete phrases left without their document (a killed writer's)."""
        assert self.directory is not None
        if self.index is not None and self.index.path is not None:
            check_folder(self.index.path)  # a link planted in place of the phrase folder is never written through
        if self.index is not None and self.index.hidden_passage_ids():
            self.index = None  # read afresh: what is stale now, under the lock
        if self.directory.changed():
            self._catch_up()
        elif self.index is None:
            self._reload_index()
        self._delete_hidden(strict=True)

    def _reload_index(self) -> None:
        self._refresh_index()
        self._hide_stale(None)

    def _phrase_mark(self) -> tuple[Path | None, int]:
        """Where the phrase index stands: its folder and row count (what a failed write rolls back to)."""
        index = self.index
        return (index.path, len(index.passages)) if index is not None else (None, 0)

    def _roll_back(self, mark: tuple[Path | None, int]) -> None:
        """After a write of a store with a directory failed before its commit: delete the phrases it committed to
        the folder the directory names (best effort), then read the committed state again."""
        assert self.directory is not None
        index, (folder, rows) = self.index, mark
        if index is not None and index.path is not None and index.path == folder and len(index.passages) > rows:
            live = set(index.live_passage_ids())
            try:
                index.delete_passages([p["id"] for p in index.passages[rows:] if p["id"] in live])
            except (DphrError, OSError) as exc:
                logger.warning("phrases of a failed write stay on disk (left out of results): %s", exc)
        self.touched, self.dropped, self.phrases_changed = {}, False, False
        self.directory.retire(self.new_folder)
        self.new_folder = None
        self.load()

    def _commit(self) -> None:
        touched, self.touched = self.touched, {}
        dropped, phrases, folder = self.dropped, self.phrases_changed, self.new_folder
        self.dropped, self.phrases_changed, self.new_folder = False, False, None
        self._hide_stale(touched)
        directory = self.directory
        if directory is not None and (touched or dropped or phrases or folder is not None):
            storage = self.store.storage
            put = [storage[doc_id] for doc_id in touched if doc_id in storage]
            deleted = [] if dropped else [doc_id for doc_id in touched if doc_id not in storage]
            directory.commit(put, deleted, dropped, phrases, folder)
        self._delete_hidden(strict=False)
        if directory is not None:
            directory.remove_retired()

    def _delete_hidden(self, strict: bool) -> None:
        """Delete the phrases left out of results; ``strict=False`` (after a commit) only warns on failure: the
        documents are committed, and the next write deletes them."""
        hidden = self.index.hidden_passage_ids() if self.index is not None else []
        if not hidden:
            return
        if self.directory is not None and self.index is not None and self.index.path is not None:
            check_folder(self.index.path)
        index = self.writable_index()
        assert index is not None
        try:
            index.delete_passages(hidden)
        except (DphrError, OSError) as exc:
            if self.directory is not None:  # what the index committed, its stale phrases left out again
                self.index = None
                self._reload_index()
            if strict:
                raise
            logger.warning("phrases of %d changed documents stay on disk until the next write: %s", len(hidden), exc)


__all__ = ["StoreSync"]
