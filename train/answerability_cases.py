"""The questions and corpora an answerability and a holds-answer are fitted on (:mod:`train.answerability`).

Each :class:`Question` of SQuAD's held-out validation articles is asked over corpora that hold its answer and
corpora that do not (:func:`all_cases`), over the corpus less its own paragraph (:func:`near_miss_cases`), over its
own article alone (:func:`article_cases`) and about an invented name (:func:`invented_cases`); a :class:`Case` is one
such question over one corpus, a mask of an index's passages.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from dphr_haystack import PhraseIndex
from dphr_haystack.answers import normalize_answer
from dphr_haystack.question_words import question_names

from .data import load_squad

# Sizes of the sampled sub-corpora of the dev paragraphs; "dev" and "open" are whole indexes.
SIZES = (5, 50, 500)
_VOWELS = "aeiou"
_CAPITALISED = re.compile(r"\b[A-Z][a-z]{3,}\b")


@dataclass(frozen=True)
class Question:
    """A question, its answers and the passage and article that hold them (empty for open-domain questions)."""

    question: str
    answers: tuple[str, ...]
    title: str = ""
    passage_id: str = ""


@dataclass(frozen=True)
class Case:
    """A question asked over a corpus: ``corpus`` names it (``"5"``, ``"dev"``, ``"open"``...), ``answerable``
    says whether it holds the question's passage, ``allowed`` masks the index's passages (None: all), ``weight``
    scales its weight in the fit, ``lower_case`` says whether the fit also counts it as if asked in lower case."""

    question: Question
    corpus: str
    answerable: bool
    allowed: np.ndarray | None = field(default=None, compare=False, repr=False)
    weight: float = 1.0
    lower_case: bool = True


def squad_questions(path: Path, articles: slice) -> list[Question]:
    """The questions of the SQuAD file's ``articles`` (by file order), one per question text."""
    data = load_squad(path)
    titles = list(dict.fromkeys(p["document_id"] for p in data.passages))[articles]
    wanted = set(titles)
    title_of = {p["id"]: p["document_id"] for p in data.passages}
    seen: set[str] = set()
    out = []
    for ex in data.examples:
        if title_of[ex.passage_id] in wanted and ex.question not in seen:
            seen.add(ex.question)
            out.append(Question(ex.question, tuple(ex.answers), title_of[ex.passage_id], ex.passage_id))
    return out


def corpus_cases(
    index: PhraseIndex, questions: Sequence[Question], corpus: str, rng: random.Random, size: int | None = None
) -> list[Case]:
    """Each question over ``corpus`` twice: with its passage (answerable) and with its article removed.

    ``size`` samples a sub-corpus of that many passages of the index: the question's passage and random others,
    or random passages of other articles; without it the corpus is the index less a random other article, or the
    index less the question's article (either way one article less: the number of passages searched, a feature of
    the answerability, must not give away which).
    """
    passages = index.passages
    rows = np.flatnonzero(~index.deleted)
    article = np.array([p.get("document_id", "") for p in passages])
    out = []
    for q in questions:
        gold = index.passage_row(q.passage_id)
        if gold is None:
            continue
        others = rows[article[rows] != q.title]
        if size is None:  # both corpora lack one article, so that their sizes tell nothing
            other = rng.choice(sorted(set(article[others].tolist())))
            kept = np.zeros(len(passages), dtype=bool)
            kept[rows[article[rows] != other]] = True
            away = np.zeros(len(passages), dtype=bool)
            away[others] = True
            out += [Case(q, corpus, True, kept), Case(q, corpus, False, away)]
            continue
        near = rows[rows != gold]
        with_gold = np.zeros(len(passages), dtype=bool)
        with_gold[[gold, *rng.sample(list(near), min(size - 1, len(near)))]] = True
        without = np.zeros(len(passages), dtype=bool)
        without[rng.sample(list(others), min(size, len(others)))] = True
        out += [Case(q, corpus, True, with_gold), Case(q, corpus, False, without)]
    return out


