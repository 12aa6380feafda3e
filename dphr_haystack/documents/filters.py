"""Metadata filters checked before a store runs them, in both Haystack syntaxes.

Haystack 1.x parses an operator it does not know (``$exists``, ``$regex``) into nothing, and an empty group
(``{"$and": {}}``, ``{"x": {}}``) into a clause that matches every document, so a mistyped filter would select the
whole store, for a delete as for a query. Haystack 2 raises on an unknown operator only when a document reaches it.
Both stores refuse such a filter here, before anything is read or deleted, with
:class:`~dphr_haystack.errors.UnsupportedFilterError`; nesting is bounded (``MAX_FILTER_DEPTH``).
"""

from __future__ import annotations

from typing import Any

from ..errors import UnsupportedFilterError

MAX_FILTER_DEPTH = 32

LEGACY_LOGICAL = ("$and", "$or", "$not")
LEGACY_COMPARISON = ("$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte")
LOGICAL = ("AND", "OR", "NOT")
COMPARISON = ("==", "!=", ">", ">=", "<", "<=", "in", "not in")
_LISTS = ("$in", "$nin", "in", "not in")
_ORDERING = ("$gt", "$gte", "$lt", "$lte", ">", ">=", "<", "<=")

ErrorType = type[Exception]


def check_legacy_filters(filters: Any, error: ErrorType = UnsupportedFilterError) -> None:
    """Refuse Haystack 1.x filters (``{"field": {"$op": value}}``, ``$and``/``$or``/``$not``) that use an operator
    outside ``LEGACY_LOGICAL`` and ``LEGACY_COMPARISON``, an empty group, a ``$in``/``$nin`` without a list, or
    nest deeper than ``MAX_FILTER_DEPTH``. None and ``{}`` (no filter) pass."""
    if filters is None:
        return
    if not isinstance(filters, dict):
        raise error(f"filters must be a mapping, got {type(filters).__name__}")
    if filters:
        _legacy_group(filters, 1, error)


def _legacy_group(group: dict, depth: int, error: ErrorType) -> None:
    if depth > MAX_FILTER_DEPTH:
        raise error(f"filters are nested deeper than {MAX_FILTER_DEPTH} levels")
    for key, value in group.items():
        if not isinstance(key, str):
            raise error(f"filter field names are strings, got {key!r:.60}")
        if key in LEGACY_LOGICAL:
            members = value if isinstance(value, list) else [value]
            if not members or not all(isinstance(m, dict) and m for m in members):
                raise error(f"{key} takes a non-empty mapping or a non-empty list of non-empty mappings")
            for member in members:
                _legacy_group(member, depth + 1, error)
        elif key.startswith("$"):
            raise error(_unsupported(key, LEGACY_LOGICAL + LEGACY_COMPARISON))
        elif isinstance(value, dict):
            _legacy_comparisons(key, value, error)


def _legacy_comparisons(field: str, comparisons: dict, error: ErrorType) -> None:
    if not comparisons:
        raise error(f"the filter on {field!r} has no operator (an empty mapping would match every document)")
    for operator, value in comparisons.items():
        if operator not in LEGACY_COMPARISON:
            raise error(_unsupported(operator, LEGACY_COMPARISON, field))
        _check_value(field, operator, value, error)


def check_filters(filters: Any, error: ErrorType = UnsupportedFilterError) -> None:
    """Refuse Haystack 2 filters (``{"field": "meta.x", "operator": "==", "value": 1}``, ``{"operator": "AND",
    "conditions": [...]}``) with an operator outside ``COMPARISON`` and ``LOGICAL``, a missing key, an empty or
    non-list ``conditions``, an ``in``/``not in`` without a list, or nesting deeper than ``MAX_FILTER_DEPTH``.
    None and ``{}`` (no filter) pass."""
    if filters is None or (isinstance(filters, dict) and not filters):
        return
    _condition(filters, 1, error)


def _condition(condition: Any, depth: int, error: ErrorType) -> None:
    if depth > MAX_FILTER_DEPTH:
        raise error(f"filters are nested deeper than {MAX_FILTER_DEPTH} levels")
    if not isinstance(condition, dict):
        raise error(f"a filter condition must be a mapping, got {type(condition).__name__}")
    operator = condition.get("operator")
    if "field" in condition:
        field = condition["field"]
        if not isinstance(field, str) or not field:
            raise error(f"a filter 'field' must be a non-empty string, got {field!r:.60}")
        for key in ("operator", "value"):
            if key not in condition:
                raise error(f"'{key}' key missing in the filter condition on {field!r}")
        if not isinstance(operator, str) or operator not in COMPARISON:
            raise error(_unsupported(operator, COMPARISON, field))
        _check_value(field, operator, condition["value"], error)
        return
    if "operator" not in condition or "conditions" not in condition:
        raise error(
            "a filter condition needs 'field', 'operator' and 'value', or 'operator' and 'conditions'; "
            f"got keys {sorted(map(str, condition))}"
        )
    if not isinstance(operator, str) or operator not in LOGICAL:
        raise error(_unsupported(operator, LOGICAL))
    conditions = condition["conditions"]
    if not isinstance(conditions, list) or not conditions:
        raise error(f"{operator} takes a non-empty list of conditions, got {conditions!r:.60}")
    for member in conditions:
        _condition(member, depth + 1, error)


def _check_value(field: str, operator: str, value: Any, error: ErrorType) -> None:
    if operator in _LISTS and not isinstance(value, list):
        raise error(f"{operator!r} on {field!r} takes a list, got {type(value).__name__}")
    if operator in _ORDERING and isinstance(value, (list, dict)):
        raise error(f"{operator!r} on {field!r} takes a single value, got {type(value).__name__}")


def _unsupported(operator: Any, supported: tuple[str, ...], field: str | None = None) -> str:
    where = f" (on {field!r})" if field is not None else ""
    return f"unsupported filter operator {operator!r:.60}{where}: supported are {', '.join(supported)}"


__all__ = [
    "COMPARISON",
    "LEGACY_COMPARISON",
    "LEGACY_LOGICAL",
    "LOGICAL",
    "MAX_FILTER_DEPTH",
    "check_filters",
    "check_legacy_filters",
]
