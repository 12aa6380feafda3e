"""A verification reader on the CPU in float32 vs bfloat16 autocast: time per answer read, and what it reads.

    .venv/bin/python -m benchmarks.speed.reader_precision --reader MiniLM=dphr-minilm-squad-reader \\
        MPNet=runs/reader-mpnet/reader/final [--questions 100] [--threads 2]

``--questions`` SQuAD dev-public questions outside the held-out validation articles (seed ``--seed``): each reader
(:class:`dphr_haystack.verification.SpanReader`, one window of 384 subwords around the span, as a verified search
reads) reads the gold answer in its paragraph and, for the same question, the first word of a *near miss*: the
paragraph of the same article that shares most of its words and writes none of its answers. Every read is done in
both precisions one after the other (the order alternating), so both see the same machine state. Reported per
reader and precision: p50 / p95 ms per read, bfloat16's speed-up, how far bfloat16's view (span score,
log-probability, gap, no-answer score) lies from float32's (mean and max absolute difference), and the AUROC of the
no-answer score telling the near misses from the answers' paragraphs in each precision (what the verification reads
it for). Writes results/reader_precision.json and .png.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import (
    SQUAD_DEV,
    VALIDATION_ARTICLES,
    finish_result,
    machine,
    parse_readers,
    percentiles,
    pyplot,
    save_figure,
)

PRECISIONS = ("float32", "bfloat16")
VIEW = ("span", "logp", "gap", "null")  # ReaderView.values(), in order
WORD = re.compile(r"\w+")


def near_miss_reads(path: Path, questions: int, seed: int) -> list[dict[str, Any]]:
    """``questions`` unseen dev questions with their gold span and a near-miss paragraph of their article (the one
    sharing most of the question's paragraph's words among those writing none of its answers); questions whose
    article has no such paragraph are skipped."""
    from dphr_haystack._util.io import read_json

    reads = []
    for article in read_json(path)["data"][VALIDATION_ARTICLES:]:
        contexts = [p["context"] for p in article["paragraphs"]]
        words = [set(WORD.findall(c.lower())) for c in contexts]
        for i, para in enumerate(article["paragraphs"]):
            for qa in para["qas"]:
                answers = [a["text"] for a in qa["answers"]]
                others = [j for j in range(len(contexts)) if j != i and not any(a in contexts[j] for a in answers)]
                if not others:
                    continue
                near = max(others, key=lambda j: len(words[i] & words[j]))
                first = qa["answers"][0]
                reads.append(
                    {
                        "question": qa["question"],
                        "context": para["context"],
                        "span": (first["answer_start"], first["answer_start"] + len(first["text"])),
                        "near_context": contexts[near],
                        "near_span": WORD.search(contexts[near]).span(),
                    }
                )
    return random.Random(seed).sample(reads, min(questions, len(reads)))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from dphr_haystack.fitting import auroc
    from dphr_haystack.verification import SpanReader

    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    reads = near_miss_reads(SQUAD_DEV, args.questions, args.seed)
    result: dict[str, Any] = {"machine": machine(), "threads": args.threads, "questions": len(reads), "readers": {}}
    for label, path in parse_readers(args.reader).items():
        readers = {p: SpanReader(path, precision=p) for p in PRECISIONS}
        times: dict[str, list[float]] = {p: [] for p in PRECISIONS}
        views: dict[str, list[tuple[float, ...]]] = {p: [] for p in PRECISIONS}
        for precision in PRECISIONS:  # one warm-up read each
            readers[precision].view(reads[0]["question"], reads[0]["context"], *reads[0]["span"])
        for k, read in enumerate(reads):
            for context, span in ((read["context"], read["span"]), (read["near_context"], read["near_span"])):
                for precision in PRECISIONS if k % 2 == 0 else PRECISIONS[::-1]:
                    read_at = time.perf_counter()
                    view = readers[precision].view(read["question"], context, *span)
                    times[precision].append(1000 * (time.perf_counter() - read_at))
                    views[precision].append(view.values())
        exact, rounded = np.array(views["float32"]), np.array(views["bfloat16"])
        is_answer = np.tile([True, False], len(reads))  # each question: its paragraph, then its near miss
        result["readers"][label] = {
            "path": str(path),
            "parameters": sum(p.numel() for p in readers["float32"].model.parameters()),
            **{p: percentiles(times[p]) for p in PRECISIONS},
            "speedup_p50": percentiles(times["float32"])["p50_ms"] / percentiles(times["bfloat16"])["p50_ms"],
            "view_abs_difference": {
                name: {"mean": float(difference.mean()), "max": float(difference.max())}
                for name, difference in zip(VIEW, np.abs(rounded - exact).T, strict=True)
            },
            "null_auroc_near_miss": {p: auroc(np.array(views[p])[:, 3], ~is_answer) for p in PRECISIONS},
        }
    result["seconds"] = time.perf_counter() - started
    return result


def _markdown(result: dict[str, Any]) -> str:
    lines = [
        f"{result['questions']} unseen SQuAD questions, each read in its paragraph and in a near miss, "
        f"{result['threads']} threads; p50 / p95 ms a read:",
        "",
        "| reader | parameters | float32 | bfloat16 | speed-up (p50) | \\|Δ no-answer score\\| mean / max |"
        " AUROC near miss, float32 → bfloat16 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, row in result["readers"].items():
        f, b, null = row["float32"], row["bfloat16"], row["view_abs_difference"]["null"]
        a = row["null_auroc_near_miss"]
        lines.append(
            f"| {label} | {row['parameters'] / 1e6:.1f}M | {f['p50_ms']:.1f} / {f['p95_ms']:.1f} | "
            f"{b['p50_ms']:.1f} / {b['p95_ms']:.1f} | {row['speedup_p50']:.2f}× | {null['mean']:.3f} / "
            f"{null['max']:.3f} | {a['float32']:.3f} → {a['bfloat16']:.3f} |"
        )
    return "\n".join(lines)


def _plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    labels = list(result["readers"])
    fig, ax = plt.subplots(figsize=(6, 3.2))
    x = np.arange(len(labels))
    for k, precision in enumerate(PRECISIONS):
        values = [result["readers"][label][precision]["p50_ms"] for label in labels]
        ax.bar(x + 0.38 * k, values, width=0.38, label=precision)
    ax.set_xticks(x + 0.19, labels)
    ax.set_ylabel("ms a read (p50)")
    ax.set_title(f"verification reader on {result['threads']} CPU threads", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reader", nargs="+", required=True, help="DIR or LABEL=DIR (a reader directory or name)")
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="reader_precision", help="results/NAME.json (default: %(default)s)")
    args = parser.parse_args()
    if not SQUAD_DEV.is_file():
        raise SystemExit(f"SQuAD dev not found at {SQUAD_DEV}: this benchmark needs ../shared/data")
    finish_result(args.name, measure(args), _markdown, _plot)


if __name__ == "__main__":
    main()
