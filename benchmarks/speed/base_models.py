"""Which base: the CPU cost of untrained phrase models on all-MiniLM-L6-v2 (``minilm``) and all-mpnet-base-v2
(``mpnet``).

    nice -n 10 .venv/bin/python -m benchmarks.speed.base_models [--passages 200] [--questions 100] [--rounds 2]

Both bases need to be installed (``mpnet``: ``bash scripts/setup.sh --with-mpnet``). Each model is built with
``PhraseModel.from_base(base, config)``, where ``config`` is the shipped default model's (windows of 192 subwords,
stride 64; also measured: 384 / 128). Side by side in one run, on the shipped SQuAD dev paragraphs:

1. phrase encoding (tokenise, window, encode, filter logits) of ``--passages`` paragraphs with all cores, in
   ``--rounds`` rounds alternating the bases; wall and CPU seconds (all threads; steadier than wall time on a
   shared machine) per 1,000 passages (best round), and vectors per passage before filtering;
2. one-query encoding, one thread: p50 / p95 (wall) and CPU p50 of ``encode_queries([q])`` over ``--questions``
   SQuAD dev questions;
3. parameters, and the memory (VmRSS) of a fresh process holding each model, measured in a child process.

Ratios are mpnet / minilm. The load average is recorded at the start and the end.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import default_config, finish_result, machine, percentiles, proc_memory, pyplot, save_figure

BASES = ("minilm", "mpnet")
WINDOWS = ((192, 64), (384, 128))  # (max_passage_length, passage_stride); the first is the shipped model's


def parameters(model) -> dict[str, int]:
    groups = {role: sum(p.numel() for p in params) for role, params in model.parameter_groups().items()}
    return {"total": sum(groups.values()), **groups}


def encode_round(model, passages: list, threads: int) -> tuple[float, float, int, int]:
    """Wall and CPU seconds (all threads) to encode ``passages``, their vectors (before filtering) and windows."""
    import torch

    from dphr_haystack.model.inputs import count_windows

    torch.set_num_threads(threads)
    texts, titles = [p.text for p in passages], [p.title for p in passages]
    model.encode_passages(texts[:8], titles[:8])  # warm-up
    started, cpu = time.perf_counter(), time.process_time()
    encoded = model.encode_passages(texts, titles)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    windows = sum(count_windows(tp, model.config) for tp in model.tokenize_passages(texts, titles))
    return seconds, cpu, sum(len(e.vectors) for e in encoded), windows


def query_timing(model, questions: list[str]) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    for q in questions[:5]:
        model.encode_queries([q])
    times, cpu = [], []
    for q in questions:
        started, cpu_started = time.perf_counter(), time.process_time()
        model.encode_queries([q])
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - cpu_started) * 1000)
    return {**percentiles(times), "cpu_p50_ms": percentiles(cpu)["p50_ms"]}


def rss_probe(base: str) -> dict[str, Any]:
    """In this (fresh) process: memory after the imports, then after ``from_base(base)`` at the default windows."""
    import torch  # noqa: F401  (imported before the baseline, as any user of the model has)
    import transformers  # noqa: F401

    from dphr_haystack import PhraseModel

    before = proc_memory()
    started = time.perf_counter()
    model = PhraseModel.from_base(base, config=default_config(*WINDOWS[0]))
    seconds = time.perf_counter() - started
    after = proc_memory()
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    return {
        "from_base_s": seconds,
        "rss_before_mb": before["VmRSS"],
        "rss_after_mb": after["VmRSS"],
        "rss_model_mb": after["VmRSS"] - before["VmRSS"],
        "peak_rss_mb": after["VmHWM"],
        "weights_mb": weights / 2**20,
    }


def probe_in_child(base: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.speed.base_models", "--rss-probe", base]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def measure(n_passages: int, n_questions: int, rounds: int) -> dict[str, Any]:
    import torch

    from dphr_haystack import PhraseModel
    from dphr_haystack.corpus import read_corpus
    from dphr_haystack.evaluation import read_questions
    from dphr_haystack.model.bases import mpnet_path

    mpnet_path()  # assembled (or checked) before anything is measured; a clear error when the parts are missing
    started = time.perf_counter()
    load_start = os.getloadavg()
    threads = os.cpu_count() or 1
    corpus = read_corpus("squad-dev")
    passages = [next(corpus) for _ in range(n_passages)]
    questions = [q.question for q in read_questions("squad-dev", limit=n_questions, seed=0)]
    memory = {base: probe_in_child(base) for base in BASES}
    models = {base: PhraseModel.from_base(base, config=default_config(*WINDOWS[0])) for base in BASES}
    rows = []
    for max_length, stride in WINDOWS:
        config = default_config(max_length, stride)
        for model in models.values():
            model.config = copy.deepcopy(config)
        times: dict[str, list[float]] = {base: [] for base in BASES}
        cpu: dict[str, list[float]] = {base: [] for base in BASES}
        counts: dict[str, tuple[int, int]] = {}
        for _ in range(rounds):
            for base, model in models.items():
                seconds, cpu_seconds, vectors, windows = encode_round(model, passages, threads)
                times[base].append(seconds)
                cpu[base].append(cpu_seconds)
                counts[base] = (vectors, windows)
        for base in BASES:
            rows.append(
                {
                    "base": base,
                    "max_passage_length": max_length,
                    "passage_stride": stride,
                    "encode_s_per_1000_passages": 1000 * min(times[base]) / len(passages),
                    "encode_cpu_s_per_1000_passages": 1000 * min(cpu[base]) / len(passages),
                    "encode_rounds_s": times[base],
                    "encode_rounds_cpu_s": cpu[base],
                    "vectors_per_passage": counts[base][0] / len(passages),
                    "windows_per_passage": counts[base][1] / len(passages),
                }
            )
    for model in models.values():
        model.config = default_config(*WINDOWS[0])
    queries = {base: query_timing(model, questions) for base, model in models.items()}
    per_base = {
        base: {
            "parameters": parameters(model),
            "encoder": type(model.phrase_encoder).__name__,
            "attention": model.phrase_encoder.config._attn_implementation,
            "hidden_size": model.hidden_size,
            "query_one_thread": queries[base],
            "memory": memory[base],
        }
        for base, model in models.items()
    }
    ratios = {
        f"encode_{r['max_passage_length']}": r["encode_s_per_1000_passages"]
        / rows[i - 1]["encode_s_per_1000_passages"]
        for i, r in enumerate(rows)
        if r["base"] == "mpnet"
    }
    ratios.update(
        {
            f"encode_cpu_{r['max_passage_length']}": r["encode_cpu_s_per_1000_passages"]
            / rows[i - 1]["encode_cpu_s_per_1000_passages"]
            for i, r in enumerate(rows)
            if r["base"] == "mpnet"
        }
    )
    ratios["query_p50"] = queries["mpnet"]["p50_ms"] / queries["minilm"]["p50_ms"]
    ratios["query_cpu_p50"] = queries["mpnet"]["cpu_p50_ms"] / queries["minilm"]["cpu_p50_ms"]
    ratios["parameters"] = per_base["mpnet"]["parameters"]["total"] / per_base["minilm"]["parameters"]["total"]
    ratios["rss_model"] = memory["mpnet"]["rss_model_mb"] / memory["minilm"]["rss_model_mb"]
    return {
        "machine": machine(),
        "threads_encoding": threads,
        "threads_query": 1,
        "passages": len(passages),
        "questions": len(questions),
        "rounds": rounds,
        "nice": os.nice(0),
        "load_average_start": load_start,
        "rows": rows,
        "bases": per_base,
        "ratios_mpnet_over_minilm": ratios,
        "seconds": time.perf_counter() - started,
        "torch": torch.__version__,
    }


def markdown(result: dict[str, Any]) -> str:
    bases, ratios = result["bases"], result["ratios_mpnet_over_minilm"]
    lines = [
        f"Untrained phrase models on each base, shipped default config, {result['passages']} SQuAD dev paragraphs "
        f"({result['threads_encoding']} threads, best of {result['rounds']} rounds), {result['questions']} "
        f"questions (1 thread); {result['machine']['cpu']}, nice {result['nice']}, load average "
        f"{result['load_average_start'][0]:.1f} → {result['load_average_end'][0]:.1f}:",
        "",
        "| base | windows | wall s / 1,000 passages | CPU s / 1,000 | vectors / passage | windows / passage |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['base']} | {r['max_passage_length']} / {r['passage_stride']} | "
            f"{r['encode_s_per_1000_passages']:.1f} | {r['encode_cpu_s_per_1000_passages']:.1f} | "
            f"{r['vectors_per_passage']:.1f} | "
            f"{r['windows_per_passage']:.2f} |"
        )
    lines += [
        "",
        "| base | parameters: phrase + query + filter | one query p50 / p95 ms (CPU p50) | weights MiB | RSS of "
        "the loaded model MiB | from_base s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for base, b in bases.items():
        q, m, p = b["query_one_thread"], b["memory"], b["parameters"]
        lines.append(
            f"| {base} ({b['encoder']}, {b['attention']}) | {p['phrase'] / 1e6:.1f} + {p['query'] / 1e6:.1f} + "
            f"{p['filter'] / 1e6:.2f} = {p['total'] / 1e6:.1f} M | {q['p50_ms']:.1f} / {q['p95_ms']:.1f} "
            f"({q['cpu_p50_ms']:.1f}) | "
            f"{m['weights_mb']:.0f} | {m['rss_model_mb']:.0f} | {m['from_base_s']:.1f} |"
        )
    lines.append("")
    lines.append("mpnet / minilm: " + ", ".join(f"{k} ×{v:.1f}" for k, v in ratios.items()))
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 2.8))
    colors = {"minilm": "#4c72b0", "mpnet": "#dd8452"}
    for offset, base in enumerate(BASES):
        rows = [r for r in result["rows"] if r["base"] == base]
        xs = [i + 0.38 * offset for i in range(len(rows))]
        left.bar(xs, [r["encode_s_per_1000_passages"] for r in rows], width=0.36, color=colors[base], label=base)
    left.set_xticks([i + 0.19 for i in range(len(WINDOWS))], [f"{a} / {b}" for a, b in WINDOWS])
    left.set_xlabel("window / stride")
    left.set_ylabel("s per 1,000 passages")
    left.legend()
    right.bar(BASES, [result["bases"][b]["query_one_thread"]["p50_ms"] for b in BASES], color=list(colors.values()))
    right.set_ylabel("one query p50 ms (1 thread)")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=200)
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rss-probe", choices=BASES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_probe:
        print(json.dumps(rss_probe(args.rss_probe)))
        return
    finish_result("base_models", measure(args.passages, args.questions, args.rounds), markdown, plot)


if __name__ == "__main__":
    main()
