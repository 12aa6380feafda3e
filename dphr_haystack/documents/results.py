"""Search hits as the values of retrieved documents and phrase answers: best phrase, meta, scaled score.

Each Haystack layer builds its own ``Document`` / ``Answer`` objects from :class:`RetrievedDocument` and
:class:`RetrievedAnswer`; what goes into them is decided here once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..search import DocumentHit, Hit, PassageHit, PhraseHit

StoredDocument = TypeVar("StoredDocument")

# Raw phrase scores are sums of two inner products; scale_score maps them to (0, 1) the way Haystack scales
# dot-product similarities (expit(score / 100)), which keeps the ranking.
SCORE_SCALE = 100.0


def expit(x: float) -> float:
    """The logistic function, without overflow for large ``|x|``."""
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def scaled_score(raw: float, scale: bool) -> float:
    """``expit(raw / 100)`` when ``scale``, else the raw score as a float."""
    return expit(raw / SCORE_SCALE) if scale else float(raw)


def best_phrase(hit: Hit) -> PhraseHit:
    """The phrase of a phrase hit, the best phrase of a passage or document hit."""
    if isinstance(hit, PhraseHit):
        return hit
    return best_passage(hit).best_phrase


def best_passage(hit: PassageHit | DocumentHit) -> PassageHit:
    """A passage hit itself, or the best passage of a document hit."""
    return hit.best_passage if isinstance(hit, DocumentHit) else hit


def hit_passage_id(hit: Hit) -> str:
    """The id of the passage (the stored document) a hit is in."""
    return hit.passage_id if isinstance(hit, PhraseHit) else best_passage(hit).passage_id


@dataclass(frozen=True)
class RetrievedDocument(Generic[StoredDocument]):
    """A stored document as a retrieval result: its meta with the best phrase added, and its score."""

    document: StoredDocument
    meta: dict[str, Any]
    score: float


@dataclass(frozen=True)
class RetrievedAnswer(Generic[StoredDocument]):
    """A phrase answer in a stored document; ``meta`` holds what the phrase adds (raw score, title, group,
    confidence), ``score`` the calibrated confidence (in [0, 1]) when the model has one, in every unit, else the
    (scaled) phrase score as before: in [0, 1] only when scaled."""

    phrase: PhraseHit
    document: StoredDocument
    meta: dict[str, Any]
    score: float


def retrieved_document(
    hit: Hit, document_meta: Mapping[str, Any] | None, document: Any, scale: bool
) -> RetrievedDocument:
    """The document of a hit: ``meta`` gains ``best_phrase``, its offsets and raw score (and
    ``phrase_document_id`` for a document hit); ``score`` is the hit's (scaled) score."""
    phrase = best_phrase(hit)
    meta = dict(document_meta or {})
    meta.update(
        {
            "best_phrase": phrase.text,
            "best_phrase_start": phrase.start,
            "best_phrase_end": phrase.end,
            "best_phrase_score": phrase.score,
        }
    )
    if isinstance(hit, DocumentHit):
        meta["phrase_document_id"] = hit.document_id
    raw = phrase.score if isinstance(hit, PhraseHit) else hit.score
    return RetrievedDocument(document, meta, scaled_score(raw, scale))


def retrieved_answer(phrase: PhraseHit, document: Any, scale: bool) -> RetrievedAnswer:
    """The answer of a phrase (see :class:`RetrievedAnswer`)."""
    meta: dict[str, Any] = {"raw_score": phrase.score, "title": phrase.title, "phrase_document_id": phrase.document_id}
    score = scaled_score(phrase.score, scale)
    if phrase.confidence is not None:
        score = meta["confidence"] = float(phrase.confidence)
    return RetrievedAnswer(phrase, document, meta, score)


def pair_hits(hits: Sequence[Hit], stored: Mapping[str, StoredDocument]) -> list[tuple[Hit, StoredDocument]]:
    """The hits whose passage is a stored document, each with that document (phrases of a document no longer
    stored are left out)."""
    pairs = []
    for hit in hits:
        document = stored.get(hit_passage_id(hit))
        if document is not None:
            pairs.append((hit, document))
    return pairs


def retrieved(
    pairs: Sequence[tuple[Hit, StoredDocument]],
    meta_of: Callable[[StoredDocument], Mapping[str, Any] | None],
    scale: bool,
) -> tuple[list[RetrievedDocument], list[RetrievedAnswer]]:
    """Documents (each stored document once, at its best rank) and answers (one per hit) of a ranked hit list.

    A passage or document hit answers with its best phrase that does not copy the question; one whose retrieved
    phrases all copy it (:attr:`~dphr_haystack.search.PhraseHit.copies_question`) still ranks as a document but
    gives no answer.
    """
    documents: list[RetrievedDocument] = []
    answers: list[RetrievedAnswer] = []
    seen: set[str] = set()
    for hit, document in pairs:
        phrase = best_phrase(hit)
        if not phrase.copies_question:
            answers.append(retrieved_answer(phrase, document, scale))
        if phrase.passage_id in seen:
            continue
        seen.add(phrase.passage_id)
        documents.append(retrieved_document(hit, meta_of(document), document, scale))
    return documents, answers


__all__ = [
    "SCORE_SCALE",
    "RetrievedAnswer",
    "RetrievedDocument",
    "best_passage",
    "best_phrase",
    "expit",
    "hit_passage_id",
    "pair_hits",
    "retrieved",
    "retrieved_answer",
    "retrieved_document",
    "scaled_score",
]
