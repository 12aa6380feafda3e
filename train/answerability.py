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
(:func:`article_cases`, ``--article-weight``) and each answerable case, and each question over its own article,
asked about an invented name (:func:`invented_cases`: its longest name respelled, which no passage writes;
``--invented-name-weight``); it scores Haystack's "no answer" (:mod:`dphr_haystack.corpus_judgement`).
``--keep-answerability`` keeps the model's stored answerability and fits the holds-answer alone. The fitted
answerability is stored in the calibration of the model's ``dphr_config.json`` (``--out``, a copy, or the model itself
with ``--in-place``); ``answerability.json`` beside it reports the fit.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher
from dphr_haystack.answers import exact_match
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
from dphr_haystack.model.calibration import CORPUS_FEATURE, NAME_FEATURES, READER_VIEW_FEATURES, sigmoid
from dphr_haystack.search_options import NO_ANSWER_THRESHOLD
from dphr_haystack.verification import SpanReader, read_top_answer

from .answerability_cases import (
    SIZES,
    Case,
    Question,
    all_cases,
    article_cases,
    invented_cases,
    near_miss_cases,
    squad_questions,
)
from .calibrate import DEFAULT_DEV, write_calibrated
from .data import load_squad

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
# Questions about invented names (:func:`invented_cases`: an answerable case re-asked with its longest name respelled,
# so no corpus holds its answer and no passage writes that name) join the holds-answer's fit, each weighing this much
# (the answerability, P(right), never sees them), and the verified holds-answer's (train.verifier) at
# VERIFIED_INVENTED_NAME_WEIGHT. On the fit's own cases 0 / 0.1 / 0.3 keep the threshold rule
# (:func:`threshold_sweep`) at 0.4 / 0.4 / 0.35: more of them teach the search's features alone to doubt answerable
# questions whose names their small corpus does not write. Fitted into the answerability itself (an earlier
# version) they pulled the answerable questions' confidences below their accuracy (docs/scores.md).
INVENTED_NAME_WEIGHT = 0.1
# With the reader's view, on held-out questions (scratch, the shipped reader verifying, VERIFIED_HOLDS_L2), 0 / 0.3 /
# 1: AUROC answerable vs not 0.909 / 0.980 / 0.980 for the user corpus's questions about another entity, 0.805 /
# 0.805 / 0.801 for its near misses, 0.919 / 0.906 / 0.900 for questions over their own article alone, 0.911 / 0.910 /
# 0.910 for SQuAD questions over 20,598 passages without their article; at 0.4 85.6% / 85.5% / 85.8% of every set's
# unanswerable questions turned away for 2.0% / 2.8% / 3.3% of the right answers lost.
VERIFIED_INVENTED_NAME_WEIGHT = 0.3
# The L2 penalty of the verified holds-answer's fit (per unit of case weight, on standardised features; the
# holds-answer's is fit_logistic's 1e-2). On held-out questions 1e-2 / 1e-3 (no invented names): AUROC 0.783 / 0.805
# for the user corpus's near misses, 0.908 / 0.911 for SQuAD questions over 20,598 passages without their article,
# the other sets within ±0.005; at 0.4 82.9% / 85.6% turned away for 1.4% / 2.0% of the right answers lost. The
# holds-answer itself at 1e-3 would keep the threshold rule only at 0.35 on the fit's cases.
VERIFIED_HOLDS_L2 = 1e-3
# How a fit chooses the "no answer" threshold it stores (:func:`choose_threshold`, over :func:`threshold_sweep`):
# the smallest at which every corpus size of the fit answers "no answer" first to at least LEAST_TURNED_AWAY of its
# questions without their article while none loses more than MOST_RIGHT_LOST_TURNING_AWAY of its right top answers;
# where none does both, the largest at which none loses more than MOST_RIGHT_LOST. The shipped default's
# holds-answer: 0.4 either way (80.8% turned away at 20,598 passages, at most 4.7% lost); its verified one: 0.4 (81.0%,
# at most 6.4%; the second rule alone: 0.25, 65.1% at 20,598 passages), benchmarks/results/*_fit.json.
LEAST_TURNED_AWAY = 0.8
MOST_RIGHT_LOST_TURNING_AWAY = 0.10
MOST_RIGHT_LOST = 0.05
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


