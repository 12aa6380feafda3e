"""Answers a user can trust: phrases that copy the question, and a calibrated confidence for phrase answers.

A phrase *copies the question* when its SQuAD-normalised words occur, as whole words and in order, in the
normalised question ("Who won Super Bowl 50?" → "Super Bowl 50"); such a phrase is never the answer.

Raw phrase scores (q_s·h_i + q_e·h_j) rank phrases but do not say how likely an answer is right. A
:class:`Calibration` (:mod:`dphr_haystack.model.calibration`) maps features of a phrase to P(correct) with a
logistic regression fitted on questions with known answers (:func:`fit_calibration`); it is stored in the model's
``dphr_config.json`` (``calibration``) so every index searched with the model reports the same confidences. The
features it names (:func:`answer_features`) are the phrase's score within its query's ranked candidates
(:func:`confidence_features`: raw score, log-softmax, agreement, margin) and, in calibrations that name them, what
the search has at hand about the answer: how many of the question's words its passage holds near it and compared
with the other candidates' passages, its length, how many passages give it, how spread the candidates' scores are.

A ranked list of passages or documents scores each by its answer's confidence, made monotone along the ranking
(:func:`ranked_confidences`): the ranking is by raw score, and a confidence also weighs how its phrase compares
with the other candidates, so a passage's answer can be more confident than the answer of one ranked above it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from .answers import normalize_answer
from .errors import InvalidParameterError
from .model.calibration import ANSWER_FEATURES, FEATURES, KNOWN_FEATURES, Calibration, check_features, sigmoid

__all__ = [
    "ANSWER_FEATURES",
    "CONFIDENCE_DEPTH",
    "FEATURES",
    "KNOWN_FEATURES",
    "STOPWORDS",
    "Calibration",
    "answer_confidences",
    "answer_features",
    "auroc",
    "confidence_features",
    "copies_question",
    "expected_calibration_error",
    "fit_calibration",
    "fit_logistic",
    "normalized_words",
    "question_words",
    "ranked_confidences",
    "reliability",
]

# How many ranked candidate phrases the confidence features look at (the search fetches at least this many).
CONFIDENCE_DEPTH = 10
# Words of a question that say little about where its answer lies: left out when a passage's support is counted.
STOPWORDS = frozenset(
    "a an the of in on at to for from by with about as into over after before during under between through "
    "and or but not no is are was were be been being has have had do does did can could will would should may "
    "might must shall it its this that these those there their they them he she his her him i you we our your "
    "what which who whom whose when where why how many much one ones other than then also s".split()
)
# Question and passage words match on their first letters, so that "invented" meets "invention".
STEM = 5
# How many words either side of an answer count as near it (window_support).
SUPPORT_WINDOW = 20


class RankedPhrase(Protocol):
    """What the answer features read of a ranked candidate (:class:`dphr_haystack.search.PhraseHit` has it):
    ``text == passages[passage_row]["text"][start:end]``."""

    score: float
    text: str
    passage_row: int
    start: int
    end: int


def question_words(question: str) -> tuple[str, ...]:
    """The normalised words of a question (SQuAD normalisation: case, punctuation and articles dropped)."""
    return tuple(normalized_words(question))


def copies_question(phrase: str, words: Sequence[str]) -> bool:
    """Does ``phrase`` occur, as whole normalised words in order, in a question of ``words``?

    A phrase with no words left after normalisation (punctuation or an article only) counts as a copy.
    """
    needle = normalize_answer(phrase).split()
    if not needle:
        return True
    n = len(needle)
    return any(list(words[i : i + n]) == needle for i in range(len(words) - n + 1))


def confidence_features(
    scores: Sequence[float], texts: Sequence[str], rows: Sequence[int] | None = None
) -> np.ndarray:
    """Features of each candidate phrase within its query's ranked candidates: (n, len(FEATURES)).

    ``scores`` are the candidates' raw scores in descending order and ``texts`` their texts. The first
    :data:`CONFIDENCE_DEPTH` candidates are the reference list. Per candidate: its raw score; its log-softmax
    against the reference list; the log of the softmax mass of the reference candidates with its normalised
    text (how much the list agrees on this answer); and the margin to the best reference candidate with another
    text (for the top candidate: how far ahead it is; 10 when the whole list agrees). ``rows`` (positions in
    the list) asks for those candidates' features only, the same as the full table's rows.
    """
    s = np.asarray(scores, dtype=np.float64)
    n = len(s)
    wanted = list(range(n)) if rows is None else [int(i) for i in rows]
    if n == 0 or not wanted:
        return np.zeros((0, len(FEATURES)))
    depth = min(n, CONFIDENCE_DEPTH)
    keys = {i: normalize_answer(texts[i]) for i in (*range(depth), *wanted)}
    log_z = s[:depth].max() + np.log(np.exp(s[:depth] - s[:depth].max()).sum())
    p = np.exp(s - log_z)
    out = np.empty((len(wanted), len(FEATURES)))
    for row, i in enumerate(wanted):
        same = np.array([keys[j] == keys[i] for j in range(depth)])
        mass = float(p[:depth][same].sum()) + (float(p[i]) if i >= depth else 0.0)
        others = s[:depth][~same]
        margin = s[i] - others.max() if len(others) else 10.0
        out[row] = (s[i], s[i] - log_z, math.log(max(mass, 1e-12)), margin)
    return out


def normalized_words(text: str) -> list[str]:
    """The SQuAD-normalised words of ``text`` (``normalize_answer(text).split()``)."""
    return normalize_answer(text).split()


def _stems(words: Sequence[str]) -> set[str]:
    return {w[:STEM] for w in words}


def _content_stems(asked: Sequence[str]) -> set[str]:
    return _stems([w for w in asked if w not in STOPWORDS])


class _Support:
    """The share of a question's content words (stopwords left out, matched on their first :data:`STEM` letters)
    that a passage holds, in its title or text, or near an answer; per passage row, computed once."""

    def __init__(self, asked: Sequence[str], passages: Sequence[Mapping[str, Any]]) -> None:
        self.content = _content_stems(asked)
        self.passages = passages
        self.by_row: dict[int, float] = {}

    def passage(self, row: int) -> float:
        if row not in self.by_row:
            passage = self.passages[row]
            words = normalized_words(f"{passage.get('title') or ''} {passage['text']}")
            self.by_row[row] = len(self.content & _stems(words)) / len(self.content)
        return self.by_row[row]

    def near(self, phrase: RankedPhrase) -> float:
        text = self.passages[phrase.passage_row]["text"]
        before = normalized_words(text[: phrase.start])[-SUPPORT_WINDOW:]
        after = normalized_words(text[phrase.end :])[:SUPPORT_WINDOW]
        return len(self.content & _stems(before + after)) / len(self.content)


def answer_features(
    names: Sequence[str],
    candidates: Sequence[RankedPhrase],
    rows: Sequence[int] | None = None,
    asked: Sequence[str] | None = None,
    passages: Sequence[Mapping[str, Any]] | None = None,
) -> np.ndarray:
    """The features ``names`` (of :data:`KNOWN_FEATURES`) of candidates within their query's ranked candidates:
    (len(rows), len(names)), rows in the order of ``rows`` (positions in ``candidates``; default all).

    ``candidates`` are ranked best first (descending score); the first :data:`CONFIDENCE_DEPTH` are the reference
    list, as in :func:`confidence_features`, which gives :data:`FEATURES`. The answer features:

    - ``window_support``: the share of the question's content words (``asked``, its normalised words, stopwords
      left out; words match on their first :data:`STEM` letters) within :data:`SUPPORT_WINDOW` words either side
      of the phrase in its passage;
    - ``support_gap``: the share of them the phrase's passage holds (title and text) minus the largest share among
      the reference list's other passages (its own share when there are none);
    - ``answer_words``: the phrase's normalised words;
    - ``agreeing_passages``: how many passages of the reference list give the phrase's normalised text (its own
      passage counted);
    - ``score_spread``: the standard deviation of the reference list's scores.

    ``passages`` are the passage records by row (``{"text", "title"}``, e.g. ``PhraseIndex.passages``). A feature
    that needs what is not given (no ``asked``, or a question with no content words) is NaN: a
    :class:`Calibration` counts it at its mean.

    Raises:
        InvalidParameterError: An unknown feature name, or passage features asked for without ``passages``.
    """
    names = check_features(tuple(names))
    wanted = list(range(len(candidates))) if rows is None else [int(i) for i in rows]
    out = np.full((len(wanted), len(names)), np.nan)
    if not wanted:
        return out
    column = {name: j for j, name in enumerate(names)}
    if any(name in column for name in FEATURES):
        scored = confidence_features([c.score for c in candidates], [c.text for c in candidates], wanted)
        for k, name in enumerate(FEATURES):
            if name in column:
                out[:, column[name]] = scored[:, k]
    if not any(name in column for name in ANSWER_FEATURES):
        return out
    depth = min(len(candidates), CONFIDENCE_DEPTH)
    reference = candidates[:depth]
    needs_passages = {"window_support", "support_gap"} & set(names)
    if needs_passages and passages is None:
        raise InvalidParameterError(f"features {sorted(needs_passages)} need the passages the candidates come from")
    has_content = asked is not None and bool(_content_stems(asked))
    support = _Support(asked, passages) if needs_passages and has_content else None
    keys = {i: normalize_answer(candidates[i].text) for i in (*range(depth), *wanted)}
    spread = float(np.std([c.score for c in reference]))
    for r, i in enumerate(wanted):
        phrase = candidates[i]
        if "answer_words" in column:
            out[r, column["answer_words"]] = len(keys[i].split())
        if "agreeing_passages" in column:
            agreeing = {reference[j].passage_row for j in range(depth) if keys[j] == keys[i]} | {phrase.passage_row}
            out[r, column["agreeing_passages"]] = len(agreeing)
        if "score_spread" in column:
            out[r, column["score_spread"]] = spread
        if support is not None and "window_support" in column:
            out[r, column["window_support"]] = support.near(phrase)
        if support is not None and "support_gap" in column:
            others = [support.passage(c.passage_row) for c in reference if c.passage_row != phrase.passage_row]
            out[r, column["support_gap"]] = support.passage(phrase.passage_row) - (max(others) if others else 0.0)
    return out


def answer_confidences(
    calibration: Calibration,
    candidates: Sequence[RankedPhrase],
    rows: Sequence[int],
    asked: Sequence[str] | None = None,
    passages: Sequence[Mapping[str, Any]] | None = None,
) -> np.ndarray:
    """P(correct) of the candidates at ``rows`` within their query's ranked ``candidates``, by ``calibration``
    over the features it names (:func:`answer_features`): (len(rows),)."""
    return calibration.confidence(answer_features(calibration.features, candidates, rows, asked, passages))


def ranked_confidences(confidences: Sequence[float | None]) -> list[float]:
    """Scores in [0, 1] for ranked results from their answers' confidences (None: the result gives no answer).

    Result i scores the lowest confidence among the answers of results 1..i, so scores never rise down the
    ranking and a threshold t keeps a prefix of it in which every answer has confidence >= t; a score equals its
    own answer's confidence unless an answer ranked above it is less confident. A result without an answer takes
    the score of the result above it (of the first one below it that has an answer, when none above has one);
    when no result has an answer, every score is 0.

    Example:
        >>> ranked_confidences([0.6, 0.7, None, 0.2, 0.4])
        [0.6, 0.6, 0.6, 0.2, 0.2]
    """
    known = [float(c) for c in confidences if c is not None]
    if not known:
        return [0.0] * len(confidences)
    low = known[0]
    out = []
    for c in confidences:
        if c is not None:
            low = min(low, float(c))
        out.append(low)
    return out


def fit_calibration(
    features: np.ndarray,
    correct: np.ndarray,
    l2: float = 1e-2,
    iterations: int = 50,
    names: Sequence[str] = FEATURES,
) -> Calibration:
    """The calibration over the features ``names`` (columns of :func:`answer_features`): :func:`fit_logistic`.

    Raises:
        InvalidParameterError: As :func:`fit_logistic`, or ``names`` are not f distinct known features.
    """
    names = check_features(tuple(names))
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != len(names):
        raise InvalidParameterError(f"feature columns of shape {x.shape} for the {len(names)} features {names}")
    weights, bias, mean, scale = fit_logistic(x, correct, l2, iterations)
    return Calibration(weights, bias, mean, scale, names)


def fit_logistic(
    features: np.ndarray, correct: np.ndarray, l2: float = 1e-2, iterations: int = 50
) -> tuple[tuple[float, ...], float, tuple[float, ...], tuple[float, ...]]:
    """Logistic regression of ``correct`` (n,) on standardised ``features`` (n, f) by Newton's method with an L2
    penalty: (weights, bias, mean, scale). A NaN feature counts at its column's mean, as
    :meth:`Calibration.confidence` counts it.

    Raises:
        InvalidParameterError: Fewer than two examples, or only right or only wrong answers.
    """
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(correct, dtype=np.float64)
    if x.ndim != 2 or len(x) != len(y) or len(y) < 2 or y.min() == y.max():
        raise InvalidParameterError("calibration needs at least one right and one wrong answer")
    known = ~np.isnan(x)
    mean = np.where(known, x, 0.0).sum(axis=0) / np.maximum(known.sum(axis=0), 1)
    x = np.where(known, x, mean)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])  # (n, f + 1)
    w = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], l2 * len(y))
    penalty[-1] = 0.0  # the bias is not shrunk
    for _ in range(iterations):
        p = sigmoid(z @ w)
        gradient = z.T @ (p - y) + penalty * w
        hessian = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return tuple(w[:-1].tolist()), float(w[-1]), tuple(mean.tolist()), tuple(scale.tolist())


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve: P(a right answer scores above a wrong one), ties counted half."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = (ends - (counts - 1) / 2)[inverse]  # 1-based ranks, averaged over ties
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def reliability(confidences: Sequence[float], labels: Sequence[bool], bins: int = 10) -> list[dict[str, float]]:
    """Reliability table: per confidence bin, the mean confidence, the accuracy and the count."""
    c = np.asarray(confidences, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.searchsorted(edges, c, side="right") - 1, 0, bins - 1)
    return [
        {
            "low": float(edges[b]),
            "high": float(edges[b + 1]),
            "confidence": float(c[which == b].mean()),
            "accuracy": float(y[which == b].mean()),
            "count": int((which == b).sum()),
        }
        for b in range(bins)
        if (which == b).any()
    ]


def expected_calibration_error(confidences: Sequence[float], labels: Sequence[bool], bins: int = 10) -> float:
    """Σ_bins (count / n) · |accuracy − mean confidence|."""
    table = reliability(confidences, labels, bins)
    n = sum(row["count"] for row in table)
    return float(sum(row["count"] / n * abs(row["accuracy"] - row["confidence"]) for row in table)) if n else 0.0
