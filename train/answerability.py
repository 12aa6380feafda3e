"""Fit a phrase model's answerability, P(the top answer is right *given the corpus searched*), and its holds-answer,
P(the corpus holds an answer to the question).

    python -m train.answerability --model dphr_haystack/shipped_models/dphr-minilm-squad-distilled \\
        --dev-index DIR [--open-index DIR] (--out DIR | --in-place) [--questions 2000] [--report FILE] \\
        [--invented-name-weight W] [--keep-answerability]

A model's calibration (``python -m train.calibrate``) says how likely its top answer is right among the candidates
a search found; it cannot tell that the corpus holds no answer at all (asked over four paragraphs about a lake
town, "When did the Normans conquer England?" got "1821" at 0.78). The answerability is a logistic regression of
"the top answer is right" on features of the whole search (:func:`dphr_haystack.confidence.query_features`: the
top answer's confidence, how much of the question the best passages and titles hold, how many passages were
searched), fitted on questions asked over corpora that hold their answer and over corpora that do not:

- ``5``, ``50``, ``500``: sub-corpora of the SQuAD dev-public paragraphs (``--dev-index``, built when missing):
  the question's own paragraph and random others, or random paragraphs of other articles (its article removed);
- ``dev``: all 1,702 dev-public paragraphs, and the same without the question's article;
- ``open``: an open-domain index (``--open-index``, e.g. SQuAD-open-small's 20,598 paragraphs), the same two ways.

Questions are those of the held-out validation articles (the first 8 of dev-public, by default), which no benchmark
asks: each is searched once per corpus exactly as a default :class:`~dphr_haystack.PhraseSearcher` searches (a
sub-corpus is a mask of passages: the search, its candidates and features are those of an index holding only them), the
query features recorded. The same features fit the holds-answer on whether the corpus holds the question's passage,
each case weighing 1 (one unanswerable question for each answerable one), with near misses besides
(:func:`near_miss_cases`: each question over the dev and open index less its own passage, the rest of its article kept;
``--near-miss-weight``) and each question over its own article alone, with and without its passage
(:func:`article_cases`, ``--article-weight``); it scores Haystack's "no answer"
(:mod:`dphr_haystack.corpus_judgement`).
``--keep-answerability`` keeps the model's stored answerability and fits the holds-answer alone. The fitted
answerability is stored in the calibration of the model's ``dphr_config.json`` (``--out``, a copy, or the model itself
with ``--in-place``); ``answerability.json`` beside it reports the fit.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher
from dphr_haystack.answers import exact_match, normalize_answer
from dphr_haystack.confidence import (
    QUERY_FEATURES,
    Answerability,
    Calibration,
    auroc,
    expected_calibration_error,
    fit_answerability,
)
from dphr_haystack.encode.add import add_passages
from dphr_haystack.index.shards import PhraseShard
from dphr_haystack.model.calibration import NAME_FEATURES, READER_VIEW_FEATURES, sigmoid
from dphr_haystack.question_words import question_names
from dphr_haystack.search_options import NO_ANSWER_THRESHOLD
from dphr_haystack.verification import SpanReader, read_top_answer

from .calibrate import DEFAULT_DEV, write_calibrated
from .data import load_squad

# Sizes of the sampled sub-corpora of the dev paragraphs; "dev" and "open" are whole indexes.
SIZES = (5, 50, 500)
VALIDATION_ARTICLES = 8
# How much a case whose corpus lacks the answer weighs in the fit, against 1 for one that holds it: each question is
# asked both ways, so 0.3 fits for about one unanswerable question in four. On held-out questions, 0.5 / 0.3 gave ECE
# over the answerable ones 0.064 / 0.055 (5 passages), 0.048 / 0.031 (500), 0.158 / 0.114 (20,598), and "no answer"
# at the threshold of 0.25 for 96% / 92%, 86% / 83%, 87% / 81% of the unanswerable ones.
UNANSWERABLE_WEIGHT = 0.3
# Each case also counts as if its question were written in lower case with no name the corpus' truecasing finds (as
# many of NQ's are: the name features say so), weighing this much of the case. On held-out questions, 0 / 0.5 / 1:
# AUROC answerable vs not 0.786 / 0.797 / 0.801 for NQ-open questions over SQuAD-open-small (0.808 without name
# features; measured before lower-case questions read names), 0.838 / 0.843 / 0.844 for SQuAD questions over it
# without their article (0.824), ECE of the answerable ones over the 1,702 dev paragraphs 0.061 / 0.053 / 0.052.
LOWER_CASE_WEIGHT = 0.5
# Optional cases about invented names (:func:`invented_cases`: an answerable case re-asked with one of its names
# respelled, so no corpus holds its answer), weighing this much of an unanswerable case. Off by default: on held-out
# questions they raise the AUROC of questions about another town or company than the corpus' own, but over-weigh
# unanswerability for the answerable ones (docs/scores.md compares them).
INVENTED_NAME_WEIGHT = 0.0
# Near misses (:func:`near_miss_cases`: a question over the corpus less its own passage, the rest of its article kept)
# join the holds-answer's fit, each weighing this much. On held-out questions, 0 / 0.5 / 1 / 2: AUROC answerable vs
# not 0.816 / 0.835 / 0.842 / 0.849 for near misses over the 1,702 dev paragraphs, 0.835 / 0.844 / 0.849 / 0.852 for
# NQ-open questions over SQuAD-open-small, 0.568 / 0.612 / 0.638 / 0.671 for the user corpus's near misses, the other
# sets within ±0.005; at the threshold 0.5 81.8% / 85.7% / 88.3% / 91.7% of the unanswerable questions turned away
# and 2.7% / 3.4% / 4.6% / 6.2% of the right answers lost (a scratch comparison; benchmarks/quality/answerability.py).
NEAR_MISS_WEIGHT = 1.0
# Each question also joins the holds-answer's fit over its own article alone (:func:`article_cases`: with and
# without its paragraph, a small corpus about one topic, as a user's store of one manual is), each case weighing
# this much. On held-out questions, 0 / 1 (with ``all_names_in_corpus``; scratch, ``--verify`` on top): AUROC
# answerable vs not 0.866 / 0.874 (0.916 / 0.920) for those questions over their article alone, 0.616 / 0.655 (0.753
# / 0.770) for the user corpus's near misses, 0.927 / 0.924 (0.871 / 0.854) for its questions about another entity.
ARTICLE_WEIGHT = 1.0
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
    scales its weight in the fit."""

    question: Question
    corpus: str
    answerable: bool
    allowed: np.ndarray | None = field(default=None, compare=False, repr=False)
    weight: float = 1.0


