"""The phrase half of :class:`~dphr_haystack.nodes.PhraseDocumentStore`: one phrase index per Haystack index.

Encoding documents into phrases (``update_embeddings`` with a ``PhraseRetriever``), attaching a phrase index built
elsewhere, keeping phrases in step with their documents, and the phrase reads of a retrieval. Mixed into the store,
whose locks, documents and settings it uses (declared below).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from haystack.document_stores import BaseDocumentStore
from haystack.schema import Document

from .._util.memory import release_free_memory
from ..corpus import Passage
from ..documents.encoding import PhraseEncoding
from ..documents.index_settings import warn_if_index_keeps_others
from ..documents.passages import PassageRule, encoded_as, passage_mask, record_passage
from ..documents.results import hit_passage_id, pair_hits
from ..documents.retrieval import check_phrase_model, search_phrase_index, warm_phrase_index
from ..encode.dump import chunked, encode_shard
from ..errors import InvalidParameterError, ModelMismatchError
from ..index.codec import VectorCodec
from ..index.phrase_index import PhraseIndex
from ..index.shards import PhraseShard
from ..model.cache import model_fingerprint
from ..params import check_param
from ..search import Hit
from ..search_options import DEFAULT_SEARCH_OPTIONS, PhraseSearchOptions
from ._rwlock import ReadWriteLock
from .live import StoreDirectory, store_read, store_write
from .stores import InnerStore

logger = logging.getLogger("dphr_haystack.nodes.document_store")  # the store's logger, as before the split


@dataclass
class PhraseIndexingStats:
    """What :meth:`PhraseDocumentStore.update_embeddings` did."""

    encoded: int = 0
    skipped_existing: int = 0
    skipped_non_text: int = 0


class PhraseIndexing:
    """Phrase indexes beside the documents of a :class:`~dphr_haystack.nodes.PhraseDocumentStore`."""

    # Provided by PhraseDocumentStore.
    index: str
    passage_rule: PassageRule
    title_field: str
    document_id_field: str
    faiss_factory: str
    phrase_dtype: str
    phrase_key_vectors: int | None
    progress_bar: bool
    inner: BaseDocumentStore
    _inner: InnerStore
    _lock: ReadWriteLock
    _indexing: ReadWriteLock
    _phrase_indexes: dict[str, PhraseIndex]
    _snapshots: set[Path]
    _read_only: set[Path]
    _live: StoreDirectory | None
    _staged: list[tuple[Any, PhraseShard]]
    _staging: threading.Lock
    lock_timeout: float

    def _follow(self) -> None: ...

    def _transaction(self) -> AbstractContextManager[None]: ...

    def _touch(self, index: str, ids: Iterable[str]) -> None: ...

    def reading(self) -> AbstractContextManager[None]:
        """The store's read lock, for a multi-step read such as a retrieval (see the class docstring); a shared
        store first catches up with other writers' commits."""
        self._follow()
        return self._lock.read()

    def get_phrase_index(self, index: str | None = None) -> PhraseIndex | None:
        """The phrase index of a Haystack index, or None before the first :meth:`update_embeddings`."""
        return self._phrase_indexes.get(index or self.index)

    @store_read
    def get_phrase_count(self, index: str | None = None) -> int:
        """Number of phrase vectors (the start/end token vectors kept by the filter) of the live documents."""
        phrase_index = self.get_phrase_index(index)
        return 0 if phrase_index is None else phrase_index.num_live_vectors

    @store_read
    def get_embedding_count(self, filters: dict[str, Any] | None = None, index: str | None = None) -> int:
        """Number of documents with an embedding, as Haystack's stores count them (documents, not vectors): those with
        phrase vectors (``PhraseRetriever``) or a dense embedding (``EmbeddingRetriever``), among the documents of
        ``index`` passing ``filters``. The phrase vectors themselves: :meth:`get_phrase_count`."""
        return len(self._embedded_ids(index or self.index, filters))

    def _embedded_ids(self, index: str, filters: dict[str, Any] | None) -> set[str]:
        """Ids of the documents of ``index`` passing ``filters`` that have phrases or a dense embedding."""
        ids = self._inner.embedded_ids(index, filters)
        phrase_index = self._phrase_indexes.get(index)
        if phrase_index is not None and phrase_index.num_live_passages:
            ids |= set(phrase_index.live_passage_ids()) & self._inner.matching_ids(index, filters)
        return ids

    @store_read
    def get_phrase_document_count(self, index: str | None = None) -> int:
        """Number of live (not deleted) documents with phrases."""
        phrase_index = self.get_phrase_index(index)
        return 0 if phrase_index is None else phrase_index.num_live_passages

    @store_read
    def phrase_mask(self, filters: dict[str, Any] | None, index: str | None = None) -> np.ndarray | None:
        """Boolean mask over phrase-index passage rows of the documents passing ``filters`` (None: no filter)."""
        if not filters:
            return None
        phrase_index = self.get_phrase_index(index)
        if phrase_index is None:
            return None
        return passage_mask(phrase_index, self.matching_ids(filters, index))

    def _to_passage(self, doc: Document) -> dict[str, str] | None:
        """The phrase-index passage of a document (:class:`~dphr_haystack.documents.passages.PassageRule`), or None
        for non-text, empty or invalid (lone surrogate) text."""
        if doc.content_type != "text":
            return None
        return self.passage_rule.passage(doc.id, doc.content, doc.meta)

    def search_phrases(
        self,
        model: Any,
        queries: list[str],
        options: PhraseSearchOptions = DEFAULT_SEARCH_OPTIONS,
        filters: dict[str, Any] | list[dict[str, Any] | None] | None = None,
        index: str | None = None,
        model_name: str = "",
        **option_values: Any,
    ) -> list[list[tuple[Hit, Document]]]:
        """Phrase search (the store scores, its retriever only asks): per query, the hits whose passage is a stored
        document of ``index``, each with that document. ``options``: the search options
        (:class:`~dphr_haystack.search_options.PhraseSearchOptions`), with any given by name in ``option_values`` in
        their place. ``filters``: one for all queries or one per query. Holds the read lock throughout: writes wait
        until the phrase index and the documents are read.

        Raises:
            ModelMismatchError: The phrase index of ``index`` was built with another phrase encoder than ``model``.
        """
        options = options.replaced(**option_values)
        with self.reading():
            index = index or self.index
            phrase_index = self.get_phrase_index(index)
            if phrase_index is None or phrase_index.num_live_passages == 0:
                if phrase_index is None and self.index_exists(index) and self.get_document_count(index=index):
                    logger.warning(
                        "index %r has documents but no phrases: call document_store.update_embeddings(retriever)",
                        index,
                    )
                return [[] for _ in queries]
            check_phrase_model(
                phrase_index,
                model,
                f"the phrase index of {index!r} was built with another phrase encoder than {model_name!r}",
            )
            if isinstance(filters, list):
                if len(filters) != len(queries):
                    raise InvalidParameterError(f"{len(filters)} filters for {len(queries)} queries")
                masks: Any = [self.phrase_mask(f, index) for f in filters]
            else:
                masks = self.phrase_mask(filters, index)
            hits = search_phrase_index(phrase_index, model, queries, options, masks)
            wanted = sorted({hit_passage_id(hit) for per_query in hits for hit in per_query})
            stored = {doc.id: doc for doc in self.get_documents_by_id(wanted, index=index)}
            return [pair_hits(per_query, stored) for per_query in hits]

    def warm_up(
        self, model: Any, options: PhraseSearchOptions = DEFAULT_SEARCH_OPTIONS, index: str | None = None
    ) -> None:
        """Read now what the first phrase search of ``index`` would otherwise wait for
        (:meth:`PhraseSearcher.warm_up <dphr_haystack.search.PhraseSearcher.warm_up>` with ``options``: seconds at
        200,000 passages)."""
        with self.reading():
            phrase_index = self.get_phrase_index(index or self.index)
            if phrase_index is not None and phrase_index.num_live_passages:
                warm_phrase_index(phrase_index, model, options)

    def update_embeddings(
        self,
        retriever,
        index: str | None = None,
        filters: dict[str, Any] | None = None,
        update_existing_embeddings: bool | None = None,
        batch_size: int = 10_000,
    ) -> PhraseIndexingStats | None:
        """Encode documents into the phrase index (``PhraseRetriever``) or into dense embeddings (other retrievers).

        With a ``PhraseRetriever``, only documents not yet in the phrase index are encoded unless
        ``update_existing_embeddings=True``; passages are committed every ``min(batch_size, 512)`` documents, so
        an interrupted run resumes where it stopped. Non-text and empty documents are skipped and counted.
        Any other retriever goes to the inner store's ``update_embeddings`` (Haystack default: update all).
        """
        index = index or self.index
        if not isinstance(retriever, PhraseEncoding):
            update = True if update_existing_embeddings is None else update_existing_embeddings
            with self._lock.write(), self._transaction():
                exists = self._inner.index_exists(index)
                kept = set() if update or not exists else self._inner.embedded_ids(index, filters)
                shown = self.inner.return_embedding
                if self._inner.in_memory and not update:
                    # Haystack's in-memory store takes the embeddings off its working copies when return_embedding
                    # is off, and would then embed every document again.
                    self.inner.return_embedding = True
                try:
                    result = self.inner.update_embeddings(
                        retriever,
                        index=index,
                        filters=filters,
                        update_existing_embeddings=update,
                        batch_size=batch_size,
                    )
                finally:
                    self.inner.return_embedding = shown
                if exists:  # the documents whose embedding changed (a reused store commits only those)
                    docs = self._inner.documents(index, filters, return_embedding=False)
                    self._touch(index, [doc.id for doc in docs if doc.id not in kept])
                return result
        batch_size = check_param("batch_size", batch_size)
        with self._indexing.write():
            return self._update_phrases(retriever, index, filters, bool(update_existing_embeddings), batch_size)

    def _update_phrases(
        self, retriever, index: str, filters: dict[str, Any] | None, update: bool, batch_size: int
    ) -> PhraseIndexingStats:
        """Encode the documents that need phrases, a chunk at a time; each chunk commits under the write lock."""
        from tqdm.auto import tqdm

        model = retriever.phrase_model
        stats = PhraseIndexingStats()
        with self._lock.write(), self._transaction():
            phrase_index = self._phrase_index_for(retriever, index)
            pending: list[dict[str, str]] = []
            docs: Iterable[Document] = []
            if self._inner.index_exists(index):
                docs = self.get_all_documents_generator(index=index, filters=filters, return_embedding=False)
            for doc in docs:
                if not update and phrase_index.passage_row(doc.id) is not None:
                    stats.skipped_existing += 1
                    continue
                passage = self._to_passage(doc)
                if passage is None:
                    stats.skipped_non_text += 1
                    continue
                pending.append(passage)
        if stats.skipped_non_text:
            logger.warning(
                "update_embeddings: skipped %d non-text, empty or invalid documents", stats.skipped_non_text
            )
        bar = tqdm(
            total=len(pending), desc="indexing phrases", unit="doc", disable=not (self.progress_bar and pending)
        )
        for chunk in chunked(pending, min(batch_size, 512)):
            calibrated = phrase_index.manifest.get("codec_calibrated", True)  # int8: add_shard calibrates on float32
            codec = phrase_index.codec if calibrated else VectorCodec("float32")
            shard = encode_shard(
                model, [Passage(**p) for p in chunk], codec, phrase_index.filter_threshold, retriever.batch_size
            )  # outside the lock: searches go on meanwhile
            with self._lock.write(), self._transaction():
                # The index object may have been swapped meanwhile (a private copy, the copy save() wrote, another
                # process's delete_index).
                current_index = self._phrase_indexes.get(index)
                if current_index is None or current_index.model_fingerprint != model_fingerprint(model):
                    logger.warning("update_embeddings: index %r was deleted or replaced meanwhile; stopping", index)
                    break
                phrase_index = current_index
                current = {
                    d.id: self._to_passage(d) for d in self.get_documents_by_id([p["id"] for p in chunk], index=index)
                }
                keep = [i for i, p in enumerate(chunk) if current.get(p["id"]) == p]  # not deleted or changed since
                hidden = phrase_index.hidden_passage_ids()
                if hidden:  # phrases of a changed text, left out since load: deleted before new ones are added
                    phrase_index = self._private(index)
                    phrase_index.delete_passages(hidden)
                if not update:
                    keep = [i for i in keep if phrase_index.passage_row(chunk[i]["id"]) is None]
                if keep:
                    self._replace_phrases(index, shard, keep, [chunk[i]["id"] for i in keep] if update else [])
                stats.encoded += len(keep)
            del shard
            release_free_memory()  # flat peak memory however many chunks (see dphr_haystack/_memory.py)
            bar.update(len(chunk))
        bar.close()
        logger.info("update_embeddings(%r): %s", index, stats)
        return stats

    def _replace_phrases(self, index: str, shard: PhraseShard, keep: list[int], replaced: list[str]) -> None:
        """Add the passages ``keep`` of ``shard``, deleting the phrases of ``replaced`` in the same commit (a run
        stopped at any point leaves each document its old phrases or its new ones)."""
        phrase_index = self._private(index, adding=not replaced)
        with phrase_index.writing():
            if replaced:
                phrase_index.delete_passages(replaced, commit=False)
            phrase_index.append_shard(shard.subset(keep))

    def _phrase_index_for(self, retriever, index: str) -> PhraseIndex:
        """The phrase index of ``index`` (created for the retriever's model when missing); the model must match."""
        model = retriever.phrase_model
        phrase_index = self._phrase_indexes.get(index)
        if phrase_index is None:
            phrase_index = PhraseIndex.create(
                model,
                path=self._new_phrase_folder(),
                faiss_factory=self.faiss_factory,
                dtype=self.phrase_dtype,
                filter_threshold=retriever.filter_threshold,
                model_path=retriever.model,
                lock_timeout=self.lock_timeout,
                key_vectors=self.phrase_key_vectors,
            )
            self._phrase_indexes[index] = phrase_index
        elif phrase_index.model_fingerprint != model_fingerprint(model):
            raise ModelMismatchError(
                f"the phrase index of {index!r} was built with another phrase encoder than {retriever.model!r}; "
                f"delete_index({index!r}) and re-index, or use the original model"
            )
        else:
            if phrase_index.filter_threshold != retriever.filter_threshold:
                logger.warning(
                    "phrase index %r keeps filter_threshold=%s (the retriever asks for %s)",
                    index,
                    phrase_index.filter_threshold,
                    retriever.filter_threshold,
                )
            asked = {"phrase_dtype": self.phrase_dtype, "phrase_key_vectors": self.phrase_key_vectors}
            warn_if_index_keeps_others(phrase_index, asked, repr(index))
        return phrase_index

    def stage_phrases(self, documents: list[Document], retriever) -> int:
        """Encode the phrases of documents about to be written (an indexing pipeline's ``PhraseRetriever``); the
        store's next :meth:`write_documents` of the same documents, with the same text, commits them in the same
        write. Returns the number of documents encoded (non-text and empty ones are skipped)."""
        from tqdm.auto import tqdm

        passages = [p for p in (self._to_passage(doc) for doc in documents) if p is not None]
        show = bool(self.progress_bar and passages)
        bar = tqdm(total=len(passages), desc="encoding phrases", unit="doc", disable=not show)
        for chunk in chunked(passages, 512):
            shard = encode_shard(
                retriever.phrase_model,
                [Passage(**p) for p in chunk],
                VectorCodec("float32"),
                retriever.filter_threshold,
                retriever.batch_size,
            )
            with self._staging:
                self._staged.append((retriever, shard))
            bar.update(len(chunk))
        bar.close()
        return len(passages)

    def _commit_staged(self, index: str, written: list[str]) -> None:
        """Add the staged phrases of the documents just written to ``index`` (store write lock held)."""
        with self._staging:
            staged, self._staged = self._staged, []
        wanted = set(written)
        left = []
        for retriever, shard in staged:
            mine = [i for i, p in enumerate(shard.passages) if p["id"] in wanted]
            others = [i for i, p in enumerate(shard.passages) if p["id"] not in wanted]
            if others:
                left.append((retriever, shard.subset(others)))
            if not mine:
                continue
            phrase_index = self._phrase_index_for(retriever, index)
            ids = [shard.passages[i]["id"] for i in mine]  # this shard's documents only: linear in the upload
            current = {d.id: self._to_passage(d) for d in self._inner.documents_by_id(ids, index)}
            keep = [
                i
                for i in mine
                if current.get(shard.passages[i]["id"]) == record_passage(shard.passages[i])
                and phrase_index.passage_row(shard.passages[i]["id"]) is None
            ]
            if keep:
                self._private(index, adding=True).add_shard(shard.subset(keep))
        with self._staging:
            self._staged = left[-64:] + self._staged  # shards of documents not written (yet): a bounded few

    def index_documents(
        self,
        documents: list[dict] | list[Document],
        retriever,
        index: str | None = None,
        duplicate_documents: str | None = None,
        batch_size: int = 10_000,
    ) -> PhraseIndexingStats | None:
        """One call for scripts: :meth:`write_documents`, then :meth:`update_embeddings` with ``retriever``."""
        self.write_documents(documents, index=index, duplicate_documents=duplicate_documents, batch_size=batch_size)
        return self.update_embeddings(retriever, index=index, batch_size=batch_size)

    @store_write
    def attach_phrase_index(self, phrase_index: PhraseIndex, index: str | None = None) -> None:
        """Serve ``index`` with a phrase index built elsewhere (e.g. by ``dphr index`` over the same corpus).

        Raises:
            InvalidParameterError: A passage of the phrase index is not a document of ``index``.
        """
        index = index or self.index
        doc_ids = {doc.id for doc in self.get_all_documents_generator(index=index, return_embedding=False)}
        missing = [pid for pid in phrase_index.live_passage_ids() if pid not in doc_ids]
        if missing:
            raise InvalidParameterError(
                f"{len(missing)} passages of the phrase index are not documents of "
                f"{index!r}, e.g. {missing[:3]}; write the same corpus first"
            )
        folder = self._new_phrase_folder()
        if folder is not None:  # a shared store holds its phrase indexes in its directory
            phrase_index.save(folder)
            phrase_index = PhraseIndex.load(folder, verify=False, lock_timeout=self.lock_timeout)
        self._phrase_indexes[index] = phrase_index

    def _new_phrase_folder(self) -> Path | None:
        """A fresh ``phrases-N`` folder of the shared directory for a new phrase index (None: not shared)."""
        return None if self._live is None else self._live.new_folder()

    def _phrases_outdated(self, phrase_index: PhraseIndex, doc: Document) -> bool:
        """True when ``doc`` has phrases encoded from another text, title or document id."""
        return phrase_index.passage_row(doc.id) is not None and not encoded_as(
            phrase_index, doc.id, self._to_passage(doc)
        )

    def _drop_phrases(self, index: str, ids: list[str], written: bool) -> None:
        """Remove the phrases of documents a write deletes or changes; called before (``written=False``) and after
        the documents change. A shared store leaves them out of results once the documents changed and deletes
        them after committing the documents (:meth:`_transaction`): a kill in between leaves phrases that the next
        open leaves out and the next write deletes, never a stored document without its phrases. Other stores
        delete them first (a failing write leaves documents to encode again, never phrases of a gone text)."""
        phrase_index = self._phrase_indexes.get(index)
        if phrase_index is None or not ids or written != (self._live is not None):
            return
        if self._live is not None:
            phrase_index.hide_passages(ids)
        else:
            self._private(index).delete_passages(ids)

    def _private(self, index: str, adding: bool = False) -> PhraseIndex:
        """The phrase index of ``index`` for a phrase write, first moved to a private copy when it lives in a saved
        directory (a deletion, not an ``adding`` write) or is a phrase index directory the store was opened from
        (``phrase_index``: never written).

        Phrase additions to a saved directory are committed in place (they only extend the saved index, and load()
        drops those whose document the directory does not hold), but a deletion would remove phrases of documents
        the saved directory still holds; so the saved directory only loses phrases through save().
        """
        phrase_index = self._phrase_indexes[index]
        where = phrase_index.path.resolve() if phrase_index.path is not None else None
        if where is None or not (where in self._read_only or (where in self._snapshots and not adding)):
            return phrase_index
        private = phrase_index.private_copy()
        self._phrase_indexes[index] = private
        logger.info("phrase index %r moved from %s to a private copy until the next save()", index, phrase_index.path)
        return private

    def _hide_orphan_phrases(self, index: str, phrase_index: PhraseIndex, ids: Iterable[str] | None = None) -> None:
        """Leave out of results the phrases whose document is missing or changed (a run killed between a phrase
        commit and its save or commit; another writer's change), without writing: the next write deletes them.
        ``ids``: only those documents (None: every phrase)."""
        docs = self._inner.stored_documents(index)
        if docs is None:  # Elasticsearch: the retriever skips hits of missing documents
            return
        orphans = []
        for pid in phrase_index.live_passage_ids() if ids is None else ids:
            row = phrase_index.passage_row(pid)
            if row is None:
                continue
            doc = docs.get(pid)
            record = phrase_index.passages[row]
            passage = self._to_passage(doc) if isinstance(doc, Document) else None
            if passage is None or (passage["text"], passage["title"]) != (record["text"], record.get("title", "")):
                orphans.append(pid)
        if orphans:
            logger.warning(
                "phrase index %r: leaving out phrases of %d documents the store does not hold as encoded, "
                "e.g. %s (left by a run stopped before it saved or committed its documents)",
                index,
                len(orphans),
                orphans[:3],
            )
            phrase_index.hide_passages(orphans)
