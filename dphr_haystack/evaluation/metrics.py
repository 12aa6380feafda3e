"""Ranking metrics of an evaluation: where a ranked list first holds an answer, accuracy@k, MRR@k and P@k.

Each function takes every question at once and returns one value per question (hits as 1.0 / 0.0), so
reports average them and significance tests pair them. Whether one passage holds an answer is
:func:`dphr_haystack.answers.contains_answer`'s decision.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

# The passage accuracies a report gives, and the depth of its MRR and precision (top-k evaluations below 20 give
# those up to k: see passage_ks and ranking_depth).
PASSAGE_KS = (1, 5, 20)
RANKING_DEPTH = 20


def passage_ks(top_k: int) -> tuple[int, ...]:
    """The depths of ``passage_acc@k`` an evaluation of the top ``top_k`` passages gives: those of
    :data:`PASSAGE_KS` it reaches, and ``top_k`` itself (``5`` → ``(1, 5)``, ``3`` → ``(1, 3)``, ``100`` →
    ``(1, 5, 20, 100)``)."""
    return tuple(sorted({k for k in PASSAGE_KS if k <= top_k} | {top_k}))


def ranking_depth(top_k: int) -> int:
    """The depth of MRR and P of an evaluation of the top ``top_k`` passages: :data:`RANKING_DEPTH`, or ``top_k``
    when fewer passages were retrieved (P@20 of 5 passages would divide by passages never asked for)."""
    return min(RANKING_DEPTH, top_k)


def first_hit(has_answer: Iterable[bool]) -> int:
    """1-based rank of the first passage holding an answer; 0 when none does."""
    return next((rank for rank, hit in enumerate(has_answer, 1) if hit), 0)


def accuracy_at(first_hits: Sequence[int] | np.ndarray, k: int) -> np.ndarray:
    """Per question: 1.0 when an answer is in the top ``k`` (its first hit is at rank 1..k), else 0.0."""
    firsts = np.asarray(first_hits, dtype=np.int64)
    return ((firsts > 0) & (firsts <= k)).astype(float)


def reciprocal_rank_at(first_hits: Sequence[int] | np.ndarray, k: int = RANKING_DEPTH) -> np.ndarray:
    """Per question: 1 / rank of the first hit, 0.0 when it is beyond ``k`` or absent (MRR@k averages these)."""
    firsts = np.asarray(first_hits, dtype=np.int64)
    return np.where((firsts > 0) & (firsts <= k), 1.0 / np.maximum(firsts, 1), 0.0)


def precision_at(has_answer: Sequence[Sequence[bool]], k: int = RANKING_DEPTH) -> np.ndarray:
    """Per question: the passages holding an answer among the top ``k``, divided by ``k`` (DPR-style tables)."""
    return np.array([sum(bool(hit) for hit in flags[:k]) / k for flags in has_answer], dtype=float)


def ranking_metrics(
    has_answer: Sequence[Sequence[bool]], ks: Sequence[int] = PASSAGE_KS, depth: int = RANKING_DEPTH
) -> dict[str, np.ndarray]:
    """Per question ``passage_acc@k`` for each k, ``mrr@<depth>`` and ``p@<depth>`` (default 20) of ranked lists given
    as their has-an-answer flags, best first."""
    firsts = np.array([first_hit(flags) for flags in has_answer], dtype=np.int64)
    out = {f"passage_acc@{k}": accuracy_at(firsts, k) for k in ks}
    out[f"mrr@{depth}"] = reciprocal_rank_at(firsts, depth)
    out[f"p@{depth}"] = precision_at(has_answer, depth)
    return out


__all__ = [
    "PASSAGE_KS",
    "RANKING_DEPTH",
    "accuracy_at",
    "first_hit",
    "passage_ks",
    "precision_at",
    "ranking_depth",
    "ranking_metrics",
    "reciprocal_rank_at",
]
