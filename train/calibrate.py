"""Fit the phrase-answer confidence of a model and store it with the model.

    python -m train.calibrate --model runs/x/qsft/best --out runs/x/calibrated \\
        [--index benchmarks/cache/squad-open-small/phrases-...] [--paragraphs 427] [--features score,...]

Questions with known answers (by default those of the first ``--paragraphs`` paragraphs of SQuAD dev-public: the
held-out validation articles) are asked against a phrase index: ``--index`` (e.g. the whole open-domain corpus the
model will search), or else an in-memory index of those paragraphs. Each question's top phrase (question copies
skipped, as at inference) gets the features of :func:`dphr_haystack.confidence.confidence_features` and the label
"exact match"; a logistic calibration is fitted on ``1 − holdout`` of the questions and scored on the rest (AUROC
of right vs wrong top-1 answers, expected calibration error, a reliability table), then refitted on all of them and
written into ``<out>/dphr_config.json``. Out-of-corpus questions (those of the next paragraphs, which the in-memory
index does not hold) show what a question about nothing in the corpus gets. Writes ``<out>/calibration.json`` and
``<out>/reliability.png``.

The features (``--features``; default all of :data:`~dphr_haystack.confidence.KNOWN_FEATURES`, while
``score,log_softmax,log_agreement,margin`` fits the four of earlier calibrations) are those of
:func:`dphr_haystack.confidence.answer_features` over each question's ranked candidates as the searcher gathers
them for a top answer with a confidence (:func:`ranked_candidates`).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher
from dphr_haystack._util.atomic import write_file_atomic
from dphr_haystack.answers import exact_match
from dphr_haystack.confidence import (
    CONFIDENCE_DEPTH,
    KNOWN_FEATURES,
    answer_features,
    auroc,
    copies_question,
    expected_calibration_error,
    fit_calibration,
    question_words,
    reliability,
)
from dphr_haystack.encode.add import add_passages
from dphr_haystack.errors import InvalidParameterError
from dphr_haystack.model.calibration import check_features
from dphr_haystack.search import PhraseHit
from dphr_haystack.spans import trim_span

from .data import RCData, RCExample, load_squad
from .validation import unique_questions

logger = logging.getLogger(__name__)
DEFAULT_DEV = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "squad" / "dev-v1.1-public.json.gz"


def candidate_searcher(index: PhraseIndex, model: PhraseModel) -> PhraseSearcher:
    """A searcher that returns every scored span as it is (:func:`ranked_candidates` trims and skips)."""
    return PhraseSearcher(index, model, skip_question_copies=False, calibration=None, tidy_answers=False)


def ranked_candidates(
    searcher: PhraseSearcher, questions: Sequence[str], batch_size: int = 64
) -> list[list[PhraseHit]]:
    """Each question's ranked candidates as a default :class:`PhraseSearcher` gathers them for a top answer with a
    confidence: the spans of the first :data:`CONFIDENCE_DEPTH` start and end tokens, best first, trimmed (tidy
    answers), question copies left out, before answers are folded. ``searcher`` is a
    :func:`candidate_searcher`."""
    out: list[list[PhraseHit]] = []
    passages = searcher.index.passages
    for b in range(0, len(questions), batch_size):
        batch = list(questions[b : b + batch_size])
        q_start, q_end = searcher.model.encode_queries(
            batch, batch_size=batch_size, precision=searcher.query_precision
        )
        # one token search of CONFIDENCE_DEPTH candidates holds at most 2 * CONFIDENCE_DEPTH spans
        found = searcher.search_vectors(
            q_start, q_end, "phrase", top_k=4 * CONFIDENCE_DEPTH, candidates=CONFIDENCE_DEPTH
        )
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


def top_answers(
    searcher: PhraseSearcher,
    examples: Sequence[RCExample],
    batch_size: int = 64,
    features: Sequence[str] = KNOWN_FEATURES,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Confidence features (n, len(features)), exact-match labels (n,) and raw scores (n,) of each question's top
    phrase, for the questions with an answer; ``searcher`` is a :func:`candidate_searcher`."""
    rows, labels, scores = [], [], []
    ranked_lists = ranked_candidates(searcher, [ex.question for ex in examples], batch_size)
    for ex, ranked in zip(examples, ranked_lists, strict=True):
        if not ranked:
            continue
        asked = question_words(ex.question)
        rows.append(answer_features(features, ranked, [0], asked, searcher.index.passages)[0])
        labels.append(exact_match(ranked[0].text, ex.answers))
        scores.append(ranked[0].score)
    return np.array(rows).reshape(len(rows), len(features)), np.array(labels, dtype=bool), np.array(scores)


def calibrate(
    model: PhraseModel,
    data: RCData,
    index: PhraseIndex,
    holdout: float = 0.3,
    seed: int = 0,
    outside: Sequence[RCExample] = (),
    names: Sequence[str] = KNOWN_FEATURES,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Fit the features ``names`` on ``data``'s questions against ``index``; returns (the calibration dict, a
    report)."""
    searcher = candidate_searcher(index, model)
    questions = unique_questions(data.examples)
    features, labels, score = top_answers(searcher, questions, features=names)
    order = list(range(len(labels)))
    random.Random(seed).shuffle(order)
    n_held = int(round(holdout * len(order)))
    held, fit = np.array(order[:n_held], dtype=int), np.array(order[n_held:], dtype=int)
    report: dict[str, Any] = {
        "questions": len(labels),
        "em@1": float(labels.mean()) if len(labels) else 0.0,
        "fit_questions": len(fit),
        "held_out_questions": len(held),
    }
    if len(held):
        on_fit = fit_calibration(features[fit], labels[fit], names=names)
        confidence = on_fit.confidence(features[held])
        report.update(
            {
                "held_out_auroc": auroc(confidence, labels[held]),
                "held_out_raw_score_auroc": auroc(score[held], labels[held]),
                "held_out_ece": expected_calibration_error(confidence, labels[held]),
                "held_out_reliability": reliability(confidence, labels[held]),
                "held_out_mean_confidence": {
                    "right": float(confidence[labels[held]].mean()),
                    "wrong": float(confidence[~labels[held]].mean()),
                },
            }
        )
    calibration = fit_calibration(features, labels, names=names)
    report["in_sample_auroc"] = auroc(calibration.confidence(features), labels)
    if outside:
        out_features, _, _ = top_answers(searcher, unique_questions(list(outside)), features=names)
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
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if not 0 <= args.holdout < 1:
        parser.error("--holdout must be in [0, 1)")
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
    calibration, report = calibrate(model, data, index, args.holdout, outside=outside_examples, names=args.features)
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
