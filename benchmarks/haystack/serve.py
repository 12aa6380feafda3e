"""``dphr serve`` from an empty store: time until it serves, the restart, and ``/compare`` latency per column.

    .venv/bin/python -m benchmarks.haystack.serve [--paragraphs 1702] [--questions 40]

Runs ``python -m dphr_haystack serve --corpus <the first --paragraphs of the shipped squad-dev> --store <fresh dir>``
(the shipped model, CPU) and times it until ``/initialized`` answers: model load plus indexing, what a user waits for
the first time. Restarts it on the same store (no indexing) and times that too. Then ``--questions`` SQuAD dev
questions whose paragraph is indexed go to ``POST /compare`` (one client, top_k 5, after 3 warm-up questions): each
column's own latency as the server reports it (p50/p95), the request's round trip, and how often each column is right
at rank 1 (phrase answers: SQuAD exact match of the top answer; the others: the top document is the question's
paragraph). Needs nothing outside the package (the shipped corpus and model).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_MODEL, ROOT, finish_result, machine, model_id, percentiles, pyplot, save_figure

COLUMNS = ("answers", "bm25", "passages", "hybrid")
WARMUP = 3
TOP_K = 5


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(store: Path, corpus: Path, log: Path) -> tuple[subprocess.Popen, str, float]:
    """Start ``dphr serve`` and wait until it answers; returns the process, its URL and the seconds it took."""
    import requests

    port = _free_port()
    command = [sys.executable, "-m", "dphr_haystack", "serve", "--store", str(store), "--corpus", str(corpus)]
    command += ["--device", "cpu", "--port", str(port)]
    env = {**os.environ, "HAYSTACK_TELEMETRY_ENABLED": "False"}
    started = time.perf_counter()
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    while True:
        try:
            if requests.get(f"{url}/initialized", timeout=2).json() is True:
                return proc, url, time.perf_counter() - started
        except (requests.ConnectionError, requests.Timeout, ValueError):
            pass
        if proc.poll() is not None:
            raise SystemExit(f"dphr serve stopped:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=60)


def _compare(url: str, examples: list, paragraph_ids: set[str]) -> dict[str, Any]:
    import requests

    from dphr_haystack.answers import exact_match

    for example in examples[:WARMUP]:
        requests.post(f"{url}/compare", json={"query": example.question, "top_k": TOP_K}, timeout=300)
    latencies: dict[str, list[float]] = {name: [] for name in COLUMNS}
    right = dict.fromkeys(COLUMNS, 0)
    round_trips = []
    for example in examples[WARMUP:]:
        started = time.perf_counter()
        response = requests.post(f"{url}/compare", json={"query": example.question, "top_k": TOP_K}, timeout=300)
        round_trips.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
        for column in response.json()["columns"]:
            name = column["name"]
            latencies[name].append(column["ms"])
            if name == "answers":
                top = column["answers"][0]["answer"] if column["answers"] else ""
                right[name] += exact_match(top, example.answers)
            else:
                top_id = column["documents"][0]["id"] if column["documents"] else ""
                right[name] += top_id == example.gold_passage_id
    measured = len(examples) - WARMUP
    return {
        "questions": measured,
        "round_trip": percentiles(round_trips),
        "columns": {name: {**percentiles(latencies[name]), "top1_right": right[name] / measured} for name in COLUMNS},
        "indexed_paragraphs": len(paragraph_ids),
    }


def measure(paragraphs: int, questions: int) -> dict[str, Any]:
    from dphr_haystack.corpus import read_corpus
    from dphr_haystack.evaluation import read_questions

    started = time.perf_counter()
    result: dict[str, Any] = {
        "machine": machine(),
        "model": DEFAULT_MODEL,
        "model_id": model_id(DEFAULT_MODEL),
    }
    with tempfile.TemporaryDirectory(prefix="dphr-serve-bench-") as tmp:
        work = Path(tmp)
        corpus = work / "corpus.jsonl"
        ids: set[str] = set()
        with corpus.open("w", encoding="utf-8") as handle:
            for passage in read_corpus("squad-dev"):
                if len(ids) == paragraphs:
                    break
                ids.add(passage.id)
                handle.write(json.dumps({"id": passage.id, "title": passage.title, "text": passage.text}) + "\n")
        answerable = [q for q in read_questions("squad-dev") if q.gold_passage_id in ids]
        picked = random.Random(0).sample(answerable, min(len(answerable), questions + WARMUP))
        proc, url, first_start = _serve(work / "store", corpus, work / "first.log")
        _stop(proc)
        log = (work / "first.log").read_text()
        indexed = re.search(r"indexed (\d+) passages in (\d+)s", log)
        proc, url, restart = _serve(work / "store", corpus, work / "restart.log")
        try:
            result["compare"] = _compare(url, picked, ids)
        finally:
            _stop(proc)
    result["startup"] = {
        "paragraphs": len(ids),
        "first_start_s": first_start,
        "indexing_s": float(indexed.group(2)) if indexed else None,
        "restart_s": restart,
    }
    result["seconds"] = time.perf_counter() - started
    return result


TITLES = {
    "answers": "phrase answers (phrase_qa.yml), top answer EM",
    "bm25": "BM25 (bm25.yml), top passage is gold",
    "passages": "phrase passages (phrase_passages.yml), top passage is gold",
    "hybrid": "BM25 + phrase RRF (hybrid_rrf.yml), top passage is gold",
}


def markdown(result: dict[str, Any]) -> str:
    start, compare = result["startup"], result["compare"]
    lines = [
        f"`dphr serve --corpus` ({start['paragraphs']} squad-dev paragraphs, shipped model, CPU), "
        f"{result['machine']['cpu']} ({result['machine']['cores']} cores):",
        "",
        f"- empty store to serving: {start['first_start_s']:.0f} s (indexing {start['indexing_s'] or 0:.0f} s); "
        f"restart on the filled store: {start['restart_s']:.1f} s",
        f"- `POST /compare` round trip (4 pipelines, top_k {TOP_K}, one client, {compare['questions']} questions): "
        f"p50 {compare['round_trip']['p50_ms']:.0f} ms, p95 {compare['round_trip']['p95_ms']:.0f} ms",
        "",
        "| column | p50 ms | p95 ms | right at rank 1 |",
        "|---|---:|---:|---:|",
    ]
    for name in COLUMNS:
        row = compare["columns"][name]
        lines.append(f"| {TITLES[name]} | {row['p50_ms']:.1f} | {row['p95_ms']:.1f} | {row['top1_right']:.3f} |")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 2.4))
    rows = result["compare"]["columns"]
    ax.barh(list(COLUMNS), [rows[n]["p50_ms"] for n in COLUMNS], color="#4c72b0", label="p50")
    ax.invert_yaxis()
    ax.set_xlabel("/compare column latency, ms (p50)")
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paragraphs", type=int, default=1702, help="first paragraphs of squad-dev (all: 1702)")
    parser.add_argument("--questions", type=int, default=40)
    args = parser.parse_args()
    finish_result("serve", measure(args.paragraphs, args.questions), markdown, plot)


if __name__ == "__main__":
    main()
