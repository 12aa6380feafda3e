"""Per-query latency of PhraseRetriever vs BM25Retriever vs EmbeddingRetriever on ONE shared store.

All SQuAD dev-public paragraphs (1,702) go into one PhraseDocumentStore (in-memory; BM25Okapi; MiniLM dense
embeddings; a flat fp16 phrase index). Each question is sent to the three retrievers in turn (round robin, so
drift hits all three alike), ``retrieve(query)`` with top_k=10, timed with perf_counter after a warm-up.
Reports p50/p95/mean per retriever, ratios, indexing times, top-10 passage hit rate (context only: the phrase
model is the UNTRAINED MiniLM-based one), the machine and library versions; writes JSON and a PNG.

    .venv/bin/python benchmarks/bench_haystack_retrievers.py                 # ~5 min on 2 cores
    .venv/bin/python benchmarks/bench_haystack_retrievers.py --queries 50 --limit 300   # quick check
"""

from __future__ import annotations

import argparse
import gzip
import importlib.metadata as md
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SQUAD_DEV = REPO.parent / "shared" / "data" / "squad" / "dev-v1.1-public.json.gz"
RESULTS = REPO / "benchmarks" / "results"


def load_squad(limit: int | None) -> tuple[list[dict], list[tuple[str, str]]]:
    """Paragraph documents and (question, gold paragraph id) pairs."""
    with gzip.open(SQUAD_DEV, "rt", encoding="utf-8") as handle:
        data = json.load(handle)["data"]
    docs, qas = [], []
    for a_idx, article in enumerate(data):
        for p_idx, para in enumerate(article["paragraphs"]):
            pid = f"{article['title']}-{a_idx}-{p_idx}"
            docs.append({"content": para["context"], "id": pid, "meta": {"title": article["title"].replace("_", " ")}})
            qas.extend((qa["question"], pid) for qa in para.get("qas", []))
            if limit and len(docs) == limit:
                return docs, qas
    return docs, qas


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("torch", "transformers", "farm-haystack", "faiss-cpu", "numpy", "sentence-transformers", "rank-bm25"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "absent"
    return out


def summarise(times_s: list[float]) -> dict[str, float]:
    ms = np.asarray(times_s) * 1000
    return {"p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95)),
            "mean_ms": float(ms.mean()), "min_ms": float(ms.min()), "n": int(len(ms))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="paragraphs (default: all 1,702)")
    parser.add_argument("--queries", type=int, default=200, help="timed questions (default 200)")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--model", default="minilm", help="phrase model (default: the untrained MiniLM one)")
    parser.add_argument("--out", type=Path, default=RESULTS / "haystack_retrievers.json")
    args = parser.parse_args(argv)
    if not SQUAD_DEV.is_file():
        print(f"SQuAD dev data not found at {SQUAD_DEV}", file=sys.stderr)
        return 2
    import torch
    from haystack.nodes import BM25Retriever

    from dphr_haystack.nodes import MiniLMEmbeddingRetriever, PhraseDocumentStore, PhraseRetriever

    threads = torch.get_num_threads()
    docs, qas = load_squad(args.limit)
    rng = np.random.default_rng(0)
    picked = [qas[i] for i in sorted(rng.choice(len(qas), size=min(args.queries, len(qas)), replace=False))]
    store = PhraseDocumentStore(embedding_dim=384, similarity="cosine", progress_bar=True)
    store.write_documents(docs)
    retrievers = {
        "PhraseRetriever": PhraseRetriever(document_store=store, model=args.model, top_k=args.top_k, unit="passage",
                                           device="cpu", return_answers=False),
        "BM25Retriever": BM25Retriever(document_store=store, top_k=args.top_k),
        "EmbeddingRetriever": MiniLMEmbeddingRetriever(document_store=store, top_k=args.top_k, use_gpu=False),
    }
    indexing = {}
    for name in ("PhraseRetriever", "EmbeddingRetriever"):
        start = time.perf_counter()
        store.update_embeddings(retrievers[name])
        indexing[name + "_s"] = time.perf_counter() - start
        print(f"{name}: indexed {len(docs)} paragraphs in {indexing[name + '_s']:.1f} s", flush=True)
    phrase_index = store.get_phrase_index()
    for question, _ in picked[:5]:  # warm-up
        for retriever in retrievers.values():
            retriever.retrieve(question)
    times: dict[str, list[float]] = {name: [] for name in retrievers}
    hits: dict[str, int] = dict.fromkeys(retrievers, 0)
    for question, gold in picked:
        for name, retriever in retrievers.items():
            start = time.perf_counter()
            result = retriever.retrieve(question)
            times[name].append(time.perf_counter() - start)
            hits[name] += gold in {d.id for d in result}
    stats = {name: {**summarise(t), f"hit_at_{args.top_k}": hits[name] / len(picked)} for name, t in times.items()}
    p50 = {name: s["p50_ms"] for name, s in stats.items()}
    ratios = {
        "phrase_over_bm25_p50": p50["PhraseRetriever"] / p50["BM25Retriever"],
        "phrase_over_embedding_p50": p50["PhraseRetriever"] / p50["EmbeddingRetriever"],
        "embedding_over_bm25_p50": p50["EmbeddingRetriever"] / p50["BM25Retriever"],
    }
    report = {
        "benchmark": "haystack_retrievers", "command": "python " + " ".join([sys.argv[0], *(argv or sys.argv[1:])]),
        "corpus": {"source": str(SQUAD_DEV.name), "paragraphs": len(docs), "phrase_vectors": len(phrase_index),
                   "questions_timed": len(picked)},
        "setup": {"top_k": args.top_k, "store": "PhraseDocumentStore (in-memory inner store, shared by all three)",
                  "phrase_model": args.model, "phrase_model_trained": args.model != "minilm",
                  "phrase_index": f"{store.faiss_factory} {store.phrase_dtype}", "dense_model": "all-MiniLM-L6-v2",
                  "timing": "retrieve(query) per question, round robin over retrievers, 5 warm-up questions"},
        "indexing": indexing, "latency": stats, "ratios": ratios,
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpu_count": os.cpu_count(), "torch_threads": threads, "cuda": torch.cuda.is_available()},
        "versions": versions(),
        "note": "hit rates are context only: the phrase model is untrained unless --model points at a trained one",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({"latency": stats, "ratios": ratios, "indexing": indexing}, indent=2))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        names = list(times)
        ax.boxplot([np.asarray(times[n]) * 1000 for n in names], showfliers=False)
        ax.set_xticks(range(1, len(names) + 1), names)
        ax.set_yscale("log")
        ax.set_ylabel("ms per query (log)")
        ax.set_title(f"retrieve() latency, {len(docs)} SQuAD dev paragraphs, {len(picked)} questions, "
                     f"{os.cpu_count()} CPUs", fontsize=9)
        for i, n in enumerate(names, 1):
            ax.annotate(f"p50 {stats[n]['p50_ms']:.1f}\np95 {stats[n]['p95_ms']:.1f}", (i, stats[n]["p95_ms"]),
                        textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
        fig.tight_layout()
        fig.savefig(args.out.with_suffix(".png"), dpi=120)
        print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    except ImportError:
        print(f"wrote {args.out} (matplotlib absent: no plot)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
