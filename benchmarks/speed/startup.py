"""Start-up cost: ``import dphr_haystack`` and ``dphr --help``, this checkout against another, in one run.

    .venv/bin/python -m benchmarks.speed.startup [--other /path/to/older/checkout] [--runs 5]

Each command runs in a fresh interpreter (``python -c "import dphr_haystack"``, ``python -m dphr_haystack --help``)
with ``PYTHONPATH`` set to a checkout, alternating between the checkouts; the median wall time and the peak RSS
(``ru_maxrss`` of the child) of each are reported, with the ratio to the other checkout. The other checkout is
typically a ``git worktree`` of an older commit. Writes results/import.json and .png.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, finish_result, machine, pyplot, save_figure

COMMANDS = {"import dphr_haystack": ["-c", "import dphr_haystack"], "dphr --help": ["-m", "dphr_haystack", "--help"]}


def _run(checkout: Path, args: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one fresh interpreter running ``args`` against ``checkout``."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "HAYSTACK_TELEMETRY_ENABLED": "False"}
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *args], cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)  # the child's own resource usage
    elapsed = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{args} failed in {checkout}: {proc.stderr.read().decode()[-500:]}")
    return elapsed, usage.ru_maxrss / 1024


def measure(other: Path | None, runs: int) -> dict[str, Any]:
    started = time.perf_counter()
    checkouts = {"this checkout": ROOT, **({"other": other} if other else {})}
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(runs):
        for name, checkout in checkouts.items():
            for command, args in COMMANDS.items():
                samples.setdefault((name, command), []).append(_run(checkout, args))
    rows = []
    for (name, command), values in samples.items():
        rows.append(
            {
                "checkout": name,
                "path": str(checkouts[name]),
                "command": command,
                "median_s": statistics.median(v[0] for v in values),
                "peak_rss_mib": statistics.median(v[1] for v in values),
            }
        )
    for row in rows:
        twin = next((r for r in rows if r["command"] == row["command"] and r["checkout"] == "other"), None)
        row["ratio_to_other"] = row["median_s"] / twin["median_s"] if twin else None
    return {"machine": machine(), "runs": runs, "rows": rows, "seconds": time.perf_counter() - started}


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Start-up, median of {result['runs']} fresh interpreters each, {result['machine']['cpu']}:",
        "",
        "| checkout | command | wall s | peak RSS MiB | ratio to other |",
        "|---|---|---:|---:|---:|",
    ]
    for row in result["rows"]:
        ratio = f"{row['ratio_to_other']:.3f}" if row["ratio_to_other"] is not None else "—"
        lines.append(
            f"| {row['checkout']} (`{row['path']}`) | `{row['command']}` | {row['median_s']:.2f} | "
            f"{row['peak_rss_mib']:.0f} | {ratio} |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 2.8))
    labels = [f"{r['checkout']}: {r['command']}" for r in result["rows"]]
    ax.barh(labels, [r["median_s"] for r in result["rows"]], color="#4c72b0")
    ax.invert_yaxis()
    ax.set_xlabel("seconds (median)")
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--other", type=Path, help="another checkout to compare with (e.g. a git worktree)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    finish_result("import", measure(args.other, args.runs), markdown, plot)


if __name__ == "__main__":
    main()
