"""Which words a corpus writes anywhere: whether a question's names occur in any passage of the corpus searched.

A question about another town, company or version than a corpus' own ("Who was the first mayor of Port Calder?"
asked of a town's pages that never write "Calder") names something no passage writes; an answerable question nearly
always names only what its passage writes (measured on SQuAD dev: 1.7% of its questions name a word that none of the
1,702 paragraphs write, mostly misspellings; of TriviaQA questions over the same paragraphs, 54%; names compared as
:func:`~dphr_haystack.question_words.name_key` writes them, accents dropped: ``python -m
benchmarks.quality.unwritten_names``). The answerability reads this as the query feature ``all_names_in_corpus``
(:func:`dphr_haystack.confidence.query_features`).

:class:`CorpusWords` counts, for each word as names are compared, the live passages (title or text) that write it, and
follows its index exactly: passages added since it last looked are counted, deleted ones uncounted, at the next
question. One is kept per index (:func:`corpus_words`, built at a searcher's or store's warm-up, else when a question
first needs it: ~1 s per 20,000 passages on one core); a reload of the index starts afresh. :class:`CorpusNames` says
which of a question's names the passages a search may return write.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .question_words import holds_name, name_key

__all__ = ["CorpusNames", "CorpusWords", "corpus_words", "names_written"]

# A search masked to all but at most this many live passages reads the words of those it leaves out (~60 µs a
# passage), so that a name only they write counts as absent; a search that leaves out more asks the whole live corpus
# (a name the corpus writes outside the mask then counts as present: the feature errs towards "answerable"). The
# answerability's fit leaves out one article at most (SQuAD's longest has 149 paragraphs), so it is exact there.
EXACT_EXCLUSIONS = 160


def passage_word_set(record: Mapping[str, Any]) -> set[str]:
    """The words of a passage's title (``_`` read as a space) and text, as names are compared
    (:func:`~dphr_haystack.question_words.name_key`)."""
    title = str(record.get("title") or "").replace("_", " ")
    return set(name_key(f"{title} {record.get('text') or ''}").split())


def words_of(records: Iterable[Mapping[str, Any]]) -> Counter[str]:
    """How many of ``records`` write each normalised word (:func:`passage_word_set`)."""
    counts: Counter[str] = Counter()
    for record in records:
        counts.update(passage_word_set(record))
    return counts


class CorpusWords:
    """How many live passages of a corpus write each normalised word, kept in step with a passage table (safe to
    share between threads)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.counted = np.zeros(0, dtype=bool)  # per passage row: whether its words are in ``counts``
        self._lock = threading.Lock()

    def sync(self, passages: Sequence[Mapping[str, Any]], live: np.ndarray) -> None:
        """Count the rows that became live since the last sync and uncount those that did not stay live."""
        live = np.asarray(live, dtype=bool)
        with self._lock:
            if len(live) < len(self.counted):  # a shorter table is another table: count it afresh
                self.counts, self.counted = Counter(), np.zeros(0, dtype=bool)
            counted = np.zeros(len(live), dtype=bool)
            counted[: len(self.counted)] = self.counted
            for row in np.flatnonzero(live != counted):
                words = passage_word_set(passages[row])
                if live[row]:
                    self.counts.update(words)
                else:
                    self.counts.subtract(words)
            self.counted = live.copy()

    def all_written(self, names: Sequence[str], left_out: Iterable[Mapping[str, Any]] = ()) -> bool:
        """Whether every name (:func:`~dphr_haystack.question_words.question_names`) is written by a counted
        passage that is not among the records ``left_out`` (counted passages a search leaves out)."""
        return not self.unwritten(names, words_of(left_out))

    def unwritten(self, names: Sequence[str], less: Counter[str] | None = None) -> tuple[str, ...]:
        """The names that no counted passage writes, the passages counted in ``less`` (:func:`words_of` the counted
        passages a search leaves out) left out."""
        less = less if less is not None else Counter()
        with self._lock:
            return tuple(name for name in names if not holds_name(lambda w: self.counts[w] - less[w] > 0, name))


_CORPORA: weakref.WeakKeyDictionary[Any, CorpusWords] = weakref.WeakKeyDictionary()
_CORPORA_LOCK = threading.Lock()


def corpus_words(index: Any) -> CorpusWords:
    """The :class:`CorpusWords` of a phrase index's live passages, synced with it (one per passage table)."""
    with _CORPORA_LOCK:
        words = _CORPORA.get(index.table)
        if words is None:
            words = _CORPORA[index.table] = CorpusWords()
    words.sync(index.passages, ~index.deleted)
    return words


class CorpusNames:
    """Which of a question's names the passages ``allowed`` of a phrase index (a mask of live rows) write, reading
    the index's words only when asked; exact when at most :data:`EXACT_EXCLUSIONS` live passages are left out, else
    over every live passage. Called with names: whether they write them all."""

    def __init__(self, index: Any, allowed: np.ndarray) -> None:
        self.index, self.allowed = index, allowed
        self._left_out: Counter[str] | None = None  # the words of the passages left out, read once

    def __call__(self, names: Sequence[str]) -> bool:
        return not self.unwritten(names)

    def unwritten(self, names: Sequence[str]) -> tuple[str, ...]:
        """The names no allowed passage writes."""
        if self._left_out is None:
            left_out = np.flatnonzero(~self.index.deleted & ~self.allowed)
            records = [self.index.passages[r] for r in left_out] if len(left_out) <= EXACT_EXCLUSIONS else []
            self._left_out = words_of(records)
        return corpus_words(self.index).unwritten(names, self._left_out)


def names_written(index: Any, allowed: np.ndarray) -> CorpusNames:
    """The :class:`CorpusNames` of the passages ``allowed`` of ``index``."""
    return CorpusNames(index, allowed)
