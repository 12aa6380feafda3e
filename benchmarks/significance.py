"""Paired and unpaired differences between two systems' per-question scores, and when a difference is noise."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

Z = 1.96  # two-sided 95%


def paired(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """``b`` − ``a`` per question: mean, its standard error, and for 0/1 metrics the discordant counts with the
    exact McNemar p-value."""
    d = b - a
    n = len(d)
    se = float(np.std(d, ddof=1) / math.sqrt(n)) if n > 1 else 0.0
    out: dict[str, Any] = {"diff": float(d.mean()), "se": se}
    if np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all():
        gained, lost = int(((a == 0) & (b == 1)).sum()), int(((a == 1) & (b == 0)).sum())
        out.update(gained=gained, lost=lost, mcnemar_p=mcnemar_p(gained, lost))
    return out


def mcnemar_p(gained: int, lost: int) -> float:
    """Exact two-sided McNemar test: P(a split at least this uneven) of ``gained + lost`` fair coin flips."""
    n, low = gained + lost, min(gained, lost)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(low + 1)) / 2**n
    return min(1.0, 2 * tail)


def unpaired(p1: float, n1: int, p2: float, n2: int) -> dict[str, Any]:
    """``p2`` − ``p1`` with the standard error of two independent means of values in [0, 1]: p(1 − p)/n is the
    binomial variance for 0/1 metrics and bounds the variance of F1 and MRR (Bhatia–Davis)."""
    se = math.sqrt(max(p1 * (1 - p1), 0.0) / n1 + max(p2 * (1 - p2), 0.0) / n2)
    return {"diff": p2 - p1, "se": se}


def within_noise(diff: float, se: float) -> bool:
    """Whether ``diff`` lies within ``Z`` standard errors of zero (exactly zero when there is no error)."""
    return abs(diff) <= Z * se if se > 0 else abs(diff) < 1e-12


def paired_difference(new: list[float], old: list[float]) -> dict[str, float]:
    """Mean of the per-question differences ``new - old`` and its standard error."""
    diff = np.asarray(new, dtype=float) - np.asarray(old, dtype=float)
    se = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else float("inf")
    return {"mean": float(diff.mean()), "se": se}
