"""Would a cross-attention reader's view of the top phrase answer make its confidence more trustworthy?

    .venv/bin/python -m benchmarks.quality.reader_verification --reader runs/reader-baseline/reader/final

SQuAD-open-small (20,598 passages, the default model's cached phrase index, the Haystack 1.x ``phrase_qa.yml``
pipeline): the top answer to ``--questions`` unseen dev-public questions (answerable; seed ``--seed``) and to
``--unanswerable`` NQ-open dev questions (about Wikipedia at large: nearly all unanswerable in this corpus). For each
top answer the reader (a question-answering model directory, e.g. the MiniLM reader of
``train/configs/cpu_reader.yaml``) reads its passage with the question, and its view of the answer's span is kept:
the span's start + end logit (``reader_span``), its log-probability among the window's spans of at most 15 subwords,
and its gap to the window's best span (:class:`dphr_haystack.verification.SpanReader`, one window of
``--max-length`` subwords around the answer). Reported, as AUROC: right vs wrong top answers (answerable questions) and
answerable vs NQ questions, for the answer's confidence alone, the reader's span score alone, and both in a logistic
regression scored out of fold (5 folds, :func:`benchmarks.common.out_of_fold_confidences`), with the reader's p50 ms
per answer. Writes ``results/reader_verification.json`` and ``.png`` (ROC curves).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import (
    DEFAULT_MODEL,
    SHARED_DATA,
    finish_result,
    machine,
    model_id,
    out_of_fold_confidences,
    percentiles,
    pyplot,
    save_figure,
    squad_open_small_questions,
    squad_open_small_store,
)

NQ_DEV = SHARED_DATA / "nq-open" / "NQ-open.dev.jsonl.gz"
FEATURES = ("confidence_logit", "reader_span", "reader_logp", "reader_gap")


def top_answers(pipeline, store, reader, examples: list) -> list[dict[str, Any]]:
    """Each question's top phrase answer, whether it is right, its confidence and the reader's view of it."""
    from tqdm import tqdm

    from dphr_haystack.answers import exact_match

    rows = []
    for example in tqdm(examples, desc="questions", unit="q"):
        answers = pipeline.run(query=example.question, params={"Retriever": {"top_k": 1}}).get("answers") or []
        if not answers or not answers[0].document_ids or not answers[0].offsets_in_document:
            continue
        answer = answers[0]
        document = store.get_document_by_id(answer.document_ids[0])
        span = answer.offsets_in_document[0]
        began = time.perf_counter()
        view = reader.view(example.question, document.content, span.start, span.end)
        seconds = time.perf_counter() - began
        if view is None:
            continue
        confidence = min(max(float(answer.score), 1e-6), 1 - 1e-6)
        view = {"reader_span": view.span, "reader_logp": view.logp, "reader_gap": view.gap}
        rows.append(
            {
                "right": bool(exact_match(answer.answer, example.answers)),
                "confidence": float(answer.score),
                "confidence_logit": float(np.log(confidence / (1 - confidence))),
                "reader_ms": 1000 * seconds,
                **view,
            }
        )
    return rows


def separation(rows: list[dict], labels: np.ndarray) -> dict[str, Any]:
    """AUROC of the confidence, of the reader's span score and of both (out of fold), with the ROC points."""
    from dphr_haystack.fitting import auroc

    scores = {
        "confidence": np.array([r["confidence"] for r in rows]),
        "reader span score": np.array([r["reader_span"] for r in rows]),
        "confidence + reader": out_of_fold_confidences(np.array([[r[f] for f in FEATURES] for r in rows]), labels),
    }
    return {name: {"auroc": auroc(s, labels.astype(bool)), "roc": roc_points(s, labels)} for name, s in scores.items()}


def roc_points(scores: np.ndarray, labels: np.ndarray, points: int = 50) -> list[tuple[float, float]]:
    """(false positive rate, true positive rate) at ``points`` thresholds, for the plot."""
    positives, negatives = max(labels.sum(), 1), max((1 - labels).sum(), 1)
    out = []
    for t in np.quantile(scores, np.linspace(0, 1, points)):
        chosen = scores >= t
        out.append(
            (float((chosen & (labels == 0)).sum() / negatives), float((chosen & (labels == 1)).sum() / positives))
        )
    return out


