"""The token searches of one phrase search: its rounds ask for c, 2c, 4c, ... start and end candidates until enough
results are found, and one search serves the first rounds (:data:`ROUNDS_AHEAD`), where it gives exactly the rows a
search per round would: with tidy answers half the phrase searches need a second round
(``benchmarks/haystack/retrievers.py``), which then scans no index again.

An exact or IVF structure ranks the same scored rows whatever k is asked for (:func:`~dphr_haystack.index.structures.
k_independent`), and every search keeps its top-k in one total order (by score, then the lower row:
:func:`~dphr_haystack.index.structures.ranked_head`), so its top-k for a smaller k is the head of its top-k for a
larger one, equal scores at the cut included (copies of a passage score alike): only a query whose equal scores run
past every row the search fetched searches again. With ``refine`` the head's candidates are re-ranked as a search
for that k re-ranks them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from .structures import candidate_count, ranked_head, refine_exact, rows_to_fetch

ROUNDS_AHEAD = 2  # candidate counts one token search serves: c and 2c


class SearchedRows:
    """The ranked rows of one search for ``largest`` candidates per query (set ``scores`` and ``ids``, fetched as
    :meth:`fetched_rows` says), which also give, for a smaller k, the rows a search of its own would return:
    :meth:`rows`."""

    def __init__(
        self,
        queries: np.ndarray,
        largest: int,
        refine: int,
        total: int,
        stored: np.ndarray,
        decode: Callable[[np.ndarray], np.ndarray],
    ) -> None:
        self.queries, self.largest, self.refine, self.total = queries, largest, refine, total
        self.stored, self.decode = stored, decode
        self.scores = np.empty((0, 0), dtype=np.float32)
        self.ids = np.empty((0, 0), dtype=np.int64)
        # the FAISS ids of the searched vectors as stored rows (key vectors stand for rows; else themselves)
        self.stored_rows: Callable[[np.ndarray], np.ndarray] = lambda ids: ids

    def fetched(self, k: int) -> int:
        """How many candidates a search for k keeps from the FAISS index (more to re-rank with ``refine``)."""
        return candidate_count(k, self.refine, self.total)

    def fetched_rows(self) -> int:
        """How many rows to ask the FAISS index for: the largest search's candidates and the rows that show where
        equal scores at its cut end."""
        return rows_to_fetch(self.fetched(self.largest), self.total)

    def rows(self, k: int, which: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """For the queries ``which`` (indices into the searched ones), the rows a search for ``k`` candidates returns,
        and per query whether they are those rows: not where equal scores at its cut run past the rows fetched,
        which a search of its own settles. None for k above the search's."""
        if k > self.largest:
            return None
        complete = self.ids.shape[1] >= self.total
        _, ids, settled = ranked_head(self.scores[which], self.ids[which], self.fetched(k), complete)
        if self.refine > 1:
            ids = refine_exact(self.queries[which], ids, k, self.stored, self.decode)[1]
        return self.stored_rows(ids), settled


class TokenSearch(Protocol):
    """What :class:`TokenRounds` asks of a phrase index (``PhraseIndex``)."""

    def __len__(self) -> int: ...

    def search_tokens(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]: ...

    def search_token_rows(self, queries: np.ndarray, largest: int) -> SearchedRows | None: ...


class TokenRounds:
    """The start and end token rows of each round of one phrase search over ``index``: ``first`` candidates in
    the first round; with ``ahead`` one search serves the first :data:`ROUNDS_AHEAD` rounds."""

    def __init__(
        self, index: TokenSearch, q_start: np.ndarray, q_end: np.ndarray, first: int, ahead: bool = True
    ) -> None:
        self.index, self.q_start, self.q_end = index, q_start, q_end
        largest = min(first << (ROUNDS_AHEAD - 1), len(index))
        self.searched = index.search_token_rows(np.concatenate([q_start, q_end]), largest) if ahead else None

    def rows(self, c: int, pending: np.ndarray) -> np.ndarray:
        """The rows of a search for ``c`` candidates: the ``pending`` queries' start rows, then their end rows."""
        n, p = len(self.q_start), len(pending)
        found = self.searched.rows(c, np.concatenate([pending, pending + n])) if self.searched is not None else None
        if found is None:
            return self.search(c, pending)
        ids, settled = found
        redo = np.flatnonzero(~(settled[:p] & settled[p:]))
        if len(redo):  # equal scores past the rows fetched: these queries search again
            ids = ids.copy()
            ids[np.concatenate([redo, redo + p])] = self.search(c, pending[redo])
        return ids

    def search(self, c: int, queries: np.ndarray) -> np.ndarray:
        return self.index.search_tokens(np.concatenate([self.q_start[queries], self.q_end[queries]]), c)[1]
