"""Gold-window reading of phrase models and cross-attention readers on the same held-out questions.

    .venv/bin/python -m benchmarks.training.gold_windows --phrase-model runs/gpu-distill-mpnet/filter/final \
        --reader runs/gpu-distill-mpnet/reader-int8 --name base_size [--questions 1000]

Gold-window span EM / F1 (``train.reader.span_metrics``: the best span of each answerable window of the question's
own paragraph, cut by each model's own window settings, against the gold span) for ``--questions`` evenly spaced
questions of the held-out validation articles (the measure of ``benchmarks.training.candidate`` and of the reader
stage). The shipped default is always measured first; a reader is read in the windows of the phrase model named
before it (``--window-model``, default the first ``--phrase-model``). Writes ``results/gold_windows_<name>.json``.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import DEFAULT_MODEL, finish_result, gold_window_spans, machine, validation_data


def reader_spans(reader: str, window_model: Any, data: Any, examples: list, questions: int) -> dict[str, Any]:
    """A cross-attention reader's gold-window span EM / F1 in ``window_model``'s windows."""
    import numpy as np

    from train.data import PassageWindows, RCData, build_features
    from train.reader import ReaderModel, span_metrics

    started = time.perf_counter()
    picked = list(examples)
    if questions and questions < len(picked):  # the same evenly spaced questions as gold_window_spans
        picked = [picked[i] for i in sorted(set(np.linspace(0, len(picked) - 1, questions).round().astype(int)))]
    gold = RCData(data.passages, picked)
    features = build_features(gold, PassageWindows(window_model.tokenizer, window_model.config, gold.passages))
    teacher = ReaderModel.from_reader(reader, window_model.config).eval().teacher()
    spans = span_metrics(teacher.logits, gold, features, window_model.tokenizer, window_model.config)
    return {**spans, "questions": len(picked), "seconds": time.perf_counter() - started}


def measure(phrase_models: list[str], readers: list[str], window_model: str | None, questions: int) -> dict:
    from dphr_haystack import PhraseModel
    from dphr_haystack.model.cache import load_phrase_model

    data, examples = validation_data(None)
    rows: dict[str, Any] = {}
    for name in [DEFAULT_MODEL, *phrase_models]:
        model = load_phrase_model(name, device="cpu") if name == DEFAULT_MODEL else PhraseModel.load(name)
        rows[name] = {"kind": "phrase model", **gold_window_spans(model, data, examples, questions)}
        print(f"{name}: gold-window EM / F1 {rows[name]['em']:.1f} / {rows[name]['f1']:.1f}", flush=True)
    windows = PhraseModel.load(window_model or (phrase_models[0] if phrase_models else DEFAULT_MODEL))
    for reader in readers:
        rows[reader] = {"kind": "reader", **reader_spans(reader, windows, data, examples, questions)}
        print(f"{reader}: gold-window EM / F1 {rows[reader]['em']:.1f} / {rows[reader]['f1']:.1f}", flush=True)
    return {"questions": questions, "rows": rows}


def markdown(result: dict) -> str:
    lines = [
        f"Gold-window span EM / F1, {result['questions']:,} held-out validation questions "
        f"({result['machine'].get('cpu', 'CPU')}):",
        "",
        "| model | kind | EM | F1 | seconds |",
        "|---|---|---:|---:|---:|",
    ]
    for name, row in result["rows"].items():
        lines.append(f"| `{name}` | {row['kind']} | {row['em']:.1f} | {row['f1']:.1f} | {row['seconds']:.0f} |")
    return "\n".join(lines)


def plot(result: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["rows"])
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(names) + 1.5))
    for offset, metric in ((-0.2, "em"), (0.2, "f1")):
        values = [result["rows"][n][metric] for n in names]
        ax.barh([i + offset for i in range(len(names))], values, height=0.4, label=metric.upper())
    ax.set_yticks(range(len(names)), [n.split("/")[-3] if n.count("/") > 2 else n for n in names])
    ax.set_xlabel("gold-window span score (%)")
    ax.set_title(f"Gold-window reading, {result['questions']:,} held-out questions")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phrase-model", nargs="*", default=[], help="phrase model directories or names")
    parser.add_argument("--reader", nargs="*", default=[], help="question-answering reader directories")
    parser.add_argument("--window-model", help="whose windows the readers read (default: the first phrase model)")
    parser.add_argument("--questions", type=int, default=1000, help="held-out validation questions (0: all)")
    parser.add_argument("--name", required=True, help="results/gold_windows_<name>.json")
    args = parser.parse_args()
    started = time.perf_counter()
    result = measure(args.phrase_model, args.reader, args.window_model, args.questions)
    result.update({"machine": machine(), "seconds": time.perf_counter() - started})
    finish_result(f"gold_windows_{args.name}", result, markdown, plot)


if __name__ == "__main__":
    main()
