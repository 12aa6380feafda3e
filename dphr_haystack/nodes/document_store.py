"""PhraseDocumentStore: a Haystack keyword document store with a phrase index beside its documents.

Documents, labels and BM25 live in an inner Haystack store (``InMemoryDocumentStore(use_bm25=True)`` by
default, ``ElasticsearchDocumentStore`` when ``elasticsearch_host`` is set), so ``BM25Retriever``,
``EmbeddingRetriever`` and ``PhraseRetriever`` see the same documents and ids. Each Haystack ``index`` has its
own :class:`~dphr_haystack.PhraseIndex`; one Haystack document is one phrase-index passage (same id).
"""

from __future__ import annotations

import copy
import functools
import inspect
import logging
import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from haystack.document_stores import BaseDocumentStore, KeywordDocumentStore
from haystack.errors import DocumentStoreError
from haystack.schema import Document, Label

from .._util.atomic import replace_directory
from .._util.memory import release_free_memory
from ..build.corpus import Passage
from ..build.dump import PhraseShard, chunked, encode_shard
from ..errors import DphrError, InvalidParameterError, ModelMismatchError
from ..index.codec import VectorCodec
from ..index.phrase_index import PhraseIndex
from ..model.inputs import is_valid_unicode
from ._models import model_fingerprint
from ._rwlock import ReadWriteLock, read_locked, write_locked
from ._schema import typed_init
from .persistence import STORE_FILE, document_from_json, read_items, read_manifest, write_snapshot
from .stores import make_inner_store

logger = logging.getLogger(__name__)


@dataclass
class PhraseIndexingStats:
    """What :meth:`PhraseDocumentStore.update_embeddings` did."""

    encoded: int = 0
    skipped_existing: int = 0
    skipped_non_text: int = 0