def near_miss_table(
    indexes: dict[str, PhraseIndex | None],
    model: PhraseModel,
    calibration: Calibration,
    questions: Sequence[Question],
    weight: float,
    reader: SpanReader | None = None,
    article_weight: float = 0.0,
    invented: tuple[dict[str, Sequence[Case]], float] | None = None,
) -> QueryTable | None:
    """The holds-answer's extra cases, :func:`gather`-ed: the near misses of ``questions`` over each index
    (``"<name>-near-miss"``), each weighing ``weight``; with ``article_weight`` the questions over their own article
    alone in the ``"dev"`` index (:func:`article_cases`, ``"article"``), each weighing that; with ``invented`` (the
    cases per index name and a weight) those cases and the article-alone ones asked about an invented name
    (:func:`invented_cases`, ``"<corpus>-invented"``). None when there are none."""
    found = [
        (index, near_miss_cases(index, questions, f"{name}-near-miss", weight))
        for name, index in indexes.items()
        if index is not None and weight > 0
    ]
    dev = indexes.get("dev")
    if article_weight > 0 and dev is not None:
        found.append((dev, article_cases(dev, questions, "article", article_weight)))
    if invented is not None and invented[1] > 0:
        asked, invented_weight = invented
        alone = article_cases(dev, questions, "article") if dev is not None else []
        for name, cases in asked.items():
            base = [*cases, *alone] if name == "dev" else cases
            if indexes.get(name) is not None:
                found.append((indexes[name], invented_cases(base, invented_weight)))
    tables = [gather(index, model, calibration, cases, reader=reader) for index, cases in found if cases]
    return concatenate(tables) if tables else None


def add_holds_case_weights(parser: argparse.ArgumentParser, invented: float = INVENTED_NAME_WEIGHT) -> None:
    """The options that weigh the holds-answer's extra cases: ``--near-miss-weight``, ``--article-weight`` and
    ``--invented-name-weight`` (default ``invented``)."""
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
    parser.add_argument(
        "--invented-name-weight",
        type=float,
        default=invented,
        help="weight of an answerable case asked about an invented name (no answer) in the holds-answer's fit",
    )


def dev_index(model: PhraseModel, path: Path, dev: Path = DEFAULT_DEV) -> PhraseIndex:
    """The phrase index of every dev-public paragraph at ``path`` (built, resumably, when missing)."""
    if (path / "manifest.json").is_file():
        index = PhraseIndex.load(path, model=model)
    else:
        index = PhraseIndex.create(model, path=path, filter_threshold=model.config.filter_threshold)
    add_passages(index, model, load_squad(dev).passages, duplicates="skip", progress=True)
    return index


def fit_table(
    table: QueryTable,
    names: Sequence[str] = QUERY_FEATURES,
    unanswerable_weight: float = UNANSWERABLE_WEIGHT,
    lower_case_weight: float = LOWER_CASE_WEIGHT,
    holds: bool = False,
    l2: float = 1e-2,
) -> Answerability:
    """The answerability fitted on every case of ``table`` (a case without an answer is left out), a case whose
    corpus lacks the answer weighing ``unanswerable_weight``; each case with names counts once more as if asked in
    lower case (:func:`lower_cased`; not those whose ``lower_case`` is off), weighing ``lower_case_weight`` of it.
    With ``holds``, fitted on whether the corpus holds the answer instead of whether the top answer is right: a
    calibration's ``holds_answer``. ``l2``: the penalty of :func:`~dphr_haystack.fitting.fit_logistic`."""
    known = ~np.isnan(table.features[:, QUERY_FEATURES.index("top_logit")])
    columns = [QUERY_FEATURES.index(n) for n in names]
    weights = np.array([(1.0 if c.answerable else unanswerable_weight) * c.weight for c in table.cases])
    features, correct = table.features, (table.holds if holds else table.correct)
    named = known & (table.features[:, QUERY_FEATURES.index("has_names")] == 1.0)
    named &= np.array([c.lower_case for c in table.cases], dtype=bool)
    if lower_case_weight > 0 and named.any():
        features = np.vstack([features, lower_cased(features[named])])
        correct = np.concatenate([correct, correct[named]])
        weights = np.concatenate([weights, lower_case_weight * weights[named]])
        known = np.concatenate([known, np.ones(int(named.sum()), dtype=bool)])
    return fit_answerability(features[known][:, columns], correct[known], names, l2=l2, weights=weights[known])


def lower_cased(features: np.ndarray) -> np.ndarray:
    """Query features as the same questions written in lower case give them: no names found (so none the corpus
    does not write), every other feature as it was (exact for an uncased tokenizer, as the shipped models have: the
    search does not change)."""
    out = np.array(features, dtype=np.float64, copy=True)
    out[:, [QUERY_FEATURES.index(n) for n in NAME_FEATURES if n not in ("has_names", CORPUS_FEATURE)]] = np.nan
    out[:, QUERY_FEATURES.index("has_names")] = 0.0
    out[:, QUERY_FEATURES.index(CORPUS_FEATURE)] = 1.0
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


