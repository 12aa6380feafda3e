"""Cheaper query encoding, measured: the query encoder in float32 against dynamic int8 (torch), same index.

    .venv/bin/python -m benchmarks.speed.query_encoding [--model dphr-minilm-squad] [--paragraphs 300]

Indexes ``--paragraphs`` SQuAD dev-public paragraphs with the model's phrase encoder, then answers their
questions (first question of each paragraph) with the query side as it is and with its Linear layers quantized to
int8 by ``torch.ao.quantization.quantize_dynamic`` (the phrase index is shared: only the query side differs).
Reports the median encoding time of one query and the queries/s of batches of 32, EM@1 / F1@1 of the top phrase,
and how often the two variants return the same top phrase. One run, same machine.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from typing import Any

from benchmarks.common import finish_result, machine, model_id, pyplot, save_figure, squad_passages

QUERY_MODULES = ("query_encoder", "query_start_encoder", "query_end_encoder", "query_start_head", "query_end_head")


def int8_query_side(model):
    """A copy of ``model`` whose query-side Linear layers are dynamically quantized to int8."""
    import torch

    quantized = copy.deepcopy(model)
    for name in QUERY_MODULES:
        module = getattr(quantized, name, None)
        if module is not None:
            setattr(quantized, name, torch.ao.quantization.quantize_dynamic(module, {torch.nn.Linear}, torch.qint8))
    return quantized


def _timing(model, questions: list[str]) -> dict[str, float]:
    for q in questions[:5]:
        model.encode_queries([q])
    single = []
    for q in questions[:100]:
        started = time.perf_counter()
        model.encode_queries([q])
        single.append((time.perf_counter() - started) * 1000)
    started = time.perf_counter()
    model.encode_queries(questions, batch_size=32)
    return {
        "p50_ms_one_query": statistics.median(single),
        "queries_per_s_batch32": len(questions) / (time.perf_counter() - started),
    }


def measure(model_name: str, paragraphs: int) -> dict[str, Any]:
    import torch

    from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher
    from dphr_haystack.answers import exact_match, f1_score
    from dphr_haystack.encode.add import add_passages

    started = time.perf_counter()
    passages, all_questions = squad_passages(limit=paragraphs)
    seen, questions = set(), []
    for q in all_questions:
        if q["passage_id"] not in seen:
            seen.add(q["passage_id"])
            questions.append(q)
    model = PhraseModel.load(model_name)
    index = PhraseIndex.create(model, filter_threshold=model.config.filter_threshold)
    add_passages(index, model, passages, progress=False)
    texts = [q["question"] for q in questions]
    variants = {"float32": model, "int8 dynamic": int8_query_side(model)}
    rows, tops = [], {}
    for name, variant in variants.items():
        searcher = PhraseSearcher(index, variant)
        hits = [h[0] if h else None for h in searcher.search_batch(texts, "phrase", 1)]
        tops[name] = [h.text if h else "" for h in hits]
        em = sum(exact_match(t, q["answers"]) for t, q in zip(tops[name], questions)) / len(questions)
        f1 = sum(f1_score(t, q["answers"]) for t, q in zip(tops[name], questions)) / len(questions)
        rows.append({"variant": name, "em@1": em, "f1@1": f1, **_timing(variant, texts)})
    same = sum(a == b for a, b in zip(tops["float32"], tops["int8 dynamic"])) / len(questions)
    return {
        "machine": machine(),
        "model": model_name,
        "model_id": model_id(model_name),
        "torch_threads": torch.get_num_threads(),
        "paragraphs": len(passages),
        "questions": len(questions),
        "vectors": len(index),
        "rows": rows,
        "same_top_phrase": same,
        "seconds": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Query side float32 vs dynamic int8, `{result['model']}`, {result['paragraphs']} SQuAD dev paragraphs "
        f"({result['vectors']:,} phrase vectors), {result['questions']} questions, {result['machine']['cpu']} "
        f"({result['torch_threads']} threads):",
        "",
        "| query side | EM@1 | F1@1 | one query p50 ms | queries/s (batches of 32) |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['variant']} | {100 * r['em@1']:.1f} | {100 * r['f1@1']:.1f} | {r['p50_ms_one_query']:.1f} | "
            f"{r['queries_per_s_batch32']:.0f} |"
        )
    lines.append(f"\nsame top phrase: {100 * result['same_top_phrase']:.1f}% of questions")
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 2.4))
    ax.barh([r["variant"] for r in result["rows"]], [r["p50_ms_one_query"] for r in result["rows"]], color="#4c72b0")
    ax.set_xlabel("one query, p50 ms")
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="dphr-minilm-squad")
    parser.add_argument("--paragraphs", type=int, default=300)
    args = parser.parse_args()
    finish_result("query_encoding", measure(args.model, args.paragraphs), markdown, plot)


if __name__ == "__main__":
    main()
