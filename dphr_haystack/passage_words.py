"""A passage's words as the answer features read them, tokenised once per passage.

The answer features (:func:`dphr_haystack.confidence.answer_features`) count a question's words near an answer, in
its sentence and in its passage. :class:`PassageWords` holds what they read of one passage: its words, SQuAD-
normalised word by word (case and punctuation dropped, articles left out), each kept as its first :data:`STEM`
letters with its character span; its title's stems; and where its sentences end. A phrase index keeps them per
passage row once they are read (:meth:`dphr_haystack.index.phrase_index.PhraseIndex.passage_cache`), so that a
search tokenises each passage once, not once per query; they are compact (int32 character spans, interned stems).
"""

from __future__ import annotations

import bisect
import re
import string
import sys
from array import array
from collections.abc import Callable, Mapping
from typing import Any

from .answers import normalize_answer

# Question and passage words match on their first letters, so that "invented" meets "invention".
STEM = 5
# A word of a passage before normalisation: what stands between white space.
_TOKEN = re.compile(r"\S+")
# SQuAD normalisation word by word: punctuation dropped (marked first, so that offsets hold), articles dropped.
_PUNCTUATION_MARK = str.maketrans(dict.fromkeys(string.punctuation, "\x00"))
_ARTICLES = frozenset(("a", "an", "the"))
# Where a sentence ends: a full stop, question or exclamation mark before a space.
SENTENCE_END = re.compile(r"[.!?]\s")


class PassageWords:
    """A passage's normalised words (their :data:`STEM`-letter stems, in order, with character spans), its title's
    stems and its sentence ends (the positions of :data:`SENTENCE_END` in its text)."""

    __slots__ = ("ends", "sentence_marks", "starts", "stems", "title_stems")

    def __init__(self, text: str, title: str = "") -> None:
        starts, ends, stems = array("i"), array("i"), []
        lowered = text.lower()
        if len(lowered) == len(text):  # punctuation marked in place: the words keep their offsets
            marked = lowered.translate(_PUNCTUATION_MARK)
            words = ((m, m.group().replace("\x00", "")) for m in _TOKEN.finditer(marked))
        else:  # a letter whose lower case is longer: normalise word by word
            words = ((m, normalize_answer(m.group()).replace(" ", "")) for m in _TOKEN.finditer(text))
        for match, word in words:
            if word and word not in _ARTICLES:  # not punctuation or an article alone
                starts.append(match.start())
                ends.append(match.end())
                stems.append(sys.intern(word[:STEM]))
        self.starts, self.ends, self.stems = starts, ends, tuple(stems)
        self.title_stems = tuple(sys.intern(w[:STEM]) for w in normalize_answer(title).split())
        # a mark is one character (.!?) followed by a space, so no two overlap: these are all of the text's
        self.sentence_marks = array("i", (m.start() for m in SENTENCE_END.finditer(text)))

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> PassageWords:
        """The words of a passage record (``{"text", "title"}``)."""
        return cls(record["text"], record.get("title") or "")

    def __len__(self) -> int:
        return len(self.stems)

    def ending_by(self, position: int) -> int:
        """How many words end at or before ``position`` (the words before a phrase that starts there)."""
        return bisect.bisect_right(self.ends, position)

    def starting_from(self, position: int) -> int:
        """The first word that starts at or after ``position`` (the first after a phrase that ends there)."""
        return bisect.bisect_left(self.starts, position)

    def sentence_bounds(self, start: int, end: int) -> tuple[int, int | None]:
        """Where the sentence of the span ``start:end`` starts (after the last sentence end before it; 0 when none)
        and ends (one past the first full stop at or after ``end``; None when none)."""
        before = bisect.bisect_right(self.sentence_marks, start - 2)  # marks that end (mark + space) by ``start``
        after = bisect.bisect_left(self.sentence_marks, end)
        low = self.sentence_marks[before - 1] + 2 if before else 0
        return low, self.sentence_marks[after] + 1 if after < len(self.sentence_marks) else None


def cached_words(index: Any) -> Callable[[int], PassageWords]:
    """A reader of the :class:`PassageWords` of an index's passage rows that keeps each in the index's cache
    (``index``: a :class:`~dphr_haystack.index.phrase_index.PhraseIndex`), so that each is tokenised once."""
    cache = index.passage_cache("answer_words", PassageWords.of)
    passages = index.passages
    return lambda row: cache.get(row, passages[row])
