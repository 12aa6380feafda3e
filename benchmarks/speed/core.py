"""Core benchmark: dump throughput vs sentence-transformers, search latency, vectors per passage.

    .venv/bin/python -m benchmarks.speed.core            # ~6 min on 2 cores
    .venv/bin/python -m benchmarks.speed.core --dump-passages 100 --search-queries 50   # quick

1. Dump throughput: the MiniLM-based phrase model dumps N SQuAD dev paragraphs (tokenise, window, encode,
   filter, fp16, write shards) vs sentence-transformers encoding the same paragraphs with the same
   all-MiniLM-L6-v2 (max_seq_length = ours, same batch size). Alternating rounds; ratio of tokens/s.
2. Search: flat index of all dev-public paragraphs; single-query latency p50/p95 (query encoding + MIPS +
   span search) and batched queries/s, per unit.
3. Stored vectors per passage at several filter thresholds (the filter of the model under test).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import SQUAD_DEV, machine, percentiles, pyplot, save_figure, squad_passages, write_result
from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher, dump_phrases
from dphr_haystack.encode.add import add_passages


def bench_dump(model: PhraseModel, passages: list[dict], batch_size: int, rounds: int) -> dict:
    from sentence_transformers import SentenceTransformer

    from dphr_haystack.model.registry import resolve_base

    st = SentenceTransformer(resolve_base("minilm"), device="cpu")
    st.max_seq_length = model.config.max_passage_length
    texts = [p["text"] for p in passages]
    lengths = [len(ids) for ids in model.tokenizer(texts, add_special_tokens=False)["input_ids"]]
    ours_tokens = sum(lengths)  # every context token gets a vector (long passages are windowed)
    st_tokens = sum(min(n, st.max_seq_length - 2) for n in lengths)  # sentence-transformers truncates
    st.encode(texts[:32], batch_size=batch_size)  # warm-up both
    model.encode_passages(texts[:32], batch_size=batch_size)
    ours_s, st_s = [], []
    for _ in range(rounds):
        out = Path(tempfile.mkdtemp(prefix="dphr-dump-"))
        start = time.perf_counter()
        dump_phrases(model, passages, out, shard_size=256, batch_size=batch_size, progress=False)
        ours_s.append(time.perf_counter() - start)
        shutil.rmtree(out)
        start = time.perf_counter()
        st.encode(texts, batch_size=batch_size)
        st_s.append(time.perf_counter() - start)
    ours_rate = ours_tokens / min(ours_s)
    st_rate = st_tokens / min(st_s)
    return {
        "passages": len(passages),
        "context_tokens": ours_tokens,
        "st_tokens": st_tokens,
        "batch_size": batch_size,
        "rounds": rounds,
        "phrase_dump_seconds": ours_s,
        "sentence_transformers_seconds": st_s,
        "phrase_dump_tokens_per_s": ours_rate,
        "sentence_transformers_tokens_per_s": st_rate,
        "ratio_tokens_per_s": ours_rate / st_rate,
    }


def bench_search(model: PhraseModel, passages: list[dict], questions: list[str], top_k: int) -> dict:
    index = PhraseIndex.create(model)
    start = time.perf_counter()
    add_passages(index, model, passages, batch_size=32, progress=True)
    build_s = time.perf_counter() - start
    searcher = PhraseSearcher(index, model)
    out = {
        "passages": index.num_passages,
        "vectors": len(index),
        "vectors_per_passage": len(index) / index.num_passages,
        "index_build_seconds": build_s,
        "top_k": top_k,
        "queries": len(questions),
        "units": {},
    }
    searcher.search_batch(questions[:8], unit="phrase", top_k=top_k)  # warm-up
    for unit in ("phrase", "passage", "document"):
        single = []
        for q in questions:
            t0 = time.perf_counter()
            searcher.search(q, unit=unit, top_k=top_k)
            single.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        for b in range(0, len(questions), 64):
            searcher.search_batch(questions[b : b + 64], unit=unit, top_k=top_k)
        batched = len(questions) / (time.perf_counter() - t0)
        out["units"][unit] = {**percentiles(single), "batched_queries_per_s": batched}
    # Where the time goes, single query: encoding vs MIPS + span search.
    enc = []
    for q in questions:
        t0 = time.perf_counter()
        model.encode_queries([q])
        enc.append((time.perf_counter() - t0) * 1000)
    out["query_encoding"] = percentiles(enc)
    return out


def bench_filter(
    model: PhraseModel, max_paragraphs: int, thresholds: list[float | None], questions: int = 300
) -> dict:
    """Index size (vectors, bytes) against accuracy for each filter threshold, on the first dev paragraphs and
    their own questions (open-domain over that sub-corpus; train.filter.threshold_sweep encodes once)."""
    from dphr_haystack.index.shards import TOKEN_DTYPE
    from train.data import load_squad
    from train.filter import threshold_sweep

    data = load_squad(SQUAD_DEV, max_paragraphs=max_paragraphs, max_questions=questions)
    rows = threshold_sweep(model, data.passages, data.examples, thresholds)
    row_bytes = 2 * model.hidden_size + TOKEN_DTYPE.itemsize  # fp16 vector + token metadata, as stored
    for row in rows:
        row["vectors_per_passage"] = row["vectors"] / len(data.passages)
        row["fraction_kept"] = row.pop("kept_fraction")
        row["bytes"] = row["vectors"] * row_bytes
    return {"passages": len(data.passages), "questions": len(data.examples), "rows": rows}


def plot(result: dict, path: Path) -> None:
    plt = pyplot()

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    d = result["dump"]
    axes[0].bar(
        ["phrase dump", "sentence-transformers"],
        [d["phrase_dump_tokens_per_s"], d["sentence_transformers_tokens_per_s"]],
        color=["tab:blue", "tab:gray"],
    )
    axes[0].set_title(f"Encoding throughput (ratio {d['ratio_tokens_per_s']:.2f})")
    axes[0].set_ylabel("context tokens / s")
    s = result["search"]["units"]
    units = list(s)
    x = np.arange(len(units))
    axes[1].bar(x - 0.2, [s[u]["p50_ms"] for u in units], 0.4, label="p50")
    axes[1].bar(x + 0.2, [s[u]["p95_ms"] for u in units], 0.4, label="p95")
    axes[1].set_xticks(x, units)
    axes[1].set_ylabel("ms / query (single)")
    axes[1].set_title(f"Search latency, {result['search']['passages']} passages")
    axes[1].legend()
    rows = result["filter"]["rows"]
    size = [r["bytes"] / 2**20 for r in rows]
    axes[2].plot(size, [100 * r["acc@20"] for r in rows], marker="o", label="passage acc@20")
    axes[2].plot(size, [100 * r["em@1"] for r in rows], marker="s", label="phrase EM@1")
    for r, x in zip(rows, size):
        axes[2].annotate(
            "none" if r["threshold"] is None else f"{r['threshold']:g}",
            (x, 100 * r["acc@20"]),
            textcoords="offset points",
            xytext=(3, 4),
            fontsize=7,
        )
    axes[2].set_xlabel("index size (MiB, vectors + token metadata)")
    axes[2].set_ylabel("accuracy (%)")
    axes[2].set_title(f"Size vs accuracy by filter threshold ({result['filter']['passages']} passages)")
    axes[2].legend(fontsize=8)
    fig.suptitle(f"dphr core benchmark: {result['machine']['cpu']} ({result['machine']['cores']} cores)", fontsize=9)
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", default="minilm", help="model directory, or 'minilm' for the untrained MiniLM phrase model"
    )
    parser.add_argument("--dump-passages", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--search-queries", type=int, default=200)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--thresholds", type=float, nargs="*", default=[-1.0, -0.5, 0.0, 0.5])
    parser.add_argument("--name", default="core")
    args = parser.parse_args()

    model = PhraseModel.from_base("minilm") if args.model == "minilm" else PhraseModel.load(args.model)
    passages, questions = squad_passages()
    rng = np.random.default_rng(0)
    sample_q = [questions[i]["question"] for i in rng.choice(len(questions), args.search_queries, replace=False)]
    result = {"machine": machine(), "model": args.model, "command": " ".join(sys.argv)}
    result["dump"] = bench_dump(model, passages[: args.dump_passages], args.batch_size, args.rounds)
    print("dump:", {k: v for k, v in result["dump"].items() if "seconds" not in k})
    result["filter"] = bench_filter(model, args.dump_passages, [None, *args.thresholds])
    print("filter:", result["filter"]["rows"])
    result["search"] = bench_search(model, passages, sample_q, args.top_k)
    print("search:", result["search"])
    path = write_result(args.name, result)
    plot(result, path.with_suffix(".png"))
    print(f"wrote {path} and {path.with_suffix('.png')}")


if __name__ == "__main__":
    main()
