"""Widening float16 stored vectors to float32: numpy's cast against torch's, by how many vectors are widened.

    .venv/bin/python -m benchmarks.speed.half_widening [--vectors 8 32 64 256 1024 5172 16384] [--repeats 200]

A search that reads whole passages (an index with key vectors) widens every stored vector of the passages its keys
hit, ~5,000 float16 vectors of d=384 a query on SQuAD-open-small; :meth:`dphr_haystack.index.codec.VectorCodec.decode`
hands arrays of ``TORCH_HALF_MIN`` values or more to torch. For each count of vectors (random normal, one array per
count) numpy's cast, torch's and the codec's ``decode`` (either, by size) run ``--repeats`` times each, the order
rotated every round, on the threads torch is given (``--threads``). Reported per count: p50 / p95 ms of each,
numpy's p50 over torch's, and whether all three give the same bits (NaN aside).
Writes results/half_widening.json and .png.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import finish_result, machine, percentiles, pyplot, save_figure

WAYS = ("numpy", "torch", "codec")


def widen(stored: np.ndarray, way: str) -> np.ndarray:
    """``stored`` (float16) as float32, by numpy's cast, torch's or the codec's ``decode``."""
    if way == "numpy":
        return stored.astype(np.float32)
    if way == "codec":
        from dphr_haystack.index.codec import VectorCodec

        return VectorCodec("float16").decode(stored)
    import torch

    return torch.from_numpy(stored).float().numpy()


def time_widening(vectors: int, dim: int, repeats: int, seed: int = 0) -> dict[str, Any]:
    """p50 / p95 ms of each way of widening ``vectors`` × ``dim`` float16 values and whether they agree bitwise."""
    stored = np.random.default_rng(seed).standard_normal((vectors, dim)).astype(np.float16)
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    for r in range(repeats):
        for way in WAYS[r % len(WAYS) :] + WAYS[: r % len(WAYS)]:
            start = time.perf_counter()
            widen(stored, way)
            times[way].append((time.perf_counter() - start) * 1000)
    row: dict[str, Any] = {"vectors": vectors, "values": vectors * dim}
    row.update({way: percentiles(times[way]) for way in WAYS})
    row["numpy_over_torch_p50"] = row["numpy"]["p50_ms"] / row["torch"]["p50_ms"]
    first = widen(stored, WAYS[0])
    row["same_bits"] = all(np.array_equal(first, widen(stored, way)) for way in WAYS[1:])
    return row


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"float16 vectors of d={result['dim']} widened to float32, {result['repeats']} times each, "
        f"{result['threads']} torch threads.",
        "",
        "| vectors | values | numpy p50 / p95 ms | torch p50 / p95 ms | codec p50 / p95 ms | numpy / torch p50 "
        "| same bits |",
        "|---:|---:|---|---|---|---:|---|",
    ]
    for row in result["rows"]:
        times = " | ".join(f"{row[way]['p50_ms']:.3f} / {row[way]['p95_ms']:.3f}" for way in WAYS)
        lines.append(
            f"| {row['vectors']:,} | {row['values']:,} | {times} | {row['numpy_over_torch_p50']:.2f}× | "
            f"{row['same_bits']} |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    xs = [row["values"] for row in result["rows"]]
    for way in WAYS:
        ax.plot(xs, [row[way]["p50_ms"] for row in result["rows"]], marker="o", label=f"{way} (p50)")
    ax.axvline(result["torch_half_min"], color="grey", linestyle=":", label="codec hands to torch from here")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("float16 values widened")
    ax.set_ylabel("ms")
    ax.set_title("float16 → float32")
    ax.legend()
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", type=int, nargs="+", default=[8, 32, 64, 256, 1024, 5172, 16384])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--name", default="half_widening")
    args = parser.parse_args()
    if min(args.vectors) < 1 or args.dim < 1 or args.repeats < 1:
        parser.error("--vectors, --dim and --repeats must be positive")
    import torch

    from dphr_haystack.index.codec import TORCH_HALF_MIN

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    rows = [time_widening(n, args.dim, args.repeats) for n in sorted(set(args.vectors))]
    result = {
        "machine": machine(),
        "dim": args.dim,
        "repeats": args.repeats,
        "threads": args.threads,
        "torch_half_min": TORCH_HALF_MIN,
        "rows": rows,
        "seconds": time.perf_counter() - start,
    }
    finish_result(args.name, result, markdown, plot)


if __name__ == "__main__":
    main()
