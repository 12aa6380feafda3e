"""What a phrase search returns: phrase answers, passages ranked by their best phrase, documents by their best
passage (:class:`~dphr_haystack.search.PhraseSearcher`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PhraseHit:
    """A phrase answer: ``text == passage_text[start:end]``. ``start_token``/``end_token`` are the scored span's
    subwords; ``start``/``end`` may lie inside it when the answer was trimmed (see
    :class:`~dphr_haystack.search.PhraseSearcher`)."""

    text: str
    score: float
    passage_id: str
    document_id: str
    title: str
    start: int  # char offset in the passage text
    end: int
    start_score: float = 0.0
    end_score: float = 0.0
    start_token: int = 0  # subword position of the first and last token in the passage context
    end_token: int = 0
    passage_row: int = field(default=0, compare=False, repr=False)
    confidence: float | None = field(default=None, compare=False)  # P(correct), from the model's calibration
    # P(the corpus holds an answer to the query), the same on each of its answers: a calibration with holds_answer
    holds_answer: float | None = field(default=None, compare=False)
    # the query's names that no passage of the corpus searched writes, as the query writes them, the same on each of
    # its answers (empty: it writes them all; None: the query names nothing, or the calibration does not weigh it);
    # a verified holds-answer reads it again
    unwritten_names: tuple[str, ...] | None = field(default=None, compare=False, repr=False)
    # True only for the best phrase of a passage whose every retrieved phrase copies the question: no answer
    # (its confidence is then 0 with a calibration)
    copies_question: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class PassageHit:
    """A passage ranked by its best phrase; ``best_phrase`` is its answer, the best of its phrases that does not
    copy the question (see :class:`~dphr_haystack.search.PhraseSearcher`)."""

    passage_id: str
    document_id: str
    title: str
    text: str
    score: float
    best_phrase: PhraseHit
    meta: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class DocumentHit:
    """A document ranked by its best passage."""

    document_id: str
    title: str
    score: float
    best_passage: PassageHit


Hit = PhraseHit | PassageHit | DocumentHit


def best_phrase(hit: Hit) -> PhraseHit:
    """The phrase of a phrase hit, the best phrase of a passage or document hit."""
    if isinstance(hit, PhraseHit):
        return hit
    return best_passage(hit).best_phrase


def best_passage(hit: PassageHit | DocumentHit) -> PassageHit:
    """A passage hit itself, or the best passage of a document hit."""
    return hit.best_passage if isinstance(hit, DocumentHit) else hit
