"""The one rule that makes a stored document a phrase-index passage, and the checks built on it.

Both Haystack layers (1.x ``nodes`` and 2.x ``haystack2``) give a document's id, text and meta to
:meth:`PassageRule.passage`, so a phrase index built through one layer is served unchanged by the other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidParameterError
from ..index.phrase_index import PhraseIndex
from ..model.inputs import is_valid_unicode

PASSAGE_FIELDS = ("id", "text", "title", "document_id")


@dataclass(frozen=True)
class PassageRule:
    """Which meta fields give a document's title (encoded before its text) and its document group.

    Example:
        >>> PassageRule().passage("p1", "Paris is in France.", {"title": 2024})
        {'id': 'p1', 'text': 'Paris is in France.', 'title': '2024', 'document_id': 'p1'}
    """

    title_field: str = "title"
    document_id_field: str = "document_id"

    def passage(self, doc_id: Any, text: Any, meta: Any) -> dict[str, str] | None:
        """The passage record of a document, or None for a document without text (not a string, empty, blank or
        not encodable as UTF-8). The title and group are the meta fields as strings (empty or absent: no title,
        the document's own id as its group)."""
        if not isinstance(text, str) or not text.strip():
            return None
        meta = meta if isinstance(meta, dict) else {}
        passage = {
            "id": str(doc_id),
            "text": text,
            "title": str(meta.get(self.title_field) or ""),
            "document_id": str(meta.get(self.document_id_field) or doc_id),
        }
        return passage if all(is_valid_unicode(value) for value in passage.values()) else None


def record_passage(record: Mapping[str, Any]) -> dict[str, str]:
    """A phrase-index (or shard) passage record in the form :meth:`PassageRule.passage` gives."""
    passage = {key: record.get(key, "") for key in PASSAGE_FIELDS}
    passage["document_id"] = record.get("document_id", record["id"])
    return passage


def encoded_as(phrase_index: PhraseIndex, passage_id: str, passage: Mapping[str, str] | None) -> bool:
    """Whether the phrases of ``passage_id`` were encoded from ``passage`` (same text, title and document group);
    False when the index has no phrases for it or ``passage`` is None."""
    row = phrase_index.passage_row(passage_id)
    if row is None or passage is None:
        return False
    record = phrase_index.passages[row]
    return (passage["text"], passage["title"], passage["document_id"]) == (
        record["text"],
        record.get("title", ""),
        record.get("document_id", record["id"]),
    )


def stale_passage_ids(
    phrase_index: PhraseIndex, ids: Iterable[str], passage_of: Callable[[str], dict[str, str] | None]
) -> list[str]:
    """The ids among ``ids`` with phrases that are not those of their current passage (``passage_of(id)``: None for
    a document that is gone or has no text)."""
    return [
        i for i in ids if phrase_index.passage_row(i) is not None and not encoded_as(phrase_index, i, passage_of(i))
    ]


def unencoded_passages(
    phrase_index: PhraseIndex | None, ids: Iterable[str], passage_of: Callable[[str], dict[str, str] | None]
) -> list[dict[str, str]]:
    """The passages (``passage_of`` each id, None ones skipped) of the ids that have no phrases in ``phrase_index``
    yet. A passage's id is its document's: the id is looked up first, so a store whose documents are all encoded
    pays one dictionary lookup a document, not a passage record."""
    pending = (i for i in ids if phrase_index is None or phrase_index.passage_row(i) is None)
    return [p for p in map(passage_of, pending) if p is not None]


def check_attachable(
    phrase_index: Any, passage_of: Callable[[str], dict[str, str] | None], title_field: str, document_id_field: str
) -> PhraseIndex:
    """``phrase_index`` when every live passage of it is a stored document encoded as stored.

    Raises:
        InvalidParameterError: Not a PhraseIndex, or a passage is not a stored document or differs from it.
    """
    if not isinstance(phrase_index, PhraseIndex):
        raise InvalidParameterError(f"expected a PhraseIndex, got {type(phrase_index).__name__}")
    differing = [i for i in phrase_index.live_passage_ids() if not encoded_as(phrase_index, i, passage_of(i))]
    if differing:
        raise InvalidParameterError(
            f"{len(differing)} passages of the phrase index are not stored documents or differ from them "
            f"(text, title from meta {title_field!r}, document id from meta {document_id_field!r}), "
            f"e.g. {differing[:3]}: write the corpus the index was built from first"
        )
    return phrase_index


def passage_mask(phrase_index: PhraseIndex, allowed_ids: set[str]) -> np.ndarray:
    """Boolean mask over the phrase index's passage rows: True for the passages whose id is allowed."""
    return np.fromiter(
        (p["id"] in allowed_ids for p in phrase_index.passages), dtype=bool, count=phrase_index.num_passages
    )


__all__ = [
    "PASSAGE_FIELDS",
    "PassageRule",
    "check_attachable",
    "encoded_as",
    "passage_mask",
    "record_passage",
    "stale_passage_ids",
    "unencoded_passages",
]
