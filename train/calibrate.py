"""Fit the phrase-answer confidence of a model and store it with the model.

    python -m train.calibrate --model runs/x/qsft/best --out runs/x/calibrated \\
        [--index benchmarks/cache/squad-open-small/phrases-...] [--paragraphs 427] [--features score,...] [--no-ranker]
        [--depth 50]

Questions with known answers (by default those of the first ``--paragraphs`` paragraphs of SQuAD dev-public: the
held-out validation articles) are asked against a phrase index: ``--index`` (e.g. the whole open-domain corpus the
model will search), or else an in-memory index of those paragraphs. Each question's ranked candidates (the first
``--depth``, default :data:`~dphr_haystack.confidence.CONFIDENCE_DEPTH`, trimmed, question copies skipped, as at
inference; :func:`ranked_candidates`) get the features of :func:`dphr_haystack.confidence.answer_features`
(``--features``; default all of :data:`~dphr_haystack.confidence.KNOWN_FEATURES`) and the label "exact match". An
answer ranker (:func:`dphr_haystack.confidence.fit_ranker`) learns from all of them to put the right answer first,
and a logistic calibration of its top answers (:data:`RANKED_CALIBRATION`) turns its scores into P(correct);
``--no-ranker`` fits the calibration on the features of the top answers by score instead, as models calibrated
before the ranker were. Both are fitted on ``1 − holdout`` of the questions and scored on the rest (EM@1 of the top
answer by score and by confidence, AUROC of right vs wrong top answers, expected calibration error, a reliability
table), then refitted on all of them and written into ``<out>/dphr_config.json``. Out-of-corpus questions (those
of the next paragraphs, which the in-memory index does not hold) show what a question about nothing in the corpus
gets. Writes ``<out>/calibration.json`` and ``<out>/reliability.png``.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher
from dphr_haystack._util.atomic import write_file_atomic
from dphr_haystack.answers import exact_match
from dphr_haystack.confidence import (
    CONFIDENCE_DEPTH,
    KNOWN_FEATURES,
    RANKER_FEATURES,
    AnswerRanker,
    Calibration,
    answer_features,
    auroc,
    copies_question,
    expected_calibration_error,
    fit_calibration,
    fit_ranker,
    question_words,
    reliability,
)
from dphr_haystack.encode.add import add_passages
from dphr_haystack.errors import InvalidParameterError
from dphr_haystack.model.calibration import check_features
from dphr_haystack.passage_words import cached_words
from dphr_haystack.search import PhraseHit
from dphr_haystack.spans import trim_span

from .data import RCData, RCExample, load_squad
from .validation import unique_questions

logger = logging.getLogger(__name__)
# What the calibration of a ranked model weighs of its top answer: the answer ranker's score and log-softmax (both
# rise with the rank score within a query, so confidences order a query's answers as the ranker does), and how
# high and how spread the query's raw scores are (the same for all of its answers).
RANKED_CALIBRATION = ("rank_score", "rank_log_softmax", "best_score", "score_spread")
DEFAULT_DEV = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "squad" / "dev-v1.1-public.json.gz"


def candidate_searcher(index: PhraseIndex, model: PhraseModel) -> PhraseSearcher:
    """A searcher that returns every scored span as it is (:func:`ranked_candidates` trims and skips)."""
    return PhraseSearcher(index, model, skip_question_copies=False, calibration=None, tidy_answers=False)


def ranked_candidates(
    searcher: PhraseSearcher, questions: Sequence[str], batch_size: int = 64, depth: int = CONFIDENCE_DEPTH
) -> list[list[PhraseHit]]:
    """Each question's ranked candidates as a default :class:`PhraseSearcher` gathers them for a top answer with a
    confidence of a calibration of ``depth``: the spans of the first ``depth`` start and end tokens, best first,
    trimmed (tidy answers), question copies left out, before answers are folded. ``searcher`` is a
    :func:`candidate_searcher`."""
    out: list[list[PhraseHit]] = []
    passages = searcher.index.passages
    for b in range(0, len(questions), batch_size):
        batch = list(questions[b : b + batch_size])
        q_start, q_end = searcher.model.encode_queries(
            batch, batch_size=batch_size, precision=searcher.query_precision
        )
        # one token search of ``depth`` candidates holds at most 2 * depth spans
        found = searcher.search_vectors(q_start, q_end, "phrase", top_k=4 * depth, candidates=depth)
        for question, ranked in zip(batch, found, strict=True):
            words = question_words(question)
            kept = []
            for hit in ranked:
                text = passages[hit.passage_row]["text"]
                start, end = trim_span(text, hit.start, hit.end)
                if not copies_question(text[start:end], words):
                    kept.append(replace(hit, text=text[start:end], start=start, end=end))
            out.append(kept)
    return out


@dataclass
class CandidateTable:
    """The features of each question's ranked candidates (the first ``depth``, the reference list of their
    features): one row per candidate, with its question's position and its exact-match label; ``candidates[q]`` and
    ``asked[q]`` are question q's candidates and normalised words."""

    features: np.ndarray
    correct: np.ndarray
    query: np.ndarray
    candidates: list[list[PhraseHit]]
    asked: list[tuple[str, ...]]
    depth: int = CONFIDENCE_DEPTH


