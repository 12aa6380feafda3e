"""PhraseDocumentStore: Haystack 2 documents in memory (or in a directory), their phrase vectors beside them.

The store is an ``InMemoryDocumentStore`` (so ``InMemoryBM25Retriever`` and ``InMemoryEmbeddingRetriever`` search
the very same documents) plus one :class:`~dphr_haystack.PhraseIndex` of the documents' phrases. One Haystack
document is one phrase-index passage with the same id.
"""

from __future__ import annotations

import gc
import inspect
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

from .._util.lock import DEFAULT_LOCK_TIMEOUT, check_lock_timeout
from ..documents.database import encode_body
from ..documents.index_settings import INDEX_SETTINGS, settings_of_index
from ..documents.passages import PassageRule, check_attachable, passage_mask, unencoded_passages
from ..documents.results import hit_passage_id, pair_hits
from ..documents.retrieval import search_phrase_index, warm_phrase_index
from ..documents.validation import check_meta, check_storable
from ..errors import InvalidParameterError
from ..index.keys import check_key_budget
from ..index.phrase_index import PhraseIndex
from ..model.phrase_model import PhraseModel
from ..params import check_choice, check_param
from ..search import Hit
from ..search_options import DEFAULT_SEARCH_OPTIONS, PhraseSearchOptions
from . import phrase_updates
from .filters import check_filters
from .serialization import component_from_dict
from .store_directory import CONFIG_KEY, StoreDirectory, document_body
from .syncing import StoreSync

# Haystack 3's in-memory stores share their documents per index unless told not to (``shared``); 2.x's keep their own.
_NOT_SHARED = {"shared": False} if "shared" in inspect.signature(InMemoryDocumentStore.__init__).parameters else {}

logger = logging.getLogger(__name__)

PHRASE_DTYPES = ("float16", "float32", "int8")

# Stores opened in this process, by path or index name: from_dict hands back the live one, so that the components
# of a pipeline loaded from YAML (retrievers, indexer, writer) share one store as they did when it was saved.
_OPEN: weakref.WeakValueDictionary[str, PhraseDocumentStore] = weakref.WeakValueDictionary()
_OPEN_LOCK = threading.Lock()
# Held by from_dict around finding the live store and making a new one: two threads that load pipelines naming the same
# path (Hayhooks deploys its pipelines in parallel) get one store, and never one still loading its directory.
_OPENING = threading.RLock()


