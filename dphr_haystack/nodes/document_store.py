"""PhraseDocumentStore: a Haystack keyword document store with a phrase index beside its documents.

Documents, labels and BM25 live in an inner Haystack store (``InMemoryDocumentStore(use_bm25=True)`` by
default, ``ElasticsearchDocumentStore`` when ``elasticsearch_host`` is set), so ``BM25Retriever``,
``EmbeddingRetriever`` and ``PhraseRetriever`` see the same documents and ids. Each Haystack ``index`` has its
own :class:`~dphr_haystack.PhraseIndex`; one Haystack document is one phrase-index passage (same id).
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from haystack.document_stores import BaseDocumentStore, KeywordDocumentStore
from haystack.errors import DocumentStoreError
from haystack.schema import Document, Label

from .._util.lock import DEFAULT_LOCK_TIMEOUT, check_lock_timeout
from .._util.nofollow import refuse_symlink
from ..documents.passages import PassageRule
from ..errors import DphrError, InvalidParameterError
from ..index.keys import check_key_budget
from ..index.phrase_index import PhraseIndex
from ..params import check_choice, check_param
from ._rwlock import ReadWriteLock, write_locked
from ._schema import typed_init
from .live import StoreDirectory, store_read, store_write
from .persistence import is_store, save_store, saved_settings
from .phrases import PhraseIndexingStats
from .store_checks import check_bm25, check_meta, checked_documents, document_line
from .stores import InnerQueries, make_inner_store
from .syncing import DirectorySync

logger = logging.getLogger(__name__)


@typed_init
class PhraseDocumentStore(DirectorySync, InnerQueries, KeywordDocumentStore):
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

    Shared directory (``path``): every write is committed to the directory as it happens, in one transaction of
    its store database (documents and labels per Haystack index, the settings, which ``phrases-N`` folder holds
    each phrase index; phrases are committed in place just before), under an inter-process writer lock: any number
    of store objects and processes may open one path, write to it (one write at a time; a writer waits up to
    ``lock_timeout`` seconds, then gets a DirectoryLockedError naming the holder) and see each other's committed
    writes at their next read or query, without a restart. Opening and reading never write; a read-only directory
    (or mount) is read, and its writes raise ReadOnlyStoreError. The store deletes only folders it made, and
    never anything else in the directory. A directory of an earlier version is converted on open (its old files
    are left as they are). This is how Haystack's REST API, which builds its indexing and query pipelines
    separately, shares one store; the Haystack 2 store reads and writes the same directories (its documents are
    this layer's default index ``document``).

    Snapshots (``save`` / ``load`` / ``load_path``): :meth:`save` replaces what its target directory holds in one
    commit: a save killed at any point leaves the previous content. A store loaded from a snapshot keeps the
    snapshot's settings for any argument not given. After :meth:`load` or :meth:`save`, phrase indexes kept on
    disk live in that directory and phrase *additions* are committed there as they happen, so an
    ``update_embeddings`` killed part-way resumes where it stopped; documents and phrase *deletions* reach the
    directory only through :meth:`save` (the first deletion moves the phrase index to a private copy). Phrases
    whose document the directory does not hold (added by a run killed before its save) are left out of results;
    nothing is written on load. Opened with ``path`` instead, a saved directory is a shared store.

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
        faiss_factory: FAISS structure of new phrase indexes: ``auto`` (exact while small, then chosen and tuned
            for the size), ``Flat`` (always exact) or any FAISS factory string.
        phrase_dtype: Storage of phrase vectors: ``float16``, ``float32`` or ``int8``.
        phrase_key_vectors: For large corpora: the FAISS structure of new phrase indexes searches this many k-means
            centroids of each passage's vectors instead of every vector, and searches read the passages they hit
            whole (8: a quarter of the structure's RAM, within 1 EM point; see ``docs/scale.md``); None: every
            vector. These three shape a new phrase index; a store opened from ``phrase_index`` takes that index's
            unless given others. An index once built keeps its dtype and key vectors (a store asking for others
            says so in a warning).
        title_field: Meta field holding a document's title (encoded before the text, as in DensePhrases).
        document_id_field: Meta field grouping passages into documents for ``unit="document"``
            (absent → each Haystack document is its own document).
        load_path: A store directory (written by :meth:`save` or shared); its documents, labels and phrase indexes
            are loaded, and its settings are used for every argument not given.
        path: A shared store directory (created when missing): every write is committed there and other store
            objects and processes on the same path see it (see above). Its settings are used for every argument
            not given. A directory written by :meth:`save` opens as a shared directory too.
        lock_timeout: Seconds a write to ``path`` (or to a phrase index directory) waits for another writer.
        phrase_index: A phrase index directory (``dphr index --out``, or another store's phrase folder): its passage
            table gives the documents of ``index`` (same ids, text and meta; title and document id in
            ``title_field`` / ``document_id_field``) and the index serves their phrases, nothing encoded again
            (:meth:`from_index`). The directory is never written: the first phrase change moves the store's phrases
            to a private copy; :meth:`save` keeps it all.
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
        faiss_factory: str = "auto",
        phrase_dtype: Literal["float16", "float32", "int8"] = "float16",
        title_field: str = "title",
        document_id_field: str = "document_id",
        load_path: str | None = None,
        elasticsearch_host: str | None = None,
        elasticsearch_port: int = 9200,
        elasticsearch_scheme: Literal["http", "https"] = "http",
        elasticsearch_username: str = "",
        elasticsearch_password: str = "",
        path: str | None = None,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        phrase_index: str | None = None,
        phrase_key_vectors: int | None = None,
    ):
        super().__init__()
        settings = {name: value for name, value in locals().items() if name not in ("self", "__class__")}
        if sum(bool(source) for source in (path, load_path, phrase_index)) > 1:
            raise InvalidParameterError(
                "give one of path (a shared store directory), load_path (a snapshot) and phrase_index (a phrase "
                "index directory); to keep a store opened from a phrase index, save() it"
            )
        where = path or load_path
        saved = saved_settings(Path(where), check_lock_timeout(lock_timeout)) if where else {}
        passed = self._component_config.get("params", {})
        settings.update({name: value for name, value in saved.items() if name not in passed and name in settings})
        self._setup(**settings)

    def _setup(
        self,
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
        faiss_factory: str,
        phrase_dtype: str,
        title_field: str,
        document_id_field: str,
        load_path: str | None,
        elasticsearch_host: str | None,
        elasticsearch_port: int,
        elasticsearch_scheme: str,
        elasticsearch_username: str,
        elasticsearch_password: str,
        path: str | None,
        lock_timeout: float,
        phrase_index: str | None,
        phrase_key_vectors: int | None,
    ) -> None:
        """The constructor, with the settings a saved directory supplies filled in."""
        self._settings = {
            name: value
            for name, value in locals().items()
            if name not in ("self", "load_path", "path", "phrase_index", "elasticsearch_password")
        }
        self._lock = ReadWriteLock()
        self._staged = []  # phrases encoded by an indexing pipeline's retriever, committed with their documents
        self._staging = threading.Lock()
        self._indexing = ReadWriteLock()  # its write lock: one update_embeddings per store at a time
        check_choice("duplicate_documents", duplicate_documents, self.duplicate_documents_options)
        check_bm25(bm25_algorithm, bm25_parameters)
        embedding_dim = self._settings["embedding_dim"] = int(check_param("embedding_dim", embedding_dim))
        check_param("elasticsearch_port", elasticsearch_port)
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
        self.phrase_key_vectors = self._settings["phrase_key_vectors"] = check_key_budget(phrase_key_vectors)
        self.title_field = title_field
        self.document_id_field = document_id_field
        self.passage_rule = PassageRule(title_field, document_id_field)
        self._phrase_indexes: dict[str, PhraseIndex] = {}
        self._snapshots: set[Path] = set()  # phrase index folders of the directory this store was loaded from
        self._read_only: set[Path] = set()  # phrase index directories it was opened from (never written)
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
        self.lock_timeout = check_lock_timeout(lock_timeout)
        self._live: StoreDirectory | None = None
        if path:
            self._open_shared(Path(path))
        elif load_path:
            self._restore(Path(load_path))
        elif phrase_index:
            self._open_index(Path(phrase_index))

    # ----------------------------------------------------------------- inner store plumbing
    @property
    def path(self) -> Path | None:
        """The shared store directory, or None."""
        return self._live.path if self._live is not None else None

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

    @store_read
    def matching_ids(self, filters: dict[str, Any] | None, index: str | None = None) -> set[str]:
        """Ids of the documents of ``index`` that pass ``filters``."""
        return self._inner.matching_ids(index or self.index, filters)

    # ----------------------------------------------------------------- documents
    @store_write
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
        documents = checked_documents(documents, self._create_document_field_map())
        if self._live is not None:
            for doc in documents:  # a document the directory cannot hold fails before anything is written
                document_line(doc, index)
        phrase_index = self._phrase_indexes.get(index)
        stale: list[str] = []
        if phrase_index is not None and policy == "overwrite":
            stale = [doc.id for doc in documents if self._phrases_outdated(phrase_index, doc)]
        self._drop_phrases(index, stale, written=False)
        # Under "skip", stored documents stay as they are: only the new ones are committed.
        kept = {doc.id for doc in documents if self._inner.has_document(index, doc.id)} if policy == "skip" else set()
        self._inner.write(
            index,
            lambda: self.inner.write_documents(
                documents, index=index, batch_size=batch_size, duplicate_documents=policy, headers=headers
            ),
        )
        self._drop_phrases(index, stale, written=True)
        written = list(dict.fromkeys(doc.id for doc in documents))
        if self._staged:
            self._commit_staged(index, written)
        self._touch(index, [i for i in written if i not in kept])

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
        self._follow()
        with self._lock.read():  # in memory a snapshot: the lock is not held while the caller iterates
            docs = self._inner.documents(index, filters, return_embedding, batch_size=batch_size, headers=headers)
        yield from docs

    def get_document_by_id(self, id: str, index: str | None = None, headers: dict[str, str] | None = None):
        docs = self.get_documents_by_id([id], index=index, headers=headers)
        return docs[0] if docs else None

    @store_read
    def get_documents_by_id(
        self,
        ids: list[str],
        index: str | None = None,
        batch_size: int = 10_000,
        headers: dict[str, str] | None = None,
    ) -> list[Document]:
        """Documents with these ids, in the order given; unknown ids are left out."""
        return self._inner.documents_by_id(ids, index or self.index, batch_size=batch_size, headers=headers)

    @store_read
    def get_document_count(
        self,
        filters: dict[str, Any] | None = None,
        index: str | None = None,
        only_documents_without_embedding: bool = False,
        headers: dict[str, str] | None = None,
    ) -> int:
        """Number of documents; ``only_documents_without_embedding``: those with neither phrases nor a dense
        embedding (the complement of :meth:`get_embedding_count`)."""
        index = index or self.index
        count = self._inner.document_count(index, filters, False, headers=headers)
        return count - len(self._embedded_ids(index, filters)) if only_documents_without_embedding else count

    @store_write
    def update_document_meta(self, id: str, meta: dict[str, Any], index: str | None = None):
        """Replace a document's meta; a changed title or document id drops its phrases until update_embeddings."""
        index = index or self.index
        if not isinstance(meta, dict):
            raise DocumentStoreError(f"update_document_meta takes a dict, got {type(meta).__name__}")
        check_meta(id, meta)  # a NaN or a lone surrogate would break every later read of this document
        if not self._inner.has_document(index, id):
            raise DocumentStoreError(f"no document with id {id!r} in index {index!r}")
        phrase_index = self._phrase_indexes.get(index)
        stale: list[str] = []
        if phrase_index is not None and phrase_index.passage_row(id) is not None:
            current = self.get_document_by_id(id, index=index)
            if current is not None:
                changed = copy.copy(current)
                changed.meta = {**(current.meta or {}), **(meta or {})}
                if self._phrases_outdated(phrase_index, changed):
                    stale = [id]
        self._drop_phrases(index, stale, written=False)
        self.inner.update_document_meta(id, meta, index=index)
        self._drop_phrases(index, stale, written=True)
        self._touch(index, [id])

    @store_write
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
            self._touch_all(index)  # its phrase folder is removed once the commit no longer names it
            return
        targets = list(ids) if ids else None
        if filters:
            allowed = self.matching_ids(filters, index)
            targets = [i for i in targets if i in allowed] if targets is not None else sorted(allowed)
        if not targets:
            return
        self._drop_phrases(index, targets, written=False)
        self._inner.write(index, lambda: self.inner.delete_documents(index=index, ids=targets, headers=headers))
        self._drop_phrases(index, targets, written=True)
        self._touch(index, targets)

    @store_write
    def delete_index(self, index: str):
        """Delete an index: its documents, its labels if it is a label index, and its phrase index."""
        self._phrase_indexes.pop(index, None)
        self.inner.delete_index(index)
        self._touch_all(index, labels=True)

    # ----------------------------------------------------------------- labels
    @store_write
    def write_labels(self, labels, index: str | None = None, headers: dict[str, str] | None = None):
        self.inner.write_labels(labels, index=index or self.label_index, headers=headers)
        self._touch_labels(index or self.label_index)

    @store_read
    def get_all_labels(
        self, index: str | None = None, filters: dict[str, Any] | None = None, headers: dict[str, str] | None = None
    ) -> list[Label]:
        return self._inner.get_all_labels(index=index or self.label_index, filters=filters, headers=headers)

    @store_read
    def get_label_count(self, index: str | None = None, headers: dict[str, str] | None = None) -> int:
        return self.inner.get_label_count(index=index or self.label_index, headers=headers)

    @store_write
    def delete_labels(
        self,
        index: str | None = None,
        ids: list[str] | None = None,
        filters: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ):
        self._inner.delete_labels(index=index or self.label_index, ids=ids, filters=filters, headers=headers)
        self._touch_labels(index or self.label_index)

    # ----------------------------------------------------------------- persistence
    @write_locked
    def save(self, path: str | Path) -> None:
        """Write documents, labels (in-memory store only; Elasticsearch keeps its own), phrase indexes and settings
        to the store directory ``path`` (created when missing), replacing what it held in one commit under its
        writer lock (other writers of ``path`` wait; its readers see the copy at their next read). A save stopped at
        any point leaves ``path``'s previous state. A shared store saving to its own ``path`` has nothing to copy
        (every write is committed there).

        Raises:
            DocumentStoreError: A document or label cannot be written as JSON (e.g. a ``set`` in its meta);
                ``path`` is left as it was.
        """
        path = refuse_symlink(Path(path).absolute())
        if self._live is not None:
            if self._live.db.changed():
                self._catch_up()
            if path.resolve() == self._live.path.resolve():
                return
        folders = save_store(
            path, self._config, self._inner.saved_collections(), self._phrase_indexes, self.lock_timeout
        )
        if self._live is not None:
            return  # a shared store keeps committing to its own directory; the copy is a snapshot
        # Phrase indexes kept on disk now live in the new copy: later phrase additions are committed there.
        self._snapshots = set()
        for name, folder in folders.items():
            if self._phrase_indexes[name].path is not None:
                self._phrase_indexes[name] = PhraseIndex.load(path / folder, verify=False)
                self._snapshots.add((path / folder).resolve())

    @classmethod
    def load(cls, path: str | Path, elasticsearch_password: str = "") -> PhraseDocumentStore:
        """A store rebuilt from a store directory (written by :meth:`save`, or a shared ``path``), with the settings
        it was saved with."""
        if not is_store(Path(path)):
            raise DocumentStoreError(f"{path} holds no store: not a directory written by PhraseDocumentStore.save")
        config = saved_settings(Path(path), DEFAULT_LOCK_TIMEOUT)
        if config.get("elasticsearch_host"):
            config["elasticsearch_password"] = elasticsearch_password
        try:
            return cls(**config, load_path=str(path))
        except (DphrError, DocumentStoreError):
            raise
        except (TypeError, ValueError, KeyError) as exc:  # a damaged config section
            raise DocumentStoreError(f"{path}: unusable store settings ({exc})") from exc

    @classmethod
    def from_index(cls, phrase_index: str | Path, **settings: Any) -> PhraseDocumentStore:
        """A store whose documents and phrases come from a phrase index directory (``dphr index --out IDX``), with
        any other constructor ``settings``; the same as ``PhraseDocumentStore(phrase_index=IDX, ...)``.

        Example:
            >>> store = PhraseDocumentStore.from_index("my-index")
            >>> retriever = PhraseRetriever(document_store=store)   # the model the index was built with
        """
        return cls(phrase_index=str(phrase_index), **settings)


__all__ = ["PhraseDocumentStore", "PhraseIndexingStats"]
