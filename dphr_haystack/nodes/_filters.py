"""Haystack filter evaluation on document meta, with Elasticsearch's semantics for missing fields.

Filters are checked first (:func:`dphr_haystack.documents.filters.check_legacy_filters`): an operator the store does
not implement, which Haystack's parser would turn into "match every document", raises UnsupportedFilterError.
"""

from __future__ import annotations

from typing import Any

from haystack.document_stores.filter_utils import (
    AndOperation,
    GteOperation,
    GtOperation,
    LogicalFilterClause,
    LteOperation,
    LtOperation,
    NeOperation,
    NotOperation,
    OrOperation,
)

from ..documents.filters import check_legacy_filters
from ..errors import UnsupportedFilterError

_ORDERING = (GtOperation, GteOperation, LtOperation, LteOperation)


def checked_filters(filters: Any) -> Any:
    """``filters`` unchanged, once checked (UnsupportedFilterError for an operator or shape the store lacks)."""
    check_legacy_filters(filters)
    return filters


def compile_filters(filters: dict[str, Any] | None):
    """Check and parse Haystack filters once; None when there is nothing to filter."""
    check_legacy_filters(filters)
    if not filters:
        return None
    return LogicalFilterClause.parse(filters)


def matches(clause, meta: dict[str, Any]) -> bool:
    """Whether a parsed filter accepts ``meta``.

    Same as Haystack's in-memory evaluation except that ``$ne`` accepts documents lacking the field, as
    Elasticsearch (``must_not term``) and ``$nin`` already do; Haystack's conformance suite expects that; and a
    range comparison (``$gt``, ``$gte``, ``$lt``, ``$lte``) never matches a None value (nor a None in a list), as it
    never matches a missing field. A range comparison of values that do not compare (``{"x": {"$gt": 1}}`` on
    ``x="a"``) raises UnsupportedFilterError.
    """
    if clause is None:
        return True
    if isinstance(clause, NotOperation):
        return not any(matches(c, meta) for c in clause.conditions)
    if isinstance(clause, AndOperation):
        return all(matches(c, meta) for c in clause.conditions)
    if isinstance(clause, OrOperation):
        return any(matches(c, meta) for c in clause.conditions)
    if isinstance(clause, NeOperation) and clause.field_name not in meta:
        return True
    if isinstance(clause, _ORDERING) and clause.field_name in meta:
        value = meta[clause.field_name]
        if value is None:
            return False  # a null field is no value to compare, as a missing one
        if isinstance(value, list) and any(item is None for item in value):
            meta = {**meta, clause.field_name: [item for item in value if item is not None]}
    try:
        return clause.evaluate(meta)
    except TypeError as exc:
        raise UnsupportedFilterError(
            f"filter on {clause.field_name!r} cannot compare {clause.comparison_value!r:.40} with the stored "
            f"{type(meta.get(clause.field_name)).__name__} value ({exc})"
        ) from exc
