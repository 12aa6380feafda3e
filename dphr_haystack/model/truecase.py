"""Truecasing of all-lowercase queries for cased models (DensePhrases' ``--truecase``).

A cased encoder reads "who wrote hamlet" differently from "Who wrote Hamlet", and open-domain question sets
(NQ, WebQuestions) are lower-cased. DensePhrases restores the case of such queries with n-gram case statistics
before encoding them. This is a small statistical truecaser of the same kind (Lita et al. 2003, simplified),
built from cased text at hand instead of a pickled statistics file:

* the **corpus** it searches: for each word (lower-cased), how often each surface form occurs away from the
  start of a sentence (a sentence-initial capital says little about the word: it counts only for words never
  seen elsewhere, and only where the vocabulary says nothing), and, for words seen in several forms
  ("may"/"May", "new"/"New"), how often each form follows and precedes each neighbouring word;
* the model's **cased vocabulary** for words the corpus lacks: a whole-word entry that exists only capitalised
  ("NASA", "Denver") gives that form, one that exists in lower case stays lower case.

A word is given its most frequent form, or for a word seen in several forms the form that scores best with
its left and right neighbours (add-one smoothed unigram × left-bigram × right-bigram); unknown words stay lower
case (``unknown="title"`` title-cases them, as DensePhrases does), so do clitics ("didn't"); the first word is
capitalised. Only letters
change: spacing, digits and punctuation are kept as they are. Nothing is read from disk.

Example:
    >>> caser = TrueCaser.from_texts(["Hamlet is a tragedy by William Shakespeare, set in Denmark."])
    >>> caser.truecase("who wrote hamlet")
    'Who wrote Hamlet'
"""

from __future__ import annotations

import math
import re
import weakref
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

# Letter runs, or dotted abbreviations such as "U.S." / "e.g." kept whole.
WORD = re.compile(r"[^\W\d_]+(?:\.[^\W\d_]+)+\.?|[^\W\d_]+")
_WORD_GROUP = re.compile(f"({WORD.pattern})")
UNKNOWN_OPTIONS = ("lower", "title")
# Corpus passages a searcher reads to build its truecaser (evenly spread over the index).
CORPUS_SAMPLE = 20_000


def is_all_lowercase(text: str) -> bool:
    """True when ``text`` has letters and none of them is upper case (what DensePhrases truecases)."""
    return text == text.lower() and any(ch.isalpha() for ch in text)


class TrueCaser:
    """Restores the case of lower-cased text from case statistics of cased text.

    Args:
        forms: lower-cased word → Counter of its surface forms (away from sentence starts).
        left: (previous word, word), both lower-cased → counts of the word's forms after it.
        right: (word, next word), both lower-cased → counts of the word's forms before it.
        unknown: What an unknown word becomes: ``lower`` (kept) or ``title``.
    """

    def __init__(
        self,
        forms: Mapping[str, Counter[str]] | None = None,
        left: Mapping[tuple[str, str], Mapping[str, int]] | None = None,
        right: Mapping[tuple[str, str], Mapping[str, int]] | None = None,
        unknown: str = "lower",
    ) -> None:
        if unknown not in UNKNOWN_OPTIONS:
            raise ValueError(f"unknown={unknown!r}; valid: {', '.join(UNKNOWN_OPTIONS)}")
        self.forms: dict[str, Counter[str]] = dict(forms or {})
        self.left: dict[tuple[str, str], Mapping[str, int]] = dict(left or {})
        self.right: dict[tuple[str, str], Mapping[str, int]] = dict(right or {})
        self.unknown = unknown
        self.initial: dict[str, str] = {}  # forms of words seen only at sentence starts
        self.fallback: dict[str, str] = {}  # from a vocabulary: used for words without corpus counts

    # ----------------------------------------------------------------- building
    @classmethod
    def from_texts(cls, texts: Iterable[str], unknown: str = "lower") -> TrueCaser:
        """Count case forms in cased ``texts`` (two passes: forms, then the neighbours of ambiguous words)."""
        split = [_sentence_words(text) for text in texts]
        counted: Counter[str | None] = Counter()  # surface forms away from sentence starts, in order of appearance
        initials: dict[str, Counter[str]] = defaultdict(Counter)
        for words, starts in split:
            positional = [i for i, start in enumerate(starts) if start and _positional(words[i])]
            if positional:
                words = list(words)
                for i in positional:
                    initials[words[i].lower()][words[i]] += 1
                    words[i] = None
            counted.update(words)  # counted in C: a corpus sample's millions of words take a second or two
        counted.pop(None, None)
        forms: dict[str, Counter[str]] = defaultdict(Counter)
        for form, count in counted.items():
            forms[form.lower()][form] += count
        ambiguous = {key for key, counts in forms.items() if _is_ambiguous(counts)}
        before: Counter[tuple[str, str, str]] = Counter()  # (previous word, word, form), words lower-cased
        after: Counter[tuple[str, str, str]] = Counter()  # (word, next word, form)
        for words, starts in split if ambiguous else ():
            keys = [word.lower() for word in words]
            at = [i for i, key in enumerate(keys) if key in ambiguous and not (starts[i] and _positional(words[i]))]
            before.update([(keys[i - 1], keys[i], words[i]) for i in at if i > 0])
            after.update([(keys[i], keys[i + 1], words[i]) for i in at if i + 1 < len(words)])
        left: dict[tuple[str, str], dict[str, int]] = {}
        right: dict[tuple[str, str], dict[str, int]] = {}
        for (previous, key, form), count in before.items():
            left.setdefault((previous, key), {})[form] = count
        for (key, following, form), count in after.items():
            right.setdefault((key, following), {})[form] = count
        caser = cls(forms, left, right, unknown)
        # A word seen only at sentence starts ("Hamlet is a tragedy.") keeps that form, as weak evidence.
        caser.initial = {key: counts.most_common(1)[0][0] for key, counts in initials.items() if key not in forms}
        return caser

    @classmethod
    def from_vocab(cls, vocab: Iterable[str], unknown: str = "lower") -> TrueCaser:
        """A truecaser from a cased WordPiece vocabulary alone (whole-word entries; see :meth:`add_vocab`)."""
        caser = cls(unknown=unknown)
        caser.add_vocab(vocab)
        return caser

    def add_vocab(self, vocab: Iterable[str]) -> TrueCaser:
        """Use a cased vocabulary for words without corpus counts: a word whose lower-case form is an entry stays
        lower case; otherwise its capitalised (or all-caps) entry is used. Returns ``self``."""
        entries = {w for w in vocab if w and not w.startswith("##") and w.isalpha()}
        fallback: dict[str, str] = {}
        for word in entries:
            key = word.lower()
            if key in entries:
                fallback[key] = key
            elif key not in fallback or word[0].isupper() and not word.isupper():
                fallback[key] = word  # prefer "Denver" over "DENVER" when both exist
        self.fallback = fallback
        return self

    # ----------------------------------------------------------------- truecasing
    def truecase(self, text: str) -> str:
        """``text`` with each word in its most likely case and the first word capitalised."""
        matches = list(WORD.finditer(text))
        if not matches:
            return text
        keys = [m.group().lower() for m in matches]
        out, last = [], 0
        chosen: list[str] = []
        for i, match in enumerate(matches):
            prev = chosen[i - 1].lower() if i else None
            nxt = keys[i + 1] if i + 1 < len(keys) else None
            form = self._form(keys[i], prev, nxt) if not _clitic(text, match.start()) else keys[i]
            if i == 0:
                form = form[:1].upper() + form[1:]
            chosen.append(form)
            out.append(text[last : match.start()])
            out.append(form)
            last = match.end()
        out.append(text[last:])
        return "".join(out)

    def truecase_query(self, text: str) -> str:
        """:meth:`truecase` for an all-lowercase query; any other query is returned unchanged."""
        return self.truecase(text) if is_all_lowercase(text) else text

    def _form(self, key: str, prev: str | None, nxt: str | None) -> str:
        counts = self.forms.get(key)
        if not counts:
            if key in self.initial and key not in self.fallback:
                return self.initial[key]
            if key in self.fallback:
                return self.fallback[key]
            return key.title() if self.unknown == "title" else key
        if len(counts) == 1:
            return next(iter(counts))
        total = sum(counts.values())
        best, best_score = key, -math.inf
        for form, count in counts.most_common():
            score = math.log((count + 1) / (total + len(counts)))
            for context in (self.left.get((prev, key)) if prev else None, self.right.get((key, nxt)) if nxt else None):
                if context:
                    score += math.log((context.get(form, 0) + 1) / (sum(context.values()) + len(counts)))
            if score > best_score:
                best, best_score = form, score
        return best