def markdown(payload: dict[str, Any]) -> str:
    lines = [
        f"SQuAD-open-small ({payload['corpus_passages']:,} passages), phrase model `{payload['phrase_model']}`, "
        f"reader `{payload['reader']}`; {payload['answerable']} unseen SQuAD questions (EM@1 "
        f"{100 * payload['em@1']:.1f}) and {payload['unanswerable']} NQ-open dev questions; reader p50 "
        f"{payload['reader_latency']['p50_ms']:.1f} ms per answer ({payload['threads']} torch threads).",
        "",
        "| score | AUROC right vs wrong | AUROC answerable vs NQ |",
        "|---|---:|---:|",
    ]
    for name in payload["right_vs_wrong"]:
        lines.append(
            f"| {name} | {payload['right_vs_wrong'][name]['auroc']:.3f} | "
            f"{payload['answerable_vs_unanswerable'][name]['auroc']:.3f} |"
        )
    return "\n".join(lines)


def plot(payload: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    for ax, key, title in (
        (axes[0], "right_vs_wrong", "right vs wrong top answers"),
        (axes[1], "answerable_vs_unanswerable", "answerable vs NQ questions"),
    ):
        for name, result in payload[key].items():
            fpr, tpr = zip(*result["roc"], strict=True)
            ax.plot(fpr, tpr, label=f"{name} ({result['auroc']:.3f})")
        ax.plot([0, 1], [0, 1], color="lightgray", linestyle="--")
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.set_title(title)
        ax.legend(fontsize=8, loc="lower right")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reader", required=True, help="a question-answering model directory")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--questions", type=int, default=600, help="unseen SQuAD questions (default 600)")
    parser.add_argument("--unanswerable", type=int, default=400, help="NQ-open dev questions (default 400)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--max-length", type=int, default=384, help="subwords of the reader's window (default 384)")
    parser.add_argument("--name", default="reader_verification", help="results/NAME.json (default: %(default)s)")
    args = parser.parse_args(argv)
    if not NQ_DEV.is_file():
        raise SystemExit(f"{NQ_DEV} is needed (../shared/data)")
    import torch

    from dphr_haystack.evaluation import read_questions
    from dphr_haystack.nodes import load_pipeline
    from dphr_haystack.verification import SpanReader

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    store, phrase_index = squad_open_small_store(args.model)
    pipeline = load_pipeline(
        "phrase_qa.yml", overrides={"Retriever": {"model": args.model}}, components={"DocumentStore": store}
    )
    reader = SpanReader(args.reader, max_length=args.max_length)
    answerable = top_answers(pipeline, store, reader, squad_open_small_questions(args.questions, args.seed))
    nq = top_answers(pipeline, store, reader, read_questions(NQ_DEV, limit=args.unanswerable, seed=args.seed))
    right = np.array([r["right"] for r in answerable], dtype=float)
    payload = {
        "benchmark": "reader verification of the top phrase answer, SQuAD-open-small",
        "phrase_model": args.model,
        "model_id": model_id(args.model),
        "phrase_index": phrase_index,
        "reader": args.reader,
        "corpus_passages": store.get_document_count(),
        "answerable": len(answerable),
        "unanswerable": len(nq),
        "em@1": float(right.mean()),
        "seed": args.seed,
        "threads": args.threads,
        "max_length": args.max_length,
        "reader_latency": percentiles([r["reader_ms"] for r in answerable + nq]),
        "right_vs_wrong": separation(answerable, right),
        "answerable_vs_unanswerable": separation(answerable + nq, np.array([1.0] * len(answerable) + [0.0] * len(nq))),
        "machine": machine(),
        "seconds": time.perf_counter() - started,
    }
    finish_result(args.name, payload, markdown, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
