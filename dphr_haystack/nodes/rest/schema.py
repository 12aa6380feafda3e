"""The REST app's request and response bodies: the JSON Haystack 1.x's REST clients send and read.

Answers and documents are Haystack's own ``Answer`` and ``Document`` (their pydantic serialisation: offsets as
``{"start", "end"}``, no embedding); requests refuse fields they do not know (422).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from haystack.schema import Answer, Document
from pydantic import BaseModel, Extra, Field

PrimitiveType = str | int | float | bool
MAX_BATCH_QUERIES = 100
MAX_COMPARE_TOP_K = 50


class _Request(BaseModel):
    class Config:
        extra = Extra.forbid  # a misspelt field is an error, not silently ignored


class _Response(BaseModel):
    class Config:
        arbitrary_types_allowed = True
        json_encoders = {np.ndarray: lambda array: array.tolist()}


class QueryRequest(_Request):
    query: str
    params: dict | None = None
    debug: bool | None = False


class QueryBatchRequest(_Request):
    queries: list[str] = Field(..., min_items=1, max_items=MAX_BATCH_QUERIES)
    params: dict | None = None


class FilterRequest(_Request):
    filters: dict[str, PrimitiveType | list[PrimitiveType] | dict[str, Any]] | None = None


class CompareRequest(_Request):
    query: str
    top_k: int = Field(5, ge=1, le=MAX_COMPARE_TOP_K)
    filters: dict[str, Any] | None = None
    no_answer: bool | None = None
    no_answer_threshold: float | None = None
    verify: bool | None = None


class QueryResponse(_Response):
    query: str
    answers: list[Answer] = []
    documents: list[Document] = []
    results: list[str] | None = None
    debug: dict | None = Field(None, alias="_debug")


class UploadResponse(_Response):
    files: list[str]
    documents_added: int
    documents_total: int


class CompareColumn(_Response):
    name: str
    title: str
    pipeline: str
    ms: float
    answers: list[Answer] = []
    documents: list[Document] = []


class CompareResponse(_Response):
    query: str
    top_k: int
    columns: list[CompareColumn]


class StoreInfo(_Response):
    documents: int
    phrase_documents: int | None = None
    query_pipeline: str
    indexing: bool
    compare: bool
    hs_version: str


__all__ = [
    "MAX_BATCH_QUERIES",
    "MAX_COMPARE_TOP_K",
    "CompareColumn",
    "CompareRequest",
    "CompareResponse",
    "FilterRequest",
    "QueryBatchRequest",
    "QueryRequest",
    "QueryResponse",
    "StoreInfo",
    "UploadResponse",
]
