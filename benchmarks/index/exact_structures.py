"""Exact phrase search over the stored codes against a float32 IndexFlatIP copy: memory, latency, same results.

    .venv/bin/python -m benchmarks.index.exact_structures [--vectors 1000000] [--runs 20]

For each stored dtype (float16, int8 with a calibrated offset/scale), ``--vectors`` synthetic d=384 vectors are
stored as the codec stores them; the structure a flat ``PhraseIndex`` now searches
(``index.structures.make_exact_index``: FAISS' fp16 scalar quantizer, or its uniform 8-bit one set to decode as
the codec does) is compared, in one run, with ``IndexFlatIP`` over the decoded float32 vectors (what a flat index
held before): bytes of the structure, p50 search time for 1 and for 8 queries (top 1,000 tokens, as phrase search
asks for), overlap of the returned rows and the largest score difference.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

from benchmarks.common import finish_result, machine, pyplot, save_figure

DIM = 384
TOP_K = 1000


def _timed(index, queries: np.ndarray, runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        index.search(queries, TOP_K)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def measure(vectors: int, runs: int) -> dict[str, Any]:
    import faiss

    from dphr_haystack.index import structures
    from dphr_haystack.index.codec import VectorCodec

    started = time.perf_counter()
    rng = np.random.default_rng(0)
    floats = (rng.standard_normal((vectors, DIM)) * 0.5).astype(np.float32)
    queries = rng.standard_normal((8, DIM)).astype(np.float32)
    rows = []
    for dtype in ("float16", "int8"):
        codec = VectorCodec.calibrate(dtype, floats[:20000])
        stored = codec.encode(floats)
        flat = faiss.IndexFlatIP(DIM)
        for start in range(0, vectors, 65536):
            flat.add(codec.decode(stored[start : start + 65536]))
        exact = structures.make_exact_index(DIM, codec)
        structures.add_exact(exact, codec, stored)
        ref_scores, ref_rows = flat.search(queries, TOP_K)
        scores, found = exact.search(queries, TOP_K)
        row = {"dtype": dtype, "vectors": vectors, "exact_structure": type(exact).__name__}
        for name, index in (("float32_flat", flat), ("exact", exact)):
            row[f"{name}_bytes"] = int(faiss.serialize_index(index).size)
            row[f"{name}_p50_ms_1q"] = _timed(index, queries[:1], runs)
            row[f"{name}_p50_ms_8q"] = _timed(index, queries, runs)
        row["row_overlap"] = float(np.mean([len(set(a) & set(b)) / TOP_K for a, b in zip(ref_rows, found)]))
        row["max_score_diff"] = float(np.abs(scores - ref_scores).max())
        row["memory_ratio"] = row["exact_bytes"] / row["float32_flat_bytes"]
        row["speedup_1q"] = row["float32_flat_p50_ms_1q"] / row["exact_p50_ms_1q"]
        row["speedup_8q"] = row["float32_flat_p50_ms_8q"] / row["exact_p50_ms_8q"]
        rows.append(row)
        del flat, exact
    return {"machine": machine(), "runs": runs, "rows": rows, "seconds": time.perf_counter() - started}


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Exact search over stored codes vs a float32 IndexFlatIP copy, top {TOP_K} tokens, median of "
        f"{result['runs']} searches, {result['machine']['cpu']} ({result['machine']['cores']} cores):",
        "",
        "| stored | vectors | structure | MiB (float32 flat → exact) | 1 query ms | 8 queries ms | same rows | "
        "max score diff |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['dtype']} | {r['vectors']:,} | {r['exact_structure']} | {r['float32_flat_bytes'] / 2**20:.0f} → "
            f"{r['exact_bytes'] / 2**20:.0f} ({r['memory_ratio']:.2f}×) | {r['float32_flat_p50_ms_1q']:.1f} → "
            f"{r['exact_p50_ms_1q']:.1f} ({r['speedup_1q']:.2f}× faster) | {r['float32_flat_p50_ms_8q']:.1f} → "
            f"{r['exact_p50_ms_8q']:.1f} ({r['speedup_8q']:.2f}×) | {r['row_overlap']:.4f} | "
            f"{r['max_score_diff']:.1e} |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(8, 2.8))
    labels = [r["dtype"] for r in result["rows"]]
    x = np.arange(len(labels))
    for ax, key, title in ((axes[0], "bytes", "MiB"), (axes[1], "p50_ms_1q", "ms, 1 query")):
        scale = 2**20 if key == "bytes" else 1
        ax.bar(x - 0.2, [r[f"float32_flat_{key}"] / scale for r in result["rows"]], 0.4, label="float32 flat")
        ax.bar(x + 0.2, [r[f"exact_{key}"] / scale for r in result["rows"]], 0.4, label="exact over codes")
        ax.set_xticks(x, labels)
        ax.set_title(title)
    axes[0].legend(fontsize=8)
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vectors", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    finish_result("exact_structures", measure(args.vectors, args.runs), markdown, plot)


if __name__ == "__main__":
    main()