@dataclass(frozen=True)
class _Recorder(Answerability):
    """An answerability that records the query features a search computes and returns the top answer's own
    confidence (``top_logit`` first), so the search's confidences stay those of the calibration alone."""

    records: list = field(default_factory=list, compare=False, repr=False)

    def probability(self, features: np.ndarray) -> np.ndarray:
        self.records.append(np.array(features[0], dtype=np.float64))
        return sigmoid(np.asarray(features)[:, 0])


@dataclass
class QueryTable:
    """One row per case: the query features, whether the top answer is right, its confidence and text, and (when
    gathered with a reader) the reader's view of it (``views``: :data:`READER_VIEW_FEATURES`; NaN without one)."""

    cases: list[Case]
    features: np.ndarray
    correct: np.ndarray
    confidence: np.ndarray
    texts: list[str]
    views: np.ndarray | None = None

    @property
    def holds(self) -> np.ndarray:
        """Whether each case's corpus holds its question's answer."""
        return np.array([c.answerable for c in self.cases], dtype=bool)

    def rows(self, corpus: str | None = None, answerable: bool | None = None) -> np.ndarray:
        """Positions of the cases of ``corpus`` (None: any) that are (not) ``answerable`` (None: either)."""
        return np.array(
            [
                i
                for i, c in enumerate(self.cases)
                if (corpus is None or c.corpus == corpus) and (answerable is None or c.answerable == answerable)
            ],
            dtype=np.int64,
        )


def recording_calibration(calibration: Calibration) -> tuple[Calibration, list]:
    """``calibration`` with a recording answerability over every :data:`QUERY_FEATURES` and the list it fills."""
    n = len(QUERY_FEATURES)
    recorder = _Recorder((0.0,) * n, 0.0, (0.0,) * n, (1.0,) * n, QUERY_FEATURES)
    return replace(calibration, answerability=recorder), recorder.records


def sub_index(
    index: PhraseIndex, model: PhraseModel, rows: np.ndarray, whole: PhraseShard | None = None
) -> PhraseIndex:
    """An in-memory index of the passages at ``rows`` of ``index`` (ascending), their stored vectors copied (no
    encoding): a corpus of those passages alone, as a user's store of them is (a search of ``index`` masked to them
    finds fewer candidates: its first token candidates mostly lie elsewhere). ``whole``: the whole index as a shard
    (:func:`as_shard`), when several sub-indexes are made."""
    shard = (whole or as_shard(index)).subset([int(r) for r in rows])
    sub = PhraseIndex.create(model, filter_threshold=index.filter_threshold)
    sub.add_shard(shard)
    return sub


