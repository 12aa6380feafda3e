"""Search hits as the values of retrieved documents and phrase answers: best phrase, meta, score.

Each Haystack layer builds its own ``Document`` / ``Answer`` objects from :class:`RetrievedDocument` and
:class:`RetrievedAnswer`; what goes into them is decided here once.

Scores (``scale_score=True``, the default, with a model that has a calibration, as the shipped one does):

- an answer scores its calibrated confidence: P(the answer is right), in [0, 1];
- a document (passage, or document group) scores its answer's confidence made monotone along the ranking
  (:func:`dphr_haystack.confidence.ranked_confidences`): the lowest answer confidence among it and the documents
  ranked above it, in [0, 1]; a threshold t keeps the documents ranked above the first answer less confident
  than t. The ranking is the raw one, unchanged; a document whose every retrieved phrase copies the question has
  no answer and keeps the score of the one above it.

An answer's ``meta["holds_answer"]`` is P(the corpus holds an answer to the question), the same for each answer of
a query, when the calibration has a ``holds_answer`` (the shipped one has; :mod:`dphr_haystack.corpus_judgement`);
``meta["unwritten_names"]`` the question's names that no passage searched writes, as the question writes them
(``["Calder"]`` for "Who was the first mayor of Port Calder?" over pages that never write it), when there are any and
the calibration weighs them (the shipped one does).

A search asked for ``no_answer`` also answers "no answer" (:func:`with_no_answer`): an answer with empty text
whose score is P(no answer given is right) = 1 − P(the corpus holds an answer) (without a ``holds_answer``, 1 − the
top answer's confidence: a calibration with an answerability makes that P(right *given this corpus*)). It comes
first when that probability is below the threshold (:data:`~dphr_haystack.search_options.NO_ANSWER_THRESHOLD` by
default), last otherwise, as Haystack's readers add theirs.

The raw phrase score (an inner product: about 600 to 960 for the shipped model on SQuAD) stays in
``meta["phrase_score"]`` (documents; ``meta["best_phrase_score"]`` is its answer's) and ``meta["raw_score"]``
(answers). Without a calibration, or with ``scale_score=False``, scores are as before: ``expit(raw / 100)`` (a
monotone squash with no probability meaning) or the raw score.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..confidence import ranked_confidences
from ..corpus_judgement import holds_answer_estimate, no_answer_score
from ..errors import InvalidParameterError
from ..model.calibration import Calibration
from ..search import DocumentHit, Hit, PhraseHit, best_passage, best_phrase
from ..search_options import NO_ANSWER_THRESHOLD, PhraseSearchOptions, check_no_answer_threshold, no_answer_threshold

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


def raw_score(hit: Hit) -> float:
    """The raw score a hit is ranked by: its phrase's, or its passage's or document's (best or summed phrases)."""
    return float(hit.score)


def document_scores(hits: Sequence[Hit], scale: bool) -> list[float]:
    """The scores of ranked hits as documents: with ``scale`` and confidences (a calibrated model) their answers'
    confidences made monotone along the ranking (:func:`~dphr_haystack.confidence.ranked_confidences`); with
    ``scale`` and no confidences ``expit(raw / 100)``; else the raw scores. Never reorders the hits."""
    phrases = [best_phrase(hit) for hit in hits]
    if scale and any(phrase.confidence is not None for phrase in phrases):
        return ranked_confidences([None if p.copies_question else p.confidence for p in phrases])
    return [scaled_score(raw_score(hit), scale) for hit in hits]


def retrieved_document(
    hit: Hit, document_meta: Mapping[str, Any] | None, document: Any, scale: bool, score: float | None = None
) -> RetrievedDocument:
    """The document of a hit: ``meta`` gains ``best_phrase``, its offsets, raw score and confidence (when it has
    one), the raw score the hit ranks by (``phrase_score``) and, for a document hit, ``phrase_document_id``;
    ``score`` is ``score`` when given (:func:`document_scores` of the ranked list), else the hit's (scaled) raw
    score."""
    phrase = best_phrase(hit)
    meta = dict(document_meta or {})
    meta.update(
        {
            "best_phrase": phrase.text,
            "best_phrase_start": phrase.start,
            "best_phrase_end": phrase.end,
            "best_phrase_score": phrase.score,
            "phrase_score": raw_score(hit),
        }
    )
    if phrase.confidence is not None:
        meta["best_phrase_confidence"] = float(phrase.confidence)
    if isinstance(hit, DocumentHit):
        meta["phrase_document_id"] = hit.document_id
    return RetrievedDocument(document, meta, scaled_score(raw_score(hit), scale) if score is None else score)


