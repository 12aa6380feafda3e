"""The inner document stores behind :class:`~dphr_haystack.nodes.PhraseDocumentStore`.

Documents, labels and BM25 live in a Haystack store. :class:`InnerStore` forwards to it unchanged (Elasticsearch:
indexes exist on demand, filters and BM25 run in Elasticsearch). :class:`InMemoryInnerStore` fills the gaps of
Haystack's ``InMemoryDocumentStore``: filters it ignores, reads of indexes that do not exist, BM25 over an index
without tokens, and writes that must be all or nothing. Both check every filter they are given first
(:func:`~dphr_haystack.documents.filters.check_legacy_filters`): an operator Haystack's parser does not know would
otherwise select every document.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from haystack.document_stores import BaseDocumentStore, InMemoryDocumentStore
from haystack.errors import DocumentStoreError
from haystack.schema import Document

from ..errors import InvalidParameterError
from ._filters import checked_filters, compile_filters, matches
from ._rwlock import ReadWriteLock
from .live import store_read

Filters = dict[str, Any] | None


class UnknownIndexError(DocumentStoreError, InvalidParameterError):
    """A read named a document index the store does not have (Haystack's DocumentStoreError, as Elasticsearch raises;
    a bad parameter to the REST API: 404)."""


class InnerStore:
    """A Haystack document store used as it is (Elasticsearch)."""

    in_memory = False

    def __init__(self, store: BaseDocumentStore, default_index: str) -> None:
        self.store = store
        self.default_index = default_index

    def index_exists(self, index: str) -> bool:
        """Whether ``index`` may hold documents (Elasticsearch indexes exist on demand)."""
        return True

    def check_index(self, index: str) -> None:
        """Raise DocumentStoreError when reading ``index`` must fail (never here: Elasticsearch decides)."""

    def has_document(self, index: str, id: str) -> bool:
        """False when ``id`` is known not to be in ``index`` (here: the store decides, so always True)."""
        return True

    def has_documents(self, index: str) -> bool:
        """False when ``index`` is known to hold no document (here: the store decides, so always True)."""
        return True

    def stored_documents(self, index: str) -> dict[str, Any] | None:
        """The documents of ``index`` by id when they are at hand in this process, else None."""
        return None

    def saved_collections(self) -> list[tuple[str, dict[str, Any]]]:
        """``(index, {id: document or label})`` that :meth:`PhraseDocumentStore.save` writes (Elasticsearch keeps its
        own)."""
        return []

    def matching_ids(self, index: str, filters: Filters) -> set[str]:
        """Ids of the documents of ``index`` that pass ``filters``."""
        docs = self.store.get_all_documents_generator(
            index=index, filters=checked_filters(filters), return_embedding=False
        )
        return {d.id for d in docs}

    def documents(
        self, index: str, filters: Filters, return_embedding: bool | None, **options: Any
    ) -> Iterable[Document]:
        """The documents of ``index`` passing ``filters`` (lazily, as the store streams them)."""
        return self.store.get_all_documents_generator(
            index=index, filters=checked_filters(filters), return_embedding=return_embedding, **options
        )

    def documents_by_id(self, ids: list[str], index: str, **options: Any) -> list[Document]:
        """Documents with these ids."""
        return self.store.get_documents_by_id(ids, index=index, **options)

    def document_count(self, index: str, filters: Filters, without_embedding: bool, **options: Any) -> int:
        """Number of documents of ``index`` passing ``filters`` (only those without a dense embedding, if asked)."""
        return self.store.get_document_count(
            filters=checked_filters(filters),
            index=index,
            only_documents_without_embedding=without_embedding,
            **options,
        )

    def write(self, index: str, call: Callable[[], object]) -> None:
        """Run a write on the store."""
        call()

    def query(
        self, index: str, query: str | None, filters: Filters, top_k: int, scale_score: bool, **options: Any
    ) -> list[Document]:
        """BM25 in the store (``options``: Elasticsearch's custom_query, headers, all_terms_must_match)."""
        filters = checked_filters(filters)
        return self.store.query(query, filters=filters, top_k=top_k, index=index, scale_score=scale_score, **options)

    def query_by_embedding(self, query_emb: Any, filters: Filters, **options: Any) -> list[Document]:
        """Dense search in the store, filters checked first."""
        return self.store.query_by_embedding(query_emb, filters=checked_filters(filters), **options)

    def embedded_ids(self, index: str, filters: Filters) -> set[str]:
        """Ids of the documents of ``index`` passing ``filters`` that have a dense embedding."""
        docs = self.store.get_all_documents_generator(
            index=index, filters=checked_filters(filters), return_embedding=True
        )
        return {d.id for d in docs if d.embedding is not None}

    def get_all_labels(self, filters: Filters = None, **options: Any) -> list:
        """Labels of the store, filters checked first."""
        return self.store.get_all_labels(filters=checked_filters(filters), **options)

    def delete_labels(self, filters: Filters = None, **options: Any) -> None:
        """Delete labels, filters checked first (an unknown operator would otherwise select every label)."""
        self.store.delete_labels(filters=checked_filters(filters), **options)


class InMemoryInnerStore(InnerStore):
    """Haystack's ``InMemoryDocumentStore``, with filters, index checks, BM25 gaps and atomic writes filled in."""

    in_memory = True
    store: InMemoryDocumentStore

    def __init__(self, store: InMemoryDocumentStore, default_index: str) -> None:
        super().__init__(store, default_index)
        # Haystack's in-memory BM25 query writes each hit's score into the stored Document before copying it, so
        # two concurrent queries could swap scores: they take this mutex (its write lock) in turn.
        self._bm25_mutex = ReadWriteLock()
        self._bm25_stale: set[str] = set()  # indexes whose BM25 representation is rebuilt at their next query

    def _docs(self, index: str) -> dict[str, Any]:
        return self.store.indexes.get(index, {})

    def index_exists(self, index: str) -> bool:
        """The default index always exists; another one once something was written to it."""
        return index == self.default_index or index in self.store.indexes

    def check_index(self, index: str) -> None:
        """Like Elasticsearch, reading a non-default document index that does not exist raises."""
        if not self.index_exists(index):
            raise UnknownIndexError(f"index {index!r} does not exist")

    def has_document(self, index: str, id: str) -> bool:
        return isinstance(self._docs(index).get(id), Document)

    def has_documents(self, index: str) -> bool:
        return any(isinstance(d, Document) for d in self._docs(index).values())

    def stored_documents(self, index: str) -> dict[str, Any] | None:
        return self._docs(index)

    def saved_collections(self) -> list[tuple[str, dict[str, Any]]]:
        return sorted(self.store.indexes.items())

    def matching_ids(self, index: str, filters: Filters) -> set[str]:
        clause = compile_filters(filters)
        return {d.id for d in self._docs(index).values() if isinstance(d, Document) and matches(clause, d.meta)}

    def embedded_ids(self, index: str, filters: Filters) -> set[str]:
        self.check_index(index)
        clause = compile_filters(filters)
        return {
            d.id
            for d in self._docs(index).values()
            if isinstance(d, Document) and d.embedding is not None and matches(clause, d.meta)
        }

    def documents(self, index: str, filters: Filters, return_embedding: bool | None, **options: Any) -> list[Document]:
        """A snapshot (copies) of the documents of ``index`` passing ``filters``."""
        self.check_index(index)
        clause = compile_filters(filters)
        docs = [d for d in self._docs(index).values() if isinstance(d, Document) and matches(clause, d.meta)]
        docs = copy.deepcopy(docs)
        if not (self.store.return_embedding if return_embedding is None else return_embedding):
            for doc in docs:
                doc.embedding = None
        return docs

    def documents_by_id(self, ids: list[str], index: str, **options: Any) -> list[Document]:
        """Documents with these ids, in the order given; unknown ids are left out."""
        stored = self._docs(index)
        return [copy.deepcopy(stored[i]) for i in ids if isinstance(stored.get(i), Document)]

    def document_count(self, index: str, filters: Filters, without_embedding: bool, **options: Any) -> int:
        self.check_index(index)
        clause = compile_filters(filters)
        return sum(
            1
            for d in self._docs(index).values()
            if isinstance(d, Document)
            and matches(clause, d.meta)
            and not (without_embedding and d.embedding is not None)
        )

    def write(self, index: str, call: Callable[[], object]) -> None:
        """Run a write on the store; a failure restores the index as it was.

        Haystack's in-memory store rebuilds BM25 over the whole index on every write (O(corpus) per write, so
        ingesting in batches grows quadratically) and stores documents before the rebuild, so a failing rebuild would
        leave them half written. Here a write only marks the index's BM25 stale; its next BM25 query rebuilds it once.
        """
        indexes = self.store.indexes
        before = dict(indexes[index]) if index in indexes else None
        bm25, self.store.use_bm25 = self.store.use_bm25, False
        try:
            call()
        except BaseException:
            if before is None:
                indexes.pop(index, None)
            else:
                indexes[index] = before
            raise
        finally:
            self.store.use_bm25 = bm25
            if bm25:
                self._bm25_stale.add(index)

    def _fresh_bm25(self, index: str) -> None:
        """Rebuild the BM25 representation of ``index`` when a write changed it since the last query. A corpus with no
        token at all (only empty or non-text documents) makes rank_bm25 divide by zero: the index then simply has no
        BM25 representation (``query`` returns nothing) until it has text."""
        if index not in self._bm25_stale:
            return
        with self._bm25_mutex.write():
            if index not in self._bm25_stale:
                return
            if index in self.store.indexes:
                try:
                    self.store.update_bm25(index=index)
                except ZeroDivisionError:
                    self.store.bm25.pop(index, None)
            else:
                self.store.bm25.pop(index, None)
            self._bm25_stale.discard(index)

    def query(
        self, index: str, query: str | None, filters: Filters, top_k: int, scale_score: bool, **options: Any
    ) -> list[Document]:
        """BM25 with filters applied here (the in-memory store ignores them); an empty index returns nothing."""
        checked_filters(filters)
        stored = self._docs(index)
        if query is None or not any(isinstance(d, Document) for d in stored.values()):
            return []
        if self.store.use_bm25:
            self._fresh_bm25(index)
            if index not in self.store.bm25:
                return []  # no document with a token yet (see _fresh_bm25)
        if not filters:
            with self._bm25_mutex.write():
                return self.store.query(query, top_k=top_k, index=index, scale_score=scale_score)
        allowed = self.matching_ids(index, filters)
        if not allowed:
            return []
        with self._bm25_mutex.write():
            ranked = self.store.query(query, top_k=len(stored), index=index, scale_score=scale_score)
        return [d for d in ranked if d.id in allowed][:top_k]


class InnerQueries:
    """BM25 and dense queries of :class:`~dphr_haystack.nodes.PhraseDocumentStore`, answered by its inner store under
    the store's read lock (mixed into the store)."""

    index: str
    _inner: InnerStore

    @store_read
    def query(
        self,
        query: str | None,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        custom_query: str | None = None,
        index: str | None = None,
        headers: dict[str, str] | None = None,
        all_terms_must_match: bool = False,
        scale_score: bool = True,
    ) -> list[Document]:
        """BM25 over the inner store. In memory, filters are applied here (the in-memory store ignores them)
        and an empty index returns no documents."""
        return self._inner.query(
            index or self.index,
            query,
            filters,
            top_k,
            scale_score,
            custom_query=custom_query,
            headers=headers,
            all_terms_must_match=all_terms_must_match,
        )

    @store_read
    def query_batch(
        self,
        queries: list[str],
        filters: dict[str, Any] | list[dict[str, Any] | None] | None = None,
        top_k: int = 10,
        custom_query: str | None = None,
        index: str | None = None,
        headers: dict[str, str] | None = None,
        all_terms_must_match: bool = False,
        scale_score: bool = True,
    ) -> list[list[Document]]:
        per_query = filters if isinstance(filters, list) else [filters] * len(queries)
        if len(per_query) != len(queries):
            raise InvalidParameterError(f"{len(per_query)} filters for {len(queries)} queries")
        return [
            self.query(q, f, top_k, custom_query, index, headers, all_terms_must_match, scale_score)
            for q, f in zip(queries, per_query)
        ]

    @store_read
    def query_by_embedding(
        self,
        query_emb: np.ndarray,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        index: str | None = None,
        return_embedding: bool | None = None,
        headers: dict[str, str] | None = None,
        scale_score: bool = True,
    ) -> list[Document]:
        """Dense search over the inner store's document embeddings (for ``EmbeddingRetriever``)."""
        index = index or self.index
        if not self._inner.has_documents(index):
            return []
        return self._inner.query_by_embedding(
            query_emb,
            filters=filters,
            top_k=top_k,
            index=index,
            return_embedding=return_embedding,
            headers=headers,
            scale_score=scale_score,
        )


def make_inner_store(
    index: str,
    label_index: str,
    duplicate_documents: str,
    embedding_dim: int,
    similarity: str,
    return_embedding: bool,
    progress_bar: bool,
    use_bm25: bool,
    bm25_algorithm: str,
    bm25_parameters: dict[str, float] | None,
    elasticsearch_host: str | None,
    elasticsearch_port: int,
    elasticsearch_scheme: str,
    elasticsearch_username: str,
    elasticsearch_password: str,
) -> InnerStore:
    """Elasticsearch at ``elasticsearch_host`` when it is set, else an in-memory store (BM25 per ``use_bm25``)."""
    common = {
        "index": index,
        "label_index": label_index,
        "embedding_dim": embedding_dim,
        "similarity": similarity,
        "return_embedding": return_embedding,
        "duplicate_documents": duplicate_documents,
    }
    if elasticsearch_host:
        from haystack.document_stores import ElasticsearchDocumentStore

        elasticsearch = ElasticsearchDocumentStore(
            host=elasticsearch_host,
            port=elasticsearch_port,
            scheme=elasticsearch_scheme,
            username=elasticsearch_username,
            password=elasticsearch_password,
            **common,
        )
        return InnerStore(elasticsearch, index)
    memory = InMemoryDocumentStore(
        progress_bar=progress_bar,
        use_gpu=False,
        use_bm25=use_bm25,
        bm25_algorithm=bm25_algorithm,
        bm25_parameters=dict(bm25_parameters or {}),
        **common,
    )
    return InMemoryInnerStore(memory, index)
