"""SQuAD-open-small: every retriever through its Haystack YAML pipeline on one store, one accuracy table.

    .venv/bin/python -m benchmarks.quality.squad_open_small                 # build (cached, resumable) + evaluate
    .venv/bin/python -m benchmarks.quality.squad_open_small --questions 200 # quicker
    .venv/bin/python -m benchmarks.quality.squad_open_small --model DIR     # another model (minilm: untrained)
    .venv/bin/python -m benchmarks.quality.squad_open_small --model DIR --tag NAME  # results/squad_open_small_NAME

Corpus: every paragraph of SQuAD train-rebuilt and dev-public (~20.6k). Questions: dev-public
questions, open-domain (no gold passage given), without those of the held-out validation articles
(:data:`VALIDATION_TITLES`, kept for model selection), sampled with a fixed seed. Each pipeline file in
``pipelines/`` is loaded with ``components={"DocumentStore": store}``, so BM25, dense, phrase and hybrid
pipelines query the same documents and ids; the FAISS dense variant holds the same embeddings in Haystack's
FAISSDocumentStore. The in-memory dense scan (~1.7 s/query here) runs on a smaller subset.

Build artifacts go to ``benchmarks/cache/squad-open-small`` (git-ignored): dense embeddings in resumable
chunks and a resumable phrase index (``PhraseIndex`` commits every chunk). Results: ``results/squad_open_small.json``
and ``.png``; per-question predictions in the cache's ``eval/`` folder.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import (
    DEFAULT_MODEL,
    SQUAD_DEV,
    SQUAD_TRAIN,
    analyze_sqlite,
    build_squad_open_small,
    load_dense,
    machine,
    model_id,
    percentiles,
    phrase_store,
    pyplot,
    save_figure,
    validation_titles,
    write_result,
)
from benchmarks.common import SQUAD_OPEN_SMALL_CACHE as CACHE

# ----------------------------------------------------------------------------- evaluate
# (system, pipeline file, overrides, uses the FAISS store, the slow in-memory subset)
SYSTEMS = [
    ("BM25", "bm25.yml", {}, False, False),
    ("Dense MiniLM (FAISS flat)", "dense_faiss.yml", {}, True, False),
    ("Dense MiniLM (in-memory)", "dense_passages.yml", {}, False, True),
    ("Phrase → passages", "phrase_passages.yml", {"Retriever": {}}, False, False),
    ("Phrase answers", "phrase_qa.yml", {"Retriever": {}}, False, False),
    ("Hybrid RRF (BM25 + phrase)", "hybrid_rrf.yml", {"Retriever": {}}, False, False),
    ("Hybrid DPR-λ (BM25 + phrase)", "hybrid_dpr.yml", {"Retriever": {}}, False, False),
    ("Hybrid linear (BM25 + phrase confidence)", "hybrid_confidence.yml", {"Retriever": {}}, False, False),
]


def make_stores(docs, embeddings: np.ndarray, cache: Path, build_stats: dict):
    """The shared PhraseDocumentStore (documents, BM25, dense embeddings, phrase index) and the FAISS store."""
    from haystack.document_stores import FAISSDocumentStore

    for doc, vector in zip(docs, embeddings, strict=True):
        doc.embedding = vector
    start = time.perf_counter()
    store = phrase_store(docs, cache / build_stats["phrase_index"], embeddings.shape[1])
    faiss_store = FAISSDocumentStore(
        sql_url="sqlite://",
        faiss_index_factory_str="Flat",
        embedding_dim=embeddings.shape[1],
        similarity="cosine",
        progress_bar=False,
    )
    faiss_store.write_documents(docs)
    analyze_sqlite(faiss_store)
    print(f"stores loaded in {time.perf_counter() - start:.0f}s")
    return store, faiss_store


def evaluate_all(docs, embeddings: np.ndarray, cache: Path, build_stats: dict, args) -> dict:
    """Every system of :data:`SYSTEMS` on the same sampled questions; summaries, latencies and ratios."""
    from dphr_haystack.evaluation import evaluate_pipeline, markdown_table, read_questions
    from dphr_haystack.nodes import load_pipeline

    held_out = validation_titles()
    examples = read_questions(SQUAD_DEV, limit=args.questions, seed=args.seed, exclude_titles=held_out)
    store, faiss_store = make_stores(docs, embeddings, cache, build_stats)
    reports, rows = [], []
    for name, yml, overrides, uses_faiss, slow in SYSTEMS:
        overrides = {node: {**params, "model": args.model} for node, params in overrides.items()}
        pipeline = load_pipeline(
            yml, overrides=overrides or None, components={"DocumentStore": faiss_store if uses_faiss else store}
        )
        questions = examples[: args.in_memory_dense_questions] if slow else examples
        pipeline.run(query=questions[0].question)  # warm-up: model loading and caches are not query latency
        report = evaluate_pipeline(pipeline, questions, top_k=args.top_k, system=name)
        report.write(cache / "eval" / Path(args.model).name)
        reports.append(report)
        latency = percentiles([1000 * r.seconds for r in report.results])
        rows.append(
            {
                "system": name,
                "pipeline": yml,
                "questions": len(questions),
                "metrics": report.summary,
                "latency": latency,
            }
        )
        print(markdown_table([report]).splitlines()[-1], f"p50 {latency['p50_ms']:.1f} ms", flush=True)
    by_name = {row["system"]: row for row in rows}
    for row in rows:
        row["p50_vs_bm25"] = row["latency"]["p50_ms"] / by_name["BM25"]["latency"]["p50_ms"]
        row["p50_vs_dense_faiss"] = (
            row["latency"]["p50_ms"] / by_name["Dense MiniLM (FAISS flat)"]["latency"]["p50_ms"]
        )
    table = markdown_table(reports)
    print(table)
    return {
        "benchmark": "SQuAD-open-small",
        "phrase_model": args.model,
        "model_id": model_id(args.model),
        "phrase_model_note": "untrained: all-MiniLM-L6-v2 copied into the phrase and query encoders"
        if args.model == "minilm"
        else "",
        "corpus_passages": len(docs),
        "questions_sampled": len(examples),
        "held_out_titles": held_out,
        "seed": args.seed,
        "top_k": args.top_k,
        "systems": rows,
        "table_markdown": table,
        "phrase_vectors": len(store.get_phrase_index()),
        "filter_threshold": store.get_phrase_index().filter_threshold,
        "phrase_structure": structure_label(store.get_phrase_index()),
    }


def structure_label(index) -> str:
    """The phrase index's FAISS structure and search parameters, e.g. ``IVF4096,SQ8 (auto; nprobe 1024, refine 4)``."""
    params = ", ".join(f"{k} {v}" for k, v in sorted(index.search_params.items()))
    how = "auto" if index.auto_structure else "explicit"
    return f"{index.faiss_factory} ({how}{'; ' + params if params else ''})"