def threshold_sweep(table: QueryTable, holds: np.ndarray, most_lost: float = MOST_RIGHT_LOST) -> dict[str, Any]:
    """Per corpus size of ``table`` (5, 50, 500, 1,702, 20,598 passages), at each threshold in steps of 0.05: the
    share of its right top answers whose P(the corpus holds an answer) ``holds`` falls below it and of its
    unanswerable cases; the largest threshold at which no size loses more than ``most_lost`` of its right ones (how
    :data:`~dphr_haystack.search_options.NO_ANSWER_THRESHOLD` was chosen); and the one the fit stores as its
    ``no_answer_threshold`` (:func:`choose_threshold`)."""
    corpora = np.array([c.corpus for c in table.cases])
    sizes = [str(size) for size in SIZES] + [name for name in ("dev", "open") if name in corpora]
    sweep = []
    for t in np.round(np.arange(0.05, 1.0, 0.05), 2):
        below = np.nan_to_num(holds, nan=0.0) < t
        sweep.append(
            {
                "threshold": float(t),
                **{
                    size: {
                        "right_lost_share": float(below[(corpora == size) & table.correct].mean()),
                        "no_answer_share": float(below[(corpora == size) & ~table.holds].mean()),
                    }
                    for size in sizes
                },
            }
        )
    kept = [row["threshold"] for row in sweep if all(row[s]["right_lost_share"] <= most_lost for s in sizes)]
    return {
        "threshold_sweep": sweep,
        "largest_threshold_within_lost": max(kept, default=None),
        "chosen_threshold": choose_threshold(sweep),
    }


def choose_threshold(sweep: Sequence[Mapping[str, Any]]) -> float | None:
    """The "no answer" threshold a fit stores, from its :func:`threshold_sweep` rows: the smallest at which every
    corpus size turns away at least :data:`LEAST_TURNED_AWAY` of its unanswerable cases and loses at most
    :data:`MOST_RIGHT_LOST_TURNING_AWAY` of its right ones, else the largest that loses at most
    :data:`MOST_RIGHT_LOST` at every size (None: not even the smallest does)."""

    def sizes(row: Mapping[str, Any]) -> list[Mapping[str, float]]:
        return [v for k, v in row.items() if k != "threshold"]

    turning = [
        row["threshold"]
        for row in sweep
        if all(
            s["no_answer_share"] >= LEAST_TURNED_AWAY and s["right_lost_share"] <= MOST_RIGHT_LOST_TURNING_AWAY
            for s in sizes(row)
        )
    ]
    if turning:
        return min(turning)
    kept = [row["threshold"] for row in sweep if all(s["right_lost_share"] <= MOST_RIGHT_LOST for s in sizes(row))]
    return max(kept, default=None)


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
    indexes = {"dev": dev, "open": open_index}
    table = concatenate([gather(indexes[name], model, calibration, found) for name, found in cases.items()])
    answerability = calibration.answerability if args.keep_answerability else None
    answerability = answerability or fit_table(
        table, unanswerable_weight=args.unanswerable_weight, lower_case_weight=args.lower_case_weight
    )
    near = near_miss_table(
        indexes,
        model,
        calibration,
        questions,
        args.near_miss_weight,
        article_weight=args.article_weight,
        invented=(cases, args.invented_name_weight),
    )
    both = concatenate([table, near]) if near is not None else table
    holds_answer = fit_table(both, unanswerable_weight=1.0, lower_case_weight=args.lower_case_weight, holds=True)
    probability = answerability.query_probability(table.features)
    holds = holds_answer.query_probability(both.features)
    sweep = threshold_sweep(table, holds_answer.query_probability(table.features))
    threshold = sweep["chosen_threshold"]
    threshold = NO_ANSWER_THRESHOLD if threshold is None else threshold
    below = holds < threshold
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
        "threshold": threshold,
        "no_answer_share": float(below[~both.holds].mean()),
        "right_lost_share": float(below[both.correct].mean()),
        **sweep,
    }
    fitted = replace(
        calibration, answerability=answerability, holds_answer=holds_answer, no_answer_threshold=threshold
    ).to_dict()
    out = Path(args.model) if args.in_place else args.out
    write_calibrated(Path(args.model), out, fitted)
    (args.report or out / "answerability.json").write_text(json.dumps(report, indent=2) + "\n")
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
