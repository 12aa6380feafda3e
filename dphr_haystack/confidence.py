"""Answers a user can trust: phrases that copy the question, and a calibrated confidence for phrase answers.

A phrase *copies the question* when its SQuAD-normalised words occur, as whole words and in order, in the
normalised question ("Who won Super Bowl 50?" → "Super Bowl 50"); such a phrase is never the answer.

Raw phrase scores (q_s·h_i + q_e·h_j) rank phrases but do not say how likely an answer is right. A
:class:`Calibration` (:mod:`dphr_haystack.model.calibration`) maps features of a phrase's score within its query's
candidate list to P(correct) with a logistic regression fitted on questions with known answers
(:func:`fit_calibration`); it is stored in the model's ``dphr_config.json`` (``calibration``) so every index
searched with the model reports the same confidences.

A ranked list of passages or documents scores each by its answer's confidence, made monotone along the ranking
(:func:`ranked_confidences`): the ranking is by raw score, and a confidence also weighs how its phrase compares
with the other candidates, so a passage's answer can be more confident than the answer of one ranked above it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .answers import normalize_answer
from .errors import InvalidParameterError
from .model.calibration import FEATURES, Calibration, sigmoid

# How many ranked candidate phrases the confidence features look at (the search fetches at least this many).
CONFIDENCE_DEPTH = 10


def question_words(question: str) -> tuple[str, ...]:
    """The normalised words of a question (SQuAD normalisation: case, punctuation and articles dropped)."""
    return tuple(normalize_answer(question).split())


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


def fit_calibration(features: np.ndarray, correct: np.ndarray, l2: float = 1e-2, iterations: int = 50) -> Calibration:
    """Logistic regression of ``correct`` (n,) on ``features`` (n, f) by Newton's method with an L2 penalty.

    Raises:
        InvalidParameterError: Fewer than two examples, or only right or only wrong answers.
    """
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(correct, dtype=np.float64)
    if x.ndim != 2 or len(x) != len(y) or len(y) < 2 or y.min() == y.max():
        raise InvalidParameterError("calibration needs at least one right and one wrong answer")
    mean, scale = x.mean(axis=0), x.std(axis=0)
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
    return Calibration(tuple(w[:-1].tolist()), float(w[-1]), tuple(mean.tolist()), tuple(scale.tolist()))


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve: P(a right answer scores above a wrong one), ties counted half."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    sorted_s = s[order]
    i = 0
    while i < len(s):  # average ranks over ties
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
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
