"""Answers a user can trust: phrase answers copied from the question, and the calibrated confidence.

    .venv/bin/python -m benchmarks.quality.answer_trust [--model dphr-minilm-squad] [--paragraphs 600]

The corpus is the SQuAD dev-public paragraphs after the held-out validation articles (the first 427 paragraphs,
which ``python -m train.calibrate`` fits the confidence on), indexed in memory with the model's filter; its
questions are asked with question copies allowed and skipped, each scored by phrase EM@1 and F1@1, with the share
of top answers that copy the question. With a calibrated model: the AUROC of the top answer's confidence for
right vs wrong answers (and of the raw score, for comparison), the expected calibration error and a reliability
table, and the confidence that questions about paragraphs outside the corpus (the next ones in the file) get.
Writes results/answer_trust.json and .png.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import DEFAULT_MODEL, SQUAD_DEV, finish_result, machine, model_id, pyplot, save_figure

VALIDATION_PARAGRAPHS = 427


def _ask(searcher, questions, batch_size: int = 64) -> list[list[Any]]:
    hits = []
    for b in range(0, len(questions), batch_size):
        hits.extend(searcher.search_batch([q.question for q in questions[b : b + batch_size]], unit="phrase", top_k=1))
    return hits


def measure(model_name: str, paragraphs: int, max_questions: int, outside: int) -> dict[str, Any]:
    from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher
    from dphr_haystack.answers import exact_match, f1_score
    from dphr_haystack.confidence import (
        auroc,
        copies_question,
        expected_calibration_error,
        question_words,
        reliability,
    )
    from dphr_haystack.encode.add import add_passages
    from train.data import load_squad
    from train.validation import unique_questions

    if not SQUAD_DEV.is_file():
        raise SystemExit(f"SQuAD dev not found at {SQUAD_DEV}: this benchmark needs ../shared/data")
    started = time.perf_counter()
    model = PhraseModel.load(model_name)
    data = load_squad(
        SQUAD_DEV, skip_paragraphs=VALIDATION_PARAGRAPHS, max_paragraphs=paragraphs, max_questions=max_questions
    )
    away = load_squad(
        SQUAD_DEV, skip_paragraphs=VALIDATION_PARAGRAPHS + paragraphs, max_paragraphs=paragraphs, max_questions=outside
    )
    index = PhraseIndex.create(model, filter_threshold=model.config.filter_threshold)
    add_passages(index, model, data.passages, progress=True)
    questions = unique_questions(data.examples)
    result: dict[str, Any] = {
        "machine": machine(),
        "model": model_name,
        "model_id": model_id(model_name),
        "paragraphs": len(data.passages),
        "questions": len(questions),
        "vectors_per_passage": len(index) / max(1, len(data.passages)),
        "rows": [],
    }
    tops = {}
    for label, skip in (("copies allowed", False), ("copies skipped (default)", True)):
        searcher = PhraseSearcher(index, model, skip_question_copies=skip)
        top = [hits[0] if hits else None for hits in _ask(searcher, questions)]
        tops[label] = top
        texts = [h.text if h else "" for h in top]
        copied = [copies_question(t, question_words(q.question)) for t, q in zip(texts, questions, strict=True)]
        result["rows"].append(
            {
                "setting": label,
                "em@1": 100
                * float(np.mean([exact_match(t, q.answers) for t, q in zip(texts, questions, strict=True)])),
                "f1@1": 100 * float(np.mean([f1_score(t, q.answers) for t, q in zip(texts, questions, strict=True)])),
                "copies_question": 100 * float(np.mean(copied)),
            }
        )
    top = tops["copies skipped (default)"]
    if model.config.calibration is not None:
        kept = [(h, q) for h, q in zip(top, questions, strict=True) if h is not None]
        right = np.array([exact_match(h.text, q.answers) for h, q in kept])
        confidence = np.array([h.confidence for h, _ in kept])
        searcher = PhraseSearcher(index, model)
        away_top = [hits[0].confidence for hits in _ask(searcher, unique_questions(away.examples)) if hits]
        result["confidence"] = {
            "auroc": auroc(confidence, right),
            "raw_score_auroc": auroc([h.score for h, _ in kept], right),
            "ece": expected_calibration_error(confidence, right),
            "reliability": reliability(confidence, right),
            "mean_right": float(confidence[right].mean()),
            "mean_wrong": float(confidence[~right].mean()),
            "out_of_corpus_questions": len(away_top),
            "out_of_corpus_mean": float(np.mean(away_top)),
            "out_of_corpus_above_0.5": float(np.mean(np.array(away_top) > 0.5)),
        }
    result["seconds"] = time.perf_counter() - started
    return result


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Answer trust, `{result['model']}`, {result['paragraphs']} SQuAD dev-public paragraphs outside the "
        f"validation articles ({result['questions']} questions, {result['vectors_per_passage']:.0f} vectors per "
        f"passage), {result['machine']['cpu']}:",
        "",
        "| phrase answers | EM@1 | F1@1 | top answers copying the question |",
        "|---|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(f"| {row['setting']} | {row['em@1']:.1f} | {row['f1@1']:.1f} | {row['copies_question']:.1f}% |")
    conf = result.get("confidence")
    if conf:
        lines += [
            "",
            f"Confidence of the top answer: AUROC {conf['auroc']:.3f} (raw score {conf['raw_score_auroc']:.3f}),"
            f" ECE {conf['ece']:.3f}; mean {conf['mean_right']:.3f} when right, {conf['mean_wrong']:.3f} when "
            f"wrong, {conf['out_of_corpus_mean']:.3f} for {conf['out_of_corpus_questions']} questions about "
            f"paragraphs outside the corpus ({100 * conf['out_of_corpus_above_0.5']:.1f}% above 0.5).",
        ]
    else:
        lines += ["", "The model stores no calibration: its answers carry no confidence."]
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()
    conf = result.get("confidence")
    fig, axes = plt.subplots(1, 2 if conf else 1, figsize=(9 if conf else 4.5, 3.8), squeeze=False)
    ax = axes[0][0]
    names = [row["setting"] for row in result["rows"]]
    x = np.arange(len(names))
    ax.bar(x - 0.2, [row["em@1"] for row in result["rows"]], 0.4, label="EM@1")
    ax.bar(x + 0.2, [row["copies_question"] for row in result["rows"]], 0.4, label="% copying the question")
    ax.set_xticks(x, names, fontsize=8)
    ax.legend(fontsize=8)
    ax.set_title("question copies", fontsize=9)
    if conf:
        ax = axes[0][1]
        rows = conf["reliability"]
        ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1)
        ax.plot([r["confidence"] for r in rows], [r["accuracy"] for r in rows], marker="o")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("confidence of the top answer")
        ax.set_ylabel("exact-match rate")
        ax.set_title(f"reliability: AUROC {conf['auroc']:.3f}, ECE {conf['ece']:.3f}", fontsize=9)
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--paragraphs", type=int, default=600)
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--outside", type=int, default=300, help="questions about paragraphs outside the corpus")
    args = parser.parse_args()
    finish_result("answer_trust", measure(args.model, args.paragraphs, args.questions, args.outside), markdown, plot)


if __name__ == "__main__":
    main()
