"""What a search says about the corpus as a whole: how far its answers' confidences move, and whether it holds an
answer to the question at all.

A calibration's ``answerability`` gives P(the top answer is right *given the corpus searched*) from features of the
whole search (:func:`~dphr_haystack.confidence.query_features`); every answer's log-odds then move by the same amount
so that the top answer's confidence is that probability (:attr:`CorpusJudgement.shift`; the order of the answers
stays). Its ``holds_answer`` gives P(the corpus holds an answer to the question) from the same features, fitted on
that label: it scores Haystack's "no answer" (:func:`no_answer_score`) and decides where it goes
(:func:`holds_answer_estimate`). A question whose top answer is wrong may still be answered by the corpus, so the
two differ: on SQuAD-style questions the first separates right answers from wrong ones, the second answerable
questions from unanswerable ones. Without a ``holds_answer`` the top answer's confidence stands for it (a lower
bound: a right top answer means the corpus holds one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .confidence import QUERY_FEATURES, Answerability, Calibration, RankedPhrase, logit, query_features
from .corpus_words import CorpusNames
from .model.calibration import CORPUS_FEATURE
from .passage_words import PassageWords
from .question_words import QuestionWords


@dataclass(frozen=True)
class CorpusJudgement:
    """``shift``: how far every answer's log-odds move (0.0 without an answerability); ``holds_answer``: P(the corpus
    holds an answer to the question), None without a ``holds_answer`` in the calibration; ``unwritten_names``: the
    question's names that no passage of the corpus searched writes, as the question writes them (empty: it writes them
    all; None: the question names nothing, or nothing weighs it)."""

    shift: float = 0.0
    holds_answer: float | None = None
    unwritten_names: tuple[str, ...] | None = None


def judge_corpus(
    calibration: Calibration,
    candidates: Sequence[RankedPhrase],
    confidence: Mapping[int, float],
    asked: Sequence[str] | None,
    passages: Sequence[Mapping[str, Any]],
    searched: int,
    words: Callable[[int], PassageWords] | None = None,
    written: CorpusNames | None = None,
) -> CorpusJudgement:
    """The :class:`CorpusJudgement` of one query's search by the calibration's ``answerability`` and
    ``holds_answer`` (nothing to judge without either, or without answers).

    ``confidence`` maps positions in ``candidates`` to their confidences; the top answer is the most confident
    (the first of equals); ``searched``: the passages the search could return; ``written``: which of a question's
    names they write (:class:`~dphr_haystack.corpus_words.CorpusNames`), asked only when a model reads it.
    """
    answerability, holds = calibration.answerability, calibration.holds_answer
    if (answerability is None and holds is None) or not confidence:
        return CorpusJudgement()
    top = min(confidence, key=lambda i: (-confidence[i], i))
    features = query_features(
        QUERY_FEATURES,
        candidates,
        top,
        confidence[top],
        asked,
        passages,
        searched,
        calibration.depth,
        words,
        written if reads_corpus(calibration) else None,
    )
    shift = logit(_probability(answerability, features)) - logit(confidence[top]) if answerability else 0.0
    written_all = features[QUERY_FEATURES.index(CORPUS_FEATURE)]
    unwritten = None
    if not np.isnan(written_all) and written is not None and isinstance(asked, QuestionWords):  # names were read
        unwritten = () if written_all else asked.spelled(written.unwritten(asked.names))
    return CorpusJudgement(shift, None if holds is None else _probability(holds, features), unwritten)


def corpus_judges(calibration: Calibration | None) -> list[Any]:
    """The models of ``calibration`` that judge the corpus searched from a query's features: its answerability,
    holds-answer and verified holds-answer (those it has)."""
    if calibration is None:
        return []
    verified = calibration.verification.holds_answer if calibration.verification is not None else None
    return [m for m in (calibration.answerability, calibration.holds_answer, verified) if m is not None]


def reads_corpus(calibration: Calibration) -> bool:
    """Whether one of the :func:`corpus_judges` of ``calibration`` weighs whether the corpus writes a question's
    names (:data:`~dphr_haystack.model.calibration.CORPUS_FEATURE`)."""
    return any(CORPUS_FEATURE in judge.features for judge in corpus_judges(calibration))


def _probability(model: Answerability, features: np.ndarray) -> float:
    """``model``'s probability of one query's features (all of :data:`QUERY_FEATURES`, in order)."""
    return float(model.query_probability(features[None, :])[0])


def holds_answer_estimate(top_confidence: float | None, holds_answer: float | None) -> float | None:
    """P(the corpus holds an answer): ``holds_answer`` when known, else the top answer's confidence (None: no
    answer at all)."""
    return holds_answer if holds_answer is not None else top_confidence


def no_answer_score(top_confidence: float | None, holds_answer: float | None = None) -> float:
    """P("no answer" is right): 1 − :func:`holds_answer_estimate` (1.0 when there is no answer)."""
    estimate = holds_answer_estimate(top_confidence, holds_answer)
    return 1.0 if estimate is None else 1.0 - float(estimate)
