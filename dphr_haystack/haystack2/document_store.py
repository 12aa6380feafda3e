"""PhraseDocumentStore: Haystack 2 documents in memory (or in a directory), their phrase vectors beside them.

The store is an ``InMemoryDocumentStore`` (so ``InMemoryBM25Retriever`` and ``InMemoryEmbeddingRetriever`` search
the very same documents) plus one :class:`~dphr_haystack.PhraseIndex` of the documents' phrases. One Haystack
document is one phrase-index passage with the same id.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from haystack import Document
from haystack.core.serialization import default_to_dict
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.types import DuplicatePolicy

from ..documents.passages import (
    PassageRule,
    check_attachable,
    passage_mask,
    unencoded_passages,
)
from ..documents.results import hit_passage_id, pair_hits
from ..documents.retrieval import PhraseSearchOptions, check_phrase_model, search_phrase_index
from ..documents.validation import check_meta, check_storable
from ..encode.add import add_passages
from ..errors import EmptyCorpusError, InvalidParameterError
from ..index.phrase_index import PhraseIndex
from ..model.phrase_model import PhraseModel
from ..params import check_choice, check_param
from ..search import Hit
from .filters import check_filters
from .serialization import component_from_dict
from .store_directory import StoreDirectory
from .syncing import StoreSync

logger = logging.getLogger(__name__)

PHRASE_DTYPES = ("float16", "float32", "int8")

# Stores opened in this process, by path or index name: from_dict hands back the live one, so that the components
# of a pipeline loaded from YAML (retrievers, indexer, writer) share one store as they did when it was saved.
_OPEN: weakref.WeakValueDictionary[str, PhraseDocumentStore] = weakref.WeakValueDictionary()
_OPEN_LOCK = threading.Lock()


class PhraseDocumentStore(StoreSync, InMemoryDocumentStore):
    """An ``InMemoryDocumentStore`` whose documents are also searchable by phrase.

    ``write_documents`` stores documents only (no model is needed, nothing is encoded); their phrases are encoded
    by :meth:`update_phrases`, which ``PhraseIndexer`` calls after writing and ``PhraseRetriever`` calls before a
    search (``encode_missing``), so documents written by a plain ``DocumentWriter`` become searchable by phrase
    too. Deleting a document, or overwriting it with another text, title or document id, removes its phrases at
    once; an overwrite with the same text keeps them.

    Persistence: with ``path`` the store lives in that directory (:mod:`~dphr_haystack.haystack2.store_directory`):
    ``documents.jsonl`` (replaced atomically after every change) and ``phrases/`` (a phrase index, committed
    crash-safely by the core as each chunk is encoded). Store objects in any number of processes may share one path:
    every write holds the directory's writer lock (another writer waits, then gets DirectoryLockedError), reads
    what the others committed, then commits the documents first and only then deletes the phrases of deleted or
    changed documents; reads catch up too. A process killed at any point reopens to a store whose documents have
    their phrases (or wait for them, as after an overwrite with a new text); phrases of documents gone are left
    out of results and deleted by the next write. Opening never writes, and refuses a directory it would damage
    (documents file missing beside phrases, not a regular file, ``phrases/`` a symbolic link). Without ``path``
    everything lives in memory, like ``InMemoryDocumentStore()``.

    Thread safety: one lock serialises writes, phrase encoding and phrase searches of a store.

    Example:
        >>> store = PhraseDocumentStore()
        >>> store.write_documents([Document(content="Paris is the capital of France.")])
        >>> store.update_phrases(model)          # or let PhraseIndexer / PhraseRetriever do it

    Args:
        path: Directory holding the store (created if missing); None keeps it in memory.
        index: Name of an in-memory store; ``from_dict`` in the same process returns the live store of that name.
        faiss_factory: FAISS structure of the phrase index: ``auto`` (exact while small, then chosen and tuned
            for the size), ``Flat`` (always exact) or any FAISS factory string.
        phrase_dtype: Storage of phrase vectors: ``float16``, ``float32`` or ``int8``.
        title_field: Meta field holding a document's title (encoded before its text).
        document_id_field: Meta field grouping documents (passages) for ``unit="document"``; absent → the id.
        progress_bar: Show a progress bar while encoding phrases.
        bm25_tokenization_regex: As in ``InMemoryDocumentStore`` (None: its default).
        bm25_algorithm: As in ``InMemoryDocumentStore``.
        bm25_parameters: As in ``InMemoryDocumentStore``.
        embedding_similarity_function: As in ``InMemoryDocumentStore``.
        return_embedding: As in ``InMemoryDocumentStore``.
        phrase_index: A phrase index directory (``dphr index --out``, a Haystack 1.x or 2.x store's phrase folder):
            its passage table gives the store's documents (same ids, text and meta; title and document id in
            ``title_field`` / ``document_id_field``) and the index serves their phrases, nothing encoded again
            (:meth:`from_index`). The directory is never written: the store's first phrase change (new documents
            encoded, documents deleted or overwritten) moves its phrases to a private copy. Not with ``path``.
    """

    def __init__(
        self,
        path: str | None = None,
        index: str | None = None,
        faiss_factory: str = "auto",
        phrase_dtype: Literal["float16", "float32", "int8"] = "float16",
        title_field: str = "title",
        document_id_field: str = "document_id",
        progress_bar: bool = True,
        bm25_tokenization_regex: str | None = None,
        bm25_algorithm: Literal["BM25Okapi", "BM25L", "BM25Plus"] = "BM25L",
        bm25_parameters: dict | None = None,
        embedding_similarity_function: Literal["dot_product", "cosine"] = "dot_product",
        return_embedding: bool = True,
        phrase_index: str | None = None,
    ) -> None:
        check_choice("phrase_dtype", phrase_dtype, PHRASE_DTYPES)
        if phrase_index is not None and (path is not None or not isinstance(phrase_index, str | os.PathLike)):
            raise InvalidParameterError(
                "phrase_index must be a phrase index directory, and it cannot be combined with path (to keep such a "
                f"store in a directory, write its documents and attach the index there), got {phrase_index!r:.60}"
            )
        for name, value in (
            ("faiss_factory", faiss_factory),
            ("title_field", title_field),
            ("document_id_field", document_id_field),
        ):
            if not isinstance(value, str) or not value:
                raise InvalidParameterError(f"{name} must be a non-empty string, got {value!r:.60}")
        if path is not None and (not isinstance(path, (str, os.PathLike)) or not str(path)):
            raise InvalidParameterError(f"path must be a directory path or None, got {path!r:.60}")
        regex = {} if bm25_tokenization_regex is None else {"bm25_tokenization_regex": bm25_tokenization_regex}
        self._regex_arg = bm25_tokenization_regex
        super().__init__(
            **regex,
            bm25_algorithm=bm25_algorithm,
            bm25_parameters=bm25_parameters,
            embedding_similarity_function=embedding_similarity_function,
            index=index,
            shared=False,
            return_embedding=return_embedding,
        )
        self.path = str(path) if path is not None else None
        self.faiss_factory = faiss_factory
        self.phrase_dtype = phrase_dtype
        self.title_field = title_field
        self.document_id_field = document_id_field
        self.passage_rule = PassageRule(title_field, document_id_field)
        self.progress_bar = progress_bar
        self._lock = threading.RLock()
        self._depth = 0
        self._touched: set[str] = set()
        self._phrase_index: PhraseIndex | None = None
        self._read_only = False
        self.phrase_index_source = str(phrase_index) if phrase_index is not None else None
        self._dirty = False  # documents changed by the write in progress
        self._directory = StoreDirectory(Path(self.path)) if self.path is not None else None
        key = self._registry_key()
        with _OPEN_LOCK:
            if self.path is not None and key in _OPEN:
                gc.collect()  # a store dropped by its owner may wait for the cycle collector (bound methods)
            if self.path is not None and key in _OPEN:
                raise InvalidParameterError(
                    f"a PhraseDocumentStore is already open on {self.path} in this process: "
                    "use that instance (PhraseDocumentStore.from_dict returns it)"
                )
            _OPEN[key] = self
        try:
            if self.path is not None:
                self._open()
            elif phrase_index is not None:
                self._open_index(Path(phrase_index))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Forgets this store's registration, so that another instance may open its path in this process."""
        with _OPEN_LOCK:
            if _OPEN.get(self._registry_key()) is self:
                del _OPEN[self._registry_key()]

    @classmethod
    def from_index(cls, phrase_index: str | os.PathLike, **settings: Any) -> PhraseDocumentStore:
        """A store whose documents and phrases come from a phrase index directory (``dphr index --out IDX``), with
        any other constructor ``settings``; the same as ``PhraseDocumentStore(phrase_index=IDX, ...)``.

        Example:
            >>> store = PhraseDocumentStore.from_index("my-index")
            >>> PhraseRetriever(document_store=store).run(query="Who wrote Hamlet?")   # the index's model
        """
        return cls(phrase_index=str(phrase_index), **settings)

    # ----------------------------------------------------------------- serialisation
    def _registry_key(self) -> str:
        return f"path:{Path(self.path).resolve()}" if self.path is not None else f"index:{self.index}"

    def to_dict(self) -> dict[str, Any]:
        """Serialises the store's settings (not its documents: a ``path`` store reloads them from there)."""
        return default_to_dict(
            self,
            path=self.path,
            index=None if self.path is not None else self.index,
            faiss_factory=self.faiss_factory,
            phrase_dtype=self.phrase_dtype,
            title_field=self.title_field,
            document_id_field=self.document_id_field,
            progress_bar=self.progress_bar,
            bm25_tokenization_regex=self._regex_arg,
            bm25_algorithm=self.bm25_algorithm,
            bm25_parameters=dict(self.bm25_parameters),
            embedding_similarity_function=self.embedding_similarity_function,
            return_embedding=self.return_embedding,
            **({} if self.phrase_index_source is None else {"phrase_index": self.phrase_index_source}),
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PhraseDocumentStore:
        """The store of these settings: the live one of the same path or index in this process, else a new one."""
        params = data.get("init_parameters", {}) if isinstance(data, dict) else None
        path, index = (params.get("path"), params.get("index")) if isinstance(params, dict) else (None, None)
        key = None
        if isinstance(path, str | os.PathLike):
            key = f"path:{Path(path).resolve()}"
        elif path is None and isinstance(index, str) and index:
            key = f"index:{index}"
        with _OPEN_LOCK:
            live = _OPEN.get(key) if key else None
        if live is not None:
            return live
        return component_from_dict(cls, data)  # data of the wrong shape or type: InvalidParameterError

    def _passage(self, doc: Document) -> dict[str, str] | None:
        """The phrase-index passage of a document (:class:`~dphr_haystack.documents.passages.PassageRule`), or None
        when it has no text to encode."""
        return self.passage_rule.passage(doc.id, doc.content, doc.meta)

    def _stored_passage(self, doc_id: str) -> dict[str, str] | None:
        """The passage of the stored document ``doc_id`` (None: not stored, or without text)."""
        doc = self.storage.get(doc_id)
        return self._passage(doc) if doc is not None else None

    # ----------------------------------------------------------------- DocumentStore protocol (reads)
    def count_documents(self) -> int:
        """Number of stored documents (a store with a ``path`` first reads other writers' commits)."""
        self._follow()
        return super().count_documents()

    def filter_documents(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """``InMemoryDocumentStore.filter_documents`` (a store with a ``path`` first reads other writers' commits)."""
        check_filters(filters)  # an operator the store lacks is refused, never skipped
        self._follow()
        return super().filter_documents(filters)

    # ----------------------------------------------------------------- DocumentStore protocol (mutations)
    def write_documents(self, documents: list[Document], policy: DuplicatePolicy = DuplicatePolicy.NONE) -> int:
        """Writes documents (``InMemoryDocumentStore`` semantics); their phrases come from :meth:`update_phrases`.

        An overwritten document keeps its phrases only when its text, title and document id are unchanged.
        """
        for doc in documents if isinstance(documents, list) else ():  # NaN, lone surrogates: refused before storing
            if isinstance(doc, Document):
                check_storable(doc.id, doc.content, doc.meta)
        if self.path is not None and isinstance(documents, list):
            for doc in documents:
                if isinstance(doc, Document):
                    try:
                        json.dumps(doc.to_dict(flatten=False))
                    except (TypeError, ValueError) as exc:
                        raise InvalidParameterError(
                            f"document {doc.id!r} cannot be stored as JSON in {self.path}: {exc}"
                        ) from exc
        with self._mutating():
            if isinstance(documents, list):
                self._touched.update(doc.id for doc in documents if isinstance(doc, Document))
            self._dirty = True
            return super().write_documents(documents, policy=policy)

    def delete_documents(self, document_ids: list[str]) -> None:
        """Deletes documents and their phrases."""
        with self._mutating():
            self._touched.update(document_ids)
            self._dirty = True
            super().delete_documents(document_ids)

    def delete_all_documents(self) -> None:
        """Deletes every document and every phrase."""
        with self._mutating():
            if self._phrase_index is not None:
                self._touched.update(self._phrase_index.live_passage_ids())
            self._dirty = True
            super().delete_all_documents()

    def delete_by_filter(self, filters: dict[str, Any]) -> int:
        """Deletes the documents matching ``filters`` and their phrases."""
        check_filters(filters)
        with self._mutating():
            self._dirty = True
            return super().delete_by_filter(filters)

    def update_by_filter(self, filters: dict[str, Any], meta: dict[str, Any]) -> int:
        """Merges ``meta`` into matching documents; a changed title or document id drops their phrases."""
        check_filters(filters)
        check_meta("(update_by_filter)", meta)
        with self._mutating():
            self._dirty = True
            count = super().update_by_filter(filters, meta)
            if (
                self._phrase_index is not None
                and isinstance(meta, dict)
                and (self.title_field in meta or self.document_id_field in meta)
            ):
                self._touched.update(self._phrase_index.live_passage_ids())
            return count

    # ----------------------------------------------------------------- phrases
    @property
    def phrase_index(self) -> PhraseIndex | None:
        """The phrase index (None until phrases were first encoded)."""
        return self._phrase_index

    def phrase_count(self) -> int:
        """Number of documents whose phrases are encoded."""
        self._follow()
        with self._lock:
            return 0 if self._phrase_index is None else self._phrase_index.num_live_passages

    def pending_documents(self) -> list[Document]:
        """Documents with text whose phrases are not encoded yet."""
        self._follow()
        with self._lock:
            pending = {p["id"] for p in unencoded_passages(self._phrase_index, self.storage, self._stored_passage)}
            return [doc for doc in self.storage.values() if doc.id in pending]

    def update_phrases(
        self, model: PhraseModel, batch_size: int = 32, progress_bar: bool | None = None, chunk_size: int = 512
    ) -> int:
        """Encodes the phrases of every document that has none yet; returns how many documents were encoded.

        Phrases are committed every ``chunk_size`` documents: a run killed part-way keeps what it committed, and the
        next run encodes the rest.

        Raises:
            ModelMismatchError: The store's phrases were encoded by another phrase model.
        """
        batch_size, chunk_size = check_param("batch_size", batch_size), check_param("chunk_size", chunk_size)
        with self._mutating():
            records = unencoded_passages(self._phrase_index, self.storage, self._stored_passage)
            if self._phrase_index is not None:
                self._check_model(model)
            if not records:
                return 0
            self._phrase_index_for(model)
            index = self._writable_index()  # an index the store was opened from is copied first
            assert index is not None
            show = self.progress_bar if progress_bar is None else progress_bar
            try:
                add_passages(
                    index,
                    model,
                    records,
                    batch_size=batch_size,
                    chunk_size=chunk_size,
                    duplicates="overwrite",
                    progress=show,
                )
            except EmptyCorpusError:
                return 0
            return len(records)

    def attach_phrase_index(self, phrase_index: PhraseIndex) -> None:
        """Serve the stored documents' phrases from an index built elsewhere over the same documents (``dphr
        index``, ``add_passages``, a Haystack 1.x store's phrase index), without encoding them again.

        Every live passage of ``phrase_index`` must be a stored document of the same id, text, title and document
        id (as :meth:`update_phrases` would have encoded it); stored documents it lacks stay pending. The index
        replaces the store's phrases. A store with a ``path`` keeps a copy of it in its directory; an in-memory
        store uses it as given, so the store's later phrase changes (deleted or overwritten documents, phrases of
        new documents) are written to it, and to its directory when it has one.

        Raises:
            InvalidParameterError: A passage of the index is not a stored document, or differs from it.
        """
        with self._mutating():
            check_attachable(phrase_index, self._stored_passage, self.title_field, self.document_id_field)
            if self._directory is not None:
                folder = self._directory.check_phrases_dir()
                if phrase_index.path is None or phrase_index.path.resolve() != folder.resolve():
                    phrase_index.save(folder)
                    phrase_index = PhraseIndex.load(folder, verify=False)
            self._phrase_index, self._read_only = phrase_index, False

    def _check_model(self, model: PhraseModel) -> None:
        assert self._phrase_index is not None
        check_phrase_model(
            self._phrase_index,
            model,
            "this store's phrases were encoded by another phrase model: use that model, or a new store "
            "(or delete_all_documents and write them again)",
        )

    def _phrase_index_for(self, model: PhraseModel) -> PhraseIndex:
        if self._phrase_index is None:
            folder = self._directory.check_phrases_dir() if self._directory is not None else None
            self._phrase_index = PhraseIndex.create(
                model,
                path=folder,
                faiss_factory=self.faiss_factory,
                filter_threshold=model.config.filter_threshold,
                dtype=self.phrase_dtype,
            )
        return self._phrase_index

    def search_phrases(
        self,
        model: PhraseModel,
        queries: Sequence[str],
        unit: str = "passage",
        top_k: int = 10,
        filters: dict[str, Any] | None = None,
        max_answer_length: int | None = None,
        whole_words: bool = True,
        skip_question_copies: bool = True,
        batch_size: int = 32,
        passage_scoring: str = "max",
        truecase: bool | None = None,
        query_precision: str = "int8",
        ranking: str = "confidence",
    ) -> list[list[tuple[Hit, Document]]]:
        """Phrase search (the store scores; its retriever resolves the options and makes this one call): per query,
        the core's hits (phrases, passages or documents) with their stored Document.

        Args:
            model: The phrase model the store's phrases were encoded with.
            queries: Questions.
            unit: ``phrase``, ``passage`` or ``document``.
            top_k: Hits per query.
            filters: Haystack 2 filters; only matching documents are searched.
            max_answer_length: Longest phrase in subwords (default: the model's).
            whole_words: Phrases start and end on word boundaries.
            skip_question_copies: Never answer with a phrase the question contains.
            batch_size: Query encoding batch size.
            passage_scoring: ``max`` (a passage or document scores its best phrase) or ``logsumexp`` (all of them).
            truecase: Truecase all-lowercase queries (None: the model's setting).
            query_precision: ``int8`` (the query side in int8 on the CPU) or ``float32``.
            ranking: ``confidence`` (the first results reordered by their answer's confidence) or ``score``.
        """
        options = PhraseSearchOptions(
            unit=unit,
            top_k=top_k,
            max_answer_length=max_answer_length,
            whole_words=whole_words,
            skip_question_copies=skip_question_copies,
            truecase=truecase,
            passage_scoring=passage_scoring,
            query_batch_size=batch_size,
            query_precision=query_precision,
            ranking=ranking,
        )
        self._follow()
        with self._lock:
            index = self._phrase_index
            if index is None or index.num_live_passages == 0:
                if filters:
                    self.filter_documents(filters)  # bad filters raise even on an empty store
                return [[] for _ in queries]
            self._check_model(model)
            allowed = passage_mask(index, {doc.id for doc in self.filter_documents(filters)}) if filters else None
            results = search_phrase_index(index, model, list(queries), options, allowed)
            stored = {hit_passage_id(hit): self.storage.get(hit_passage_id(hit)) for hits in results for hit in hits}
            return [pair_hits(hits, {k: v for k, v in stored.items() if v is not None}) for hits in results]


__all__ = ["PhraseDocumentStore"]
