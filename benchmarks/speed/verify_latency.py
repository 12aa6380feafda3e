"""What ``verify=True`` costs a query, side by side with the same query without it, through Haystack 1.x.

    .venv/bin/python -m benchmarks.speed.verify_latency [--questions 300] [--threads 1]

SQuAD-open-small (20,598 passages, the default model's cached phrase index) behind ``phrase_qa.yml``; each of
``--questions`` unseen questions (``squad_open_small``'s) is asked without and then with ``verify`` (the order
alternating between questions, one warm-up query each way first), on ``--threads`` torch threads. Reports p50 / p95
ms of each and their ratio, and how often the top answer stayed the same (always, by construction). Writes
results/verify_latency.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import (
    DEFAULT_MODEL,
    machine,
    model_id,
    percentiles,
    squad_open_small_questions,
    squad_open_small_store,
    write_result,
)


def timed(pipeline, question: str, verify: bool) -> tuple[float, Any]:
    """Milliseconds of one pipeline run and its top answer."""
    params = {"Retriever": {"top_k": 1, "verify": verify}}
    began = time.perf_counter()
    answers = pipeline.run(query=question, params=params).get("answers") or []
    return 1000 * (time.perf_counter() - began), answers[0] if answers else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1, the searcher's default)")
    args = parser.parse_args(argv)
    import torch

    from dphr_haystack.nodes import load_pipeline

    torch.set_num_threads(args.threads)
    os.environ["DPHR_THREADS"] = str(args.threads)
    started = time.perf_counter()
    store, phrase_index = squad_open_small_store(args.model)
    pipeline = load_pipeline(
        "phrase_qa.yml", overrides={"Retriever": {"model": args.model}}, components={"DocumentStore": store}
    )
    questions = [ex.question for ex in squad_open_small_questions(args.questions)]
    for verify in (False, True):  # warm-up: the reader loads at its first query
        timed(pipeline, questions[0], verify)
    ms: dict[bool, list[float]] = {False: [], True: []}
    same = 0
    for i, question in enumerate(questions):
        order = (False, True) if i % 2 == 0 else (True, False)
        top = {}
        for verify in order:
            elapsed, top[verify] = timed(pipeline, question, verify)
            ms[verify].append(elapsed)
        same += top[False] is not None and top[True] is not None and top[False].answer == top[True].answer
    plain, verified = percentiles(ms[False]), percentiles(ms[True])
    payload = {
        "benchmark": "verify=True beside the same query without it, phrase_qa.yml, SQuAD-open-small",
        "model": args.model,
        "model_id": model_id(args.model),
        "phrase_index": phrase_index,
        "questions": len(questions),
        "threads": args.threads,
        "plain": plain,
        "verified": verified,
        "ratio_p50": verified["p50_ms"] / plain["p50_ms"],
        "ratio_p95": verified["p95_ms"] / plain["p95_ms"],
        "same_top_answer": same / len(questions),
        "machine": machine(),
        "seconds": time.perf_counter() - started,
    }
    print(
        f"p50 {plain['p50_ms']:.1f} -> {verified['p50_ms']:.1f} ms ({payload['ratio_p50']:.2f}x), "
        f"p95 {plain['p95_ms']:.1f} -> {verified['p95_ms']:.1f} ms ({payload['ratio_p95']:.2f}x); "
        f"same top answer {100 * payload['same_top_answer']:.1f}%"
    )
    print(f"wrote {write_result('verify_latency', payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
