"""Passage and document units: how many candidates the first search takes, measured.

    .venv/bin/python -m benchmarks.index.unit_search [--model dphr-minilm-squad] [--questions 100]

A passage (document) ranking needs ``top_k`` distinct passages (documents), and several of the best phrases
often share one. The searcher takes ``top_k x f`` start and end tokens in its first search and doubles the
number while fewer than ``top_k`` results come out, each time searching the index anew (an exact index scans
every vector each time). This benchmark runs single queries with ``f`` = 1, 2, 4, 8, 16, 32 on one index (the
SQuAD-open-small phrase index of ``benchmarks/cache`` when it was built for the model, else ``--paragraphs``
SQuAD dev-public paragraphs): p50 search time (query vectors encoded beforehand), index searches per query,
passage acc@1 / acc@20 (the passage contains an answer) and the overlap of the top-20 with ``f`` = 32's.
One run, same machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    DEFAULT_MODEL,
    SQUAD_OPEN_SMALL_CACHE,
    finish_result,
    hit_scores,
    machine,
    model_id,
    phrase_cache,
    pyplot,
    save_figure,
    squad_open_small_questions,
    squad_passages,
)

FACTORS = (1, 2, 4, 8, 16, 32)
UNITS = ("passage", "document")


def open_index(model, paragraphs: int, questions: int):
    """The cached SQuAD-open-small phrase index of ``model`` when complete (open dev-public questions), else a
    fresh index of ``paragraphs`` dev-public paragraphs (the first question of each)."""
    from dphr_haystack import PhraseIndex
    from dphr_haystack.encode.add import add_passages
    from dphr_haystack.evaluation import QAExample
    from dphr_haystack.index.phrase_index import MANIFEST

    cached = phrase_cache(model, SQUAD_OPEN_SMALL_CACHE)
    if (cached / MANIFEST).is_file():
        index = PhraseIndex.load(cached, model=model)
        if index.num_passages >= 20000:
            return index, f"SQuAD-open-small ({cached.name})", squad_open_small_questions(questions)
    passages, all_questions = squad_passages(limit=paragraphs)
    index = PhraseIndex.create(model, filter_threshold=model.config.filter_threshold)
    add_passages(index, model, passages, progress=True)
    first = {}
    for q in all_questions:
        first.setdefault(q["passage_id"], q)
    examples = [
        QAExample(q["passage_id"], q["question"], tuple(q["answers"])) for q in list(first.values())[:questions]
    ]
    return index, f"{len(passages)} SQuAD dev-public paragraphs", examples


def _key(hit, unit: str) -> str:
    return hit.passage_id if unit == "passage" else hit.document_id


def measure(model_name: str, questions: int, paragraphs: int, top_k: int) -> dict[str, Any]:
    import numpy as np

    import dphr_haystack.search as search
    from dphr_haystack import PhraseModel, PhraseSearcher

    started = time.perf_counter()
    model = PhraseModel.load(model_name)
    index, corpus, examples = open_index(model, paragraphs, questions)
    q_start, q_end = model.encode_queries([e.question for e in examples])
    searcher = PhraseSearcher(index, model)
    searches = 0
    search_tokens = index.search_tokens

    def counted(*args, **kwargs):
        nonlocal searches
        searches += 1
        return search_tokens(*args, **kwargs)

    index.search_tokens = counted
    default = dict(search.FIRST_CANDIDATES_PER_RESULT)
    rows, rankings = [], {}
    try:
        for unit in UNITS:
            for factor in FACTORS:
                search.FIRST_CANDIDATES_PER_RESULT[unit] = factor
                searcher.search_vectors(q_start[:1], q_end[:1], unit, top_k)  # warm-up
                searches, times, hits = 0, [], []
                for i in range(len(examples)):
                    t0 = time.perf_counter()
                    found = searcher.search_vectors(q_start[i : i + 1], q_end[i : i + 1], unit, top_k)[0]
                    times.append((time.perf_counter() - t0) * 1000)
                    hits.append(found)
                rankings[(unit, factor)] = [
                    [h.passage_id if unit == "passage" else h.document_id for h in q] for q in hits
                ]
                row = {
                    "unit": unit,
                    "factor": factor,
                    "p50_ms": statistics.median(times),
                    "mean_ms": statistics.fmean(times),
                    "searches_per_query": searches / len(examples),
                    "full_results": float(np.mean([len(h) == top_k for h in hits])),
                }
                if unit == "passage":
                    row.update(hit_scores(examples, None, hits, top_k))
                rows.append(row)
    finally:
        search.FIRST_CANDIDATES_PER_RESULT.update(default)
        index.search_tokens = search_tokens
    for row in rows:
        deepest = rankings[(row["unit"], FACTORS[-1])]
        mine = rankings[(row["unit"], row["factor"])]
        row["overlap_with_deepest"] = float(
            np.mean([len(set(a) & set(b)) / max(1, len(b)) for a, b in zip(mine, deepest, strict=True)])
        )
    return {
        "machine": machine(),
        "model": model_name,
        "model_id": model_id(model_name),
        "corpus": corpus,
        "vectors": len(index),
        "questions": len(examples),
        "top_k": top_k,
        "default": default,
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    k = result["top_k"]
    lines = [
        f"First-search depth of passage and document units, `{result['model']}` on {result['corpus']} "
        f"({result['vectors']:,} vectors), {result['questions']} single questions, top {k}, "
        f"{result['machine']['cpu']}. Default: {result['default']}.",
        "",
        f"| unit | candidates per result | p50 ms | index searches / query | acc@1 | acc@{k} "
        f"| top-{k} overlap with 32 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        acc1 = f"{100 * r['acc@1']:.1f}" if "acc@1" in r else "–"
        acck = f"{100 * r[f'acc@{k}']:.1f}" if f"acc@{k}" in r else "–"
        lines.append(
            f"| {r['unit']} | {r['factor']} | {r['p50_ms']:.1f} | {r['searches_per_query']:.2f} | {acc1} | {acck} | "
            f"{100 * r['overlap_with_deepest']:.1f} |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for unit in UNITS:
        rows = [r for r in result["rows"] if r["unit"] == unit]
        axes[0].plot([r["factor"] for r in rows], [r["p50_ms"] for r in rows], marker="o", label=unit)
        axes[1].plot([r["factor"] for r in rows], [r["searches_per_query"] for r in rows], marker="o", label=unit)
    for ax, label in zip(axes, ("p50 ms", "index searches / query"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("first-search candidates per result")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--paragraphs", type=int, default=300, help="dev paragraphs when no cached index fits")
    parser.add_argument("--top-k", type=int, default=20)
    args = parser.parse_args()
    finish_result("unit_search", measure(args.model, args.questions, args.paragraphs, args.top_k), markdown, plot)


if __name__ == "__main__":
    main()
