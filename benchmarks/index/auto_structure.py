"""The automatic index structure against exhaustive search, on the default model's SQuAD-open-small phrase index.

    .venv/bin/python -m benchmarks.index.auto_structure [--model dphr-minilm-squad] [--questions 300]

Indexes above the exact-search threshold get an IVF structure with ``nprobe`` tuned at build time and exact
re-ranking from the stored vectors. This benchmark answers the SQuAD-open-small questions (the sampling of
``quality.squad_open_small``) with the index's own search parameters and with every inverted list probed and 16x
re-ranking (exhaustive over the structure's codes, re-scored exactly): phrase EM@1 / F1@1, passage acc@1 / acc@20
of the phrase ranking, p50 search time (query vectors encoded beforehand) and how often the top phrase agrees.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from benchmarks.common import (
    SQUAD_OPEN_SMALL_CACHE,
    finish_result,
    hit_scores,
    machine,
    model_id,
    phrase_cache,
    pyplot,
    save_figure,
    squad_open_small_questions,
)


def _run(searcher, q_start, q_end, examples, unit: str, top_k: int) -> tuple[list, list[float]]:
    hits, times = [], []
    for i in range(len(examples)):
        started = time.perf_counter()
        question = [examples[i].question]  # lets the searcher skip answers that copy the question, as in a pipeline
        hits.append(searcher.search_vectors(q_start[i : i + 1], q_end[i : i + 1], unit, top_k, questions=question)[0])
        times.append((time.perf_counter() - started) * 1000)
    return hits, times


def _use(index, params: dict[str, Any]) -> None:
    """Search with ``params`` in this process only (``set_search_params`` would commit them to the cache)."""
    from dphr_haystack.index import structures

    index.manifest["search_params"] = dict(params)
    structures.apply_search_params(index.faiss_index, params)


def measure(model_name: str, questions: int, top_k: int) -> dict[str, Any]:
    import numpy as np

    from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher

    started = time.perf_counter()
    model = PhraseModel.load(model_name)
    path = phrase_cache(model, SQUAD_OPEN_SMALL_CACHE)
    index = PhraseIndex.load(path, model=model)
    if not index.search_params.get("nprobe"):
        raise SystemExit(f"{path} is searched exactly ({index.faiss_factory}): nothing to compare")
    examples = squad_open_small_questions(questions)
    q_start, q_end = model.encode_queries([e.question for e in examples])
    searcher = PhraseSearcher(index, model)
    index.search_tokens(q_start[:1], 8)  # loads the structure
    tuned = dict(index.search_params)
    nlist = int(index.faiss_factory.split(",")[0].removeprefix("IVF"))
    settings = {"tuned": tuned, "exhaustive": {**tuned, "nprobe": nlist, "refine": 16}}
    rows, tops = [], {}
    for name, params in settings.items():
        _use(index, params)
        answers, answer_ms = _run(searcher, q_start, q_end, examples, "phrase", 1)
        passages, passage_ms = _run(searcher, q_start, q_end, examples, "passage", top_k)
        tops[name] = [a[0].text if a else "" for a in answers]
        rows.append(
            {
                "search": name,
                "params": params,
                **hit_scores(examples, answers, passages, top_k),
                "answer_p50_ms": statistics.median(answer_ms),
                "passage_p50_ms": statistics.median(passage_ms),
            }
        )
    _use(index, tuned)
    same = float(np.mean([a == b for a, b in zip(tops["tuned"], tops["exhaustive"], strict=True)]))
    return {
        "machine": machine(),
        "model": model_name,
        "model_id": model_id(model_name),
        "index": path.name,
        "structure": index.faiss_factory,
        "vectors": len(index),
        "questions": len(examples),
        "top_k": top_k,
        "rows": rows,
        "same_top_phrase": same,
        "seconds": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    k = result["top_k"]
    lines = [
        f"`{result['model']}` on SQuAD-open-small ({result['index']}: {result['vectors']:,} vectors, "
        f"`{result['structure']}`), {result['questions']} questions, {result['machine']['cpu']}:",
        "",
        f"| search | parameters | EM@1 | F1@1 | passage acc@1 | passage acc@{k} | answer p50 ms | passages p50 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        params = ", ".join(f"{a} {b}" for a, b in r["params"].items())
        lines.append(
            f"| {r['search']} | {params} | {100 * r['em@1']:.1f} | {100 * r['f1@1']:.1f} | {100 * r['acc@1']:.1f} | "
            f"{100 * r[f'acc@{k}']:.1f} | {r['answer_p50_ms']:.1f} | {r['passage_p50_ms']:.1f} |"
        )
    lines.append(f"\nsame top phrase: {100 * result['same_top_phrase']:.1f}% of questions")
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 2.2))
    ax.barh([r["search"] for r in result["rows"]], [r["answer_p50_ms"] for r in result["rows"]], color="#4c72b0")
    ax.set_xlabel("phrase answer, p50 ms")
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="dphr-minilm-squad")
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--top-k", type=int, default=20)
    args = parser.parse_args()
    finish_result("auto_structure", measure(args.model, args.questions, args.top_k), markdown, plot)


if __name__ == "__main__":
    main()
