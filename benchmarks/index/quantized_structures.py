"""Product-quantized structures for large stores, side by side with today's SQ8, on the SQuAD-open-small phrase index.

    .venv/bin/python -m benchmarks.index.quantized_structures [--questions 600]
        [--structures IVF4096,SQ8:4 OPQ96,IVF4096,PQ96np:4,8,16 OPQ48,IVF4096,PQ48np:8,16]
        [--query-models dphr-minilm-squad-distilled runs/qsft-pq/qsft/best]

Every vector of the default model's SQuAD-open-small index (stored vectors copied, no encoding) goes into each FAISS
structure in turn, built as ``auto`` builds one (trained on the sample ``auto`` takes, the build timed). For each
``refine`` given after the colon (candidates per wanted token re-ranked exactly from the stored vectors), ``nprobe``
is tuned by ``auto``'s rule (the smallest that finds 0.93 of probe queries' exact top-20 tokens; the tuning timed)
and the structure answers the same held-out validation and unseen SQuAD-open-small questions with each query model
(int8 query vectors): EM@1 / F1@1, passage acc@1 / acc@5, p50 / p95 of one phrase search (top 10, one thread).
Per structure: disk bytes of the saved index and the RSS a fresh process gains by loading it and answering 64 token
searches (both per passage; stored vectors are memory-mapped and count only where read). ``--query-models`` also
asks with other query encoders over the same index (e.g. one fine-tuned against a PQ index: query-side
fine-tuning changes the query encoder only).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import (
    DEFAULT_MODEL,
    ROOT,
    cached_open_small_phrases,
    finish_result,
    machine,
    model_id,
    pyplot,
    save_figure,
)
from benchmarks.index_variants import UNSEEN, answer_sets, filtered_index, footprint, question_sets, use_search_params

WORK = ROOT / "runs" / "quantized_structures"
DEFAULT_STRUCTURES = ["IVF4096,SQ8:4", "OPQ96,IVF4096,PQ96np:4,8,16", "OPQ48,IVF4096,PQ48np:8,16"]


def parse_structure(spec: str) -> tuple[str, list[int]]:
    """``FACTORY:R1,R2`` → (factory, refines)."""
    factory, _, refines = spec.rpartition(":")
    if not factory:
        raise SystemExit(f"--structures: {spec!r} is not FACTORY:REFINE[,REFINE...]")
    return factory, [int(r) for r in refines.split(",")]


def measure(model_name: str, questions: int, structures: list[str], query_models: list[str], cache: Path | None):
    from dphr_haystack.index.phrase_index import PhraseIndex
    from dphr_haystack.nodes import load_phrase_model

    started = time.perf_counter()
    model = load_phrase_model(model_name, "cpu")
    index = PhraseIndex.load(cached_open_small_phrases(model, cache))
    encoders = {name: load_phrase_model(name, "cpu") for name in query_models or [model_name]}
    sets = {name: question_sets(encoder, questions) for name, encoder in encoders.items()}
    everything = np.arange(len(index))
    rows = []
    for spec in structures:
        factory, refines = parse_structure(spec)
        built = time.perf_counter()
        variant = filtered_index(index, model, everything, model.config.filter_threshold, factory)
        build_seconds = time.perf_counter() - built
        row: dict[str, Any] = {
            "factory": factory,
            "build_seconds": build_seconds,
            "train_vectors": (variant.manifest.get("faiss_build") or {}).get("train_vectors"),
            **footprint(variant, WORK / "variant"),
            "tunings": [],
        }
        for refine in refines:
            tuned = time.perf_counter()
            params = variant.structure.tune_nprobe(refine)
            tune_seconds = time.perf_counter() - tuned
            use_search_params(variant, {"nprobe": params["nprobe"], "refine": refine})
            tuning = {
                "refine": refine,
                "nprobe": params["nprobe"],
                "probe_recall": params["probe_recall"],
                "tune_seconds": tune_seconds,
                "results": {name: answer_sets(variant, encoders[name], sets[name], UNSEEN) for name in encoders},
            }
            row["tunings"].append(tuning)
            print(factory, {k: v for k, v in tuning.items() if k != "results"}, tuning["results"], flush=True)
        row["disk_bytes_per_passage"] = row["disk_bytes"] / index.num_passages
        row["rss_bytes_per_passage"] = row["rss_bytes"] / index.num_passages
        rows.append(row)
        del variant
    return {
        "machine": machine(),
        "model": model_name,
        "model_id": model_id(model_name),
        "query_models": list(encoders),
        "passages": index.num_passages,
        "vectors": len(index),
        "questions": {name: len(s[0]) for name, s in next(iter(sets.values())).items()},
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Every vector of `{result['model']}`'s SQuAD-open-small index ({result['vectors']:,} vectors, "
        f"{result['passages']:,} passages) in each structure, nprobe tuned by `auto`'s rule for each refine, "
        f"{result['machine']['cpu']}; EM@1 on {result['questions']['validation']:,} validation and "
        f"{result['questions'][UNSEEN]:,} unseen questions, latency of one phrase search (top 10, one thread):",
        "",
        "| structure | build s | disk B / passage | RSS B / passage | refine | nprobe | probe recall | query model "
        "| val EM@1 | unseen EM@1 | unseen F1@1 | unseen acc@1 | p50 ms | p95 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        for t in r["tunings"]:
            for name, res in t["results"].items():
                v, u = res["validation"], res[UNSEEN]
                lines.append(
                    f"| `{r['factory']}` | {r['build_seconds']:.0f} | {r['disk_bytes_per_passage']:,.0f} | "
                    f"{r['rss_bytes_per_passage']:,.0f} | {t['refine']} | {t['nprobe']} | {t['probe_recall']:.3f} | "
                    f"{Path(name).name if '/' in name else name} | {100 * v['em@1']:.2f} | {100 * u['em@1']:.2f} | "
                    f"{100 * u['f1@1']:.2f} | {100 * u['acc@1']:.2f} | {res['latency_ms']['p50_ms']:.1f} | "
                    f"{res['latency_ms']['p95_ms']:.1f} |"
                )
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for r in result["rows"]:
        for t in r["tunings"]:
            for name, res in t["results"].items():
                label = f"{r['factory']} r{t['refine']}" + (f" {Path(name).name}" if len(t["results"]) > 1 else "")
                em = 100 * res[UNSEEN]["em@1"]
                axes[0].scatter([r["rss_bytes_per_passage"] / 1000], [em])
                axes[0].annotate(label, (r["rss_bytes_per_passage"] / 1000, em), fontsize=6)
                axes[1].scatter([res["latency_ms"]["p50_ms"]], [em])
                axes[1].annotate(label, (res["latency_ms"]["p50_ms"], em), fontsize=6)
    axes[0].set_xlabel("RSS KB per passage")
    axes[1].set_xlabel("p50 ms of a phrase search")
    axes[0].set_ylabel("unseen EM@1 (%)")
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--questions", type=int, default=600)
    parser.add_argument("--structures", nargs="+", default=DEFAULT_STRUCTURES, help="FACTORY:REFINE[,REFINE...]")
    parser.add_argument("--query-models", nargs="*", default=[], help="query encoders to ask with (default: --model)")
    parser.add_argument("--cache", type=Path, default=None, help="another cache root (a rehearsal on a small index)")
    parser.add_argument("--name", default="quantized_structures", help="the result's name in benchmarks/results")
    args = parser.parse_args()
    result = measure(args.model, args.questions, args.structures, args.query_models, args.cache)
    finish_result(args.name, result, markdown, plot)


if __name__ == "__main__":
    main()