def _missed_nearly(index: PhraseIndex, questions: Sequence[Question]) -> Iterator[tuple[Question, int, np.ndarray]]:
    """Each question whose passage is in ``index`` and whose article's other live passages hold none of its answers,
    with its passage row and its article's live passages (a mask)."""
    live = ~index.deleted
    article = np.array([p.get("document_id", "") for p in index.passages])
    for q in questions:
        gold = index.passage_row(q.passage_id)
        if gold is None:
            continue
        own = live & (article == q.title)
        texts = [normalize_answer(index.passages[r]["text"]) for r in np.flatnonzero(own) if r != gold]
        if not any(normalize_answer(a) in text for a in q.answers for text in texts):
            yield q, gold, own


def near_miss_cases(index: PhraseIndex, questions: Sequence[Question], corpus: str, weight: float = 1.0) -> list[Case]:
    """Each question over the whole index less its own passage, when no other passage of its article holds one of
    its answers: a near miss, unanswerable (the corpus speaks of the question's topic, its names and most of its
    words, but does not state this fact), named ``corpus`` and weighing ``weight``."""
    out = []
    for q, gold, _ in _missed_nearly(index, questions):
        allowed = ~index.deleted
        allowed[gold] = False
        out.append(Case(q, corpus, False, allowed, weight))
    return out


def article_cases(index: PhraseIndex, questions: Sequence[Question], corpus: str, weight: float = 1.0) -> list[Case]:
    """Each question over its own article alone, twice: all of its paragraphs (answerable) and the same less its
    own paragraph when no other one holds an answer (a near miss): a small corpus about one topic, as a user's store
    of one manual or one town's pages is, where every passage shares the question's names. Named ``corpus``, each
    weighing ``weight``; a question whose article has no other paragraph is left out."""
    out = []
    for q, gold, own in _missed_nearly(index, questions):
        if own.sum() > 1:
            without = own.copy()
            without[gold] = False
            out += [Case(q, corpus, True, own, weight), Case(q, corpus, False, without, weight)]
    return out


def all_cases(
    dev: PhraseIndex, questions: Sequence[Question], seed: int, open_index: PhraseIndex | None = None
) -> dict[str, list[Case]]:
    """The cases of ``questions`` per index: sub-corpora of every :data:`SIZES` and the whole dev index ("dev"), and
    the open index ("open") when given."""
    rng = random.Random(seed)
    on_dev = [c for size in SIZES for c in corpus_cases(dev, questions, str(size), rng, size)]
    on_dev += corpus_cases(dev, questions, "dev", rng)
    out = {"dev": on_dev}
    if open_index is not None:
        out["open"] = corpus_cases(open_index, questions, "open", rng)
    return out


def invented_name(question: str) -> str | None:
    """``question`` about an invented name: its longest capitalised name of four letters or more (not its first
    word) respelled, each vowel moved one on (a→e, e→i, i→o, o→u, u→a) wherever the name occurs; None without such
    a name. "Which Super Bowl was hosted in San Diego in 2003?" → "Which Sapir Bowl was hosted in San Diego in 2003?"
    """
    names = set(question_names(question))
    found = [w for w in _CAPITALISED.findall(question, 1) if w.lower() in names]
    if not found:
        return None
    name = max(found, key=len)
    respelled = "".join(
        (_VOWELS[(_VOWELS.index(ch.lower()) + 1) % 5] if ch.lower() in _VOWELS else ch.lower()) for ch in name
    )
    respelled = respelled[0].upper() + respelled[1:]
    return re.sub(rf"\b{name}\b", respelled, question)


def invented_cases(cases: Sequence[Case], weight: float) -> list[Case]:
    """The answerable ``cases`` asked about an invented name (:func:`invented_name`) over the same corpus
    (``"<corpus>-invented"``): cases without an answer (no passage holds the name), each weighing ``weight``, not
    counted again in lower case (so asked, nothing tells them from the answerable ones); questions without a name are
    left out."""
    out = []
    for case in cases:
        asked = invented_name(case.question.question) if case.answerable else None
        if asked is not None:
            question = replace(case.question, question=asked)
            out.append(Case(question, f"{case.corpus}-invented", False, case.allowed, weight, lower_case=False))
    return out