def markdown(payload: dict) -> str:
    """The accuracy table, the latency/ratio table and what was run, for benchmarks/README.md."""
    rows = payload["systems"]
    lines = [
        f"Corpus: {payload['corpus_passages']:,} passages (SQuAD train-rebuilt + dev-public); "
        f"{payload['questions_sampled']} dev-public questions sampled with seed {payload['seed']}, open-domain, "
        f"held-out validation articles excluded ({len(payload['held_out_titles'])}). Phrase model: "
        f"`{payload['phrase_model']}` {payload['phrase_model_note']}; phrase index: "
        f"{payload['phrase_vectors']:,} vectors, {payload.get('phrase_structure', 'flat')}, filter threshold "
        f"{payload.get('filter_threshold')}. "
        f"Accuracies in %, top-{payload['top_k']} retrieved.",
        "",
        payload["table_markdown"],
        "",
        "| system | questions | p50 ms | p95 ms | p50 / BM25 | p50 / dense (FAISS) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lat = row["latency"]
        lines.append(
            f"| {row['system']} | {row['questions']} | {lat['p50_ms']:.1f} | {lat['p95_ms']:.1f} | "
            f"{row['p50_vs_bm25']:.2f} | {row['p50_vs_dense_faiss']:.2f} |"
        )
    build = payload.get("build", {})
    phrases = build.get("phrase_indexes", {}).get(build.get("phrase_index"))
    if "dense" in build and phrases:
        lines += [
            "",
            f"Indexing cost (this machine, timed when the cache under benchmarks/cache/ was built): dense "
            f"embeddings {build['dense']['seconds'] / 60:.1f} min, phrase index {phrases['seconds'] / 60:.1f} min "
            f"({phrases['vectors']:,} vectors). This run, on the cached build: "
            f"{payload['benchmark_seconds'] / 60:.1f} min (evaluation "
            f"{payload['evaluation_seconds'] / 60:.1f} min).",
        ]
    return "\n".join(lines)


def plot(payload: dict, path: Path) -> None:
    """Passage accuracy@k per system, and p50 latency (log scale)."""
    plt = pyplot()

    rows = payload["systems"]
    names = [r["system"] for r in rows]
    fig, (acc_ax, lat_ax) = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.26
    for i, k in enumerate((1, 5, 20)):
        values = [100 * r["metrics"].get(f"passage_acc@{k}", 0.0) for r in rows]
        acc_ax.bar(np.arange(len(rows)) + (i - 1) * width, values, width, label=f"acc@{k}")
    acc_ax.set_xticks(np.arange(len(rows)), names, rotation=30, ha="right", fontsize=8)
    acc_ax.set_ylabel("passage accuracy (%)")
    acc_ax.set_title(f"SQuAD-open-small, {payload['questions_sampled']} questions")
    acc_ax.legend()
    lat_ax.barh(names, [r["latency"]["p50_ms"] for r in rows], color="tab:gray")
    lat_ax.set_xscale("log")
    lat_ax.set_xlabel("p50 ms per query (log)")
    lat_ax.invert_yaxis()
    lat_ax.tick_params(axis="y", labelsize=8)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help="phrase model: 'dphr-minilm-squad' (shipped), 'minilm' (untrained) or a directory",
    )
    parser.add_argument("--questions", type=int, default=300, help="dev questions to sample (default 300)")
    parser.add_argument(
        "--in-memory-dense-questions",
        type=int,
        default=50,
        help="questions for the slow in-memory dense scan (default 50)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--only", choices=["dense", "phrases"], help="build only this part (implies --build-only)")
    parser.add_argument(
        "--max-passages",
        type=int,
        default=None,
        help="smoke run: only the first N dev paragraphs (separate cache; not SQuAD-open-small)",
    )
    parser.add_argument(
        "--tag",
        default="",
        help="write results/squad_open_small_<tag>.json (e.g. a candidate model beside the default's result)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: what the phrase retrievers use for a query, and the fastest for the dense "
        "encoder too when queries come one at a time on a busy machine)",
    )
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    if not SQUAD_TRAIN.is_file() or not SQUAD_DEV.is_file():
        raise SystemExit("SQuAD train-rebuilt and dev-public are needed (../shared/data/squad)")
    cache = CACHE.with_name(f"{CACHE.name}-smoke{args.max_passages}") if args.max_passages else CACHE
    started = time.perf_counter()
    docs, build_stats = build_squad_open_small(args.model, cache, args.max_passages, args.only)
    print(f"build: {json.dumps(build_stats)}")
    if args.build_only or args.only:
        return 0
    eval_started = time.perf_counter()
    payload = evaluate_all(docs, load_dense(cache / "dense", len(docs)), cache, build_stats, args)
    payload["build"] = build_stats
    payload["evaluation_seconds"] = time.perf_counter() - eval_started
    payload["benchmark_seconds"] = time.perf_counter() - started
    payload["machine"] = machine()
    payload["command"] = "python -m benchmarks.quality.squad_open_small " + " ".join(argv or sys.argv[1:])
    payload["markdown"] = markdown(payload)
    name = "squad_open_small" + (f"_smoke{args.max_passages}" if args.max_passages else "")
    path = write_result(name + (f"_{args.tag}" if args.tag else ""), payload)
    plot(payload, path.with_suffix(".png"))
    print(f"wrote {path} in {payload['benchmark_seconds'] / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
