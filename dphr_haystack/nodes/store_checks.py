"""Checks of what a :class:`~dphr_haystack.nodes.PhraseDocumentStore` is given: BM25 settings and documents.

A document whose id, text or meta holds a value the store could not serve back as JSON (NaN, an infinity, a lone
surrogate, a non-string meta key: :mod:`dphr_haystack.documents.validation`), or whose embedding holds a NaN or an
infinity, is refused with InvalidDocumentError, before anything of its write is stored.
"""

from __future__ import annotations

import copy

import pandas as pd
from haystack.errors import DocumentStoreError
from haystack.schema import Document

from ..documents.validation import check_meta, check_storable
from ..errors import InvalidDocumentError, InvalidParameterError
from ..params import check_choice

BM25_PARAMETERS = {
    "BM25Okapi": ("k1", "b", "epsilon"),
    "BM25L": ("k1", "b", "delta"),
    "BM25Plus": ("k1", "b", "delta"),
}


def check_bm25(algorithm: str, parameters: dict[str, float] | None) -> None:
    """Fail at construction, not at the first write, on a BM25 variant or parameter rank_bm25 does not take."""
    check_choice("bm25_algorithm", algorithm, BM25_PARAMETERS)
    if parameters is None:
        return
    if not isinstance(parameters, dict):
        raise InvalidParameterError(f"bm25_parameters must be a mapping, got {type(parameters).__name__}")
    for name, value in parameters.items():
        if name not in BM25_PARAMETERS[algorithm]:
            raise InvalidParameterError(
                f"bm25_parameters: {algorithm} takes {', '.join(BM25_PARAMETERS[algorithm])}, not {name!r}"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidParameterError(f"bm25_parameters[{name!r}] must be a number, got {value!r}")


def document_line(doc: Document, index: str) -> str:
    try:
        return doc.to_json()
    except (TypeError, ValueError, RecursionError) as exc:
        raise DocumentStoreError(
            f"cannot store document {doc.id!r} of index {index!r}: its content or meta is not JSON ({exc})"
        ) from exc


def checked_documents(documents, field_map: dict) -> list[Document]:
    """Documents (dicts converted) whose content matches their content_type, else DocumentStoreError; a NaN, an
    infinity or a lone surrogate in an id, a text or a meta, a non-string meta key, or a NaN or an infinity in an
    embedding raises InvalidDocumentError."""
    if isinstance(documents, (str, bytes, Document, dict)) or not isinstance(documents, (list, tuple)):
        raise DocumentStoreError(f"write_documents takes a list of Documents or dicts, got {type(documents).__name__}")
    checked = []
    for position, doc in enumerate(documents):
        if isinstance(doc, dict):
            try:
                doc = Document.from_dict(copy.deepcopy(doc), field_map=field_map)
            except UnicodeEncodeError as exc:  # the id hash of a text with a lone surrogate
                raise InvalidDocumentError(
                    f"document {position}: its content is not valid Unicode text ({exc.reason} at {exc.start})"
                ) from exc
            except Exception as exc:
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
        check_storable(doc.id, doc.content, doc.meta, embedding=doc.embedding)
        checked.append(doc)
    return checked


__all__ = ["BM25_PARAMETERS", "check_bm25", "check_meta", "checked_documents", "document_line"]