def as_shard(index: PhraseIndex) -> PhraseShard:
    """Every passage of ``index`` with its tokens and stored vectors, as one shard."""
    return PhraseShard(index.storage.vectors.view(), index.tokens.copy(), index.passages, index.codec)


def case_searcher(
    searcher: PhraseSearcher, case: Case, whole: PhraseShard | None = None
) -> tuple[PhraseSearcher, np.ndarray | None]:
    """The searcher and passage mask that search ``case``'s corpus: ``searcher`` masked by the case, or, for a
    case masked to fewer than half of its index's passages, a searcher of those passages alone (:func:`sub_index`)
    with ``searcher``'s model and calibration."""
    index = searcher.index
    if case.allowed is None or 2 * int(case.allowed.sum()) >= index.num_passages:
        return searcher, case.allowed
    sub = sub_index(index, searcher.model, np.flatnonzero(case.allowed), whole)
    return PhraseSearcher(sub, searcher.model, calibration=searcher.calibration), None


def gather(
    index: PhraseIndex,
    model: PhraseModel,
    calibration: Calibration,
    cases: Sequence[Case],
    batch_size: int = 64,
    progress: bool = True,
    reader: SpanReader | None = None,
) -> QueryTable:
    """Search each case as a default :class:`PhraseSearcher` would (phrase answers, ranked by confidence) with
    ``calibration`` minus any answerability, and record its query features and top answer (with ``reader``, also
    the reader's view of it: :func:`dphr_haystack.verification.read_top_answer`). A case masked to fewer than half
    of the index's passages searches an index of those passages alone (:func:`sub_index`), as a corpus of them is
    searched; one masked to more searches the index masked (a corpus less an article)."""
    recording, records = recording_calibration(replace(calibration, answerability=None, holds_answer=None))
    searcher = PhraseSearcher(index, model, calibration=recording)
    whole = as_shard(index)
    features, correct, confidence, texts, views = [], [], [], [], []
    bar = tqdm(total=len(cases), desc="searching", unit="question", disable=not progress)
    for b in range(0, len(cases), batch_size):
        batch = cases[b : b + batch_size]
        q_start, q_end = model.encode_queries(
            [c.question.question for c in batch], batch_size=batch_size, precision=searcher.query_precision
        )
        for k, case in enumerate(batch):
            records.clear()
            search, allowed = case_searcher(searcher, case, whole)
            hits = search.search_vectors(
                q_start[k : k + 1], q_end[k : k + 1], "phrase", 1, allowed, questions=[case.question.question]
            )[0]
            top = hits[0] if hits else None
            features.append(records[-1] if records and top is not None else np.full(len(QUERY_FEATURES), np.nan))
            correct.append(top is not None and case.answerable and exact_match(top.text, case.question.answers))
            confidence.append(float(top.confidence) if top is not None and top.confidence is not None else 0.0)
            texts.append(top.text if top is not None else "")
            if reader is not None:
                view = read_top_answer(reader, case.question.question, hits, search.index)
                views.append(view.values() if view is not None else (np.nan,) * len(READER_VIEW_FEATURES))
        bar.update(len(batch))
    bar.close()
    table = QueryTable(list(cases), np.array(features), np.array(correct, dtype=bool), np.array(confidence), texts)
    if reader is None:
        return table
    return replace(table, views=np.array(views, dtype=np.float64).reshape(-1, len(READER_VIEW_FEATURES)))


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


def near_miss_table(
    indexes: dict[str, PhraseIndex | None],
    model: PhraseModel,
    calibration: Calibration,
    questions: Sequence[Question],
    weight: float,
    reader: SpanReader | None = None,
    article_weight: float = 0.0,
) -> QueryTable | None:
    """The near misses of ``questions`` over each index (``"<name>-near-miss"``), each weighing ``weight``, and with
    ``article_weight`` the questions over their own article alone in the ``"dev"`` index (:func:`article_cases`,
    ``"article"``), each weighing that, :func:`gather`-ed; None when both weights are 0."""
    found = [
        (index, near_miss_cases(index, questions, f"{name}-near-miss", weight))
        for name, index in indexes.items()
        if index is not None and weight > 0
    ]
    if article_weight > 0 and indexes.get("dev") is not None:
        found.append((indexes["dev"], article_cases(indexes["dev"], questions, "article", article_weight)))
    tables = [gather(index, model, calibration, cases, reader=reader) for index, cases in found]
    return concatenate(tables) if tables else None


