"""PhraseDocumentStore: a Haystack keyword document store with a phrase index beside its documents.

Documents, labels and BM25 live in an inner Haystack store (``InMemoryDocumentStore(use_bm25=True)`` by
default, ``ElasticsearchDocumentStore`` when ``elasticsearch_host`` is set), so ``BM25Retriever``,
``EmbeddingRetriever`` and ``PhraseRetriever`` see the same documents and ids. Each Haystack ``index`` has its
own :class:`~dphr_haystack.PhraseIndex`; one Haystack document is one phrase-index passage (same id).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from haystack.document_stores import BaseDocumentStore, InMemoryDocumentStore, KeywordDocumentStore
from haystack.errors import DocumentStoreError
from haystack.schema import Document, Label

from ..errors import InvalidParameterError, ModelMismatchError
from ..index import PhraseIndex, replace_directory
from ._filters import compile_filters, matches
from ._models import model_fingerprint
from ._schema import typed_init

logger = logging.getLogger(__name__)

STORE_FILE = "phrase_store.json"
STORE_FORMAT = "dphr-phrase-document-store"
STORE_FORMAT_VERSION = 1


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
        if duplicate_documents not in self.duplicate_documents_options:
            raise InvalidParameterError(
                f"duplicate_documents={duplicate_documents!r}; valid: {', '.join(self.duplicate_documents_options)}"
            )
        self.index = index
        self.label_index = label_index
        self.duplicate_documents = duplicate_documents
        self.progress_bar = progress_bar
        self.faiss_factory = faiss_factory
        self.phrase_dtype = phrase_dtype
        self.title_field = title_field
        self.document_id_field = document_id_field
        self._config: dict[str, Any] = {
            "index": index, "label_index": label_index, "duplicate_documents": duplicate_documents,
            "embedding_dim": embedding_dim, "similarity": similarity, "return_embedding": return_embedding,
            "progress_bar": progress_bar, "use_bm25": use_bm25, "bm25_algorithm": bm25_algorithm,
            "bm25_parameters": bm25_parameters, "faiss_factory": faiss_factory, "phrase_dtype": phrase_dtype,
            "title_field": title_field, "document_id_field": document_id_field,
            "elasticsearch_host": elasticsearch_host, "elasticsearch_port": elasticsearch_port,
            "elasticsearch_scheme": elasticsearch_scheme, "elasticsearch_username": elasticsearch_username,
        }
        self._phrase_indexes: dict[str, PhraseIndex] = {}
        if elasticsearch_host:
            from haystack.document_stores import ElasticsearchDocumentStore

            self.inner: BaseDocumentStore = ElasticsearchDocumentStore(
                host=elasticsearch_host, port=elasticsearch_port, scheme=elasticsearch_scheme,
                username=elasticsearch_username, password=elasticsearch_password, index=index,
                label_index=label_index, embedding_dim=embedding_dim, similarity=similarity,
                return_embedding=return_embedding, duplicate_documents=duplicate_documents,
            )
        else:
            self.inner = InMemoryDocumentStore(
                index=index, label_index=label_index, embedding_dim=embedding_dim, similarity=similarity,
                return_embedding=return_embedding, progress_bar=progress_bar, duplicate_documents=duplicate_documents,
                use_gpu=False, use_bm25=use_bm25, bm25_algorithm=bm25_algorithm,
                bm25_parameters=dict(bm25_parameters or {}),
            )
        self.similarity = similarity
        if load_path:
            self._restore(Path(load_path))

    # ----------------------------------------------------------------- inner store plumbing
    @property
    def in_memory(self) -> bool:
        """True when documents live in the embedded in-memory store."""
        return isinstance(self.inner, InMemoryDocumentStore)

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

    def _memory_docs(self, index: str) -> dict[str, Any]:
        return self.inner.indexes.get(index, {})  # type: ignore[attr-defined]

    def _check_index(self, index: str) -> None:
        """Like Elasticsearch, reading a non-default document index that does not exist raises."""
        if self.in_memory and index != self.index and index not in self.inner.indexes:  # type: ignore[attr-defined]
            raise DocumentStoreError(f"index {index!r} does not exist")

    def _filtered_memory(self, index: str, filters, return_embedding: bool | None) -> list[Document]:
        clause = compile_filters(filters)
        docs = [d for d in self._memory_docs(index).values() if isinstance(d, Document) and matches(clause, d.meta)]
        docs = copy.deepcopy(docs)
        if not (self.return_embedding if return_embedding is None else return_embedding):
            for doc in docs:
                doc.embedding = None
        return docs

    def matching_ids(self, filters: dict[str, Any] | None, index: str | None = None) -> set[str]:
        """Ids of the documents of ``index`` that pass ``filters``."""
        index = index or self.index
        if self.in_memory:
            clause = compile_filters(filters)
            return {d.id for d in self._memory_docs(index).values() if isinstance(d, Document) and matches(clause, d.meta)}
        return {d.id for d in self.inner.get_all_documents_generator(index=index, filters=filters, return_embedding=False)}

    # ----------------------------------------------------------------- documents
    def write_documents(
        self,
        documents: list[dict] | list[Document],
        index: str | None = None,
        batch_size: int = 10_000,
        duplicate_documents: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        """Write documents to the inner store (Haystack's duplicate policy applies); phrases come from
        :meth:`update_embeddings`. Overwritten documents whose text or title changed lose their stale phrases."""
        index = index or self.index
        policy = duplicate_documents or self.duplicate_documents
        phrase_index = self._phrase_indexes.get(index)
        stale: list[str] = []
        if phrase_index is not None and policy == "overwrite":
            field_map = self._create_document_field_map()
            documents = [Document.from_dict(copy.deepcopy(d), field_map=field_map) if isinstance(d, dict) else d
                         for d in documents]
            for doc in documents:
                row = phrase_index.passage_row(doc.id)
                if row is None:
                    continue
                record = phrase_index.passages[row]
                passage = self._to_passage(doc)
                if passage is None or (passage["text"], passage["title"]) != (record["text"], record.get("title", "")):
                    stale.append(doc.id)
        self.inner.write_documents(documents, index=index, batch_size=batch_size, duplicate_documents=policy,
                                   headers=headers)
        if stale:
            phrase_index.delete_passages(stale)  # type: ignore[union-attr]

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
        if self.in_memory:
            self._check_index(index)
            yield from self._filtered_memory(index, filters, return_embedding)
            return
        yield from self.inner.get_all_documents_generator(index=index, filters=filters, return_embedding=return_embedding,
                                                          batch_size=batch_size, headers=headers)

    def get_document_by_id(self, id: str, index: str | None = None, headers: dict[str, str] | None = None):
        docs = self.get_documents_by_id([id], index=index, headers=headers)
        return docs[0] if docs else None

    def get_documents_by_id(
        self,
        ids: list[str],
        index: str | None = None,
        batch_size: int = 10_000,
        headers: dict[str, str] | None = None,
    ) -> list[Document]:
        """Documents with these ids, in the order given; unknown ids are left out."""
        index = index or self.index
        if self.in_memory:
            stored = self._memory_docs(index)
            return [copy.deepcopy(stored[i]) for i in ids if isinstance(stored.get(i), Document)]
        return self.inner.get_documents_by_id(ids, index=index, batch_size=batch_size, headers=headers)

    def get_document_count(
        self,
        filters: dict[str, Any] | None = None,
        index: str | None = None,
        only_documents_without_embedding: bool = False,
        headers: dict[str, str] | None = None,
    ) -> int:
        index = index or self.index
        if self.in_memory:
            self._check_index(index)
            clause = compile_filters(filters)
            return sum(1 for d in self._memory_docs(index).values() if isinstance(d, Document) and matches(clause, d.meta)
                       and not (only_documents_without_embedding and d.embedding is not None))
        return self.inner.get_document_count(filters=filters, index=index,
                                             only_documents_without_embedding=only_documents_without_embedding,
                                             headers=headers)

    def get_embedding_count(self, filters: dict[str, Any] | None = None, index: str | None = None) -> int:
        """Number of documents with a dense embedding (phrase vectors are counted by :meth:`get_phrase_count`)."""
        return self.inner.get_embedding_count(filters=filters, index=index or self.index)

    def update_document_meta(self, id: str, meta: dict[str, Any], index: str | None = None):
        self.inner.update_document_meta(id, meta, index=index or self.index)

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
            self.inner.delete_documents(index=index, headers=headers)
            self._phrase_indexes.pop(index, None)
            return
        targets = list(ids) if ids else None
        if filters:
            allowed = self.matching_ids(filters, index)
            targets = [i for i in targets if i in allowed] if targets is not None else sorted(allowed)
        if not targets:
            return
        self.inner.delete_documents(index=index, ids=targets, headers=headers)
        phrase_index = self._phrase_indexes.get(index)
        if phrase_index is not None:
            phrase_index.delete_passages(targets)

    def delete_index(self, index: str):
        """Delete an index: its documents, its labels if it is a label index, and its phrase index."""
        self.inner.delete_index(index)
        self._phrase_indexes.pop(index, None)

    # ----------------------------------------------------------------- labels
    def write_labels(self, labels, index: str | None = None, headers: dict[str, str] | None = None):
        self.inner.write_labels(labels, index=index or self.label_index, headers=headers)

    def get_all_labels(self, index: str | None = None, filters: dict[str, Any] | None = None,
                       headers: dict[str, str] | None = None) -> list[Label]:
        return self.inner.get_all_labels(index=index or self.label_index, filters=filters, headers=headers)

    def get_label_count(self, index: str | None = None, headers: dict[str, str] | None = None) -> int:
        return self.inner.get_label_count(index=index or self.label_index, headers=headers)

    def delete_labels(self, index: str | None = None, ids: list[str] | None = None,
                      filters: dict[str, Any] | None = None, headers: dict[str, str] | None = None):
        self.inner.delete_labels(index=index or self.label_index, ids=ids, filters=filters, headers=headers)

    # ----------------------------------------------------------------- BM25 and dense queries
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
        index = index or self.index
        if not self.in_memory:
            return self.inner.query(query, filters=filters, top_k=top_k, custom_query=custom_query, index=index,
                                    headers=headers, all_terms_must_match=all_terms_must_match, scale_score=scale_score)
        stored = self._memory_docs(index)
        if query is None or not any(isinstance(d, Document) for d in stored.values()):
            return []
        if not filters:
            return self.inner.query(query, top_k=top_k, index=index, scale_score=scale_score)
        allowed = self.matching_ids(filters, index)
        if not allowed:
            return []
        ranked = self.inner.query(query, top_k=len(stored), index=index, scale_score=scale_score)
        return [d for d in ranked if d.id in allowed][:top_k]

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
        return [self.query(q, f, top_k, custom_query, index, headers, all_terms_must_match, scale_score)
                for q, f in zip(queries, per_query)]

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
        if self.in_memory and not any(isinstance(d, Document) for d in self._memory_docs(index).values()):
            return []
        return self.inner.query_by_embedding(query_emb, filters=filters, top_k=top_k, index=index,
                                             return_embedding=return_embedding, headers=headers, scale_score=scale_score)

    # ----------------------------------------------------------------- phrases
    def get_phrase_index(self, index: str | None = None) -> PhraseIndex | None:
        """The phrase index of a Haystack index, or None before the first :meth:`update_embeddings`."""
        return self._phrase_indexes.get(index or self.index)

    def get_phrase_count(self, index: str | None = None) -> int:
        """Number of live (not deleted) documents in the phrase index."""
        phrase_index = self.get_phrase_index(index)
        return 0 if phrase_index is None else phrase_index.num_live_passages

    def phrase_mask(self, filters: dict[str, Any] | None, index: str | None = None) -> np.ndarray | None:
        """Boolean mask over phrase-index passage rows of the documents passing ``filters`` (None: no filter)."""
        if not filters:
            return None
        phrase_index = self.get_phrase_index(index)
        if phrase_index is None:
            return None
        allowed = self.matching_ids(filters, index)
        return np.fromiter((p["id"] in allowed for p in phrase_index.passages), dtype=bool, count=phrase_index.num_passages)

    def _to_passage(self, doc: Document) -> dict[str, str] | None:
        if doc.content_type != "text" or not isinstance(doc.content, str) or not doc.content.strip():
            return None
        meta = doc.meta or {}
        return {"id": doc.id, "text": doc.content, "title": str(meta.get(self.title_field) or ""),
                "document_id": str(meta.get(self.document_id_field) or doc.id)}

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
        if not hasattr(retriever, "phrase_model"):
            update = True if update_existing_embeddings is None else update_existing_embeddings
            return self.inner.update_embeddings(retriever, index=index, filters=filters,
                                                update_existing_embeddings=update, batch_size=batch_size)
        if batch_size < 1:
            raise InvalidParameterError(f"batch_size must be >= 1, got {batch_size}")
        update = bool(update_existing_embeddings)
        model = retriever.phrase_model
        stats = PhraseIndexingStats()
        phrase_index = self._phrase_indexes.get(index)
        if phrase_index is None:
            phrase_index = PhraseIndex.create(model, faiss_factory=self.faiss_factory, dtype=self.phrase_dtype,
                                              filter_threshold=retriever.filter_threshold, model_path=retriever.model)
            self._phrase_indexes[index] = phrase_index
        elif phrase_index.model_fingerprint != model_fingerprint(model):
            raise ModelMismatchError(
                f"the phrase index of {index!r} was built with another phrase encoder than {retriever.model!r}; "
                f"delete_index({index!r}) and re-index, or use the original model"
            )
        elif phrase_index.filter_threshold != retriever.filter_threshold:
            logger.warning("phrase index %r keeps filter_threshold=%s (the retriever asks for %s)", index,
                           phrase_index.filter_threshold, retriever.filter_threshold)
        pending: list[dict[str, str]] = []
        docs: Iterable[Document] = []
        if not self.in_memory or index == self.index or index in self.inner.indexes:  # type: ignore[attr-defined]
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
            logger.warning("update_embeddings: skipped %d non-text or empty documents", stats.skipped_non_text)
        if pending:
            phrase_index.add_passages(pending, model, batch_size=retriever.batch_size, chunk_size=min(batch_size, 512),
                                      duplicates="overwrite" if update else "skip", progress=self.progress_bar)
            stats.encoded = len(pending)
        logger.info("update_embeddings(%r): %s", index, stats)
        return stats

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

    # ----------------------------------------------------------------- persistence
    def save(self, path: str | Path) -> None:
        """Write documents, labels (in-memory store only; Elasticsearch keeps its own) and phrase indexes to
        ``path``, atomically (a temporary directory renamed over ``path``)."""
        path = Path(path).resolve()
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        manifest: dict[str, Any] = {"format": STORE_FORMAT, "format_version": STORE_FORMAT_VERSION,
                                    "config": self._config, "documents": {}, "labels": {}, "phrases": {}}
        if self.in_memory:
            for n, (name, items) in enumerate(sorted(self.inner.indexes.items())):  # type: ignore[attr-defined]
                values = list(items.values())
                if not values:
                    continue
                kind = "labels" if isinstance(values[0], Label) else "documents"
                file = f"{kind}-{n}.jsonl"
                with (tmp / file).open("w", encoding="utf-8") as handle:
                    for item in values:
                        handle.write(item.to_json() + "\n")
                manifest[kind][name] = file
        for n, (name, phrase_index) in enumerate(sorted(self._phrase_indexes.items())):
            phrase_index.save(tmp / f"phrases-{n}")
            manifest["phrases"][name] = f"phrases-{n}"
        (tmp / STORE_FILE).write_text(json.dumps(manifest, indent=1))
        replace_directory(tmp, path)

    @classmethod
    def load(cls, path: str | Path, elasticsearch_password: str = "") -> PhraseDocumentStore:
        """A store rebuilt from a directory written by :meth:`save`, with the settings it was saved with."""
        manifest = _read_manifest(Path(path))
        config = dict(manifest["config"])
        if config.get("elasticsearch_host"):
            config["elasticsearch_password"] = elasticsearch_password
        return cls(**config, load_path=str(path))

    def _restore(self, path: Path) -> None:
        manifest = _read_manifest(path)
        for name, file in manifest["documents"].items():
            with (path / file).open(encoding="utf-8") as handle:
                docs = [_document_from_json(line) for line in handle if line.strip()]
            self.inner.write_documents(docs, index=name, duplicate_documents="overwrite")
        for name, file in manifest["labels"].items():
            with (path / file).open(encoding="utf-8") as handle:
                labels = [Label.from_json(line) for line in handle if line.strip()]
            self.inner.write_labels(labels, index=name)
        for name, folder in manifest["phrases"].items():
            self._phrase_indexes[name] = PhraseIndex.load(path / folder)


def _read_manifest(path: Path) -> dict[str, Any]:
    file = path / STORE_FILE
    if not file.is_file():
        raise DocumentStoreError(f"{file} not found: not a directory written by PhraseDocumentStore.save")
    manifest = json.loads(file.read_text())
    if manifest.get("format") != STORE_FORMAT or manifest.get("format_version") != STORE_FORMAT_VERSION:
        raise DocumentStoreError(f"{file}: not a {STORE_FORMAT} v{STORE_FORMAT_VERSION} manifest")
    return manifest


def _document_from_json(line: str) -> Document:
    data = json.loads(line)
    doc = Document.from_dict(data)
    if isinstance(doc.embedding, list):
        doc.embedding = np.asarray(doc.embedding, dtype=np.float32)
    return doc


__all__ = ["PhraseDocumentStore", "PhraseIndexingStats"]
