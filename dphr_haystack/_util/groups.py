"""The best-scoring element of each group of a keyed array (the span search keeps each start's best end with it)."""

from __future__ import annotations

import numpy as np


def argmax_groups(keys: np.ndarray, scores: np.ndarray, mask: np.ndarray) -> set[int]:
    """Indices of the best-scoring element per key among masked elements (ties: lowest index)."""
    idx = np.nonzero(mask)[0]
    if len(idx) == 0:
        return set()
    order = idx[np.lexsort((idx, -scores[idx], keys[idx]))]
    first = np.ones(len(order), dtype=bool)
    first[1:] = keys[order][1:] != keys[order][:-1]
    return set(order[first].tolist())