class PhraseDocumentStore(InMemoryDocumentStore):
    """An ``InMemoryDocumentStore`` whose documents are also searchable by phrase.

    ``write_documents`` stores documents only (no model is needed, nothing is encoded); their phrases are encoded
    by :meth:`update_phrases`, which ``PhraseIndexer`` calls after writing and ``PhraseRetriever`` calls before a
    search (``encode_missing``), so documents written by a plain ``DocumentWriter`` become searchable by phrase
    too. Deleting a document, or overwriting it with another text, title or document id, removes its phrases at
    once; an overwrite with the same text keeps them.

    Persistence: with ``path`` the store lives in that directory (:mod:`~dphr_haystack.haystack2.store_directory`),
    in the format the Haystack 1.x store keeps too: one SQLite database (``store.sqlite3``, the documents in its
    collection ``document``) and the phrase index folder it names (committed crash-safely by the core as each chunk
    is encoded). Each write commits only the documents it changed, in one database transaction. Store objects in
    any number of processes may share one path: every write holds the directory's writer lock (another writer waits
    ``lock_timeout`` seconds, then gets DirectoryLockedError), applies what the others committed, commits, and only
    then deletes the phrases of deleted or changed documents; reads apply what changed too. A process killed at any
    point reopens to a store whose documents have their phrases (or wait for them, as after an overwrite with a new
    text); phrases of documents gone are left out of results and deleted by the next write. A directory of an
    earlier format (``documents.jsonl`` + ``phrases/``) is converted on open, its files left as they were; a damaged
    one is refused untouched. A read-only directory opens and answers; its writes raise ReadOnlyStoreError.
    Without ``path`` everything lives in memory, like ``InMemoryDocumentStore()``.

    Thread safety: one lock serialises writes, phrase commits and phrase searches of a store; phrases are encoded
    outside it (and outside the directory's writer lock).

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
        phrase_key_vectors: For large corpora: the phrase index's FAISS structure searches this many k-means
            centroids of each passage's vectors instead of every vector, and searches read the passages they hit
            whole (8: a quarter of the structure's RAM, within 1 EM point; see ``docs/scale.md``); None: every
            vector. These three shape a new phrase index; left at their defaults, a ``path`` store takes those it
            was created with and a store opened from ``phrase_index`` that index's. An index once built keeps
            its dtype and key vectors (a store asking for others says so in a warning).
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
        lock_timeout: Seconds a write waits for another writer of ``path`` before DirectoryLockedError.
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
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        phrase_key_vectors: int | None = None,
    ) -> None:
        check_choice("phrase_dtype", phrase_dtype, PHRASE_DTYPES)
        self.phrase_key_vectors = check_key_budget(phrase_key_vectors)
        self.lock_timeout = check_lock_timeout(lock_timeout)
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
            return_embedding=return_embedding,
            **_NOT_SHARED,
        )
        self.path = str(path) if path is not None else None
        self.faiss_factory = faiss_factory
        self.phrase_dtype = phrase_dtype
        self.title_field = title_field
        self.document_id_field = document_id_field
        self.passage_rule = PassageRule(title_field, document_id_field)
        self.progress_bar = progress_bar
        self.phrase_index_source = str(phrase_index) if phrase_index is not None else None
        self._sync = StoreSync(self, self.passage_rule, None)
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
                self._sync.directory = StoreDirectory(Path(self.path), self.lock_timeout, self._settings())
                self._take_unset(self._sync.directory.db.config.get(CONFIG_KEY, {}))  # what it was created with
                self._sync.load()
            elif phrase_index is not None:
                self._sync.open_index(Path(phrase_index))
                assert self._sync.index is not None
                self._take_unset(settings_of_index(self._sync.index))
        except BaseException:
            self.close()
            raise

    def _take_unset(self, settings: dict[str, Any]) -> None:
        """Take the phrase-index settings (FAISS factory, stored dtype, key vectors) left at their defaults from
        ``settings``: those a store directory recorded when it was created, or those of the index it was opened
        from, so that the indexes it creates later are built as before."""
        defaults = inspect.signature(type(self).__init__).parameters
        for name in INDEX_SETTINGS:
            if name in settings and getattr(self, name) == defaults[name].default:
                setattr(self, name, settings[name])
        check_choice("phrase_dtype", self.phrase_dtype, PHRASE_DTYPES)
        self.phrase_key_vectors = check_key_budget(self.phrase_key_vectors)

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

    def _settings(self) -> dict[str, Any]:
        """The settings a new store directory records."""
        settings = self.to_dict()["init_parameters"]
        return {k: v for k, v in settings.items() if k not in ("path", "index", "phrase_index")}

    def to_dict(self) -> dict[str, Any]:
        """Serialises the store's settings (not its documents: a ``path`` store reloads them from there)."""
        return default_to_dict(
            self,
            path=self.path,
            index=None if self.path is not None else self.index,
            faiss_factory=self.faiss_factory,
            phrase_dtype=self.phrase_dtype,
            phrase_key_vectors=self.phrase_key_vectors,
            title_field=self.title_field,
            document_id_field=self.document_id_field,
            progress_bar=self.progress_bar,
            bm25_tokenization_regex=self._regex_arg,
            bm25_algorithm=self.bm25_algorithm,
            bm25_parameters=dict(self.bm25_parameters),
            embedding_similarity_function=self.embedding_similarity_function,
            return_embedding=self.return_embedding,
            lock_timeout=self.lock_timeout,
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
        with _OPENING:
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
        return self._sync.passage_of(doc_id)

    # ----------------------------------------------------------------- DocumentStore protocol (reads)
    def count_documents(self) -> int:
        """Number of stored documents (a store with a ``path`` first reads other writers' commits)."""
        self._sync.follow()
        return super().count_documents()

    def filter_documents(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """``InMemoryDocumentStore.filter_documents`` (a store with a ``path`` first reads other writers' commits)."""
        check_filters(filters)  # an operator the store lacks is refused, never skipped
        self._sync.follow()
        return super().filter_documents(filters)

    # ----------------------------------------------------------------- DocumentStore protocol (mutations)
    def write_documents(self, documents: list[Document], policy: DuplicatePolicy = DuplicatePolicy.NONE) -> int:
        """Writes documents (``InMemoryDocumentStore`` semantics); their phrases come from :meth:`update_phrases`.

        An overwritten document keeps its phrases only when its text, title and document id are unchanged.
        """
        docs = [doc for doc in documents if isinstance(doc, Document)] if isinstance(documents, list) else []
        for doc in docs:  # NaN, infinities, lone surrogates: refused before anything is stored
            check_storable(
                doc.id, doc.content, doc.meta, embedding=doc.embedding, sparse_embedding=doc.sparse_embedding
            )
            if self.path is not None:
                self._check_json(doc)
        with self._sync.writing():
            self._sync.touch(doc.id for doc in docs)
            return super().write_documents(documents, policy=policy)

    def _check_json(self, doc: Document) -> None:
        try:
            encode_body(document_body(doc))
        except (TypeError, ValueError) as exc:
            raise InvalidParameterError(
                f"document {doc.id!r:.60} cannot be stored as JSON in {self.path}: {exc}"
            ) from exc

    def delete_documents(self, document_ids: list[str]) -> None:
        """Deletes documents and their phrases."""
        with self._sync.writing():
            self._sync.touch(document_ids)
            super().delete_documents(document_ids)

    def delete_all_documents(self) -> None:
        """Deletes every document and every phrase."""
        with self._sync.writing():
            self._sync.touch(self.storage)
            if self._sync.index is not None:
                self._sync.touch(self._sync.index.live_passage_ids())
            self._sync.dropped = True
            super().delete_all_documents()

    def delete_by_filter(self, filters: dict[str, Any]) -> int:
        """Deletes the documents matching ``filters`` and their phrases (all of them: :meth:`delete_all_documents`)."""
        self._check_filter_argument("delete_by_filter", filters)
        with self._sync.writing():
            ids = [doc.id for doc in InMemoryDocumentStore.filter_documents(self, filters)]
            self._sync.touch(ids)
            super().delete_documents(ids)
            return len(ids)

    def update_by_filter(self, filters: dict[str, Any], meta: dict[str, Any]) -> int:
        """Merges ``meta`` into matching documents; a changed title or document id drops their phrases."""
        self._check_filter_argument("update_by_filter", filters)
        check_meta("(update_by_filter)", meta)
        with self._sync.writing():
            ids = [doc.id for doc in InMemoryDocumentStore.filter_documents(self, filters)]
            self._sync.touch(ids)
            return super().update_by_filter(filters, meta)

    @staticmethod
    def _check_filter_argument(method: str, filters: Any) -> None:
        if filters is None:
            raise InvalidParameterError(
                f"{method} needs filters (None given): to delete every document, use delete_all_documents"
            )
        check_filters(filters)

    # ----------------------------------------------------------------- phrases
    @property
    def phrase_index(self) -> PhraseIndex | None:
        """The phrase index (None until phrases were first encoded)."""
        return self._sync.index

    def phrase_count(self) -> int:
        """Number of documents whose phrases are encoded."""
        self._sync.follow()
        with self._sync.lock:
            return 0 if self._sync.index is None else self._sync.index.num_live_passages

    def pending_documents(self) -> list[Document]:
        """Documents with text whose phrases are not encoded yet."""
        self._sync.follow()
        with self._sync.lock:
            pending = {p["id"] for p in unencoded_passages(self._sync.index, self.storage, self._stored_passage)}
            return [doc for doc in self.storage.values() if doc.id in pending]

    def update_phrases(
        self, model: PhraseModel, batch_size: int = 32, progress_bar: bool | None = None, chunk_size: int = 512
    ) -> int:
        """Encodes the phrases of every document that has none yet; returns how many documents were encoded.

        Each chunk of ``chunk_size`` documents is encoded without holding the store's locks (other writers and
        searches go on), then committed: a run killed part-way keeps what it committed, and the next run encodes
        the rest. A document deleted or changed while its chunk was encoded is left for a later run.

        Raises:
            ModelMismatchError: The store's phrases were encoded by another phrase model.
        """
        batch_size, chunk_size = check_param("batch_size", batch_size), check_param("chunk_size", chunk_size)
        show = self.progress_bar if progress_bar is None else progress_bar
        settings = (self.faiss_factory, self.phrase_dtype, self.phrase_key_vectors)
        return phrase_updates.update_phrases(self._sync, model, settings, batch_size, chunk_size, bool(show))

    def attach_phrase_index(self, phrase_index: PhraseIndex) -> None:
        """Serve the stored documents' phrases from an index built elsewhere over the same documents (``dphr
        index``, ``add_passages``, a Haystack 1.x store's phrase index), without encoding them again.

        Every live passage of ``phrase_index`` must be a stored document of the same id, text, title and document
        id (as :meth:`update_phrases` would have encoded it); stored documents it lacks stay pending. The index
        replaces the store's phrases. A store with a ``path`` keeps a copy of it in its directory; an in-memory
        store uses it as given, so the store's later phrase changes (deleted or overwritten documents, phrases of
        new documents) are written to it.

        Raises:
            InvalidParameterError: A passage of the index is not a stored document, or differs from it.
        """
        with self._sync.writing():
            check_attachable(phrase_index, self._stored_passage, self.title_field, self.document_id_field)
            self._sync.replace_index(phrase_index)

    def warm_up(self, model: PhraseModel, options: PhraseSearchOptions = DEFAULT_SEARCH_OPTIONS) -> None:
        """Read now what the first phrase search would otherwise wait for (:meth:`PhraseSearcher.warm_up
        <dphr_haystack.search.PhraseSearcher.warm_up>` with ``options``: seconds at 200,000 passages)."""
        self._sync.follow()
        with self._sync.lock:
            index = self._sync.index
            if index is not None and index.num_live_passages:
                warm_phrase_index(index, model, options)

    def search_phrases(
        self,
        model: PhraseModel,
        queries: Sequence[str],
        options: PhraseSearchOptions = DEFAULT_SEARCH_OPTIONS,
        filters: dict[str, Any] | None = None,
        **option_values: Any,
    ) -> list[list[tuple[Hit, Document]]]:
        """Phrase search (the store scores; its retriever resolves the options and makes this one call): per query,
        the core's hits (phrases, passages or documents) with their stored Document.

        Args:
            model: The phrase model the store's phrases were encoded with.
            queries: Questions.
            options: The search options (:class:`~dphr_haystack.search_options.PhraseSearchOptions`), with any
                given by name in ``option_values`` in their place (``unit="phrase", top_k=5``).
            filters: Haystack 2 filters; only matching documents are searched.
        """
        options = options.replaced(**option_values)
        self._sync.follow()
        with self._sync.lock:
            index = self._sync.index
            if index is None or index.num_live_passages == 0:
                if filters:
                    self.filter_documents(filters)  # bad filters raise even on an empty store
                return [[] for _ in queries]
            phrase_updates.check_model(index, model)
            allowed = passage_mask(index, {doc.id for doc in self.filter_documents(filters)}) if filters else None
            results = search_phrase_index(index, model, list(queries), options, allowed)
            stored = {hit_passage_id(hit): self.storage.get(hit_passage_id(hit)) for hits in results for hit in hits}
            return [pair_hits(hits, {k: v for k, v in stored.items() if v is not None}) for hits in results]


__all__ = ["PhraseDocumentStore"]
