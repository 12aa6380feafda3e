"""What a store refuses to keep: values it could not serve back.

A NaN or an infinity has no JSON form (a REST answer holding one fails), and a lone surrogate has no UTF-8 form (a
file or a response holding one fails to encode). Stored once, such a value breaks every later read that returns
its document, and a store directory's every later save; so both Haystack layers check a write's documents here,
all of them, before anything of the write is stored. The same goes for an embedding holding NaN or an infinity
(every similarity with it is NaN), and for a meta key that is not a string (JSON turns ``{2: "c"}`` into
``{"2": "c"}``: the document would reopen with other meta than it was written with).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from ..errors import InvalidDocumentError

MAX_META_DEPTH = 64


def check_storable(
    doc_id: Any,
    content: Any,
    meta: Any,
    error: type[Exception] = InvalidDocumentError,
    *,
    embedding: Any = None,
    sparse_embedding: Any = None,
) -> None:
    """Raise ``error`` when a document's id, text content or meta holds a NaN, an infinity or a lone surrogate
    (meta searched through nested mappings, lists and arrays, at most ``MAX_META_DEPTH`` deep), when a meta key is
    not a string, or when its ``embedding`` or ``sparse_embedding`` (see :func:`check_embedding`) is not finite."""
    _check(doc_id, f"document {doc_id!r:.60}: id", 0, error)
    label = f"document {doc_id!r:.60}"
    if isinstance(content, str):
        _check(content, f"{label}: content", 0, error)
    _check(meta, f"{label}: meta", 0, error)
    check_embedding(doc_id, embedding, error)
    if sparse_embedding is not None:
        values = getattr(sparse_embedding, "values", None)
        if isinstance(sparse_embedding, dict):
            values = sparse_embedding.get("values")
        check_embedding(doc_id, values, error, what="sparse embedding values")


def check_embedding(
    doc_id: Any, embedding: Any, error: type[Exception] = InvalidDocumentError, what: str = "embedding"
) -> None:
    """Raise ``error`` when ``embedding`` (a list or array; None passes) is not a flat vector of finite numbers."""
    if embedding is None:
        return
    label = f"document {doc_id!r:.60}: {what}"
    try:
        values = np.asarray(embedding, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise error(f"{label} is not a vector of numbers ({exc})") from None
    if values.ndim != 1:
        raise error(f"{label} has shape {values.shape}, not a flat vector")
    if not np.isfinite(values).all():
        bad = int(np.flatnonzero(~np.isfinite(values))[0])
        raise error(f"{label} is {values[bad]} at position {bad}: NaN and infinities cannot be stored or searched")


def check_meta(doc_id: Any, meta: Any, error: type[Exception] = InvalidDocumentError) -> None:
    """:func:`check_storable` for a meta update."""
    _check(meta, f"document {doc_id!r:.60}: meta", 0, error)


def _check(value: Any, where: str, depth: int, error: type[Exception]) -> None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise error(f"{where} is not valid Unicode text (a lone surrogate at position {exc.start})") from None
    elif isinstance(value, (bool, numbers.Integral)) or value is None:
        return
    elif isinstance(value, numbers.Real):
        if not math.isfinite(value):
            raise error(f"{where} is {value}: NaN and infinities cannot be stored (they have no JSON form)")
    elif isinstance(value, np.ndarray):
        if value.dtype.kind in "fc" and not np.isfinite(value).all():
            raise error(f"{where} holds NaN or an infinity: they cannot be stored (they have no JSON form)")
        if value.dtype.kind in "OU":
            _check(value.tolist(), where, depth, error)
    elif isinstance(value, (dict, list, tuple, set, frozenset)):
        if depth >= MAX_META_DEPTH:
            raise error(f"{where} is nested deeper than {MAX_META_DEPTH} levels")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise error(
                        f"{where} key {key!r:.40} is a {type(key).__name__}, not a string: "
                        f"JSON would store it as the string key {str(key)!r:.40}"
                    )
                _check(key, f"{where} key {key!r:.40}", depth + 1, error)
                _check(item, f"{where}[{key!r:.40}]", depth + 1, error)
        else:
            for position, item in enumerate(value):
                _check(item, f"{where}[{position}]", depth + 1, error)


__all__ = ["MAX_META_DEPTH", "check_embedding", "check_meta", "check_storable"]
