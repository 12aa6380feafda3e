"""The words of a question that the confidence features read: its normalised words and its *names*.

A question's names are the words a passage that answers it nearly always writes as asked ("Port Calder", "2023",
"3.0"), where its other words are often paraphrased; the answerability counts how many of them the best passages hold
(:func:`dphr_haystack.confidence.query_features`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .answers import normalize_answer

__all__ = [
    "QuestionWords",
    "holds_name",
    "name_key",
    "name_share",
    "question_name_spellings",
    "question_names",
    "question_words",
]

# A word of a question as written (letters, digits and the marks inside a name or a version: "3.0", "O'Neill",
# "1851–1860", "22,680,010").
_WRITTEN_WORD = re.compile(r"[^\W_](?:[\w.'’‐‑‒–-]|,(?=\d))*")
# Letters that do not decompose into a base letter and a mark, read as that letter; dashes inside a word read as a
# hyphen is (dropped: "1851–1860" → "18511860"), a dash between words as a space.
_UNMARKED = str.maketrans(
    {"ł": "l", "ø": "o", "đ": "d", "ð": "d", "ħ": "h", "ı": "i", "ß": "ss", "æ": "ae", "œ": "oe", "þ": "th"}
    | dict.fromkeys("‐‑‒–", "")
    | dict.fromkeys("—―", " ")
)
_MARKS = re.compile(r"[\u0300-\u036f]")  # combining accents, once decomposed
_POSSESSIVE = re.compile(r"['’]s?$")
# "I" and its contractions ("I'm", "I've"): capitalised, but no name.
_PRONOUN_I = re.compile(r"I(?:['’](?:m|d|ll|ve))?")


class QuestionWords(tuple):
    """A question's normalised words (a tuple of str, SQuAD-normalised as answers are) that also knows the question's
    :attr:`names` (:func:`question_names`) and how the question writes each (:attr:`spellings`)."""

    names: tuple[str, ...]
    spellings: dict[str, str]

    def __new__(
        cls, words: Iterable[str], names: Iterable[str] = (), spellings: Mapping[str, str] | None = None
    ) -> QuestionWords:
        self = super().__new__(cls, words)
        self.names = tuple(names)
        self.spellings = dict(spellings or {})
        return self

    def spelled(self, names: Iterable[str]) -> tuple[str, ...]:
        """``names`` (of :attr:`names`) as the question writes them."""
        return tuple(self.spellings.get(name, name) for name in names)


def question_words(question: str, cased: str | None = None) -> QuestionWords:
    """The normalised words of a question (SQuAD normalisation: case, punctuation and articles dropped), with its
    names (:func:`question_names`) read from ``cased`` when given: the question as it would be written, e.g. a
    question typed in lower case truecased (``"who led the normans"`` → ``"Who led the Normans"``)."""
    spellings = question_name_spellings(question if cased is None else cased)
    return QuestionWords(normalize_answer(question).split(), spellings, spellings)


def question_names(question: str) -> tuple[str, ...]:
    """The normalised names of a question: its words written with a capital letter (but its first word and "I",
    "I'm"...) or holding a digit, possessive ``'s`` dropped, each once: "Who was the first mayor of Port Calder in
    1901?" → ``("port", "calder", "1901")``. A passage that answers a question nearly always writes its names as asked,
    where other words are often paraphrased."""
    return tuple(question_name_spellings(question))


def question_name_spellings(question: str) -> dict[str, str]:
    """The :func:`question_names` of a question (in order), each with the word the question writes it as: "Is
    Ledgerline 3.0 out?" → ``{"ledgerline": "Ledgerline", "30": "3.0"}``."""
    out: dict[str, str] = {}
    for position, written in enumerate(_WRITTEN_WORD.findall(question)):
        written = _POSSESSIVE.sub("", written.rstrip(".-"))
        named = position > 0 and written[:1].isupper() and not _PRONOUN_I.fullmatch(written)
        if named or any(ch.isdigit() for ch in written):
            word = name_key(written).replace(" ", "")
            if word:
                out.setdefault(word, written)
    return out


def name_share(names: Sequence[str], record: Mapping[str, Any]) -> float:
    """The share of ``names`` (:func:`question_names`) that a passage's title or text holds as whole normalised
    words (a name also matches its possessive or plural, and a plural its singular: "velmora" in "Velmora's",
    "normans" in "Norman"); 1.0 when there are none."""
    if not names:
        return 1.0
    title = str(record.get("title") or "").replace("_", " ")
    words = set(name_key(f"{title} {record.get('text') or ''}").split())
    return sum(holds_name(words.__contains__, name) for name in names) / len(names)


def name_key(text: str) -> str:
    """``text`` as names are compared: SQuAD-normalised, accents dropped, a dash inside a word read as a hyphen (so
    a name typed without its accents or with a hyphen for a dash is still found): "Gospić" and "Gospic" →
    ``"gospic"``, "Skłodowska–Curie" → ``"sklodowskacurie"``."""
    if not text.isascii():
        text = _MARKS.sub("", unicodedata.normalize("NFKD", text.lower().translate(_UNMARKED)))
    return normalize_answer(text)


def holds_name(has: Callable[[str], bool], name: str) -> bool:
    """Whether a text writes ``name`` (normalised), its possessive or plural, or (a plural) its singular; ``has``
    tells whether the text writes a normalised word."""
    return has(name) or has(f"{name}s") or (name.endswith("s") and has(name[:-1]))
