"""Cheaper query encoding, measured: the query side in float32, in PyTorch's dynamic int8 and in the int8 the
searchers use by default (``dphr_haystack.model.int8``), against one phrase index.

    .venv/bin/python -m benchmarks.speed.query_encoding [--model dphr-minilm-squad] [--timing-questions 200] \
        [--query-models "3 layers=runs/query-depth-3" ...] [--name query_encoding]

Speed: one query at a time on one thread (what a retriever does), ``--timing-questions`` SQuAD-open-small
questions asked of the three variants in turn (round robin, twice, after a warm-up), p50 of each; and queries/s in
batches of 32. Quality: the whole SQuAD-open-small phrase index (cached under ``runs/bench-cache``; built by
``python -m benchmarks.quality.squad_open_small`` when absent) answers the validation questions (the held-out dev
articles) and 2,000 SQuAD-open-small questions with each variant: EM@1 / F1@1 of the top phrase, passage acc@1, the
share of questions whose top answer is float32's, and the cosine of the query vectors to float32's.
``--query-models NAME=PATH`` adds other query sides of the same phrase side (e.g. one of fewer layers distilled by
``python -m train.query_depth``: the same phrase fingerprint, so the same index), each in the default int8.

PyTorch's dynamic quantization (``torch.ao.quantization.quantize_dynamic``, deprecated) scales a layer's input
with one number per tensor; the searchers' int8 scales each token's row by itself, as a query's few rows differ a
lot in size.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import warnings
from typing import Any

import numpy as np

from benchmarks.common import (
    DEFAULT_MODEL,
    cached_open_small_phrases,
    finish_result,
    held_out_questions,
    hit_scores,
    machine,
    model_id,
    parse_readers,
    pyplot,
    save_figure,
    squad_open_small_questions,
)

QUERY_MODULES = ("query_encoder", "query_start_encoder", "query_end_encoder", "query_start_head", "query_end_head")
FLOAT32, TORCH_INT8, INT8 = "float32", "int8, PyTorch dynamic (per tensor)", "int8, per row (default)"


def torch_int8_query_side(model):
    """A copy of ``model`` whose query-side Linear layers PyTorch's dynamic quantization turned into int8."""
    import torch

    quantized = copy.deepcopy(model)
    with warnings.catch_warnings():  # its deprecation notices
        warnings.simplefilter("ignore")
        for name in QUERY_MODULES:
            module = getattr(quantized, name, None)
            if module is not None:
                quantized_module = torch.ao.quantization.quantize_dynamic(module, {torch.nn.Linear}, torch.qint8)
                setattr(quantized, name, quantized_module)
    return quantized


def _variants(model, others: dict[str, Any] | None = None) -> dict[str, tuple[Any, str]]:
    """Each variant's model and the precision its searcher asks for; ``others`` (name: model) in int8 per row."""
    variants = {
        FLOAT32: (model, "float32"),
        TORCH_INT8: (torch_int8_query_side(model), "float32"),
        INT8: (model, "int8"),
    }
    for name, other in (others or {}).items():
        if other.phrase_fingerprint() != model.phrase_fingerprint():
            raise SystemExit(
                f"--query-models {name}: another phrase side than {model.config.base_model or 'the model'}'s"
            )
        variants[f"{name}, {INT8}"] = (other, "int8")
    return variants


def _timing(variants: dict[str, tuple[Any, str]], questions: list[str]) -> dict[str, dict[str, float]]:
    import torch

    torch.set_num_threads(1)
    single: dict[str, list[float]] = {name: [] for name in variants}
    for model, precision in variants.values():
        for q in questions[:10]:
            model.encode_queries([q], precision=precision)
    for _ in range(2):
        for q in questions:
            for name, (model, precision) in variants.items():
                started = time.perf_counter()
                model.encode_queries([q], precision=precision)
                single[name].append((time.perf_counter() - started) * 1000)
    out = {}
    for name, (model, precision) in variants.items():
        started = time.perf_counter()
        model.encode_queries(questions, batch_size=32, precision=precision)
        out[name] = {
            "p50_ms_one_query": statistics.median(single[name]),
            "queries_per_s_batch32": len(questions) / (time.perf_counter() - started),
        }
    return out


