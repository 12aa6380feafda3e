"""Where a filter threshold's vectors per passage should be counted: a random sample of the training passages
against the whole open corpus, for the models whose SQuAD-open-small index is cached.

    .venv/bin/python -m benchmarks.training.filter_budget [--model M ...] [--sample 500] [--seed 0]

The filter stage chooses a threshold within a vector budget (``filter.vector_budget``). It counts the vectors per
passage a threshold keeps either on its sweep's subcorpus (H_10 of the validation articles: passages the reference
model retrieves for hard questions) or, with ``filter.budget_sample`` (the default), on that many SQuAD train
paragraphs drawn at random (``train.filter.sample_passages``, the seed of the recipe). This benchmark encodes the
same sample with each model, counts what every threshold keeps (``train.filter.vectors_per_passage``) and sets the
count at the model's own threshold beside what its cached SQuAD-open-small index (20,598 passages) stores. Writes
``results/filter_budget.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import (
    DEFAULT_MODEL,
    SQUAD_OPEN_SMALL_CACHE,
    SQUAD_TRAIN,
    finish_result,
    machine,
    model_id,
    phrase_cache,
    pyplot,
    save_figure,
)

THRESHOLDS = (0.0, 0.25, 0.5, 0.6, 0.75, 1.0, 1.25, 1.5, 2.0)


def measure_model(name: str, passages: list[dict[str, Any]]) -> dict[str, Any]:
    """One model's vectors per sampled passage at every threshold, and its corpus index's count."""
    from dphr_haystack.index.phrase_index import MANIFEST, PhraseIndex
    from dphr_haystack.nodes import load_phrase_model
    from train.filter import vectors_per_passage

    model = load_phrase_model(name, "cpu")
    started = time.perf_counter()
    encoded = model.encode_passages([p["text"] for p in passages], [p.get("title", "") for p in passages])
    logits = [e.filter_logits for e in encoded]
    own = model.config.filter_threshold
    counts = {th: vectors_per_passage(logits, th) for th in sorted({*THRESHOLDS, *([own] if own is not None else [])})}
    row: dict[str, Any] = {
        "model": name,
        "model_id": model_id(name),
        "filter_threshold": own,
        "sample": {str(th): count for th, count in counts.items()},
        "sample_at_threshold": counts.get(own) if own is not None else None,
        "encode_seconds": time.perf_counter() - started,
    }
    cache = phrase_cache(model, SQUAD_OPEN_SMALL_CACHE)
    if (cache / MANIFEST).is_file():  # the corpus count needs the index built (quality.squad_open_small)
        index = PhraseIndex.load(cache)
        row["corpus_at_threshold"] = len(index) / index.num_passages
        row["corpus_passages"] = index.num_passages
    return row


def measure(models: list[str], sample: int, seed: int) -> dict[str, Any]:
    from train.data import load_squad
    from train.filter import sample_passages

    started = time.perf_counter()
    passages = sample_passages(load_squad(SQUAD_TRAIN).passages, sample, seed)
    rows = [measure_model(name, passages) for name in models]
    return {
        "machine": machine(),
        "sample": len(passages),
        "seed": seed,
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Vectors per passage a filter threshold keeps: {result['sample']} SQuAD train paragraphs drawn at random "
        f"(seed {result['seed']}, as `filter.budget_sample` draws them) against the model's whole SQuAD-open-small "
        f"index, {result['machine']['cpu']}.",
        "",
        "| model | threshold | sample: vectors / passage | SQuAD-open-small: vectors / passage | sample − corpus |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        sample, corpus = r["sample_at_threshold"], r.get("corpus_at_threshold")
        gap = f"{sample - corpus:+.1f}" if sample is not None and corpus is not None else "—"
        lines.append(
            f"| `{r['model']}` | {r['filter_threshold']} | "
            f"{'—' if sample is None else f'{sample:.1f}'} | {'—' if corpus is None else f'{corpus:.1f}'} | {gap} |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for r in result["rows"]:
        points = sorted((float(th), count) for th, count in r["sample"].items())
        line = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"{r['model']} (sample)")
        if r.get("corpus_at_threshold") is not None:
            ax.scatter(
                [r["filter_threshold"]], [r["corpus_at_threshold"]], marker="*", s=140, color=line[0].get_color()
            )
    ax.axhline(40, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("filter threshold")
    ax.set_ylabel("vectors per passage")
    ax.set_title("sample count (lines) vs the corpus index (stars)", fontsize=9)
    ax.legend(fontsize=7)
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", help=f"a model name or directory (default: {DEFAULT_MODEL})")
    parser.add_argument("--sample", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    finish_result("filter_budget", measure(args.model or [DEFAULT_MODEL], args.sample, args.seed), markdown, plot)


if __name__ == "__main__":
    main()
