"""Indexing time per 1,000 passages of each shipped phrase model on this machine's CPU, side by side in one run.

    .venv/bin/python -m benchmarks.speed.index_time
        [--models dphr-minilm-squad-distilled dphr-minilm-squad-384 dphr-minilm-squad] [--passages 1000] [--rounds 2]
        [--tag base_size]

The first ``--passages`` paragraphs of the shipped SQuAD dev corpus (``squad-dev``, what the quickstart indexes)
are encoded and added to a fresh in-memory phrase index by each model in turn (``add_passages``, as
``PhraseDocumentStore.update_embeddings`` does: tokenise, window, encode, filter, store), in ``--rounds`` rounds
alternating the models so that drift of a shared machine hits all alike; each model's best round is kept. Reported
per 1,000 passages: wall seconds, CPU seconds (all threads; steadier on a shared machine), stored vectors per
passage, and the ratio of each model's wall time to the first model's. The load average is recorded at the start
and the end. Writes ``results/index_time[_<tag>].json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import DEFAULT_MODEL, finish_result, machine, model_id, pyplot, save_figure


def index_once(model, passages: list[dict]) -> dict[str, float]:
    """Wall and CPU seconds of encoding ``passages`` into a fresh in-memory index, and the vectors it stores."""
    from dphr_haystack import PhraseIndex
    from dphr_haystack.encode.add import add_passages

    index = PhraseIndex.create(model, filter_threshold=model.config.filter_threshold)
    wall, cpu = time.perf_counter(), time.process_time()
    add_passages(index, model, passages, progress=False)
    return {
        "wall_s": time.perf_counter() - wall,
        "cpu_s": time.process_time() - cpu,
        "vectors": len(index),
        "passages": index.num_passages,
    }


def measure(models: list[str], n_passages: int, rounds: int) -> dict[str, Any]:
    import torch

    from dphr_haystack.corpus import read_corpus
    from dphr_haystack.nodes import load_phrase_model

    load_start, started = os.getloadavg(), time.perf_counter()
    passages = list(read_corpus("squad-dev"))[:n_passages]
    loaded = {name: load_phrase_model(name, "cpu") for name in models}
    for name in models:  # warm-up: first calls allocate and load lazily
        index_once(loaded[name], passages[:8])
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in models}
    for r in range(rounds):
        for name in models if r % 2 == 0 else reversed(models):
            runs[name].append(index_once(loaded[name], passages))
            print(f"round {r + 1}: {name} {runs[name][-1]['wall_s']:.1f} s", flush=True)
    rows = []
    for name in models:
        best = min(runs[name], key=lambda run: run["wall_s"])
        config = loaded[name].config
        rows.append(
            {
                "model": name,
                "model_id": model_id(name),
                "window": f"{config.max_passage_length}/{config.passage_stride}",
                "filter_threshold": config.filter_threshold,
                "passages": best["passages"],
                "wall_s_per_1k": 1000 * best["wall_s"] / best["passages"],
                "cpu_s_per_1k": 1000 * best["cpu_s"] / best["passages"],
                "vectors_per_passage": best["vectors"] / best["passages"],
                "rounds": runs[name],
            }
        )
    for row in rows:
        row["wall_vs_first"] = row["wall_s_per_1k"] / rows[0]["wall_s_per_1k"]
    return {
        "machine": machine(),
        "load_average_start": load_start,
        "threads": torch.get_num_threads(),
        "passages": n_passages,
        "rounds": rounds,
        "models": rows,
        "seconds": time.perf_counter() - started,
    }


def markdown(r: dict[str, Any]) -> str:
    lines = [
        f"{r['passages']:,} shipped SQuAD dev paragraphs into a fresh in-memory phrase index, best of {r['rounds']} "
        f"alternating rounds, {r['threads']} torch threads ({r['machine'].get('cpu')}):",
        "",
        "| model | window | filter threshold | wall s / 1k passages | CPU s / 1k passages | vectors / passage "
        "| wall vs first |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in r["models"]:
        lines.append(
            f"| {row['model']} | {row['window']} | {row['filter_threshold']} | {row['wall_s_per_1k']:.1f} | "
            f"{row['cpu_s_per_1k']:.1f} | {row['vectors_per_passage']:.1f} | {row['wall_vs_first']:.2f}× |"
        )
    return "\n".join(lines)


def plot(r: dict[str, Any], path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = [row["model"] for row in r["models"]]
    ax.barh(names, [row["wall_s_per_1k"] for row in r["models"]], color="tab:blue")
    for y, row in enumerate(r["models"]):
        ax.text(row["wall_s_per_1k"], y, f" {row['wall_s_per_1k']:.0f} s", va="center")
    ax.set(xlabel="wall seconds per 1,000 passages (2 CPU cores)", title="phrase indexing time")
    ax.invert_yaxis()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=[DEFAULT_MODEL, "dphr-minilm-squad-384", "dphr-minilm-squad"])
    parser.add_argument("--passages", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tag", default="", help="write results/index_time_<tag>.json (other models than shipped)")
    args = parser.parse_args(argv)
    if args.passages < 1 or args.rounds < 1:
        parser.error("--passages and --rounds must be at least 1")
    name = f"index_time_{args.tag}" if args.tag else "index_time"
    finish_result(name, measure(args.models, args.passages, args.rounds), markdown, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
