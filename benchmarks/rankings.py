"""Passage rankings of the shipped Haystack 1.x pipelines and their reciprocal rank fusion, scored per question.

The benchmarks that choose a hybrid setting on validation questions (``quality.hybrid_weights``,
``quality.passage_scoring``) rank every question once per pipeline and score fusions of those rankings.
"""

from __future__ import annotations

import copy


def pipeline_rankings(pipeline, examples: list, top_k: int, label: str) -> list[list]:
    """Each question's top ``top_k`` documents from one Haystack pipeline."""
    from tqdm import tqdm

    from dphr_haystack.evaluation import pipeline_top_k_params

    params = pipeline_top_k_params(pipeline, top_k)
    return [
        pipeline.run(query=ex.question, params=params)["documents"]
        for ex in tqdm(examples, desc=f"rank {label}", unit="q")
    ]


def shipped_pipeline(name: str, store, retriever: dict | None = None):
    """A shipped pipeline (``bm25.yml``, ``phrase_passages.yml``) over ``store``, its Retriever's parameters
    overridden by ``retriever``."""
    from dphr_haystack.nodes import load_pipeline

    return load_pipeline(
        name, overrides={"Retriever": retriever} if retriever else None, components={"DocumentStore": store}
    )


def rankings(store, model_name: str, examples: list, top_k: int, label: str) -> list[tuple[list, list]]:
    """Each question's (BM25 documents, phrase-passage documents), top ``top_k`` each, from the shipped pipelines."""
    bm25 = pipeline_rankings(shipped_pipeline("bm25.yml", store), examples, top_k, f"{label} BM25")
    phrase = shipped_pipeline("phrase_passages.yml", store, {"model": model_name})
    return list(zip(bm25, pipeline_rankings(phrase, examples, top_k, f"{label} phrase"), strict=True))


def passage_metrics(examples: list, rankings_: list[list], top_k: int) -> dict[str, list]:
    """Per-question passage hits@k and reciprocal rank of one ranked document list per question, by the evaluation
    module's rules."""
    from dphr_haystack.evaluation import passage_metrics as evaluation_passage_metrics

    ranked = [[(d.id, d.score, d.content) for d in docs] for docs in rankings_]
    metrics = evaluation_passage_metrics(examples, ranked, top_k)
    return {name: list(values) for name, values in metrics.items() if name != "p@20"}


def passage_scores(examples: list, rankings_: list[list], top_k: int) -> dict:
    """Passage acc@k and MRR@20 of one ranked document list per question (means of :func:`passage_metrics`)."""
    from dphr_haystack.evaluation import mean_metrics

    return mean_metrics(passage_metrics(examples, rankings_, top_k))


def fused_scores(examples: list, ranked: list[tuple[list, list]], weight: float | None, top_k: int) -> dict:
    """Passage scores of Haystack's JoinDocuments RRF with BM25 weight ``weight`` (None: unweighted, as
    ``hybrid_rrf.yml`` without weights)."""
    from haystack.nodes import JoinDocuments

    join = JoinDocuments(
        join_mode="reciprocal_rank_fusion",
        weights=None if weight is None else [weight, 1.0 - weight],
        top_k_join=top_k,
    )
    fused = [
        join.run(inputs=[{"documents": [copy.copy(d) for d in docs]} for docs in pair])[0]["documents"]
        for pair in ranked
    ]
    return passage_scores(examples, fused, top_k)


def linear_scores(examples: list, ranked: list[tuple[list, list]], weight: float, top_k: int) -> dict:
    """Passage scores of the project's ``LinearFusionJoin`` without normalisation, BM25 weight ``weight`` and phrase
    weight 1 − weight: BM25's scaled score plus the phrase passages' answer confidence, as ``hybrid_confidence.yml``
    fuses them."""
    from dphr_haystack.nodes.joins import fuse_linear

    fused = [fuse_linear(list(pair), [weight, 1.0 - weight], normalization="none")[:top_k] for pair in ranked]
    return passage_scores(examples, fused, top_k)
