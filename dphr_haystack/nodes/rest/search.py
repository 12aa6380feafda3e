"""Haystack 1.x's REST endpoints for searching and managing documents, over the served pipelines.

``GET /initialized`` (true once the pipelines are built: the app only exists then), ``GET /hs_version``,
``POST /query`` (``{"query", "params", "debug"}`` → ``{"query", "answers", "documents"}``), ``POST /query-batch``
(``{"queries", "params"}`` → one such answer per query), ``POST /documents/get_by_filters`` and
``POST /documents/delete_by_filters`` (``{"filters"}``). A query is refused before it runs when it is not a JSON
string (422, never coerced), is longer than ``DPHR_MAX_QUERY_CHARS`` (413), is empty or its ``params`` name no node
or parameter of the query pipeline (400); more than ``CONCURRENT_REQUEST_PER_WORKER`` queries at once get 503.
A PhraseRetriever's parameters pass through ``params`` per request, ``no_answer`` among them
(``{"params": {"Retriever": {"no_answer": true, "no_answer_threshold": 0.4}}}`` adds "no answer", an answer with
empty text and no context, ``meta["no_answer"]`` true; see :class:`~dphr_haystack.nodes.PhraseRetriever`); a value
of the wrong type or out of range is refused with 400 before anything is searched.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import haystack
from fastapi import FastAPI, HTTPException
from haystack import Pipeline
from haystack.schema import Document
from pydantic import Field, StrictStr

from ...errors import InputTooLargeError, InvalidParameterError, InvalidQueryError
from .schema import MAX_BATCH_QUERIES, FilterRequest, QueryBatchRequest, QueryRequest, QueryResponse
from .served import ServedPipelines
from .settings import DEFAULT_MAX_QUERY_CHARS, MAX_QUERY_CHARS_ENV

_GLOBAL_PARAMS = frozenset({"debug", "add_isolated_node_eval"})  # taken by every node (Haystack's own rule)


class RequestLimiter:
    """At most ``limit`` requests at once; one more is refused with 503 instead of queueing."""

    def __init__(self, limit: int) -> None:
        self._slots = threading.BoundedSemaphore(limit)

    @contextmanager
    def run(self) -> Iterator[None]:
        if not self._slots.acquire(blocking=False):
            raise HTTPException(status_code=503, detail="the server is busy: too many queries at once")
        try:
            yield
        finally:
            self._slots.release()


class StrictQueryRequest(QueryRequest):
    """``/query``'s body, whose ``query`` must be a JSON string (42 is refused, not read as "42")."""

    query: StrictStr


class StrictQueryBatchRequest(QueryBatchRequest):
    """``/query-batch``'s body, whose ``queries`` must be JSON strings."""

    queries: list[StrictStr] = Field(..., min_items=1, max_items=MAX_BATCH_QUERIES)


def check_query(query: str, max_chars: int = DEFAULT_MAX_QUERY_CHARS) -> str:
    """``query`` when it can be searched: InputTooLargeError (413) over ``max_chars`` characters, checked before
    anything else looks at it; InvalidQueryError (400) when it is blank."""
    if len(query) > max_chars:
        raise InputTooLargeError(
            f"the query has {len(query)} characters, over the server's {MAX_QUERY_CHARS_ENV}={max_chars}"
        )
    if not query.strip():
        raise InvalidQueryError("the query is empty")
    return query


def check_query_params(pipeline: Pipeline, params: dict[str, Any]) -> None:
    """Refuse ``params`` Haystack would fail on inside the run: an unknown node or global parameter, a node's
    parameters that are not an object, or a parameter the node's ``run`` does not take."""
    nodes = {name: pipeline.get_node(name) for name in pipeline.graph.nodes}
    takes = {name: set(inspect.signature(node.run).parameters) for name, node in nodes.items() if node is not None}
    for key, value in params.items():
        if key in nodes:
            if not isinstance(value, dict):
                raise InvalidParameterError(f"params[{key!r}] must be an object of {key}'s parameters")
            unknown = sorted(set(value) - takes.get(key, set()) - _GLOBAL_PARAMS)
            if unknown:
                valid = ", ".join(sorted(takes.get(key, set()) - {"query", "self"}))
                raise InvalidParameterError(f"{key} takes no parameter {', '.join(unknown)} (it takes {valid})")
        elif key not in _GLOBAL_PARAMS and not any(key in names for names in takes.values()):
            raise InvalidParameterError(
                f"params: {key!r} is neither a node of the query pipeline ({', '.join(sorted(nodes))}) "
                "nor a parameter any of its nodes takes"
            )


