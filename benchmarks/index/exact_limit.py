"""Where exact search should stop: a phrase index of all SQuAD dev-public paragraphs searched exactly and through
the IVF structure ``auto`` now picks above ``auto.EXACT_LIMIT`` vectors, one run.

    .venv/bin/python -m benchmarks.index.exact_limit [--questions 2000]

Three indexes of the same 1,702 passages (60,962 vectors with the shipped model's filter): ``Flat`` (exact search
over the fp16 codes, what ``auto`` chose below 262,144 vectors before), ``auto`` built on all vectors at once
(``dphr reindex``), and ``auto`` as a Haystack store grows it (passages added 256 at a time: the structure is
built and tuned in the add that crosses the limit, then kept until the index has grown 4×). Each answers
``--questions`` dev-public questions (seed 0), query vectors encoded beforehand: p50 of one phrase search (top 10,
one thread, round robin), EM@1 / F1@1 of the top phrase, passage acc@1 / acc@10, and the share of questions whose
top answer is the exact index's. The exact index is built once under ``runs/bench-cache/squad-dev-exact``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    DEFAULT_MODEL,
    ROOT,
    SQUAD_DEV,
    finish_result,
    hit_scores,
    machine,
    model_id,
    pyplot,
    save_figure,
    squad_passages,
)

CACHE = ROOT / "runs" / "bench-cache" / "squad-dev-exact"
CHUNK = 256  # passages a store adds at a time (the Haystack stores' default write batch)


def _exact_index(model, model_name: str, passages: list[dict]):
    from dphr_haystack.encode.add import add_passages
    from dphr_haystack.index.phrase_index import MANIFEST, PhraseIndex

    if (CACHE / MANIFEST).is_file():
        index = PhraseIndex.load(CACHE, model=model)
    else:
        index = PhraseIndex.create(
            model,
            path=CACHE,
            faiss_factory="Flat",
            model_path=model_name,
            filter_threshold=model.config.filter_threshold,
        )
    add_passages(index, model, passages, batch_size=32, chunk_size=512, duplicates="skip", progress=True)
    return index


def _grown_index(model, passages: list[dict]) -> tuple[Any, float]:
    """An ``auto`` index grown as a store grows it, and the seconds it took (encoding included)."""
    from dphr_haystack.encode.add import add_passages
    from dphr_haystack.index.phrase_index import PhraseIndex

    started = time.perf_counter()
    index = PhraseIndex.create(model, filter_threshold=model.config.filter_threshold)
    for start in range(0, len(passages), CHUNK):
        add_passages(index, model, passages[start : start + CHUNK], batch_size=32, progress=False)
    return index, time.perf_counter() - started


def _ask(indexes: dict, model, examples) -> dict[str, dict[str, Any]]:
    import numpy as np
    import torch

    from dphr_haystack import PhraseSearcher

    questions = [ex.question for ex in examples]
    q_start, q_end = model.encode_queries(questions, batch_size=64, precision="int8")
    searchers = {name: PhraseSearcher(index, model) for name, index in indexes.items()}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    hits: dict[str, list] = {name: [] for name in indexes}
    times: dict[str, list[float]] = {name: [] for name in indexes}
    for i, question in enumerate(questions):
        for name, searcher in searchers.items():
            started = time.perf_counter()
            found = searcher.search_vectors(q_start[i : i + 1], q_end[i : i + 1], "phrase", 10, questions=[question])
            times[name].append((time.perf_counter() - started) * 1000)
            hits[name].append(found[0])
    torch.set_num_threads(threads)
    exact_tops = [h[0].text if h else None for h in hits["Flat"]]
    out = {}
    for name, searcher in searchers.items():
        passages = searcher.search_vectors(q_start, q_end, "passage", 10, questions=questions)
        tops = [h[0].text if h else None for h in hits[name]]
        out[name] = {
            **hit_scores(examples, hits[name], passages, 10),
            "p50_ms_search": statistics.median(times[name]),
            "same_top_as_exact": float(np.mean([a == b for a, b in zip(tops, exact_tops, strict=True)])),
        }
    return out


def measure(model_name: str, questions: int) -> dict[str, Any]:
    from dphr_haystack.evaluation import read_questions
    from dphr_haystack.index import auto
    from dphr_haystack.index.phrase_index import PhraseIndex
    from dphr_haystack.nodes import load_phrase_model

    started = time.perf_counter()
    model = load_phrase_model(model_name, "cpu")
    passages, _ = squad_passages(SQUAD_DEV)
    exact = _exact_index(model, model_name, passages)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "whole"
        shutil.copytree(CACHE, path)
        whole = PhraseIndex.load(path, model=model)
        build_started = time.perf_counter()
        with whole.writing():
            whole.build_auto_structure(progress=False)
        whole_seconds = time.perf_counter() - build_started
        grown, grown_seconds = _grown_index(model, passages)
        indexes = {"Flat": exact, "auto, built at once": whole, "auto, grown by a store": grown}
        examples = read_questions(SQUAD_DEV, limit=questions, seed=0)
        results = _ask(indexes, model, examples)
        rows = [
            {
                "index": name,
                "structure": index.faiss_factory,
                "search_params": index.search_params,
                **results[name],
            }
            for name, index in indexes.items()
        ]
    return {
        "machine": machine(),
        "model": model_name,
        "model_id": model_id(model_name),
        "exact_limit": auto.EXACT_LIMIT,
        "passages": len(passages),
        "vectors": len(exact),
        "questions": len(examples),
        "rows": rows,
        "build_seconds": {
            "auto, built at once": whole_seconds,
            "auto, grown by a store (encoding included)": grown_seconds,
        },
        "seconds": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"{result['passages']:,} SQuAD dev-public passages ({result['vectors']:,} vectors, `{result['model']}`), "
        f"{result['questions']:,} questions, one phrase search p50 on one thread, {result['machine']['cpu']}; "
        f"`auto` searches exactly up to {result['exact_limit']:,} vectors:",
        "",
        "| index | structure | search p50 ms | EM@1 | F1@1 | acc@1 | acc@10 | same top answer as Flat |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        params = ", ".join(f"{k} {v}" for k, v in r["search_params"].items())
        lines.append(
            f"| {r['index']} | `{r['structure']}` {params} | {r['p50_ms_search']:.2f} | {100 * r['em@1']:.1f} | "
            f"{100 * r['f1@1']:.1f} | {100 * r['acc@1']:.1f} | {100 * r['acc@10']:.1f} | "
            f"{100 * r['same_top_as_exact']:.1f}% |"
        )
    builds = "; ".join(f"{k}: {v:.1f} s" for k, v in result["build_seconds"].items())
    lines.append(f"\nBuild: {builds}.")
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 2.4))
    ax.barh([r["index"] for r in result["rows"]], [r["p50_ms_search"] for r in result["rows"]], color="#4c72b0")
    ax.invert_yaxis()
    ax.set_xlabel("one phrase search, p50 ms (query vectors given)")
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--questions", type=int, default=2000)
    args = parser.parse_args()
    finish_result("exact_limit", measure(args.model, args.questions), markdown, plot)


if __name__ == "__main__":
    main()