def candidate_table(
    searcher: PhraseSearcher,
    examples: Sequence[RCExample],
    features: Sequence[str] = KNOWN_FEATURES,
    batch_size: int = 64,
    depth: int = CONFIDENCE_DEPTH,
) -> CandidateTable:
    """The :class:`CandidateTable` of ``examples``' questions with ``depth`` candidates each; ``searcher`` is a
    :func:`candidate_searcher`."""
    rows, labels, query = [], [], []
    ranked_lists = ranked_candidates(searcher, [ex.question for ex in examples], batch_size, depth)
    kept = [ranked[:depth] for ranked in ranked_lists]
    asked = [question_words(ex.question) for ex in examples]
    passages, words = searcher.index.passages, cached_words(searcher.index)
    for q, (ex, ranked) in enumerate(zip(examples, kept, strict=True)):
        if ranked:
            rows.append(answer_features(features, ranked, None, asked[q], passages, depth=depth, words=words))
            labels += [exact_match(hit.text, ex.answers) for hit in ranked]
            query += [q] * len(ranked)
    table = np.vstack(rows) if rows else np.zeros((0, len(features)))
    return CandidateTable(table, np.array(labels, dtype=bool), np.array(query, dtype=np.int64), kept, asked, depth)


def top_answers(
    table: CandidateTable,
    passages: Sequence[dict],
    questions: np.ndarray,
    ranker: AnswerRanker | None,
    names: Sequence[str],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each of ``questions`` (positions in ``table``) that has candidates: the calibration features ``names`` of
    its top answer (by ``ranker``, else by score), whether it is right, and its raw score."""
    rows, labels, scores = [], [], []
    rank = ranker.scores(table.features[:, [KNOWN_FEATURES.index(n) for n in ranker.features]]) if ranker else None
    columns = [KNOWN_FEATURES.index(n) for n in names] if ranker is None else []
    for q in questions:
        at = np.flatnonzero(table.query == q)
        if not len(at):
            continue
        top = int(np.argmax(rank[at])) if rank is not None else 0  # argmax: the first of equals, as a stable sort
        ranked = table.candidates[q]
        if ranker is None:  # the table holds them
            rows.append(table.features[at[top], columns])
        else:  # the rank features read the other candidates' rank scores
            rows.append(answer_features(names, ranked, [top], table.asked[q], passages, ranker, table.depth)[0])
        labels.append(bool(table.correct[at[top]]))
        scores.append(ranked[top].score)
    return np.array(rows).reshape(len(rows), len(names)), np.array(labels, dtype=bool), np.array(scores)


def fit_confidence(
    table: CandidateTable, passages: Sequence[dict], questions: np.ndarray, names: Sequence[str], ranked: bool
) -> Calibration:
    """The calibration fitted on ``questions`` (positions in ``table``): with ``ranked`` an answer ranker over the
    features ``names`` of every candidate, then the :data:`RANKED_CALIBRATION` features of its top answers; else
    ``names`` of the top answers by score."""
    if not ranked:
        features, labels, _ = top_answers(table, passages, questions, None, names)
        return fit_calibration(features, labels, names=names, depth=table.depth)
    rows = np.isin(table.query, questions)
    columns = [KNOWN_FEATURES.index(n) for n in names]
    ranker = fit_ranker(table.features[rows][:, columns], table.correct[rows], table.query[rows], names=names)
    features, labels, _ = top_answers(table, passages, questions, ranker, RANKED_CALIBRATION)
    return fit_calibration(features, labels, names=RANKED_CALIBRATION, ranker=ranker, depth=table.depth)


def calibrate(
    model: PhraseModel,
    data: RCData,
    index: PhraseIndex,
    holdout: float = 0.3,
    seed: int = 0,
    outside: Sequence[RCExample] = (),
    names: Sequence[str] = KNOWN_FEATURES,
    ranked: bool = True,
    depth: int = CONFIDENCE_DEPTH,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Fit the confidence (an answer ranker over the features ``names`` and a calibration of its top answers, or
    with ``ranked=False`` a calibration of the features ``names`` of the top answers by score) on ``data``'s
    questions against ``index``, over each question's first ``depth`` candidates; returns (the calibration dict, a
    report)."""
    names = tuple(names)
    searcher = candidate_searcher(index, model)
    questions = unique_questions(data.examples)
    table = candidate_table(searcher, questions, KNOWN_FEATURES, depth=depth)
    passages = index.passages
    answered = np.unique(table.query)
    order = list(range(len(questions)))
    random.Random(seed).shuffle(order)
    n_held = int(round(holdout * len(order)))
    held, fit = np.array(sorted(order[:n_held]), dtype=int), np.array(sorted(order[n_held:]), dtype=int)
    _, by_score, _ = top_answers(table, passages, np.arange(len(questions)), None, names)
    report: dict[str, Any] = {
        "questions": len(questions),
        "answered": len(answered),
        "em@1": float(by_score.sum() / len(questions)) if len(questions) else 0.0,
        "fit_questions": len(fit),
        "held_out_questions": len(held),
        "ranker": ranked,
    }
    if len(held):
        on_fit = fit_confidence(table, passages, fit, names, ranked)
        features, labels, score = top_answers(table, passages, held, on_fit.ranker, on_fit.features)
        confidence = on_fit.confidence(features)
        _, held_by_score, _ = top_answers(table, passages, held, None, names)
        report.update(
            {
                "held_out_em@1": {
                    "by score": float(held_by_score.sum() / len(held)),
                    "by confidence": float(labels.sum() / len(held)),
                },
                "held_out_auroc": auroc(confidence, labels),
                "held_out_raw_score_auroc": auroc(score, labels),
                "held_out_ece": expected_calibration_error(confidence, labels),
                "held_out_reliability": reliability(confidence, labels),
                "held_out_mean_confidence": {
                    "right": float(confidence[labels].mean()),
                    "wrong": float(confidence[~labels].mean()),
                },
            }
        )
    calibration = fit_confidence(table, passages, np.arange(len(questions)), names, ranked)
    if ranked:
        rising = all(
            w >= 0 for f, w in zip(calibration.features, calibration.weights, strict=True) if f in RANKER_FEATURES
        )
        report["confidence_orders_as_ranker"] = rising
        if not rising:
            logger.warning("the calibration weighs a rank feature negatively: its confidences do not order answers")
    features, labels, _ = top_answers(
        table, passages, np.arange(len(questions)), calibration.ranker, calibration.features
    )
    report["in_sample_em@1"] = float(labels.sum() / len(questions)) if len(questions) else 0.0
    report["in_sample_auroc"] = auroc(calibration.confidence(features), labels)
    if outside:
        others = candidate_table(searcher, unique_questions(list(outside)), KNOWN_FEATURES, depth=depth)
        out_features, _, _ = top_answers(
            others, passages, np.arange(len(others.candidates)), calibration.ranker, calibration.features
        )
        out_conf = calibration.confidence(out_features)
        report["out_of_corpus"] = {
            "questions": len(out_conf),
            "mean_confidence": float(out_conf.mean()),
            "share_above_0.5": float((out_conf > 0.5).mean()),
        }
    return calibration.to_dict(), report


def write_calibrated(model_dir: Path, out: Path, calibration: dict[str, Any]) -> None:
    """Copy ``model_dir`` to ``out`` (unless they are the same) and store ``calibration`` in its config."""
    if out.resolve() != model_dir.resolve():
        if out.exists():
            raise FileExistsError(f"{out} exists: choose a new --out")
        shutil.copytree(model_dir, out)
    config_path = out / "dphr_config.json"
    config = json.loads(config_path.read_text())
    config["calibration"] = calibration
    write_file_atomic(config_path, json.dumps(config, indent=2, sort_keys=True) + "\n")


def plot_reliability(report: dict[str, Any], path: Path) -> None:
    """Reliability diagram of the held-out questions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report.get("held_out_reliability") or []
    fig, ax = plt.subplots(figsize=(4.2, 4.2))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="perfect calibration")
    ax.plot([r["confidence"] for r in rows], [r["accuracy"] for r in rows], marker="o", label="held-out questions")
    for r in rows:
        ax.annotate(
            str(r["count"]), (r["confidence"], r["accuracy"]), fontsize=7, xytext=(3, -9), textcoords="offset points"
        )
    ax.set_xlabel("confidence of the top answer")
    ax.set_ylabel("exact-match rate")
    ax.set_title(
        f"AUROC {report.get('held_out_auroc', float('nan')):.3f}, ECE {report.get('held_out_ece', float('nan')):.3f}",
        fontsize=9,
    )
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="model directory or shipped name")
    parser.add_argument("--out", required=True, type=Path, help="where the calibrated model goes (may be --model)")
    parser.add_argument("--questions", type=Path, default=DEFAULT_DEV, help="SQuAD-format file")
    parser.add_argument("--paragraphs", type=int, default=427, help="its first paragraphs give the questions")
    parser.add_argument("--index", type=Path, help="an existing phrase index built with the model")
    parser.add_argument("--holdout", type=float, default=0.3)
    parser.add_argument(
        "--features",
        type=lambda text: tuple(name.strip() for name in text.split(",") if name.strip()),
        default=KNOWN_FEATURES,
        help=f"comma-separated features to fit (default all: {','.join(KNOWN_FEATURES)})",
    )
    parser.add_argument(
        "--ranker",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fit an answer ranker over --features and calibrate its top answers (default); --no-ranker fits "
        "--features of the top answers by score",
    )
    parser.add_argument(
        "--depth",
        type=int,
        default=CONFIDENCE_DEPTH,
        help=f"how many ranked candidates the features read and the ranker orders (default {CONFIDENCE_DEPTH}; "
        "the searchers rank as many phrase answers)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if not 0 <= args.holdout < 1:
        parser.error("--holdout must be in [0, 1)")
    if args.depth < 1:
        parser.error("--depth must be at least 1")
    try:
        check_features(args.features)
    except InvalidParameterError as exc:
        parser.error(f"--features: {exc}")
    if not args.questions.is_file():
        parser.error(f"{args.questions} not found")
    model = PhraseModel.load(args.model)
    data = load_squad(args.questions, max_paragraphs=args.paragraphs)
    outside = load_squad(args.questions, skip_paragraphs=args.paragraphs, max_paragraphs=args.paragraphs // 2)
    if args.index is not None:
        index = PhraseIndex.load(args.index)
        outside_examples: list[RCExample] = []  # a real corpus holds them: no out-of-corpus questions to ask
    else:
        index = PhraseIndex.create(model, filter_threshold=model.config.filter_threshold)
        add_passages(index, model, data.passages, progress=True)
        outside_examples = outside.examples
    calibration, report = calibrate(
        model,
        data,
        index,
        args.holdout,
        outside=outside_examples,
        names=args.features,
        ranked=args.ranker,
        depth=args.depth,
    )
    model_dir = Path(args.model)
    if not model_dir.is_dir():  # a shipped model name
        from dphr_haystack.model.registry import shipped_model_path

        model_dir = shipped_model_path(args.model)
    write_calibrated(model_dir, args.out, calibration)
    report.update(
        {
            "model": str(args.model),
            "index": str(args.index) if args.index else "in-memory",
            "questions_file": str(args.questions),
            "paragraphs": args.paragraphs,
            "calibration": calibration,
        }
    )
    write_file_atomic(args.out / "calibration.json", json.dumps(report, indent=1) + "\n", fsync=False)
    plot_reliability(report, args.out / "reliability.png")
    print(json.dumps({k: v for k, v in report.items() if k not in ("held_out_reliability", "calibration")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
