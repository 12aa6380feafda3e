"""What a user waits for: one cold ``dphr search`` and queries under 4 concurrent clients, this checkout vs another.

    .venv/bin/python -m benchmarks.speed.cli_search --other /tmp/base [--runs 5] [--clients 4] [--queries 40]

The other checkout is a copy of an older commit (``git archive COMMIT | tar -x -C /tmp/base``); it needs no install:
every command runs in a fresh interpreter with ``PYTHONPATH`` set to a checkout. The index is built once with this
checkout's ``dphr index`` from the first ``--paragraphs`` SQuAD dev-public paragraphs (cached under
``runs/bench-cache/``) and searched by both.

(a) cold start: ``python -m dphr_haystack search --index IDX QUESTION`` (the default shipped model, phrase answers),
alternating between the checkouts, ``--runs`` times each; median wall time and peak RSS of the child.
(b) concurrent clients: ``--clients`` processes each open the index with ``dphr_haystack.saved_index.open_searcher``
(the Python API, default settings), answer one warm-up question, wait until all are ready, then ask ``--queries``
SQuAD questions one at a time (``search(q, unit="phrase", top_k=10)``); p50/p95 ms per query over all clients and
total queries/s (all queries / wall time from the common start to the last client's end). The checkouts take
turns, ``--rounds`` times each, so drift hits both alike. Writes results/cli_search.json and .png.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, SQUAD_DEV, finish_result, machine, percentiles, pyplot, save_figure, squad_passages

CACHE = ROOT / "runs" / "bench-cache"
QUESTION = "Which NFL team represented the AFC at Super Bowl 50?"

# One client: open the searcher, warm up, say "ready", wait for "go", time each query, print the latencies as JSON.
CLIENT = """
import json, sys, time
from dphr_haystack.saved_index import open_searcher
index, questions = sys.argv[1], json.loads(open(sys.argv[2]).read())
searcher = open_searcher(index)
searcher.search(questions[0], unit="phrase", top_k=10)
print("ready", flush=True)
sys.stdin.readline()
latencies = []
for question in questions:
    started = time.perf_counter()
    searcher.search(question, unit="phrase", top_k=10)
    latencies.append(1000 * (time.perf_counter() - started))