def add_holds_case_weights(parser: argparse.ArgumentParser) -> None:
    """The options that weigh the holds-answer's extra cases: ``--near-miss-weight`` and ``--article-weight``."""
    parser.add_argument(
        "--near-miss-weight",
        type=float,
        default=NEAR_MISS_WEIGHT,
        help="weight of a near miss (the question's passage removed, its article kept) in the holds-answer's fit",
    )
    parser.add_argument(
        "--article-weight",
        type=float,
        default=ARTICLE_WEIGHT,
        help="weight of a question over its own article alone, with and without its paragraph, in the holds fit",
    )


def dev_index(model: PhraseModel, path: Path, dev: Path = DEFAULT_DEV) -> PhraseIndex:
    """The phrase index of every dev-public paragraph at ``path`` (built, resumably, when missing)."""
    if (path / "manifest.json").is_file():
        index = PhraseIndex.load(path, model=model)
    else:
        index = PhraseIndex.create(model, path=path, filter_threshold=model.config.filter_threshold)
    add_passages(index, model, load_squad(dev).passages, duplicates="skip", progress=True)
    return index


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
    """The answerable ``cases`` asked about an invented name (:func:`invented_name`) over the same corpus: cases
    without an answer (no passage holds the name), each weighing ``weight``; questions without a name are left out."""
    out = []
    for case in cases:
        asked = invented_name(case.question.question) if case.answerable else None
        if asked is not None:
            question = replace(case.question, question=asked)
            out.append(Case(question, case.corpus, False, case.allowed, weight))
    return out


def fit_table(
    table: QueryTable,
    names: Sequence[str] = QUERY_FEATURES,
    unanswerable_weight: float = UNANSWERABLE_WEIGHT,
    lower_case_weight: float = LOWER_CASE_WEIGHT,
    holds: bool = False,
) -> Answerability:
    """The answerability fitted on every case of ``table`` (a case without an answer is left out), a case whose
    corpus lacks the answer weighing ``unanswerable_weight``; each case with names counts once more as if asked in
    lower case (:func:`lower_cased`), weighing ``lower_case_weight`` of it. With ``holds``, fitted on whether the
    corpus holds the answer instead of whether the top answer is right: a calibration's ``holds_answer``."""
    known = ~np.isnan(table.features[:, QUERY_FEATURES.index("top_logit")])
    columns = [QUERY_FEATURES.index(n) for n in names]
    weights = np.array([(1.0 if c.answerable else unanswerable_weight) * c.weight for c in table.cases])
    features, correct = table.features, (table.holds if holds else table.correct)
    named = known & (table.features[:, QUERY_FEATURES.index("has_names")] == 1.0)
    if lower_case_weight > 0 and named.any():
        features = np.vstack([features, lower_cased(features[named])])
        correct = np.concatenate([correct, correct[named]])
        weights = np.concatenate([weights, lower_case_weight * weights[named]])
        known = np.concatenate([known, np.ones(int(named.sum()), dtype=bool)])
    return fit_answerability(features[known][:, columns], correct[known], names, weights=weights[known])


def lower_cased(features: np.ndarray) -> np.ndarray:
    """Query features as the same questions written in lower case give them: no names found, every other feature
    as it was (exact for an uncased tokenizer, as the shipped models have: the search does not change)."""
    out = np.array(features, dtype=np.float64, copy=True)
    out[:, [QUERY_FEATURES.index(n) for n in NAME_FEATURES if n != "has_names"]] = np.nan
    out[:, QUERY_FEATURES.index("has_names")] = 0.0
    return out


def table_report(table: QueryTable, probability: np.ndarray) -> dict[str, Any]:
    """Per corpus: answerable vs unanswerable AUROC, right vs wrong AUROC and ECE over the answerable cases."""
    out: dict[str, Any] = {}
    for corpus in dict.fromkeys(c.corpus for c in table.cases):
        yes, no = table.rows(corpus, True), table.rows(corpus, False)
        rows = np.concatenate([yes, no])
        out[corpus] = {
            "answerable": len(yes),
            "unanswerable": len(no),
            "em@1": float(table.correct[yes].mean()) if len(yes) else None,
            "auroc_answerable": auroc(probability[rows], np.isin(rows, yes)),
            "auroc_right_vs_wrong": auroc(probability[yes], table.correct[yes]),
            "ece_answerable": expected_calibration_error(probability[yes], table.correct[yes]),
            "ece_all": expected_calibration_error(probability[rows], table.correct[rows]),
        }
    return out


