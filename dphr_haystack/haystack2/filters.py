"""Haystack 2 filters checked before the store runs them (:func:`dphr_haystack.documents.filters.check_filters`).

The error is both this package's :class:`~dphr_haystack.errors.UnsupportedFilterError` and Haystack's
``FilterError`` (what ``InMemoryDocumentStore`` raises on a malformed filter), so callers catching either see it.
"""

from __future__ import annotations

from typing import Any

from haystack.errors import FilterError

from ..documents import filters as checks
from ..errors import UnsupportedFilterError


class UnsupportedHaystackFilterError(UnsupportedFilterError, FilterError):
    """A Haystack 2 filter with an operator or a shape the store does not implement."""


def check_filters(filters: Any) -> None:
    """Raise :class:`UnsupportedHaystackFilterError` for a filter the store would misread (an unknown operator, a
    missing key, an empty group, nesting beyond ``MAX_FILTER_DEPTH``); None and ``{}`` pass."""
    checks.check_filters(filters, error=UnsupportedHaystackFilterError)


__all__ = ["UnsupportedHaystackFilterError", "check_filters"]
