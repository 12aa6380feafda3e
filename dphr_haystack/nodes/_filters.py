"""Haystack filter evaluation on document meta, with Elasticsearch's semantics for missing fields."""

from __future__ import annotations

from typing import Any

from haystack.document_stores.filter_utils import (
    AndOperation,
    LogicalFilterClause,
    NeOperation,
    NotOperation,
    OrOperation,
)


def compile_filters(filters: dict[str, Any] | None):
    """Parse Haystack filters once; None when there is nothing to filter."""
    if not filters:
        return None
    return LogicalFilterClause.parse(filters)


def matches(clause, meta: dict[str, Any]) -> bool:
    """Whether a parsed filter accepts ``meta``.

    Same as Haystack's in-memory evaluation except that ``$ne`` accepts documents lacking the field, as
    Elasticsearch (``must_not term``) and ``$nin`` already do; Haystack's conformance suite expects that.
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
    return clause.evaluate(meta)