def retrieved_answer(
    phrase: PhraseHit, document: Any, scale: bool, document_meta: Mapping[str, Any] | None = None
) -> RetrievedAnswer:
    """The answer of a phrase (see :class:`RetrievedAnswer`): ``meta["title"]`` is the passage's title (the one
    encoded with it, else ``document_meta``'s ``title``), left out when there is none."""
    meta: dict[str, Any] = {"raw_score": phrase.score, "phrase_document_id": phrase.document_id}
    title = phrase.title or (document_meta or {}).get("title")
    if title:
        meta["title"] = str(title)
    score = scaled_score(phrase.score, scale)
    if phrase.confidence is not None:
        score = meta["confidence"] = float(phrase.confidence)
    if phrase.holds_answer is not None:
        meta["holds_answer"] = float(phrase.holds_answer)
    if phrase.unwritten_names:
        meta["unwritten_names"] = list(phrase.unwritten_names)
    return RetrievedAnswer(phrase, document, meta, score)


@dataclass(frozen=True)
class NoAnswer:
    """The answer "the corpus gives no right answer": ``score`` = 1 − P(the corpus holds an answer)
    (:func:`~dphr_haystack.corpus_judgement.no_answer_score`; 1.0 when there is no answer), ``top_confidence`` the
    top answer's confidence (None: no answer), ``holds_answer`` P(the corpus holds an answer) when the model's
    calibration gives one (None: the top answer's confidence stands for it), ``unwritten_names`` the question's names
    that no passage searched writes (as the question writes them; known when the calibration weighs them)."""

    score: float
    top_confidence: float | None
    holds_answer: float | None = None
    unwritten_names: tuple[str, ...] = ()

    def meta(self) -> dict[str, Any]:
        """What the Haystack layers put in its answer's ``meta``."""
        meta: dict[str, Any] = {"no_answer": True, "top_confidence": self.top_confidence}
        if self.holds_answer is not None:
            meta["holds_answer"] = self.holds_answer
        if self.unwritten_names:
            meta["unwritten_names"] = list(self.unwritten_names)
        return meta


def with_no_answer(
    answers: Sequence[RetrievedAnswer], threshold: float = NO_ANSWER_THRESHOLD
) -> list[RetrievedAnswer | NoAnswer]:
    """``answers`` with a :class:`NoAnswer` first when P(the corpus holds an answer) is below ``threshold`` (or there
    is no answer), last otherwise; that probability is the top answer's ``holds_answer`` when the calibration gives
    one, else its confidence (:func:`~dphr_haystack.corpus_judgement.holds_answer_estimate`).

    Raises:
        InvalidParameterError: ``threshold`` is not a number in [0, 1], or the answers have no confidence (a model
            without a calibration cannot say how likely its answer is).
    """
    threshold = check_no_answer_threshold(threshold)
    top = answers[0].meta.get("confidence") if answers else None
    if answers and top is None:
        raise InvalidParameterError(
            "no_answer needs answer confidences: a model with a calibration (python -m train.calibrate)"
        )
    holds = answers[0].meta.get("holds_answer") if answers else None
    unwritten = tuple(answers[0].meta.get("unwritten_names") or ()) if answers else ()
    marker = NoAnswer(no_answer_score(top, holds), None if top is None else float(top), holds, unwritten)
    estimate = holds_answer_estimate(top, holds)
    return [marker, *answers] if estimate is None or estimate < threshold else [*answers, marker]


def check_no_answer_model(phrase_model: Any, name: str) -> None:
    """InvalidParameterError unless ``phrase_model`` carries a calibration: "no answer" is scored by the top
    answer's confidence."""
    if not getattr(phrase_model.config, "calibration", None):
        raise InvalidParameterError(
            f"no_answer needs answer confidences, and the model {name!r} has no calibration "
            "(python -m train.calibrate adds one; the shipped models have one)"
        )


def placed_threshold(phrase_model: Any, options: PhraseSearchOptions) -> float:
    """The threshold a search of ``phrase_model`` with ``options`` places "no answer" by: the options' own, else the
    one the model's calibration documents for it (:func:`~dphr_haystack.search_options.no_answer_threshold`)."""
    stored = getattr(phrase_model.config, "calibration", None)
    return no_answer_threshold(options, Calibration.from_dict(stored) if stored else None)


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
    gives no answer. Document scores are :func:`document_scores` of the documents, in their order.
    """
    answers: list[RetrievedAnswer] = []
    firsts: list[tuple[Hit, StoredDocument]] = []
    seen: set[str] = set()
    for hit, document in pairs:
        phrase = best_phrase(hit)
        if not phrase.copies_question:
            answers.append(retrieved_answer(phrase, document, scale, meta_of(document)))
        if phrase.passage_id in seen:
            continue
        seen.add(phrase.passage_id)
        firsts.append((hit, document))
    scores = document_scores([hit for hit, _ in firsts], scale)
    documents = [
        retrieved_document(hit, meta_of(document), document, scale, score)
        for (hit, document), score in zip(firsts, scores, strict=True)
    ]
    return documents, answers


__all__ = [
    "SCORE_SCALE",
    "NoAnswer",
    "RetrievedAnswer",
    "RetrievedDocument",
    "best_passage",
    "best_phrase",
    "check_no_answer_model",
    "document_scores",
    "expit",
    "hit_passage_id",
    "pair_hits",
    "placed_threshold",
    "raw_score",
    "retrieved",
    "retrieved_answer",
    "retrieved_document",
    "scaled_score",
    "with_no_answer",
]
