"""Key vectors: a few vectors a passage that the FAISS structure searches in place of every stored token vector.

An index made with ``key_vectors=B`` keeps, for each passage, ``B`` k-means centroids of its stored vectors (a
passage of at most ``B`` tokens keeps its vectors themselves), each beside the stored row of the token nearest to it.
Its FAISS structure holds only these (``keys.bin``, ``key_rows.bin``: :class:`~dphr_haystack.index.storage.
IndexStorage`); a key hit stands for its passage, which the searcher then reads whole from the stored vectors (every
token of it scored exactly as a start and an end). A question's words meet some token of each cluster, where the
few tokens a filter ranks first are the likeliest answers and miss passages (``docs/scale.md``, "Key vectors").

The centroids need no model: Lloyd iterations started from ``B`` evenly spaced tokens of the passage, in float32,
deterministic, so every process computes the same keys from the same stored vectors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from ..params import check_param

KMEANS_ITERATIONS = 8
KEY_ROW_DTYPE = np.dtype("<i8")
# A search of key vectors asks for this many times the start and end candidates a search of every vector asks for:
# each hit stands for a passage, which is read whole, and its best-scoring c starts and c ends are paired as the hits
# of an index of every vector are. On SQuAD-open-small (2,000 validation and 2,000 unseen questions, 8 keys a
# passage) 2 keeps EM@1 within 1 point of every vector searched (1 loses 1.00 / 1.00 of 600 + 600):
# benchmarks/index/key_tokens.py, benchmarks/index/key_store.py.
KEY_HITS_PER_CANDIDATE = 2


def passage_centroids(
    x: np.ndarray, budget: int, iterations: int = KMEANS_ITERATIONS
) -> tuple[np.ndarray, np.ndarray]:
    """``budget`` k-means centroids of one passage's vectors ``x`` (n, d) and, for each, the index into ``x`` of the
    vector nearest to it (a passage of at most ``budget`` vectors: its vectors, each standing for itself)."""
    n = len(x)
    if n <= budget:
        return x.astype(np.float32, copy=True), np.arange(n, dtype=np.int64)
    x = x.astype(np.float32, copy=False)
    start = np.round(np.linspace(0, n - 1, budget)).astype(np.int64)
    centers = x[start].copy()
    squared = np.einsum("ij,ij->i", x, x)
    clusters = np.arange(budget)
    for _ in range(iterations):
        member = (_nearest(x, squared, centers).argmin(axis=1)[:, None] == clusters).astype(np.float32)
        counts = member.sum(axis=0)
        filled = counts > 0
        centers[filled] = (member.T @ x)[filled] / counts[filled, None]  # an empty cluster keeps its centroid
    nearest = _nearest(x, squared, centers).argmin(axis=0)
    return centers, nearest.astype(np.int64)


def _nearest(x: np.ndarray, squared: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Squared distances (n, B) from each vector to each centroid."""
    return squared[:, None] - 2 * x @ centers.T + np.einsum("ij,ij->i", centers, centers)[None, :]


def key_vectors(
    stored: np.ndarray,
    counts: np.ndarray,
    first_row: int,
    budget: int,
    decode: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """The key vectors (float32) and the stored rows they stand for of consecutive passages whose ``counts`` stored
    vectors are ``stored`` (stored dtype), the first of them at row ``first_row``."""
    vectors, rows = [], []
    for begin, centers, nearest in _passages_keys(stored, counts, budget, decode):
        vectors.append(centers)
        rows.append(first_row + begin + nearest)
    if not vectors:
        return np.zeros((0, stored.shape[1]), dtype=np.float32), np.zeros(0, dtype=KEY_ROW_DTYPE)
    return np.concatenate(vectors), np.concatenate(rows).astype(KEY_ROW_DTYPE)


def _passages_keys(
    stored: np.ndarray, counts: np.ndarray, budget: int, decode: Callable[[np.ndarray], np.ndarray]
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    begin = 0
    for count in np.asarray(counts, dtype=np.int64):
        if count:
            centers, nearest = passage_centroids(decode(stored[begin : begin + count]), budget)
            yield begin, centers, nearest
        begin += int(count)
    if begin != len(stored):
        raise ValueError(f"passage token counts add up to {begin}, not the {len(stored)} vectors given")


def searched_count(num_tokens: np.ndarray, budget: int | None) -> int:
    """The vectors FAISS holds for passages of ``num_tokens`` stored vectors each: ``budget`` key vectors a passage
    (a passage of fewer keeps as many), or every stored vector (``budget`` None)."""
    num_tokens = np.asarray(num_tokens, dtype=np.int64)
    return int(np.minimum(num_tokens, budget).sum() if budget else num_tokens.sum())


def check_key_budget(budget: object) -> int | None:
    """``budget`` as a key-vector count (None: every stored vector searched); InvalidParameterError unless None or an
    integer from 1 to 4,096."""
    return None if budget is None else int(check_param("key_vectors", budget))


def best_rows_of_passages_hit(
    index, q_start: np.ndarray, q_end: np.ndarray, hits: tuple[np.ndarray, np.ndarray], allowed: np.ndarray, c: int
) -> tuple[np.ndarray, np.ndarray]:
    """Key hits (start and end rows, -1 for none) → the ``c`` best start rows and ``c`` best end rows among every
    stored token of the ``allowed`` passages they stand for, scored exactly against the query's start and end
    vectors (``index``: a :class:`~dphr_haystack.index.phrase_index.PhraseIndex`)."""
    hit = np.concatenate(hits)
    passages = np.unique(index.tokens["passage"][hit[hit >= 0]])
    passages = passages[allowed[passages]]
    rows = rows_of_passages(index.first_token[passages], index.num_tokens[passages])
    if not len(rows):
        return rows, rows
    scores = index.vectors(rows) @ np.stack([q_start, q_end], axis=1)
    return _best_rows(rows, scores[:, 0], c), _best_rows(rows, scores[:, 1], c)


def _best_rows(rows: np.ndarray, scores: np.ndarray, c: int) -> np.ndarray:
    """The ``c`` best ``rows`` by score and, among equal scores, the lower row first, as a search of every vector
    keeps them (:func:`~dphr_haystack.index.structures.total_order`: copies of a passage score alike)."""
    if c < len(rows):
        at_cut = np.partition(scores, len(scores) - c)[len(scores) - c]
        rows, scores = rows[scores >= at_cut], scores[scores >= at_cut]
    return rows[np.lexsort((rows, -scores))[:c]]


def rows_of_passages(first: np.ndarray, count: np.ndarray) -> np.ndarray:
    """The stored rows of passages whose rows start at ``first`` and number ``count``, passage after passage."""
    count = np.asarray(count, dtype=np.int64)
    return np.repeat(np.asarray(first, dtype=np.int64) - np.cumsum(count) + count, count) + np.arange(count.sum())