print(json.dumps({"latencies_ms": latencies, "end": time.time()}), flush=True)
"""


def _env(checkout: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(checkout), "HAYSTACK_TELEMETRY_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    env.pop("DPHR_THREADS", None)  # each checkout with its own defaults
    return env


def build_index(paragraphs: int) -> tuple[Path, list[str]]:
    """The benchmark's index (built once by this checkout's ``dphr index``) and the questions about it."""
    passages, questions = squad_passages(SQUAD_DEV, paragraphs)
    out = CACHE / f"cli-search-{paragraphs}"
    if not (out / "manifest.json").is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        corpus = CACHE / f"cli-search-{paragraphs}.jsonl"
        corpus.write_text("".join(json.dumps(p) + "\n" for p in passages))
        subprocess.run(
            [
                sys.executable,
                "-m",
                "dphr_haystack",
                "index",
                "--corpus",
                str(corpus),
                "--out",
                str(out),
                "--no-progress",
            ],
            cwd=ROOT,
            env=_env(ROOT),
            check=True,
        )
    return out, [q["question"] for q in questions]


def cold_search(checkout: Path, index: Path) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (all threads) and peak RSS (MiB) of one fresh ``dphr search`` of one question."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dphr_haystack", "search", "--index", str(index), QUESTION],
        cwd=checkout,
        env=_env(checkout),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"dphr search failed in {checkout}: {proc.stderr.read().decode()[-800:]}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def concurrent_clients(checkout: Path, index: Path, questions: list[str], clients: int, per_client: int) -> dict:
    """Per-query latencies of ``clients`` processes querying at once, and the total queries/s."""
    files, procs = [], []
    for c in range(clients):
        mine = [questions[(c * per_client + i) % len(questions)] for i in range(per_client)]
        file = CACHE / f"cli-search-questions-{c}.json"
        file.write_text(json.dumps(mine))
        files.append(file)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", CLIENT, str(index), str(file)],
                cwd=checkout,
                env=_env(checkout),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for proc in procs:
        line = proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"a client in {checkout} failed: {line} {proc.stderr.read()[-800:]}")
    start = time.time()
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    latencies, ends = [], []
    for proc in procs:
        out, err = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"a client in {checkout} failed: {err[-800:]}")
        record = json.loads(out.strip().splitlines()[-1])
        latencies += record["latencies_ms"]
        ends.append(record["end"])
    return {"latencies_ms": latencies, "seconds": max(ends) - start}


def measure(other: Path | None, runs: int, clients: int, per_client: int, rounds: int, paragraphs: int) -> dict:
    started = time.perf_counter()
    index, questions = build_index(paragraphs)
    checkouts = {"this checkout": ROOT, **({"other": other} if other else {})}
    cold: dict[str, list[tuple[float, float, float]]] = {name: [] for name in checkouts}
    for _ in range(runs):
        for name, checkout in checkouts.items():
            cold[name].append(cold_search(checkout, index))
    concurrent: dict[str, dict[str, list]] = {name: {"latencies_ms": [], "seconds": []} for name in checkouts}
    for r in range(rounds):
        for name, checkout in checkouts.items():
            got = concurrent_clients(checkout, index, questions[r * clients * per_client :], clients, per_client)
            concurrent[name]["latencies_ms"] += got["latencies_ms"]
            concurrent[name]["seconds"].append(got["seconds"])
    rows = []
    for name, checkout in checkouts.items():
        queries = len(concurrent[name]["latencies_ms"])
        rows.append(
            {
                "checkout": name,
                "path": str(checkout),
                "cold_median_s": statistics.median(v[0] for v in cold[name]),
                "cold_runs_s": [v[0] for v in cold[name]],
                "cold_cpu_s": statistics.median(v[1] for v in cold[name]),
                "cold_peak_rss_mib": statistics.median(v[2] for v in cold[name]),
                "concurrent": {
                    **percentiles(concurrent[name]["latencies_ms"]),
                    "queries": queries,
                    "queries_per_s": queries / sum(concurrent[name]["seconds"]),
                },
            }
        )
    if other:
        mine, theirs = rows
        mine["cold_ratio_to_other"] = mine["cold_median_s"] / theirs["cold_median_s"]
        mine["p50_ratio_to_other"] = mine["concurrent"]["p50_ms"] / theirs["concurrent"]["p50_ms"]
        mine["qps_ratio_to_other"] = mine["concurrent"]["queries_per_s"] / theirs["concurrent"]["queries_per_s"]
    return {
        "machine": machine(),
        "index": {"path": str(index.relative_to(ROOT)), "paragraphs": paragraphs},
        "setup": {"runs": runs, "clients": clients, "queries_per_client": per_client, "rounds": rounds},
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    s = result["setup"]
    lines = [
        f"`dphr search` on {result['index']['paragraphs']} SQuAD dev-public paragraphs (shipped model, phrase "
        f"answers, top-10), {result['machine']['cpu']} ({result['machine']['cores']} cores), load average at the "
        f"end {result['load_average_end'][0]:.1f}. Cold: one question in a fresh process, median of {s['runs']}. "
        f"Concurrent: {s['clients']} client processes querying one at a time, {s['queries_per_client']} questions "
        f"each, {s['rounds']} rounds.",
        "",
        "| checkout | cold `dphr search` s | its CPU s | peak RSS MiB | concurrent p50 ms | p95 ms | queries/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        c = row["concurrent"]
        lines.append(
            f"| {row['checkout']} (`{row['path']}`) | {row['cold_median_s']:.2f} | {row['cold_cpu_s']:.2f} | "
            f"{row['cold_peak_rss_mib']:.0f} | "
            f"{c['p50_ms']:.1f} | {c['p95_ms']:.1f} | {c['queries_per_s']:.1f} |"
        )
    first = result["rows"][0]
    if "cold_ratio_to_other" in first:
        lines += [
            "",
            f"This checkout / other: cold {first['cold_ratio_to_other']:.2f}x, concurrent p50 "
            f"{first['p50_ratio_to_other']:.3f}x, queries/s {first['qps_ratio_to_other']:.2f}x.",
        ]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 2.8))
    names = [r["checkout"] for r in result["rows"]]
    ax1.barh(names, [r["cold_median_s"] for r in result["rows"]], color="#4c72b0")
    ax1.set_xlabel("cold dphr search, s (median)")
    ax2.barh(names, [r["concurrent"]["p50_ms"] for r in result["rows"]], color="#dd8452")
    ax2.set_xscale("log")
    ax2.set_xlabel(f"p50 ms per query, {result['setup']['clients']} clients (log)")
    for ax in (ax1, ax2):
        ax.invert_yaxis()
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--other", type=Path, help="another checkout to compare with (e.g. an older commit's copy)")
    parser.add_argument("--runs", type=int, default=5, help="cold searches per checkout")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--queries", type=int, default=40, help="questions per client and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--paragraphs", type=int, default=300)
    args = parser.parse_args()
    other = args.other.resolve() if args.other else None
    result = measure(other, args.runs, args.clients, args.queries, args.rounds, args.paragraphs)
    finish_result("cli_search", result, markdown, plot)


if __name__ == "__main__":
    main()