def concatenate(tables: Sequence[QueryTable]) -> QueryTable:
    views = [t.views for t in tables]
    return QueryTable(
        [c for t in tables for c in t.cases],
        np.vstack([t.features for t in tables]),
        np.concatenate([t.correct for t in tables]),
        np.concatenate([t.confidence for t in tables]),
        [x for t in tables for x in t.texts],
        np.vstack(views) if all(v is not None for v in views) else None,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a calibrated phrase model directory")
    parser.add_argument("--dev-index", required=True, type=Path, help="the dev-public phrase index (built if missing)")
    parser.add_argument("--open-index", type=Path, help="an open-domain phrase index holding the dev paragraphs")
    parser.add_argument("--dev", type=Path, default=DEFAULT_DEV, help="SQuAD dev-public (its validation articles)")
    parser.add_argument("--out", type=Path, help="write the calibrated model here (a copy)")
    parser.add_argument("--in-place", action="store_true", help="write into --model itself")
    parser.add_argument("--questions", type=int, default=2000, help="at most this many validation questions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--report", type=Path, help="the fit report (default: answerability.json in the model)")
    parser.add_argument(
        "--unanswerable-weight", type=float, default=UNANSWERABLE_WEIGHT, help="weight of a case without an answer"
    )
    parser.add_argument(
        "--lower-case-weight", type=float, default=LOWER_CASE_WEIGHT, help="weight of a case asked in lower case"
    )
    add_holds_case_weights(parser)
    parser.add_argument(
        "--keep-answerability",
        action="store_true",
        help="keep the model's stored answerability and fit only its holds_answer",
    )
    parser.add_argument(
        "--invented-name-weight",
        type=float,
        default=INVENTED_NAME_WEIGHT,
        help="add the answerable cases asked about an invented name, weighing this much of an unanswerable case",
    )
    args = parser.parse_args(argv)
    if bool(args.out) == bool(args.in_place):
        parser.error("give one of --out DIR or --in-place")
    model = PhraseModel.load(args.model)
    stored = model.config.calibration
    if not stored:
        parser.error(f"{args.model} has no calibration: run python -m train.calibrate first")
    calibration = Calibration.from_dict(stored)
    if args.keep_answerability and calibration.answerability is None:
        parser.error(f"{args.model} has no answerability to keep")
    questions = squad_questions(args.dev, slice(0, VALIDATION_ARTICLES))
    questions = random.Random(args.seed).sample(questions, min(args.questions, len(questions)))
    dev = dev_index(model, args.dev_index, args.dev)
    open_index = PhraseIndex.load(args.open_index, model=model) if args.open_index else None
    cases = all_cases(dev, questions, args.seed, open_index)
    if args.invented_name_weight > 0:
        cases = {name: found + invented_cases(found, args.invented_name_weight) for name, found in cases.items()}
    indexes = {"dev": dev, "open": open_index}
    table = concatenate([gather(indexes[name], model, calibration, found) for name, found in cases.items()])
    answerability = calibration.answerability if args.keep_answerability else None
    answerability = answerability or fit_table(
        table, unanswerable_weight=args.unanswerable_weight, lower_case_weight=args.lower_case_weight
    )
    near = near_miss_table(
        indexes, model, calibration, questions, args.near_miss_weight, article_weight=args.article_weight
    )
    both = concatenate([table, near]) if near is not None else table
    holds_answer = fit_table(both, unanswerable_weight=1.0, lower_case_weight=args.lower_case_weight, holds=True)
    probability = answerability.query_probability(table.features)
    holds = holds_answer.query_probability(both.features)
    below = holds < NO_ANSWER_THRESHOLD
    report = {
        "questions": len(questions),
        "cases": len(table.cases),
        "unanswerable_weight": args.unanswerable_weight,
        "lower_case_weight": args.lower_case_weight,
        "invented_name_weight": args.invented_name_weight,
        "kept_answerability": bool(args.keep_answerability),
        "fit": table_report(table, probability),
        "near_miss_weight": args.near_miss_weight,
        "article_weight": args.article_weight,
        "holds_answer_fit": table_report(both, holds),
        "threshold": NO_ANSWER_THRESHOLD,
        "no_answer_share": float(below[~both.holds].mean()),
        "right_lost_share": float(below[both.correct].mean()),
    }
    fitted = replace(calibration, answerability=answerability, holds_answer=holds_answer).to_dict()
    out = Path(args.model) if args.in_place else args.out
    write_calibrated(Path(args.model), out, fitted)
    (args.report or out / "answerability.json").write_text(json.dumps(report, indent=2) + "\n")
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
