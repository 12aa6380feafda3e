"""Query latency, batched throughput, indexing cost and index size of every retriever on ONE shared store.

All SQuAD dev-public paragraphs (1,702) go into one PhraseDocumentStore (in-memory; BM25Okapi; MiniLM dense
embeddings; the phrase index of the shipped model in its automatic structure); the FAISS dense variant holds the
same embeddings in Haystack's FAISSDocumentStore. Each question goes to every retriever in turn (round robin, so
drift hits all alike),
``retrieve(query)`` with top_k=10 after a warm-up; then ``retrieve_batch`` in batches of 32 for queries/s.
Reported as ratios to BM25 and to dense (FAISS). Also: indexing time and tokens/s of the phrase dump vs the
dense embedding of the same paragraphs, bytes on disk, vectors per passage, and top-10 passage hit rate
(``--model minilm``: the untrained phrase model, for context).

    .venv/bin/python -m benchmarks.haystack.retrievers                 # ~8 min on 2 cores
    .venv/bin/python -m benchmarks.haystack.retrievers --queries 50 --limit 300   # quick check
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import SQUAD_DEV, machine, percentiles, pyplot, save_figure, squad_passages, write_result

BATCH = 32


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def build(docs: list, model: str, top_k: int) -> tuple[dict, dict, dict]:
    """The shared store, the FAISS store, the retrievers; indexing times, token counts and sizes."""
    from haystack.document_stores import FAISSDocumentStore
    from haystack.nodes import BM25Retriever
    from haystack.schema import Document

    from dphr_haystack.nodes import MiniLMEmbeddingRetriever, PhraseDocumentStore, PhraseRetriever

    store = PhraseDocumentStore(embedding_dim=384, similarity="cosine", progress_bar=False)
    store.write_documents(docs)
    phrase = PhraseRetriever(
        document_store=store, model=model, top_k=top_k, unit="passage", device="cpu", return_answers=False
    )
    dense = MiniLMEmbeddingRetriever(document_store=store, top_k=top_k, use_gpu=False, progress_bar=False)
    indexing: dict = {}
    for name, retriever in (("phrase", phrase), ("dense", dense)):
        start = time.perf_counter()
        store.update_embeddings(retriever)
        indexing[f"{name}_seconds"] = time.perf_counter() - start
    texts = [d["content"] for d in docs]
    # Tokens each encoder actually reads: MiniLM truncates at its max_seq_len; the phrase model windows it all.
    st_tok = dense.embedding_encoder.embedding_model.tokenizer
    indexing["dense_tokens"] = int(sum(min(len(ids), dense.max_seq_len) for ids in st_tok(texts)["input_ids"]))
    indexing["phrase_tokens"] = int(sum(len(ids) for ids in phrase.phrase_model.tokenizer(texts)["input_ids"]))
    for name in ("phrase", "dense"):
        indexing[f"{name}_tokens_per_s"] = indexing[f"{name}_tokens"] / indexing[f"{name}_seconds"]
    indexing["phrase_over_dense_tokens_per_s"] = indexing["phrase_tokens_per_s"] / indexing["dense_tokens_per_s"]
    faiss_store = FAISSDocumentStore(
        sql_url="sqlite://", faiss_index_factory_str="Flat", embedding_dim=384, similarity="cosine", progress_bar=False
    )
    faiss_store.write_documents(
        [
            Document(content=d.content, id=d.id, meta=d.meta, embedding=d.embedding)
            for d in store.get_all_documents(return_embedding=True)
        ]
    )
    retrievers = {
        "BM25": BM25Retriever(document_store=store, top_k=top_k),
        "Dense (in-memory)": dense,
        "Dense (FAISS flat)": MiniLMEmbeddingRetriever(
            document_store=faiss_store, top_k=top_k, use_gpu=False, progress_bar=False
        ),
        "Phrase → passages": phrase,
        "Phrase answers": PhraseRetriever(document_store=store, model=model, top_k=top_k, unit="phrase", device="cpu"),
    }
    phrase_index = store.get_phrase_index()
    with tempfile.TemporaryDirectory() as tmp:
        phrase_index.save(Path(tmp) / "phrases")
        faiss_store.save(str(Path(tmp) / "dense.faiss"))
        sizes = {
            "phrase_index_bytes": directory_bytes(Path(tmp) / "phrases"),
            "dense_faiss_bytes": (Path(tmp) / "dense.faiss").stat().st_size,
            "phrase_vectors": len(phrase_index),
            "vectors_per_passage": len(phrase_index) / len(docs),
        }
    return retrievers, indexing, sizes


def time_queries(retrievers: dict, questions: list[str], gold: list[str]) -> dict:
    """Round-robin single-query latency and hit@k, then batched queries/s, per retriever."""
    for question in questions[:5]:  # warm-up
        for retriever in retrievers.values():
            retriever.retrieve(question)
    times: dict[str, list[float]] = {name: [] for name in retrievers}
    hits = dict.fromkeys(retrievers, 0)
    for question, gold_id in zip(questions, gold, strict=True):
        for name, retriever in retrievers.items():
            start = time.perf_counter()
            result = retriever.retrieve(question)
            times[name].append(1000 * (time.perf_counter() - start))
            hits[name] += gold_id in {d.id for d in result}
    stats = {}
    for name, retriever in retrievers.items():
        start = time.perf_counter()
        for i in range(0, len(questions), BATCH):
            retriever.retrieve_batch(questions[i : i + BATCH])
        batched = len(questions) / (time.perf_counter() - start)
        stats[name] = {
            **percentiles(times[name]),
            "batched_queries_per_s": batched,
            "hit_at_k": hits[name] / len(questions),
        }
    return stats


def plot(result: dict, path: Path) -> None:
    plt = pyplot()

    names = list(result["latency"])
    lat = result["latency"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    y = np.arange(len(names))
    ax1.barh(y - 0.2, [lat[n]["p50_ms"] for n in names], 0.4, label="p50")
    ax1.barh(y + 0.2, [lat[n]["p95_ms"] for n in names], 0.4, label="p95")
    ax1.set_yticks(y, names)
    ax1.set_xscale("log")
    ax1.set_xlabel("ms per query (log)")
    ax1.invert_yaxis()
    ax1.legend()
    ax1.set_title(f"single-query latency, {result['corpus']['paragraphs']} paragraphs", fontsize=9)
    ax2.barh(y, [lat[n]["batched_queries_per_s"] for n in names], color="tab:green")
    ax2.set_yticks(y, names)
    ax2.set_xscale("log")
    ax2.set_xlabel(f"queries/s, batches of {BATCH} (log)")
    ax2.invert_yaxis()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="paragraphs (default: all 1,702)")
    parser.add_argument("--queries", type=int, default=200, help="timed questions (default 200)")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--model", default="dphr-minilm-squad", help="phrase model (default: the shipped one)")
    args = parser.parse_args(argv)
    passages, qas = squad_passages(SQUAD_DEV, args.limit)
    docs = [
        {"content": p["text"], "id": p["id"], "meta": {"title": p["title"], "document_id": p["document_id"]}}
        for p in passages
    ]
    rng = np.random.default_rng(0)
    picked = [qas[i] for i in sorted(rng.choice(len(qas), size=min(args.queries, len(qas)), replace=False))]
    retrievers, indexing, sizes = build(docs, args.model, args.top_k)
    print(f"indexing: {indexing}\nsizes: {sizes}", flush=True)
    stats = time_queries(retrievers, [q["question"] for q in picked], [q["passage_id"] for q in picked])
    for s in stats.values():
        s["p50_vs_bm25"] = s["p50_ms"] / stats["BM25"]["p50_ms"]
        s["p50_vs_dense_faiss"] = s["p50_ms"] / stats["Dense (FAISS flat)"]["p50_ms"]
        s["batched_vs_bm25"] = s["batched_queries_per_s"] / stats["BM25"]["batched_queries_per_s"]
    result = {
        "benchmark": "haystack_retrievers",
        "command": "python -m benchmarks.haystack.retrievers " + " ".join(argv or sys.argv[1:]),
        "machine": machine(),
        "corpus": {"source": SQUAD_DEV.name, "paragraphs": len(docs), "questions_timed": len(picked)},
        "setup": {
            "top_k": args.top_k,
            "phrase_model": args.model,
            "phrase_model_trained": args.model != "minilm",
            "store": "one PhraseDocumentStore (in-memory) shared by all but the FAISS dense variant",
        },
        "indexing": indexing,
        "sizes": sizes,
        "latency": stats,
    }
    result["markdown"] = markdown(result)
    path = write_result("haystack_retrievers", result)
    plot(result, path.with_suffix(".png"))
    print(result["markdown"])
    print(f"wrote {path}")
    return 0


def markdown(r: dict) -> str:
    ix, sz = r["indexing"], r["sizes"]
    lines = [
        f"{r['corpus']['paragraphs']} SQuAD dev-public paragraphs in one store, {r['corpus']['questions_timed']} "
        f"questions, top-{r['setup']['top_k']}; phrase model `{r['setup']['phrase_model']}`"
        + ("" if r["setup"]["phrase_model_trained"] else " (untrained: hit rates are context only)")
        + ".",
        "",
        "| retriever | p50 ms | p95 ms | p50 / BM25 | p50 / dense (FAISS) | batched q/s | batched / BM25 | hit@k |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in r["latency"].items():
        lines.append(
            f"| {name} | {s['p50_ms']:.1f} | {s['p95_ms']:.1f} | {s['p50_vs_bm25']:.2f} | "
            f"{s['p50_vs_dense_faiss']:.2f} | {s['batched_queries_per_s']:.1f} | {s['batched_vs_bm25']:.2f} | "
            f"{s['hit_at_k']:.3f} |"
        )
    lines += [
        "",
        "| indexing | seconds | tokens | tokens/s | size on disk |",
        "|---|---:|---:|---:|---:|",
        f"| phrase index (dump + flat, {sz['vectors_per_passage']:.1f} vectors/passage) | "
        f"{ix['phrase_seconds']:.1f} | {ix['phrase_tokens']:,} | {ix['phrase_tokens_per_s']:.0f} | "
        f"{sz['phrase_index_bytes'] / 2**20:.1f} MiB |",
        f"| dense embeddings (MiniLM, FAISS flat) | {ix['dense_seconds']:.1f} | {ix['dense_tokens']:,} | "
        f"{ix['dense_tokens_per_s']:.0f} | {sz['dense_faiss_bytes'] / 2**20:.1f} MiB |",
        "",
        f"Phrase dump / dense embedding tokens/s: **{ix['phrase_over_dense_tokens_per_s']:.2f}**.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