def _quality(index, variants, examples) -> dict[str, dict[str, float]]:
    from dphr_haystack import PhraseSearcher

    questions = [ex.question for ex in examples]
    out, tops, vectors = {}, {}, {}
    for name, (model, precision) in variants.items():
        searcher = PhraseSearcher(index, model, query_precision=precision)
        q_start, q_end = model.encode_queries(questions, batch_size=64, precision=precision)
        answers = searcher.search_vectors(q_start, q_end, "phrase", 10, questions=questions)
        passages = searcher.search_vectors(q_start, q_end, "passage", 10, questions=questions)
        tops[name] = [hits[0].text if hits else None for hits in answers]
        vectors[name] = np.concatenate([q_start, q_end], axis=1)
        out[name] = hit_scores(examples, answers, passages, 10)
    reference = vectors[FLOAT32] / np.linalg.norm(vectors[FLOAT32], axis=1, keepdims=True)
    for name in variants:
        same = [a == b for a, b in zip(tops[FLOAT32], tops[name], strict=True)]
        unit = vectors[name] / np.linalg.norm(vectors[name], axis=1, keepdims=True)
        out[name].update(same_top_as_float32=float(np.mean(same)), mean_cosine=float((unit * reference).sum(1).mean()))
    return out


def measure(model_name: str, timing_questions: int, query_models: dict[str, str] | None = None) -> dict[str, Any]:
    import torch

    from dphr_haystack.index.phrase_index import PhraseIndex
    from dphr_haystack.nodes import load_phrase_model

    started = time.perf_counter()
    model = load_phrase_model(model_name, "cpu")
    others = {name: load_phrase_model(path, "cpu") for name, path in (query_models or {}).items()}
    variants = _variants(model, others)
    threads = torch.get_num_threads()
    timing = _timing(variants, [ex.question for ex in squad_open_small_questions(timing_questions, seed=1)])
    torch.set_num_threads(threads)
    index = PhraseIndex.load(cached_open_small_phrases(model))
    sets = {"validation": held_out_questions(10_000), "SQuAD-open-small": squad_open_small_questions(2000)}
    quality = {name: _quality(index, variants, examples) for name, examples in sets.items()}
    return {
        "machine": machine(),
        "model": model_name,
        "model_id": model_id(model_name),
        "query_models": query_models or {},
        "vectors": len(index),
        "passages": index.num_passages,
        "timing_questions": timing_questions,
        "questions": {name: len(examples) for name, examples in sets.items()},
        "rows": [
            {"variant": name, **timing[name], "quality": {s: quality[s][name] for s in sets}} for name in variants
        ],
        "seconds": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    sets = list(result["questions"])
    lines = [
        f"Query side of `{result['model']}`: one query p50 on one thread ({result['timing_questions']} questions, "
        f"round robin), batches of 32; quality on the SQuAD-open-small index ({result['passages']:,} passages, "
        f"{result['vectors']:,} vectors), {result['machine']['cpu']}:",
        "",
        "| query side | one query p50 ms | queries/s (32) | "
        + " | ".join(f"{s} ({result['questions'][s]:,}) EM@1 / F1@1 / acc@1 | same top | cosine" for s in sets)
        + " |",
        "|---|---:|---:|" + "---:|---:|---:|" * len(sets),
    ]
    for r in result["rows"]:
        cells = []
        for s in sets:
            q = r["quality"][s]
            cells += [
                f"{100 * q['em@1']:.2f} / {100 * q['f1@1']:.2f} / {100 * q['acc@1']:.2f}",
                f"{100 * q['same_top_as_float32']:.1f}%",
                f"{q['mean_cosine']:.5f}",
            ]
        lines.append(
            f"| {r['variant']} | {r['p50_ms_one_query']:.2f} | {r['queries_per_s_batch32']:.0f} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()
    fig, (speed, em) = plt.subplots(1, 2, figsize=(9, 2.6))
    names = [r["variant"] for r in result["rows"]]
    speed.barh(names, [r["p50_ms_one_query"] for r in result["rows"]], color="#4c72b0")
    speed.set_xlabel("one query, p50 ms (1 thread)")
    sets = list(result["questions"])
    width = 0.8 / len(sets)
    for i, s in enumerate(sets):
        em.barh(
            [j + i * width for j in range(len(names))],
            [100 * r["quality"][s]["em@1"] for r in result["rows"]],
            height=width,
            label=s,
        )
    em.set_yticks([j + width / 2 for j in range(len(names))], [""] * len(names))
    em.set_xlabel("EM@1")
    em.legend(fontsize=7, loc="lower right")
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--timing-questions", type=int, default=200)
    parser.add_argument("--query-models", nargs="+", default=[], metavar="NAME=PATH", help="other query sides")
    parser.add_argument("--name", default="query_encoding")
    args = parser.parse_args()
    try:
        query_models = parse_readers(args.query_models, "--query-models")
    except ValueError as exc:
        parser.error(str(exc))
    finish_result(args.name, measure(args.model, args.timing_questions, query_models), markdown, plot)


if __name__ == "__main__":
    main()
