"""What one query costs by the layers of the query side: MiniLM (the default's base) and MPNet (base-size) phrase
models whose query encoder keeps its first L layers (``PhraseModelConfig.query_layers``).

    nice -n 10 .venv/bin/python -m benchmarks.speed.query_layers [--layers 1 2 3 4 6 12] [--questions 200]

Untrained models of the shipped default's layout (shared query layout: one query encoder, two heads) built with
``PhraseModel.from_base(base)`` for each installed base (``mpnet``: ``bash scripts/setup.sh --with-mpnet``); for
each L below the base's depth a copy keeps its query encoder's first L layers (``train.query_depth.shallow_copy``;
weights do not change the cost). One query at a time on one thread, as a retriever encodes one, over
``--questions`` SQuAD dev questions, every variant in turn (round robin, the order rotated every question, after a
warm-up), in float32 and in the searchers' default int8 per row; p50 / p95 ms per variant. Beside them, the query
side of the dense retriever the phrase answers are compared with (``MiniLMEmbeddingRetriever.embed_queries``:
all-MiniLM-L6-v2 through sentence-transformers): its encoding alone. Writes results/query_layers.json and .png.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from benchmarks.common import (
    SQUAD_DEV,
    base_installed,
    default_config,
    finish_result,
    machine,
    percentiles,
    pyplot,
    save_figure,
)

PRECISIONS = ("float32", "int8")
DENSE = "dense retriever's query (MiniLMEmbeddingRetriever, all-MiniLM-L6-v2)"


def query_sides(base: str, layers: list[int]) -> dict[int, Any]:
    """``base``'s untrained phrase model (the default's config, shared layout) and its copies keeping the first L
    query layers, by L (the base's own depth included)."""
    from dphr_haystack import PhraseModel
    from train.query_depth import shallow_copy

    config = default_config(192, 64)
    config.query_layout = "shared"
    model = PhraseModel.from_base(base, config)
    depth = model.phrase_encoder.config.num_hidden_layers
    return {depth: model, **{n: shallow_copy(model, n) for n in sorted(set(layers)) if n < depth}}


def dense_encoder():
    """The dense retriever's query encoding: a callable of one question (``MiniLMEmbeddingRetriever.embed_queries``,
    the retriever phrase answers are compared with)."""
    from dphr_haystack.nodes import MiniLMEmbeddingRetriever

    retriever = MiniLMEmbeddingRetriever(document_store=None, progress_bar=False)
    return lambda question: retriever.embed_queries([question])


def measure(bases: list[str], layers: list[int], n_questions: int) -> dict[str, Any]:
    import torch

    from train.data import load_squad

    started = time.perf_counter()
    questions = [ex.question for ex in load_squad(SQUAD_DEV, max_questions=n_questions).examples]
    runs: dict[str, Any] = {}
    shapes: dict[str, dict[str, Any]] = {}
    for base in bases:
        for n, model in query_sides(base, layers).items():
            for precision in PRECISIONS:
                name = f"{base}, {n} query layers, {precision}"
                runs[name] = lambda q, m=model, p=precision: m.encode_queries([q], precision=p)
                shapes[name] = {"base": base, "layers": n, "precision": precision, "hidden": model.hidden_size}
    runs[DENSE] = dense_encoder()
    shapes[DENSE] = {"base": "minilm", "layers": 6, "precision": "float32", "hidden": 384}
    torch.set_num_threads(1)
    names = list(runs)
    for name in names:  # warm-up: int8 copies made, kernels loaded
        for q in questions[:5]:
            runs[name](q)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i, q in enumerate(questions):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            t = time.perf_counter()
            runs[name](q)
            times[name].append((time.perf_counter() - t) * 1000)
    dense_p50 = percentiles(times[DENSE])["p50_ms"]
    rows = []
    for name in names:
        stats = percentiles(times[name])
        rows.append({"variant": name, **shapes[name], **stats, "p50_vs_dense": stats["p50_ms"] / dense_p50})
    return {
        "machine": machine(),
        "questions": len(questions),
        "bases": bases,
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"One query encoded at a time on one thread ({result['questions']} SQuAD dev questions, every variant in "
        f"turn), untrained phrase models whose query encoder keeps its first L layers, {result['machine']['cpu']}:",
        "",
        "| query side | hidden | p50 ms | p95 ms | p50 vs the dense retriever's query |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['variant']} | {r['hidden']} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} | {r['p50_vs_dense']:.2f}× |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for base in result["bases"]:
        for precision, style in zip(PRECISIONS, ("o-", "s--"), strict=True):
            rows = [
                r
                for r in result["rows"]
                if r["base"] == base and r["precision"] == precision and "dense" not in r["variant"]
            ]
            rows.sort(key=lambda r: r["layers"])
            ax.plot([r["layers"] for r in rows], [r["p50_ms"] for r in rows], style, label=f"{base}, {precision}")
    dense = next(r for r in result["rows"] if r["variant"] == DENSE)
    ax.axhline(dense["p50_ms"], color="grey", linestyle=":", label="dense retriever's query encoding")
    ax.set_xlabel("query encoder layers")
    ax.set_ylabel("one query, p50 ms (1 thread)")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 2, 3, 4, 6])
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--bases", nargs="+", default=["minilm", "mpnet"])
    parser.add_argument("--name", default="query_layers")
    args = parser.parse_args()
    if min(args.layers) < 1 or args.questions < 1:
        parser.error("--layers and --questions must be positive")
    bases = [b for b in args.bases if base_installed(b)]
    for missing in sorted(set(args.bases) - set(bases)):
        print(f"skipping {missing}: not installed (bash scripts/setup.sh --with-{missing})")
    if not bases:
        parser.error("no base installed")
    finish_result(args.name, measure(bases, args.layers, args.questions), markdown, plot)


if __name__ == "__main__":
    main()