@typed_init
class PhraseDocumentStore(KeywordDocumentStore):
    """Haystack documents in an inner store, their phrase vectors in one phrase index per Haystack index.

    Example:
        >>> store = PhraseDocumentStore()                       # in memory, BM25 on
        >>> retriever = PhraseRetriever(document_store=store, model="minilm")
        >>> store.index_documents([Document("Paris is the capital of France.")], retriever)
        >>> retriever.retrieve("What is the capital of France?")

    Thread safety: one store may serve many threads. A reader-writer lock guards it: queries, retrieval
    (``PhraseRetriever`` holds the read lock for a whole search) and document reads share it; writes
    (``write_documents``, ``delete_documents``, ``update_document_meta``, ``delete_index``, labels, ``save``) take
    it exclusively, so a search sees the store either before or after a write, never half of one.
    ``update_embeddings`` encodes outside the lock and takes it only to commit each chunk of phrases; one
    phrase-indexing run per store at a time. Documents deleted or changed while their chunk was being encoded
    are left out of that commit. ``get_all_documents_generator`` yields a snapshot.

    Persistence: :meth:`save` replaces its target directory atomically: a save killed at any point leaves the
    previous one. After :meth:`load` or :meth:`save`, phrase indexes kept on disk live in that directory and
    phrase *additions* are committed there as they happen, so an ``update_embeddings`` killed part-way resumes
    where it stopped; documents and phrase *deletions* reach the directory only through :meth:`save` (the first
    deletion moves the phrase index to a private copy). On load, phrases whose document the directory does not
    hold (added by a run killed before its save) are dropped.

    Args:
        index: Default Haystack index for documents.
        label_index: Default index for labels.
        duplicate_documents: Haystack's policy for ids already stored: ``overwrite``, ``skip`` or ``fail``.
            Overwriting a document with new text or title drops its phrases until the next
            ``update_embeddings``.
        embedding_dim: Dimension of dense (``EmbeddingRetriever``) embeddings kept by the inner store.
        similarity: Dense similarity of the inner store (``dot_product`` or ``cosine``).
        return_embedding: Return dense embeddings with documents.
        progress_bar: Show tqdm bars while indexing.
        use_bm25: Keep the inner in-memory store's BM25 representation (needed by ``BM25Retriever``).
        bm25_algorithm: ``BM25Okapi``, ``BM25L`` or ``BM25Plus`` (in-memory store only).
        bm25_parameters: Parameters of that BM25 implementation, e.g. ``{"k1": 1.5, "b": 0.75}``.
        faiss_factory: FAISS factory string for new phrase indexes (``Flat`` = exact search).
        phrase_dtype: Storage of phrase vectors: ``float16``, ``float32`` or ``int8``.
        title_field: Meta field holding a document's title (encoded before the text, as in DensePhrases).
        document_id_field: Meta field grouping passages into documents for ``unit="document"``
            (absent → each Haystack document is its own document).
        load_path: A directory written by :meth:`save`; its documents, labels and phrase indexes are loaded.
        elasticsearch_host: When set, documents live in Elasticsearch at this host instead of in memory.
        elasticsearch_port: Elasticsearch port.
        elasticsearch_scheme: ``http`` or ``https``.
        elasticsearch_username: Elasticsearch user name.
        elasticsearch_password: Elasticsearch password (never written by :meth:`save`).
    """

    def __init__(
        self,
        index: str = "document",
        label_index: str = "label",
        duplicate_documents: Literal["overwrite", "skip", "fail"] = "overwrite",
        embedding_dim: int = 768,
        similarity: Literal["dot_product", "cosine"] = "dot_product",
        return_embedding: bool = False,
        progress_bar: bool = True,
        use_bm25: bool = True,
        bm25_algorithm: Literal["BM25Okapi", "BM25L", "BM25Plus"] = "BM25Okapi",
        bm25_parameters: dict[str, float] | None = None,
        faiss_factory: str = "Flat",
        phrase_dtype: Literal["float16", "float32", "int8"] = "float16",
        title_field: str = "title",
        document_id_field: str = "document_id",
        load_path: str | None = None,
        elasticsearch_host: str | None = None,
        elasticsearch_port: int = 9200,
        elasticsearch_scheme: Literal["http", "https"] = "http",
        elasticsearch_username: str = "",
        elasticsearch_password: str = "",
    ):
        super().__init__()
        self._lock = ReadWriteLock()
        self._indexing = ReadWriteLock()  # its write lock: one update_embeddings per store at a time
        if duplicate_documents not in self.duplicate_documents_options:
            raise InvalidParameterError(
                f"duplicate_documents={duplicate_documents!r}; valid: {', '.join(self.duplicate_documents_options)}"
            )
        _check_bm25(bm25_algorithm, bm25_parameters)
        if isinstance(embedding_dim, bool) or not isinstance(embedding_dim, int) or embedding_dim < 1:
            raise InvalidParameterError(f"embedding_dim must be a positive integer, got {embedding_dim!r}")
        for name, value in (
            ("index", index),
            ("label_index", label_index),
            ("title_field", title_field),
            ("document_id_field", document_id_field),
            ("faiss_factory", faiss_factory),
        ):
            if not isinstance(value, str) or (name.endswith("index") and not value):
                raise InvalidParameterError(
                    f"{name} must be a{' non-empty' if name.endswith('index') else ''} string, got {value!r:.60}"
                )
        if phrase_dtype not in ("float16", "float32", "int8") or similarity not in ("dot_product", "cosine"):
            raise InvalidParameterError(
                f"phrase_dtype={phrase_dtype!r} (float16, float32, int8), "
                f"similarity={similarity!r} (dot_product, cosine)"
            )
        for name, value in (
            ("return_embedding", return_embedding),
            ("progress_bar", progress_bar),
            ("use_bm25", use_bm25),
        ):
            if not isinstance(value, bool):
                raise InvalidParameterError(f"{name} must be true or false, got {value!r:.60}")
        self.index = index
        self.label_index = label_index
        self.duplicate_documents = duplicate_documents
        self.progress_bar = progress_bar
        self.faiss_factory = faiss_factory
        self.phrase_dtype = phrase_dtype
        self.title_field = title_field
        self.document_id_field = document_id_field
        self._phrase_indexes: dict[str, PhraseIndex] = {}
        self._snapshots: set[Path] = set()  # phrase index folders of the directory this store was loaded from
        self._inner = make_inner_store(
            index,
            label_index,
            duplicate_documents,
            embedding_dim,
            similarity,
            return_embedding,
            progress_bar,
            use_bm25,
            bm25_algorithm,
            bm25_parameters,
            elasticsearch_host,
            elasticsearch_port,
            elasticsearch_scheme,
            elasticsearch_username,
            elasticsearch_password,
        )
        self.inner: BaseDocumentStore = self._inner.store
        self.similarity = similarity
        if load_path:
            self._restore(Path(load_path))

    # ----------------------------------------------------------------- inner store plumbing
    @property
    def in_memory(self) -> bool:
        """True when documents live in the embedded in-memory store."""
        return self._inner.in_memory

    @property
    def _config(self) -> dict[str, Any]:
        """The settings :meth:`save` records: the constructor's arguments as Haystack recorded them, defaults
        filled in, without ``load_path`` and the Elasticsearch password."""
        passed = self._component_config.get("params", {})
        return {
            name: passed.get(name, parameter.default)
            for name, parameter in inspect.signature(PhraseDocumentStore.__init__).parameters.items()
            if name not in ("self", "load_path", "elasticsearch_password")
        }

    @property
    def embedding_field(self) -> str | None:
        return self.inner.embedding_field

    @embedding_field.setter
    def embedding_field(self, value: str | None) -> None:
        self.inner.embedding_field = value

    @property
    def return_embedding(self) -> bool:
        return self.inner.return_embedding

    @return_embedding.setter
    def return_embedding(self, value: bool) -> None:
        self.inner.return_embedding = value

    @property
    def embedding_dim(self) -> int:
        return self.inner.embedding_dim

    def _create_document_field_map(self) -> dict:
        return self.inner._create_document_field_map()

    def index_exists(self, index: str | None = None) -> bool:
        """Whether ``index`` may hold documents (in memory: the default index, or one written to)."""
        return self._inner.index_exists(index or self.index)

    @read_locked
    def matching_ids(self, filters: dict[str, Any] | None, index: str | None = None) -> set[str]:
        """Ids of the documents of ``index`` that pass ``filters``."""
        return self._inner.matching_ids(index or self.index, filters)

    # ----------------------------------------------------------------- documents
    @write_locked
    def write_documents(
        self,
        documents: list[dict] | list[Document],
        index: str | None = None,
        batch_size: int = 10_000,
        duplicate_documents: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        """Write documents to the inner store (Haystack's duplicate policy applies); phrases come from
        :meth:`update_embeddings`. Overwritten documents whose text or title changed lose their stale phrases.

        All or nothing: a document the inner store cannot take (e.g. ``content_type="text"`` with a DataFrame)
        raises DocumentStoreError and no document of the call is written.
        """
        index = index or self.index
        policy = duplicate_documents or self.duplicate_documents
        documents = _checked_documents(documents, self._create_document_field_map())
        phrase_index = self._phrase_indexes.get(index)
        if phrase_index is not None and policy == "overwrite":
            stale = [doc.id for doc in documents if self._phrases_outdated(phrase_index, doc)]
            # Phrases go first: a write failing after this leaves documents without phrases (update_embeddings
            # encodes them again), never phrases of a text that is no longer stored.
            if stale:
                self._private(index).delete_passages(stale)
        self._inner.write(
            index,
            lambda: self.inner.write_documents(
                documents, index=index, batch_size=batch_size, duplicate_documents=policy, headers=headers
            ),
        )

    def _phrases_outdated(self, phrase_index: PhraseIndex, doc: Document) -> bool:
        """True when ``doc`` has phrases encoded from another text, title or document id."""
        row = phrase_index.passage_row(doc.id)
        if row is None:
            return False
        record = phrase_index.passages[row]
        passage = self._to_passage(doc)
        return passage is None or (passage["text"], passage["title"], passage["document_id"]) != (
            record["text"],
            record.get("title", ""),
            record.get("document_id", record["id"]),
        )

    def get_all_documents(
        self,
        index: str | None = None,
        filters: dict[str, Any] | None = None,
        return_embedding: bool | None = None,
        batch_size: int = 10_000,
        headers: dict[str, str] | None = None,
    ) -> list[Document]:
        return list(self.get_all_documents_generator(index, filters, return_embedding, batch_size, headers))

    def get_all_documents_generator(
        self,
        index: str | None = None,
        filters: dict[str, Any] | None = None,
        return_embedding: bool | None = None,
        batch_size: int = 10_000,
        headers: dict[str, str] | None = None,
    ) -> Iterator[Document]:
        index = index or self.index
        with self._lock.read():  # in memory a snapshot: the lock is not held while the caller iterates
            docs = self._inner.documents(index, filters, return_embedding, batch_size=batch_size, headers=headers)
        yield from docs

    def get_document_by_id(self, id: str, index: str | None = None, headers: dict[str, str] | None = None):
        docs = self.get_documents_by_id([id], index=index, headers=headers)
        return docs[0] if docs else None

    @read_locked
    def get_documents_by_id(
        self,
        ids: list[str],
        index: str | None = None,
        batch_size: int = 10_000,
        headers: dict[str, str] | None = None,
    ) -> list[Document]:
        """Documents with these ids, in the order given; unknown ids are left out."""
        return self._inner.documents_by_id(ids, index or self.index, batch_size=batch_size, headers=headers)

    @read_locked
    def get_document_count(
        self,
        filters: dict[str, Any] | None = None,
        index: str | None = None,
        only_documents_without_embedding: bool = False,
        headers: dict[str, str] | None = None,
    ) -> int:
        return self._inner.document_count(
            index or self.index, filters, only_documents_without_embedding, headers=headers
        )

    @read_locked
    def get_embedding_count(self, filters: dict[str, Any] | None = None, index: str | None = None) -> int:
        """Number of documents with a dense embedding (phrase vectors are counted by :meth:`get_phrase_count`)."""
        return self.inner.get_embedding_count(filters=filters, index=index or self.index)

    @write_locked
    def update_document_meta(self, id: str, meta: dict[str, Any], index: str | None = None):
        """Replace a document's meta; a changed title or document id drops its phrases until update_embeddings."""
        index = index or self.index
        if not isinstance(meta, dict):
            raise DocumentStoreError(f"update_document_meta takes a dict, got {type(meta).__name__}")
        if not self._inner.has_document(index, id):
            raise DocumentStoreError(f"no document with id {id!r} in index {index!r}")
        phrase_index = self._phrase_indexes.get(index)
        if phrase_index is not None and phrase_index.passage_row(id) is not None:
            current = self.get_document_by_id(id, index=index)
            if current is not None:
                changed = copy.copy(current)
                changed.meta = {**(current.meta or {}), **(meta or {})}
                if self._phrases_outdated(phrase_index, changed):
                    self._private(index).delete_passages([id])
        self.inner.update_document_meta(id, meta, index=index)

    @write_locked
    def delete_documents(
        self,
        index: str | None = None,
        ids: list[str] | None = None,
        filters: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ):
        """Delete documents (all when neither ``ids`` nor ``filters`` is given) and their phrases.

        ``ids`` and ``filters`` are ANDed. Unlike Haystack's stores, an empty ``ids`` list deletes nothing.
        """
        index = index or self.index
        if ids is not None and len(ids) == 0:
            return
        if not ids and not filters:
            self._phrase_indexes.pop(index, None)
            self._inner.write(index, lambda: self.inner.delete_documents(index=index, headers=headers))
            return
        targets = list(ids) if ids else None
        if filters:
            allowed = self.matching_ids(filters, index)
            targets = [i for i in targets if i in allowed] if targets is not None else sorted(allowed)
        if not targets:
            return
        phrase_index = self._phrase_indexes.get(index)
        if phrase_index is not None:  # phrases first (see write_documents)
            self._private(index).delete_passages(targets)
        self._inner.write(index, lambda: self.inner.delete_documents(index=index, ids=targets, headers=headers))

    @write_locked
    def delete_index(self, index: str):
        """Delete an index: its documents, its labels if it is a label index, and its phrase index."""
        self._phrase_indexes.pop(index, None)
        self.inner.delete_index(index)

    # ----------------------------------------------------------------- labels
    @write_locked
    def write_labels(self, labels, index: str | None = None, headers: dict[str, str] | None = None):
        self.inner.write_labels(labels, index=index or self.label_index, headers=headers)

    @read_locked
    def get_all_labels(
        self, index: str | None = None, filters: dict[str, Any] | None = None, headers: dict[str, str] | None = None
    ) -> list[Label]:
        return self.inner.get_all_labels(index=index or self.label_index, filters=filters, headers=headers)

    @read_locked
    def get_label_count(self, index: str | None = None, headers: dict[str, str] | None = None) -> int:
        return self.inner.get_label_count(index=index or self.label_index, headers=headers)

    @write_locked
    def delete_labels(
        self,
        index: str | None = None,
        ids: list[str] | None = None,
        filters: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ):
        self.inner.delete_labels(index=index or self.label_index, ids=ids, filters=filters, headers=headers)

    # ----------------------------------------------------------------- BM25 and dense queries
    @read_locked
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

    @read_locked
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

    @read_locked
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
        return self.inner.query_by_embedding(
            query_emb,
            filters=filters,
            top_k=top_k,
            index=index,
            return_embedding=return_embedding,
            headers=headers,
            scale_score=scale_score,
        )

    # ----------------------------------------------------------------- phrases
    def reading(self) -> AbstractContextManager[None]:
        """The store's read lock, for a multi-step read such as a retrieval (see the class docstring)."""
        return self._lock.read()

    def get_phrase_index(self, index: str | None = None) -> PhraseIndex | None:
        """The phrase index of a Haystack index, or None before the first :meth:`update_embeddings`."""
        return self._phrase_indexes.get(index or self.index)

    @read_locked
    def get_phrase_count(self, index: str | None = None) -> int:
        """Number of live (not deleted) documents in the phrase index."""
        phrase_index = self.get_phrase_index(index)
        return 0 if phrase_index is None else phrase_index.num_live_passages

    @read_locked
    def phrase_mask(self, filters: dict[str, Any] | None, index: str | None = None) -> np.ndarray | None:
        """Boolean mask over phrase-index passage rows of the documents passing ``filters`` (None: no filter)."""
        if not filters:
            return None
        phrase_index = self.get_phrase_index(index)
        if phrase_index is None:
            return None
        allowed = self.matching_ids(filters, index)
        return np.fromiter(
            (p["id"] in allowed for p in phrase_index.passages), dtype=bool, count=phrase_index.num_passages
        )

    def _to_passage(self, doc: Document) -> dict[str, str] | None:
        """The phrase-index passage of a document, or None for non-text, empty or invalid (lone surrogate) text."""
        if doc.content_type != "text" or not isinstance(doc.content, str) or not doc.content.strip():
            return None
        meta = doc.meta if isinstance(doc.meta, dict) else {}
        passage = {
            "id": str(doc.id),
            "text": doc.content,
            "title": str(meta.get(self.title_field) or ""),
            "document_id": str(meta.get(self.document_id_field) or doc.id),
        }
        return passage if all(is_valid_unicode(value) for value in passage.values()) else None

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
        from .retriever import PhraseRetriever  # a module that imports this one

        if not isinstance(retriever, PhraseRetriever):
            update = True if update_existing_embeddings is None else update_existing_embeddings
            with self._lock.write():
                return self.inner.update_embeddings(
                    retriever, index=index, filters=filters, update_existing_embeddings=update, batch_size=batch_size
                )
        if batch_size < 1:
            raise InvalidParameterError(f"batch_size must be >= 1, got {batch_size}")
        with self._indexing.write():
            return self._update_phrases(retriever, index, filters, bool(update_existing_embeddings), batch_size)

    def _update_phrases(
        self, retriever, index: str, filters: dict[str, Any] | None, update: bool, batch_size: int
    ) -> PhraseIndexingStats:
        """Encode the documents that need phrases, a chunk at a time; each chunk commits under the write lock."""
        from tqdm.auto import tqdm

        model = retriever.phrase_model
        stats = PhraseIndexingStats()
        with self._lock.write():
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
            with self._lock.write():
                # The index object may have been swapped meanwhile (a private copy, or the copy save() wrote).
                current_index = self._phrase_indexes.get(index)
                if current_index is None or current_index.model_fingerprint != model_fingerprint(model):
                    logger.warning("update_embeddings: index %r was deleted or replaced meanwhile; stopping", index)
                    break
                phrase_index = current_index
                current = {
                    d.id: self._to_passage(d) for d in self.get_documents_by_id([p["id"] for p in chunk], index=index)
                }
                keep = [i for i, p in enumerate(chunk) if current.get(p["id"]) == p]  # not deleted or changed since
                if update:
                    phrase_index = self._private(index)
                    phrase_index.delete_passages([chunk[i]["id"] for i in keep])
                keep = [i for i in keep if phrase_index.passage_row(chunk[i]["id"]) is None]
                if keep:
                    phrase_index.add_shard(_subset_shard(shard, keep))
                stats.encoded += len(keep)
            del shard
            release_free_memory()  # flat peak memory however many chunks (see dphr_haystack/_memory.py)
            bar.update(len(chunk))
        bar.close()
        logger.info("update_embeddings(%r): %s", index, stats)
        return stats

    def _phrase_index_for(self, retriever, index: str) -> PhraseIndex:
        """The phrase index of ``index`` (created for the retriever's model when missing); the model must match."""
        model = retriever.phrase_model
        phrase_index = self._phrase_indexes.get(index)
        if phrase_index is None:
            phrase_index = PhraseIndex.create(
                model,
                faiss_factory=self.faiss_factory,
                dtype=self.phrase_dtype,
                filter_threshold=retriever.filter_threshold,
                model_path=retriever.model,
            )
            self._phrase_indexes[index] = phrase_index
        elif phrase_index.model_fingerprint != model_fingerprint(model):
            raise ModelMismatchError(
                f"the phrase index of {index!r} was built with another phrase encoder than {retriever.model!r}; "
                f"delete_index({index!r}) and re-index, or use the original model"
            )
        elif phrase_index.filter_threshold != retriever.filter_threshold:
            logger.warning(
                "phrase index %r keeps filter_threshold=%s (the retriever asks for %s)",
                index,
                phrase_index.filter_threshold,
                retriever.filter_threshold,
            )
        return phrase_index

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

    @write_locked
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
        self._phrase_indexes[index] = phrase_index

    # ----------------------------------------------------------------- persistence
    @write_locked
    def save(self, path: str | Path) -> None:
        """Write documents, labels (in-memory store only; Elasticsearch keeps its own) and phrase indexes to
        ``path``, atomically: a complete temporary directory, fsynced, then swapped with ``path``.

        Raises:
            DocumentStoreError: A document or label cannot be written as JSON (e.g. a ``set`` in its meta);
                ``path`` is left as it was.
        """
        path = Path(path).resolve()
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            manifest = write_snapshot(tmp, self._config, self._inner.saved_collections(), self._phrase_indexes)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        replace_directory(tmp, path)
        # Phrase indexes kept on disk now live in the new copy (their folder may have been renumbered): later
        # phrase additions are committed there.
        self._snapshots = set()
        for name, folder in manifest["phrases"].items():
            if self._phrase_indexes[name].path is not None:
                self._phrase_indexes[name] = PhraseIndex.load(path / folder, verify=False)
                self._snapshots.add((path / folder).resolve())

    def _private(self, index: str) -> PhraseIndex:
        """The phrase index of ``index``, first moved to a private copy when it lives in a saved directory.

        Phrase additions are committed in place (they only extend the saved index, and load() drops those whose
        document the directory does not hold), but a deletion would remove phrases of documents the saved
        directory still holds; so the saved directory only loses phrases through save().
        """
        import tempfile
        import weakref

        phrase_index = self._phrase_indexes[index]
        if phrase_index.path is None or phrase_index.path.resolve() not in self._snapshots:
            return phrase_index
        folder = Path(tempfile.mkdtemp(prefix="dphr-phrases-"))
        phrase_index.save(folder / "index")
        private = PhraseIndex.load(folder / "index", verify=False)
        weakref.finalize(private, shutil.rmtree, folder, True)
        self._phrase_indexes[index] = private
        logger.info("phrase index %r moved from %s to a private copy until the next save()", index, phrase_index.path)
        return private

    @classmethod
    def load(cls, path: str | Path, elasticsearch_password: str = "") -> PhraseDocumentStore:
        """A store rebuilt from a directory written by :meth:`save`, with the settings it was saved with."""
        manifest = read_manifest(Path(path))
        config = dict(manifest["config"])
        if config.get("elasticsearch_host"):
            config["elasticsearch_password"] = elasticsearch_password
        try:
            return cls(**config, load_path=str(path))
        except (DphrError, DocumentStoreError):
            raise
        except (TypeError, ValueError, KeyError) as exc:  # a damaged config section
            raise DocumentStoreError(f"{Path(path) / STORE_FILE}: unusable store settings ({exc})") from exc

    def _restore(self, path: Path) -> None:
        manifest = read_manifest(path)
        for name, file in manifest["documents"].items():
            docs = read_items(path / file, document_from_json)
            self._inner.write(
                name, functools.partial(self.inner.write_documents, docs, index=name, duplicate_documents="overwrite")
            )
        for name, file in manifest["labels"].items():
            self.inner.write_labels(read_items(path / file, Label.from_json), index=name)
        for name, folder in manifest["phrases"].items():
            self._phrase_indexes[name] = phrase_index = PhraseIndex.load(path / folder)
            self._snapshots.add((path / folder).resolve())
            docs = self._inner.stored_documents(name)
            if docs is not None:
                self._drop_orphan_phrases(name, phrase_index, docs)

    def _drop_orphan_phrases(self, index: str, phrase_index: PhraseIndex, docs: dict[str, Any]) -> None:
        """Tombstone phrases whose document is missing or changed (a run killed between a phrase commit and save)."""
        orphans = []
        for pid in phrase_index.live_passage_ids():
            doc = docs.get(pid)
            record = phrase_index.passages[phrase_index.passage_row(pid)]
            passage = self._to_passage(doc) if isinstance(doc, Document) else None
            if passage is None or (passage["text"], passage["title"]) != (record["text"], record.get("title", "")):
                orphans.append(pid)
        if orphans:
            logger.warning(
                "phrase index %r: dropping phrases of %d documents missing from the saved documents, "
                "e.g. %s (left by a run stopped before save())",
                index,
                len(orphans),
                orphans[:3],
            )
            try:
                phrase_index.delete_passages(orphans)
            except OSError as exc:  # a read-only directory: the retriever skips hits of missing documents anyway
                logger.warning("could not drop them from %s: %s", phrase_index.path, exc)


_BM25_PARAMETERS = {
    "BM25Okapi": ("k1", "b", "epsilon"),
    "BM25L": ("k1", "b", "delta"),
    "BM25Plus": ("k1", "b", "delta"),
}


def _check_bm25(algorithm: str, parameters: dict[str, float] | None) -> None:
    """Fail at construction, not at the first write, on a BM25 variant or parameter rank_bm25 does not take."""
    if algorithm not in _BM25_PARAMETERS:
        raise InvalidParameterError(f"bm25_algorithm={algorithm!r}; valid: {', '.join(_BM25_PARAMETERS)}")
    if parameters is None:
        return
    if not isinstance(parameters, dict):
        raise InvalidParameterError(f"bm25_parameters must be a mapping, got {type(parameters).__name__}")
    for name, value in parameters.items():
        if name not in _BM25_PARAMETERS[algorithm]:
            raise InvalidParameterError(
                f"bm25_parameters: {algorithm} takes {', '.join(_BM25_PARAMETERS[algorithm])}, not {name!r}"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidParameterError(f"bm25_parameters[{name!r}] must be a number, got {value!r}")


def _checked_documents(documents, field_map: dict) -> list[Document]:
    """Documents (dicts converted) whose content matches their content_type, else DocumentStoreError."""
    if isinstance(documents, (str, bytes, Document, dict)) or not isinstance(documents, (list, tuple)):
        raise DocumentStoreError(f"write_documents takes a list of Documents or dicts, got {type(documents).__name__}")
    checked = []
    for position, doc in enumerate(documents):
        if isinstance(doc, dict):
            try:
                doc = Document.from_dict(copy.deepcopy(doc), field_map=field_map)
            except Exception as exc:  # noqa: BLE001 - Haystack raises anything on a malformed dict
                raise DocumentStoreError(f"document {position} is not a valid Haystack document: {exc}") from exc
        if not isinstance(doc, Document):
            raise DocumentStoreError(f"document {position} is a {type(doc).__name__}, not a Document or dict")
        if doc.content_type == "text" and not isinstance(doc.content, str):
            raise DocumentStoreError(
                f"document {doc.id!r}: content_type 'text' needs str content, got {type(doc.content).__name__}"
            )
        if doc.content_type == "table" and not isinstance(doc.content, pd.DataFrame):
            raise DocumentStoreError(
                f"document {doc.id!r}: content_type 'table' needs a pandas DataFrame, got {type(doc.content).__name__}"
            )
        checked.append(doc)
    return checked


def _subset_shard(shard: PhraseShard, keep: list[int]) -> PhraseShard:
    """The passages ``keep`` (local positions, ascending) of a shard, with their tokens and vectors."""
    if len(keep) == len(shard.passages):
        return shard
    remap = np.full(len(shard.passages), -1, dtype=np.int64)
    remap[keep] = np.arange(len(keep))
    rows = remap[shard.tokens["passage"]] >= 0
    tokens = shard.tokens[rows].copy()
    tokens["passage"] = remap[tokens["passage"]]
    return PhraseShard(shard.vectors[rows], tokens, [shard.passages[i] for i in keep], shard.codec)


__all__ = ["PhraseDocumentStore", "PhraseIndexingStats"]
