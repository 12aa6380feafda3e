"""The REST API (``dphr_haystack.nodes.rest_api``): upload-to-searchable time and /query latency under 4 clients.

    .venv/bin/python -m benchmarks.haystack.rest_api [--paragraphs 100] [--queries 60] [--model dphr-minilm-squad]

Starts ``uvicorn dphr_haystack.nodes.rest_api:app`` on 127.0.0.1 serving ``pipelines/rest_api.yml`` over a fresh
shared store directory, uploads one text file of ``--paragraphs`` SQuAD dev paragraphs (blank-line separated)
through ``POST /file-upload`` and times it until a ``/query`` answers from it. Then ``--queries`` of those
paragraphs' questions go to ``/query`` from 4 concurrent clients: once served by the phrase query pipeline
(``query``), once (same store directory, the server restarted with ``QUERY_PIPELINE_NAME=bm25``) by the BM25
pipeline. Reports p50/p95 per request, queries/s, and the share of queries whose top document is the gold paragraph.
Needs the ``serve`` extra (``scripts/setup.sh`` installs it) and ``../shared/data``.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import (
    DEFAULT_MODEL,
    ROOT,
    finish_result,
    machine,
    model_id,
    percentiles,
    pyplot,
    save_figure,
    squad_passages,
)

CLIENTS = 4
WARMUP = 4


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """The REST API in a child process, serving one query pipeline of pipelines/rest_api.yml."""

    def __init__(self, store: Path, model: str, query_pipeline: str, log: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "PIPELINE_YAML_PATH": str(ROOT / "pipelines" / "rest_api.yml"),
            "QUERY_PIPELINE_NAME": query_pipeline,
            "DOCUMENTSTORE_PARAMS_PATH": str(store),
            "RETRIEVER_PARAMS_MODEL": model,
            "FILE_UPLOAD_PATH": str(store.parent / "uploads"),
            "HAYSTACK_TELEMETRY_ENABLED": "False",
            "CONCURRENT_REQUEST_PER_WORKER": str(CLIENTS),
        }
        self._log = log.open("w")
        started = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "dphr_haystack.nodes.rest_api:app", "--port", str(self.port)],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready(log)
        self.startup_s = time.perf_counter() - started

    def _wait_ready(self, log: Path) -> None:
        import requests

        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{self.url}/initialized", timeout=2).json() is True:
                    return
            except (requests.ConnectionError, requests.Timeout, ValueError):
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        self.stop()
        raise SystemExit(f"the REST API did not start:\n{log.read_text()[-3000:]}")

    def query(self, question: str) -> tuple[float, dict]:
        import requests

        started = time.perf_counter()
        response = requests.post(f"{self.url}/query", json={"query": question}, timeout=300)
        elapsed = (time.perf_counter() - started) * 1000
        response.raise_for_status()
        return elapsed, response.json()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self._log.close()


def _top_is_gold(result: dict, gold_text: str) -> bool:
    docs = result.get("documents") or []
    return bool(docs) and docs[0]["content"].strip() == gold_text.strip()


def _load(server: Server, questions: list[dict], texts: dict[str, str]) -> dict[str, Any]:
    """All questions from CLIENTS concurrent clients (after a few warm-up requests)."""
    for q in questions[:WARMUP]:
        server.query(q["question"])
    started = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(lambda q: server.query(q["question"]), questions))
    wall = time.perf_counter() - started
    hits = [_top_is_gold(r, texts[q["passage_id"]]) for (_, r), q in zip(results, questions)]
    return {
        **percentiles([ms for ms, _ in results]),
        "queries_per_s": len(questions) / wall,
        "top1_gold_paragraph": sum(hits) / len(hits),
        "queries": len(questions),
    }


def measure(paragraphs: int, queries: int, model: str) -> dict[str, Any]:
    import requests

    started = time.perf_counter()
    passages, questions = squad_passages(limit=paragraphs)
    texts = {p["id"]: p["text"] for p in passages}
    seen, picked = set(), []
    for q in questions:  # one question per paragraph first, then more, for an even spread
        if q["passage_id"] not in seen:
            seen.add(q["passage_id"])
            picked.append(q)
    picked += [q for q in questions if q not in picked]
    picked = picked[:queries]
    result: dict[str, Any] = {"machine": machine(), "model": model, "model_id": model_id(model)}
    with tempfile.TemporaryDirectory(prefix="dphr-rest-") as tmp:
        store, work = Path(tmp) / "store", Path(tmp)
        upload = work / "squad-paragraphs.txt"
        upload.write_text("\n\n".join(p["text"].replace("\n", " ") for p in passages), encoding="utf-8")
        server = Server(store, model, "query", work / "server-query.log")
        try:
            t0 = time.perf_counter()
            with upload.open("rb") as handle:
                response = requests.post(
                    f"{server.url}/file-upload", files={"files": (upload.name, handle, "text/plain")}, timeout=3600
                )
            response.raise_for_status()
            uploaded = time.perf_counter() - t0
            probe = picked[0]
            while not _top_is_gold(server.query(probe["question"])[1], texts[probe["passage_id"]]):
                if time.perf_counter() - t0 > 600:
                    raise SystemExit("the uploaded file never became searchable")
                time.sleep(0.2)
            searchable = time.perf_counter() - t0
            result["upload"] = {
                "paragraphs": len(passages),
                "bytes": upload.stat().st_size,
                "upload_request_s": uploaded,
                "upload_to_searchable_s": searchable,
                "server_startup_s": server.startup_s,
            }
            result["phrase"] = _load(server, picked, texts)
        finally:
            server.stop()
        server = Server(store, model, "bm25", work / "server-bm25.log")
        try:
            result["bm25"] = _load(server, picked, texts)
        finally:
            server.stop()
    result["p50_ratio_phrase_to_bm25"] = result["phrase"]["p50_ms"] / result["bm25"]["p50_ms"]
    result["seconds"] = time.perf_counter() - started
    return result


def markdown(result: dict[str, Any]) -> str:
    up = result["upload"]
    lines = [
        f"The REST API (uvicorn, 1 worker) serving `pipelines/rest_api.yml`, model `{result['model']}`, "
        f"{result['machine']['cpu']} ({result['machine']['cores']} cores):",
        "",
        f"- upload of a {up['bytes'] / 1024:.0f} KiB text file of {up['paragraphs']} SQuAD dev paragraphs "
        f"(`POST /file-upload`): {up['upload_request_s']:.1f} s; answerable by `/query` "
        f"{up['upload_to_searchable_s']:.1f} s after the upload began",
        "",
        f"| `/query` pipeline, {CLIENTS} concurrent clients | p50 ms | p95 ms | queries/s | top-1 doc is gold |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, label in (("phrase", "phrase (`query`: PhraseRetriever)"), ("bm25", "BM25 (`bm25`)")):
        row = result[name]
        lines.append(
            f"| {label} | {row['p50_ms']:.0f} | {row['p95_ms']:.0f} | {row['queries_per_s']:.1f} | "
            f"{row['top1_gold_paragraph']:.3f} |"
        )
    lines.append(f"\np50 ratio phrase / BM25: {result['p50_ratio_phrase_to_bm25']:.2f}")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 2.6))
    names = ["phrase", "bm25"]
    ax.barh([f"{n} p50" for n in names], [result[n]["p50_ms"] for n in names], color="#4c72b0")
    ax.barh([f"{n} p95" for n in names], [result[n]["p95_ms"] for n in names], color="#dd8452")
    ax.invert_yaxis()
    ax.set_xlabel(f"/query latency, ms ({CLIENTS} concurrent clients)")
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paragraphs", type=int, default=100)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args()
    finish_result("rest_api", measure(args.paragraphs, args.queries, args.model), markdown, plot)


if __name__ == "__main__":
    main()
