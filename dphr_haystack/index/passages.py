"""The passage table of a phrase index: one row per stored passage, its tokens' place, deletions and id look-ups.

Rows are append-only and numbered in storage order; a deleted (tombstoned) row stays, marked ``deleted``, until the
index is rebuilt. Ids map to their live row; a passage id may come back in a newer row once the old one is deleted.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..errors import IndexLoadError

# Rows a passage cache keeps (the answer features' words: ~2.7 KB a passage on SQuAD-open-small, so ~180 MB).
MAX_CACHED_ROWS = 65_536


class RowCache:
    """Values derived from passage records (``derive(record)``), one per row, computed when first asked for and kept
    while the row holds the same record object: a row rolled back and written anew computes afresh. At most
    ``max_rows`` are kept, the least recently asked for dropped first, so that a long-lived reader of a large index
    keeps a bounded set (the passages its questions keep reaching) instead of every passage it ever read. Any number
    of threads may ask at once (two that compute one row at once store equal values)."""

    def __init__(self, derive: Callable[[dict[str, Any]], Any], max_rows: int | None = None) -> None:
        self.derive = derive
        self.max_rows = MAX_CACHED_ROWS if max_rows is None else max_rows
        if self.max_rows < 1:
            raise ValueError(f"max_rows must be at least 1, got {self.max_rows}")
        self._rows: OrderedDict[int, tuple[dict[str, Any], Any]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, row: int, record: dict[str, Any]) -> Any:
        """The value of ``record``, the record at ``row``."""
        with self._lock:
            entry = self._rows.get(row)
            if entry is not None and entry[0] is record:
                self._rows.move_to_end(row)
                return entry[1]
        value = self.derive(record)  # outside the lock: other threads read their rows meanwhile
        with self._lock:
            self._rows[row] = (record, value)
            self._rows.move_to_end(row)
            while len(self._rows) > self.max_rows:
                self._rows.popitem(last=False)
        return value

    def forget_from(self, row: int) -> None:
        """Drop the values of rows ``row`` and after (rows rolled back)."""
        with self._lock:
            for stale in [r for r in self._rows if r >= row]:
                del self._rows[stale]


class PassageTable:
    """Passage records with, per row, the first stored token, the token count and whether it is deleted.

    ``hidden`` passages are live in the index but left out of this object's results (a reader's view of phrases
    whose documents it does not hold); they count as deleted here and are still deletable by id.
    """

    def __init__(self) -> None:
        self.passages: list[dict[str, Any]] = []
        self.first_token = np.zeros(0, np.int64)
        self.num_tokens = np.zeros(0, np.int64)
        self.deleted = np.zeros(0, dtype=bool)
        self.live_by_id: dict[str, int] = {}
        self.hidden: dict[str, int] = {}
        self.caches: dict[str, RowCache] = {}

    def __len__(self) -> int:
        return len(self.passages)

    @property
    def num_live(self) -> int:
        return int((~self.deleted).sum())

    @property
    def num_live_vectors(self) -> int:
        """Stored tokens of the live passages."""
        return int(self.num_tokens[~self.deleted].sum())

    def row(self, passage_id: str) -> int | None:
        """Row of the live passage with this id, or None."""
        return self.live_by_id.get(passage_id)

    def live_ids(self) -> list[str]:
        return list(self.live_by_id)

    def cache(self, name: str, derive: Callable[[dict[str, Any]], Any]) -> RowCache:
        """The :class:`RowCache` called ``name`` (made with ``derive`` when it is first asked for)."""
        if name not in self.caches:
            self.caches.setdefault(name, RowCache(derive))
        return self.caches[name]

    def register(self, records: list[dict[str, Any]], counts: np.ndarray, num_vectors: int) -> None:
        """Track new passage records whose stored tokens (``counts`` each) end the ``num_vectors`` stored ones."""
        start = len(self.passages)
        counts = np.asarray(counts, dtype=np.int64)
        base = num_vectors - int(counts.sum())
        firsts = base + np.concatenate([[0], np.cumsum(counts)[:-1]]) if len(counts) else counts
        self.passages.extend(records)
        self.first_token = np.concatenate([self.first_token, firsts.astype(np.int64)])
        self.num_tokens = np.concatenate([self.num_tokens, counts])
        self.deleted = np.concatenate([self.deleted, np.zeros(len(records), dtype=bool)])
        for offset, record in enumerate(records):
            self.live_by_id[record["id"]] = start + offset

    def mark(self) -> tuple[int, np.ndarray, dict[str, int]]:
        """What :meth:`roll_back` puts back: the row count, deletions and hidden passages of this moment."""
        return (len(self.passages), self.deleted.copy(), dict(self.hidden))

    def roll_back(self, mark: tuple[int, np.ndarray, dict[str, int]]) -> None:
        """Forget the rows registered and the deletions made since :meth:`mark` (a write that failed)."""
        rows, deleted, hidden = mark
        del self.passages[rows:]
        for cache in self.caches.values():
            cache.forget_from(rows)
        self.first_token, self.num_tokens = self.first_token[:rows], self.num_tokens[:rows]
        self.deleted, self.hidden = deleted.copy(), dict(hidden)
        self.live_by_id = {self.passages[row]["id"]: int(row) for row in np.flatnonzero(~deleted)}

    def delete(self, rows: Iterable[int] | np.ndarray) -> None:
        """Mark rows deleted and drop them from the id look-ups (a newer row with the same id stays)."""
        rows = np.asarray(rows if isinstance(rows, np.ndarray) else list(rows), dtype=np.int64)
        self.deleted[rows] = True
        for row in rows.tolist():
            pid = self.passages[row]["id"]
            if self.live_by_id.get(pid) == row:
                del self.live_by_id[pid]
            if self.hidden.get(pid) == row:
                del self.hidden[pid]

    def rows_of_ids(self, passage_ids: Iterable[str]) -> list[int]:
        """Sorted rows of the live or hidden passages with these ids (forgetting that they were hidden)."""
        rows = set()
        for pid in passage_ids:
            for row in (self.live_by_id.get(pid), self.hidden.pop(pid, None)):
                if row is not None:
                    rows.add(row)
        return sorted(rows)

    def rows_of_documents(self, document_ids: Iterable[str]) -> list[int]:
        """Sorted rows of the live passages of these documents."""
        wanted = set(document_ids)
        return sorted(row for row in self.live_by_id.values() if self.passages[row]["document_id"] in wanted)

    def hide(self, passage_ids: Iterable[str]) -> int:
        """Leave these live passages out of results (see the class); returns the count."""
        hidden = 0
        for pid in passage_ids:
            row = self.live_by_id.pop(pid, None)
            if row is not None:
                self.hidden[pid] = row
                self.deleted[row] = True
                hidden += 1
        return hidden

    def check_live_ids(self, where: str) -> None:
        """Raise IndexLoadError when two live passages share an id (a valid index tombstones the older one)."""
        if len(self.live_by_id) == self.num_live:  # hidden passages are in neither
            return
        seen: dict[str, int] = {}
        for row in np.flatnonzero(~self.deleted):
            pid = self.passages[row]["id"]
            if pid in seen:
                raise IndexLoadError(
                    f"{where} is corrupted: passage id {pid!r:.80} is live at rows {seen[pid]} and {row}"
                )
            seen[pid] = int(row)
