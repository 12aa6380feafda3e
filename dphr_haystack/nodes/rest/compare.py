"""``POST /compare``: one question through four retrieval pipelines on the served store, side by side.

The columns are the shipped pipelines, each loaded on the served document store with the served phrase model
(and device): phrase answers (``phrase_qa.yml``), BM25 (``bm25.yml``), passages ranked by their best phrase
(``phrase_passages.yml``) and the BM25 + phrase hybrid fused by reciprocal rank (``hybrid_rrf.yml``). They run one
after another; each column reports its own latency in milliseconds. ``{"query", "top_k", "filters", "no_answer",
"no_answer_threshold", "verify"}`` → ``{"query", "top_k", "columns": [{"name", "title", "pipeline", "ms", "answers",
"documents"}]}``. ``no_answer`` (a JSON bool; default: the served PhraseRetriever's) adds "no answer" to the phrase
answers column (an answer with empty text, ``meta["no_answer"]`` true; see
:class:`~dphr_haystack.nodes.PhraseRetriever`), placed by ``no_answer_threshold`` (a number in [0, 1]; default: the
served PhraseRetriever's); ``verify`` (a JSON bool; default: the served PhraseRetriever's) lets a reader read the
top phrase answer in its passage (:mod:`dphr_haystack.verification`). Needs a PhraseDocumentStore (501 otherwise).
The query is checked as ``/query``'s is before any column runs: a JSON string (422), at most
``DPHR_MAX_QUERY_CHARS`` characters (413), not blank (400); so are the options: ``no_answer``,
``no_answer_threshold`` or ``verify`` of the wrong JSON type is 422, a threshold outside [0, 1] 400.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, HTTPException
from haystack import Pipeline
from pydantic import StrictBool, StrictFloat, StrictInt, StrictStr, conint

from ...model.registry import DEFAULT_MODEL
from ...search_options import check_no_answer_threshold
from ..pipeline import PIPELINES_DIR, load_pipeline
from .schema import MAX_COMPARE_TOP_K, CompareRequest, CompareResponse
from .search import RequestLimiter, check_query
from .served import ServedPipelines
from .settings import DEFAULT_MAX_QUERY_CHARS

HYBRID_CANDIDATES = 20  # each retriever's list before fusion, as in hybrid_rrf.yml


@dataclass(frozen=True)
class Column:
    name: str
    title: str
    pipeline_file: str

    def params(self, top_k: int, answer_options: dict[str, Any] | None = None) -> dict[str, Any]:
        """The per-node params that make the column return ``top_k`` results; the phrase answers column also
        takes ``answer_options`` (the Retriever's ``no_answer``, ``no_answer_threshold`` and ``verify``)."""
        if self.name == "bm25":
            return {"BM25": {"top_k": top_k}}
        if self.name == "hybrid":
            candidates = max(HYBRID_CANDIDATES, top_k)
            return {"BM25": {"top_k": candidates}, "Retriever": {"top_k": candidates}, "Join": {"top_k_join": top_k}}
        if self.name == "answers" and answer_options:
            return {"Retriever": {"top_k": top_k, **answer_options}}
        return {"Retriever": {"top_k": top_k}}


COLUMNS = (
    Column("answers", "Phrase answers", "phrase_qa.yml"),
    Column("bm25", "BM25", "bm25.yml"),
    Column("passages", "Phrase passages", "phrase_passages.yml"),
    Column("hybrid", "BM25 + phrase (RRF)", "hybrid_rrf.yml"),
)


class StrictCompareRequest(CompareRequest):
    """``/compare``'s body, whose ``query`` must be a JSON string and ``top_k`` a JSON whole number (``"5"``, ``1.5``
    and ``true`` are refused with 422, as ``/query`` refuses them)."""

    query: StrictStr
    top_k: conint(strict=True, ge=1, le=MAX_COMPARE_TOP_K) = 5  # type: ignore[valid-type]
    no_answer: StrictBool | None = None
    no_answer_threshold: StrictInt | StrictFloat | None = None
    verify: StrictBool | None = None


class Comparison:
    """The four column pipelines on the served store, built at the first request."""

    def __init__(self, served: ServedPipelines) -> None:
        self.served = served
        self._pipelines: dict[str, Pipeline] | None = None
        self._building = threading.Lock()

    @property
    def available(self) -> bool:
        return self.served.phrase_store() is not None

    def pipelines(self) -> dict[str, Pipeline]:
        with self._building:
            if self._pipelines is None:
                store = self.served.phrase_store()
                if store is None:
                    raise HTTPException(status_code=501, detail="/compare needs a PhraseDocumentStore")
                retriever = self.served.phrase_retriever()
                model = {
                    "model": retriever.model if retriever is not None else DEFAULT_MODEL,
                    "device": retriever.device if retriever is not None else "auto",
                }
                self._pipelines = {
                    column.name: load_pipeline(
                        PIPELINES_DIR / column.pipeline_file,
                        overrides={"Retriever": model} if column.name != "bm25" else None,
                        overwrite_with_env_variables=False,
                        components={"DocumentStore": store},
                    )
                    for column in COLUMNS
                }
        return self._pipelines

    def no_answer(self, asked: bool | None, threshold: float | None) -> dict[str, Any] | None:
        """The phrase answers column's ``no_answer`` params for a request (None: the request's values or, where it
        gives none, the served PhraseRetriever's), None when it adds no "no answer"."""
        served = self.served.phrase_retriever()
        if threshold is not None:
            threshold = check_no_answer_threshold(threshold)
        if asked is None:
            asked = served.no_answer if served is not None else False
        if not asked:
            return None
        if threshold is None and served is not None:
            threshold = served.no_answer_threshold
        return {"no_answer": True, **({} if threshold is None else {"no_answer_threshold": threshold})}

    def run(
        self,
        query: str,
        top_k: int,
        filters: dict[str, Any] | None,
        no_answer: bool | None = None,
        no_answer_threshold: float | None = None,
        verify: bool | None = None,
    ) -> list[dict[str, Any]]:
        """Each column's answers, documents and latency for ``query`` (``verify`` None: the served retriever's)."""
        asked = self.no_answer(no_answer, no_answer_threshold)  # refused before any column runs
        if verify is not None:
            asked = {**(asked or {}), "verify": verify}
        pipelines = self.pipelines()
        columns = []
        for column in COLUMNS:
            params = column.params(top_k, asked)
            if filters:
                params["filters"] = filters
            started = time.perf_counter()
            result = pipelines[column.name].run(query=query, params=params)
            elapsed = (time.perf_counter() - started) * 1000
            documents = list(result.get("documents") or [])
            for doc in documents:
                doc.embedding = None
            columns.append(
                {
                    "name": column.name,
                    "title": column.title,
                    "pipeline": column.pipeline_file,
                    "ms": round(elapsed, 1),
                    "answers": result.get("answers") or [],
                    "documents": documents,
                }
            )
        return columns


def add_compare_route(
    app: FastAPI, comparison: Comparison, limiter: RequestLimiter, max_query_chars: int = DEFAULT_MAX_QUERY_CHARS
) -> None:
    """Add ``POST /compare`` (see the module docstring) to ``app``; queries are bound to ``max_query_chars``."""

    @app.post("/compare", response_model=CompareResponse, response_model_exclude_none=True, tags=["search"])
    def compare(request: StrictCompareRequest) -> dict[str, Any]:
        """Phrase answers, BM25, phrase passages and the hybrid for one query, with each one's latency in ms."""
        check_query(request.query, max_query_chars)
        with limiter.run():
            columns = comparison.run(
                request.query,
                request.top_k,
                request.filters,
                request.no_answer,
                request.no_answer_threshold,
                request.verify,
            )
        return {"query": request.query, "top_k": request.top_k, "columns": columns}


__all__ = ["COLUMNS", "Comparison", "StrictCompareRequest", "add_compare_route"]
