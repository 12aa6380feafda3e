"""The directory and the phrase sources of a Haystack 2 :class:`~dphr_haystack.haystack2.PhraseDocumentStore`
(mixed into it): opening a store directory and catching up with other writers' commits, the write transaction
(documents committed first, stale phrases deleted after), and a phrase index directory the store was opened from
(``phrase_index``), copied before the store's first phrase change so that the directory is never written."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from haystack import Document
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.types import DuplicatePolicy

from .._util.write_errors import write_errors
from ..documents.passages import stale_passage_ids
from ..errors import DphrError
from ..index.phrase_index import PhraseIndex
from .store_directory import StoreDirectory

logger = logging.getLogger("dphr_haystack.haystack2.document_store")  # the store's logger, as before the split


class StoreSync:
    """Directory catch-up, write transactions and read-only phrase sources of the store (mixed into it)."""

    # Provided by PhraseDocumentStore.
    path: str | None
    title_field: str
    document_id_field: str
    storage: dict[str, Document]
    _lock: threading.RLock
    _depth: int
    _touched: set[str]
    _dirty: bool
    _phrase_index: PhraseIndex | None
    _read_only: bool  # the phrase index is a directory the store was opened from (never written)
    _directory: StoreDirectory | None

    def _stored_passage(self, doc_id: str) -> dict[str, str] | None: ...

    # ----------------------------------------------------------------- a phrase index directory as the source
    def _open_index(self, path: Path) -> None:
        """Documents and phrases from a phrase index directory (``dphr index --out``, another store's phrase index):
        each live passage becomes a document (same id, text and meta; its title and document id in the
        ``title_field`` / ``document_id_field`` meta fields), served by the index, nothing encoded again."""
        index = PhraseIndex.load(path)
        live = set(index.live_passage_ids())
        docs = []
        for record in index.passages:
            if record["id"] in live:
                meta = dict(record.get("meta") or {})
                meta[self.title_field] = record.get("title", "")
                meta[self.document_id_field] = record.get("document_id", record["id"])
                docs.append(Document(id=record["id"], content=record["text"], meta=meta))
        InMemoryDocumentStore.write_documents(self, docs, policy=DuplicatePolicy.FAIL)  # type: ignore[arg-type]
        self._phrase_index, self._read_only = index, True

    def _writable_index(self) -> PhraseIndex | None:
        """The phrase index, for a phrase write: one the store was opened from is first copied (see the module)."""
        index = self._phrase_index
        if index is not None and self._read_only:
            self._phrase_index, self._read_only = index.private_copy(), False
            logger.info("phrases moved from %s to a private copy (the index directory is never written)", index.path)
        return self._phrase_index

    # ----------------------------------------------------------------- the store directory
    def _open(self) -> None:
        """Read the directory (created when missing); a directory opening would damage is refused untouched."""
        directory = self._directory
        assert directory is not None
        directory.check()
        directory.path.mkdir(parents=True, exist_ok=True)
        self._catch_up()

    def _catch_up(self) -> None:
        """Read what other writers committed (the documents file when replaced, the phrase index's new commits);
        phrases whose document is gone or changed are left out of results until a write deletes them."""
        directory = self._directory
        if directory is None:
            return
        # Phrases before documents: a writer commits documents before their phrases, so every phrase read here
        # belongs to a document read after it, or is truly stale (its document deleted or changed).
        changed = False
        if self._phrase_index is None:
            if directory.has_phrases():
                self._phrase_index = PhraseIndex.load(directory.phrases_dir)
                changed = True
        else:
            directory.check_phrases_dir()
            changed = self._phrase_index.refresh()
        if directory.changed():
            docs = [Document.from_dict(data) for data in directory.read_documents()]
            InMemoryDocumentStore.delete_all_documents(self)
            InMemoryDocumentStore.write_documents(self, docs, policy=DuplicatePolicy.OVERWRITE)
            changed = True
        if changed and self._phrase_index is not None:
            index = self._phrase_index
            index.hide_passages(stale_passage_ids(index, index.live_passage_ids(), self._stored_passage))

    def _follow(self) -> None:
        """Before a read: catch up with other writers' commits (not inside a write of this store)."""
        if self._directory is not None:
            with self._lock:
                if self._depth == 0:
                    self._catch_up()

    @contextmanager
    def _mutating(self) -> Iterator[None]:
        """One write: under the directory's writer lock, catch up, change, then commit: the documents file first,
        then the deletion of phrases whose document is gone or changed (a kill in between leaves phrases the next
        open leaves out and the next write deletes, never a stored document without its phrases)."""
        with self._lock:
            directory = self._directory
            with directory.lock.hold() if directory is not None else nullcontext():
                if self._depth == 0 and directory is not None:  # a failure here changes nothing
                    if self._phrase_index is not None and self._phrase_index.hidden_passage_ids():
                        self._phrase_index = None  # read afresh: what is stale now, under the lock
                    self._catch_up()
                    directory.remove_leftovers()
                    self._delete_hidden_phrases(strict=True)  # a killed writer's phrases without documents
                self._depth += 1
                try:
                    with write_errors("document store", self.path):  # a full disk says so, as a typed error
                        try:
                            yield
                        except BaseException:
                            if self._depth == 1 and directory is None:
                                self._commit()  # in memory: what the failed write changed stands
                            raise
                        if self._depth == 1:
                            self._commit()
                except BaseException:
                    if self._depth == 1 and directory is not None:
                        self._roll_back()  # nothing of the write was committed: back to the directory's state
                    raise
                finally:
                    self._depth -= 1

    def _roll_back(self) -> None:
        """After a write of a store with a ``path`` failed before its commit: read the committed state afresh."""
        assert self._directory is not None
        self._touched, self._dirty = set(), False
        self._phrase_index = None  # reloaded: its own commits only
        self._directory.stamp = ("rolled back",)  # type: ignore[assignment]  # the documents file is read again
        self._catch_up()

    def _commit(self) -> None:
        touched, self._touched = self._touched, set()
        dirty, self._dirty = self._dirty or bool(touched), False
        index = self._phrase_index
        if index is not None and touched:
            index.hide_passages(stale_passage_ids(index, touched, self._stored_passage))
        if dirty:
            self._persist()
        self._delete_hidden_phrases(strict=False)

    def _delete_hidden_phrases(self, strict: bool) -> None:
        """Delete the phrases left out of results; ``strict=False`` (after a commit) only warns on failure: the
        documents are committed, and the next write deletes them."""
        index = self._phrase_index
        hidden = index.hidden_passage_ids() if index is not None else []
        if not hidden:
            return
        if self._directory is not None:
            self._directory.check_phrases_dir()
        index = self._writable_index()
        assert index is not None
        try:
            index.delete_passages(hidden)
        except (DphrError, OSError) as exc:
            if self._directory is not None:  # what the index committed, its stale phrases left out again
                self._phrase_index = None
                self._catch_up()
            if strict:
                raise
            logger.warning("phrases of %d changed documents stay on disk until the next write: %s", len(hidden), exc)

    def _persist(self) -> None:
        if self._directory is not None:
            self._directory.write_documents(
                json.dumps(doc.to_dict(flatten=False), ensure_ascii=False) for doc in self.storage.values()
            )


__all__ = ["StoreSync"]