def _without_embeddings(documents: list[Document]) -> list[Document]:
    for doc in documents:
        doc.embedding = None
    return documents


def _response(query: str, result: dict[str, Any]) -> dict[str, Any]:
    return {
        "query": query,
        "answers": result.get("answers") or [],
        "documents": _without_embeddings(list(result.get("documents") or [])),
        "results": result.get("results"),
        "_debug": result.get("_debug"),
    }


def add_search_routes(
    app: FastAPI, served: ServedPipelines, limiter: RequestLimiter, max_query_chars: int = DEFAULT_MAX_QUERY_CHARS
) -> None:
    """Add the endpoints of the module docstring to ``app``; queries are bound to ``max_query_chars``."""
    pipeline = served.query

    @app.get("/initialized", tags=["search"])
    def check_status() -> bool:
        """True: the server answers queries (it only listens once its pipelines are built)."""
        return True

    @app.get("/hs_version", tags=["search"])
    def haystack_version() -> dict[str, str]:
        """The Haystack version serving the pipelines."""
        return {"hs_version": haystack.__version__}

    @app.post("/query", response_model=QueryResponse, response_model_exclude_none=True, tags=["search"])
    def query(request: StrictQueryRequest) -> dict[str, Any]:
        """Run the query pipeline: answers and documents for ``query``, with per-node ``params``."""
        check_query(request.query, max_query_chars)
        params = request.params or {}
        check_query_params(pipeline, params)
        with limiter.run():
            result = pipeline.run(query=request.query, params=params, debug=request.debug)
        return _response(request.query, result)

    @app.post("/query-batch", response_model=list[QueryResponse], response_model_exclude_none=True, tags=["search"])
    def query_batch(request: StrictQueryBatchRequest) -> list[dict[str, Any]]:
        """Run the query pipeline on several queries at once (encoded in batches): one answer per query."""
        for text in request.queries:
            check_query(text, max_query_chars)
        params = request.params or {}
        check_query_params(pipeline, params)
        with limiter.run():
            result = pipeline.run_batch(queries=request.queries, params=params)
        answers = result.get("answers") or [[] for _ in request.queries]
        documents = result.get("documents") or [[] for _ in request.queries]
        return [
            _response(text, {"answers": a, "documents": d})
            for text, a, d in zip(request.queries, answers, documents, strict=True)
        ]

    @app.post(
        "/documents/get_by_filters",
        response_model=list[Document],
        response_model_exclude_none=True,
        tags=["document"],
    )
    def get_documents(filters: FilterRequest, index: str | None = None) -> list[Document]:
        """The stored documents that match ``filters`` (``{}`` or null: all of them), without embeddings."""
        store = _store(served)
        return _without_embeddings(store.get_all_documents(filters=filters.filters, index=index))

    @app.post("/documents/delete_by_filters", response_model=bool, tags=["document"])
    def delete_documents(filters: FilterRequest, index: str | None = None) -> bool:
        """Delete the stored documents that match ``filters`` (``{}`` or null: all of them)."""
        _store(served).delete_documents(filters=filters.filters, index=index)
        return True


def _store(served: ServedPipelines) -> Any:
    if served.document_store is None:
        raise HTTPException(status_code=501, detail="the query pipeline has no document store")
    return served.document_store


__all__ = [
    "RequestLimiter",
    "StrictQueryBatchRequest",
    "StrictQueryRequest",
    "add_search_routes",
    "check_query",
    "check_query_params",
]
