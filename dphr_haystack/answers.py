"""Answers: SQuAD normalisation and how a predicted phrase or a passage is matched against gold answers.

Answers match with SQuAD v1.1 normalisation (lower case, no punctuation or articles, collapsed whitespace);
in a passage they match as whole normalised words. CuratedTREC answers are regular expressions, matched
case-insensitively (the DrQA/DPR convention). ``answer_match="substring"`` switches passages to Haystack's
own criterion: the raw answer string is a substring of the passage.

Example:
    >>> exact_match("the Louvre", ["Louvre"])
    True
    >>> contains_answer("It flows into the Mediterranean Sea.", ["Mediterranean sea"])
    True
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

# How a passage is matched against the answers (see contains_answer).
ANSWER_MATCHES = ("squad", "substring")

_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 normalisation: lower case, drop punctuation and articles, collapse whitespace (fast enough for
    whole passages: the answer confidence reads the words of every candidate's passage)."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_NO_PUNCTUATION)).split())


def answer_pattern(pattern: str) -> re.Pattern[str] | None:
    """A regex answer compiled as DrQA/DPR do (case-insensitive); None when it does not compile (never matches)."""
    try:
        return re.compile(pattern, flags=re.IGNORECASE | re.UNICODE | re.MULTILINE)
    except re.error:
        return None


def exact_match(prediction: str, answers: Sequence[str], regex: bool = False) -> bool:
    """SQuAD exact match against any answer; with ``regex`` the pattern must match at the start."""
    if regex:
        return any(p is not None and p.match(prediction) is not None for p in map(answer_pattern, answers))
    norm = normalize_answer(prediction)
    return any(norm == normalize_answer(a) for a in answers)


def f1_score(prediction: str, answers: Sequence[str], regex: bool = False) -> float:
    """Best token-level F1 over the answers (SQuAD); regex answers have no tokens, so F1 is EM there."""
    if regex:
        return float(exact_match(prediction, answers, regex=True))
    pred = normalize_answer(prediction).split()
    best = 0.0
    for answer in answers:
        gold = normalize_answer(answer).split()
        common = sum((Counter(pred) & Counter(gold)).values())
        if not pred or not gold:
            best = max(best, float(pred == gold))
        elif common:
            precision, recall = common / len(pred), common / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def contains_answer(text: str, answers: Sequence[str], regex: bool = False, answer_match: str = "squad") -> bool:
    """True when ``text`` contains a gold answer: as whole normalised words (``"squad"``), as a raw substring
    (``"substring"``) or, with ``regex``, where a pattern matches anywhere."""
    if regex:
        return any(p is not None and p.search(text) is not None for p in map(answer_pattern, answers))
    if answer_match == "substring":
        return any(a and a in text for a in answers)
    haystack = f" {normalize_answer(text)} "
    return any(norm and f" {norm} " in haystack for norm in map(normalize_answer, answers))


__all__ = ["ANSWER_MATCHES", "answer_pattern", "contains_answer", "exact_match", "f1_score", "normalize_answer"]
