"""Ready-made Haystack 2 pipelines: indexing, BM25, phrase QA, phrase passages and BM25 + phrase hybrids (rank
fusion and score fusion with the answers' confidence).

``pipelines/haystack2/*.yml`` are these pipelines saved with ``Pipeline.dumps`` (``write_pipeline_files``); load them
with :func:`dphr_haystack.haystack2.load_pipeline`. All of them name one store (the index ``dphr``), so in one process
an indexing pipeline and the query pipelines loaded from YAML share it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from haystack import Document, Pipeline
from haystack.components.joiners import DocumentJoiner
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever

from .._util.atomic import write_file_atomic
from ..corpus import read_corpora
from ..model.registry import DEFAULT_MODEL
from .document_store import PhraseDocumentStore
from .indexer import PhraseIndexer
from .retriever import PhraseRetriever

STORE_INDEX = "dphr"
# hybrid_confidence: the weights of BM25's scaled score and of the answer confidence (benchmarks/quality/
# hybrid_weights.py chose them on validation questions for the Haystack 1.x hybrid_confidence.yml)
CONFIDENCE_FUSION_WEIGHTS = (0.7, 0.3)


def default_store() -> PhraseDocumentStore:
    """The in-memory store the shipped pipelines name (index ``dphr``): the live one if this process has it."""
    return PhraseDocumentStore.from_dict(
        {"type": f"{PhraseDocumentStore.__module__}.PhraseDocumentStore", "init_parameters": {"index": STORE_INDEX}}
    )


def indexing_pipeline(store: PhraseDocumentStore, model: str = DEFAULT_MODEL) -> Pipeline:
    """``indexer`` (PhraseIndexer): run with ``{"indexer": {"documents": [...]}}``."""
    pipeline = Pipeline()
    pipeline.add_component("indexer", PhraseIndexer(document_store=store, model=model))
    return pipeline


def bm25_pipeline(store: PhraseDocumentStore, model: str = DEFAULT_MODEL, top_k: int = 10) -> Pipeline:
    """``bm25`` (InMemoryBM25Retriever): the keyword baseline over the store's documents (``model`` is unused)."""
    pipeline = Pipeline()
    pipeline.add_component("bm25", InMemoryBM25Retriever(document_store=store, top_k=top_k))
    return pipeline


def phrase_qa_pipeline(store: PhraseDocumentStore, model: str = DEFAULT_MODEL, top_k: int = 5) -> Pipeline:
    """``retriever`` (PhraseRetriever, unit phrase): ``answers`` are the top-k phrases, ``documents`` passages."""
    pipeline = Pipeline()
    pipeline.add_component("retriever", PhraseRetriever(document_store=store, model=model, unit="phrase", top_k=top_k))
    return pipeline


def phrase_passages_pipeline(store: PhraseDocumentStore, model: str = DEFAULT_MODEL, top_k: int = 10) -> Pipeline:
    """``retriever`` (PhraseRetriever, unit passage): passages ranked by their best phrase."""
    pipeline = Pipeline()
    pipeline.add_component(
        "retriever", PhraseRetriever(document_store=store, model=model, unit="passage", top_k=top_k)
    )
    return pipeline


def hybrid_rrf_pipeline(
    store: PhraseDocumentStore, model: str = DEFAULT_MODEL, top_k: int = 10, candidates: int = 20
) -> Pipeline:
    """BM25 and phrase passages joined by reciprocal rank fusion (``joiner.documents``); phrase ``answers`` too.

    Run with ``{"bm25": {"query": q}, "phrase": {"query": q}}``.
    """
    pipeline = Pipeline()
    pipeline.add_component("bm25", InMemoryBM25Retriever(document_store=store, top_k=candidates))
    pipeline.add_component(
        "phrase", PhraseRetriever(document_store=store, model=model, unit="passage", top_k=candidates)
    )
    pipeline.add_component("joiner", DocumentJoiner(join_mode="reciprocal_rank_fusion", top_k=top_k))
    pipeline.connect("bm25.documents", "joiner.documents")
    pipeline.connect("phrase.documents", "joiner.documents")
    return pipeline


def hybrid_confidence_pipeline(
    store: PhraseDocumentStore, model: str = DEFAULT_MODEL, top_k: int = 10, candidates: int = 20
) -> Pipeline:
    """BM25 and phrase passages fused by score (``joiner.documents``): :data:`CONFIDENCE_FUSION_WEIGHTS` of BM25's
    scaled score (in [0, 1]) and the passage's answer confidence, a passage only one retriever found counting 0 for
    the other (the weights chosen on validation questions for the Haystack 1.x ``hybrid_confidence.yml``); phrase
    ``answers`` too.

    Run with ``{"bm25": {"query": q}, "phrase": {"query": q}}``.
    """
    pipeline = Pipeline()
    pipeline.add_component("bm25", InMemoryBM25Retriever(document_store=store, top_k=candidates, scale_score=True))
    pipeline.add_component(
        "phrase", PhraseRetriever(document_store=store, model=model, unit="passage", top_k=candidates)
    )
    pipeline.add_component(
        "joiner", DocumentJoiner(join_mode="merge", weights=list(CONFIDENCE_FUSION_WEIGHTS), top_k=top_k)
    )
    pipeline.connect("bm25.documents", "joiner.documents")
    pipeline.connect("phrase.documents", "joiner.documents")
    return pipeline


PIPELINES: dict[str, Callable[..., Pipeline]] = {
    "indexing": indexing_pipeline,
    "bm25": bm25_pipeline,
    "phrase_qa": phrase_qa_pipeline,
    "phrase_passages": phrase_passages_pipeline,
    "hybrid_rrf": hybrid_rrf_pipeline,
    "hybrid_confidence": hybrid_confidence_pipeline,
}


def corpus_documents(corpora: Iterable[str | Path]) -> list[Document]:
    """Haystack 2 documents of one or more corpus files (:func:`dphr_haystack.corpus.read_corpus` formats),
    with ``title`` and ``document_id`` in their meta, as PhraseDocumentStore expects: the ids, texts and meta that
    :func:`dphr_haystack.nodes.corpus_documents` gives Haystack 1.x documents.

    Raises:
        CorpusFormatError: A passage id occurs more than once across the corpora.
    """
    return [
        Document(content=p.text, id=p.id, meta={**p.meta, "title": p.title, "document_id": p.document_id})
        for p in read_corpora(corpora)
    ]


def write_pipeline_files(folder: str | Path, model: str = DEFAULT_MODEL) -> list[Path]:
    """Saves every pipeline of :data:`PIPELINES` as ``<name>.yml`` in ``folder``; returns the files."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    store = default_store()
    files = []
    for name, build in PIPELINES.items():
        file = folder / f"{name}.yml"
        write_file_atomic(file, build(store, model=model).dumps(), fsync=False)
        files.append(file)
    return files


__all__ = [
    "CONFIDENCE_FUSION_WEIGHTS",
    "PIPELINES",
    "STORE_INDEX",
    "bm25_pipeline",
    "corpus_documents",
    "default_store",
    "hybrid_confidence_pipeline",
    "hybrid_rrf_pipeline",
    "indexing_pipeline",
    "phrase_passages_pipeline",
    "phrase_qa_pipeline",
    "write_pipeline_files",
]