def _sentence_words(text: str) -> tuple[list[str], list[bool]]:
    """The words of ``text`` and, for each, whether it starts a sentence (the first word, or one after . ! or ?)."""
    parts = _WORD_GROUP.split(text)  # gap, word, gap, word, ..., gap
    words = parts[1::2]
    starts = [True, *(("." in gap or "!" in gap or "?" in gap) for gap in parts[2:-1:2])]
    return words, starts[: len(words)]


def _clitic(text: str, start: int) -> bool:
    """A word glued to the previous one by an apostrophe ("didn't", "Paris's"): its case is lower."""
    return start > 1 and text[start - 1] in "'’" and text[start - 2].isalpha()


def _positional(form: str) -> bool:
    """A capital that a sentence start explains: "The", "A" (not "NASA" or "iPhone")."""
    return form[:1].isupper() and (len(form) == 1 or form[1:].islower())


def _is_ambiguous(counts: Counter[str]) -> bool:
    if len(counts) < 2:
        return False
    (_, first), (_, second) = counts.most_common(2)
    return second >= 2 and second >= 0.02 * first


_CORPUS_CASERS: weakref.WeakKeyDictionary[Any, tuple[int, TrueCaser]] = weakref.WeakKeyDictionary()


Vocab = Iterable[str] | Callable[[], Iterable[str]]


def corpus_truecaser(index: Any, vocab: Vocab = (), max_passages: int = CORPUS_SAMPLE) -> TrueCaser:
    """The truecaser of a phrase index's corpus (up to ``max_passages`` passages, evenly spread), with ``vocab``
    for words the corpus lacks (or a function that returns it, called only when the truecaser is built: a
    tokenizer's ``get_vocab`` takes milliseconds). Built once per index object and rebuilt after it grows or shrinks
    by a tenth."""
    count = len(index.passages)
    cached = _CORPUS_CASERS.get(index)
    if cached is not None and abs(cached[0] - count) <= 0.1 * cached[0]:
        return cached[1]
    rows = range(count) if count <= max_passages else (int(i * count / max_passages) for i in range(max_passages))
    caser = TrueCaser.from_texts(index.passages[row]["text"] for row in rows)
    caser.add_vocab(vocab() if callable(vocab) else vocab)
    _CORPUS_CASERS[index] = (count, caser)
    return caser


def corpus_cased(index: Any, questions: Sequence[str], vocab: Vocab = ()) -> list[str | None]:
    """Each question written all in lower case as the index's own passages would write it (truecased by
    :func:`corpus_truecaser`, built only when one is), None for any other question."""
    if not any(is_all_lowercase(q) for q in questions):
        return [None] * len(questions)
    caser = corpus_truecaser(index, vocab)
    return [caser.truecase(q) if is_all_lowercase(q) else None for q in questions]
