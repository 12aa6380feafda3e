"""Everyday operations on a large phrase index, in place: add, delete, a second process catching up, a writer killed
in the middle of an add, the REST server starting on it.

    .venv/bin/python -m benchmarks.index.large_store_ops [--index runs/scale/index-200k] [--questions 100]

Each step is timed on the index as it is (the shipped model; the index ends holding what it held, plus the tombstones
of the passages it added and deleted):

1. a **reader** process loads the index (seconds, RSS) and answers the probe questions (SQuAD-open-small's);
2. this process, the **writer**, adds the 24 paragraphs of ``benchmarks/data/user_corpus`` (encoding and commit);
   the reader catches up (``PhraseIndex.refresh``) and answers a question only they answer;
3. the writer deletes them; the reader catches up and no longer gives that answer;
4. a writer process adding ``--crash-passages`` copies of them (new ids, a commit every :data:`CRASH_CHUNK`) is
   killed with SIGKILL ``--kill-after`` seconds after it starts writing; the index then loads with its whole
   commits only (what it appended after its last commit rolled back), and a new writer adds and deletes again (what
   the killed writer committed is deleted first, so the index keeps its corpus);
5. the probe questions' answers (text and passage) before and after all of it: they must not change;
6. **REST**: ``uvicorn dphr_haystack.nodes.rest_api:app`` with a query pipeline whose store is the index
   (``phrase_index:``, read-only): seconds until ``/initialized`` answers, then ``/query`` round trips.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import (
    DEFAULT_MODEL,
    ROOT,
    finish_result,
    machine,
    model_id,
    percentiles,
    proc_memory,
    pyplot,
    save_figure,
    squad_open_small_questions,
)

INDEX = ROOT / "runs" / "scale" / "index-200k"
USER_CORPUS = ROOT / "benchmarks" / "data" / "user_corpus" / "passages.jsonl"
# Answered by the user corpus only (paragraph uc-08): the reader finds it after the add, not after the delete.
NEW_QUESTION, NEW_ANSWER = "Who served as Velmora's first mayor?", "Aldo Ferrin"
TOP_K = 10
CRASH_CHUNK = 240  # the killed writer commits every this many passages, so the kill lands between or in commits


def user_passages(copies: int = 1, tag: str = "ops") -> list[dict[str, Any]]:
    """The user corpus' paragraphs ``copies`` times over, each copy under new ids (``<tag>-<copy>-<id>``)."""
    records = [json.loads(line) for line in USER_CORPUS.read_text().splitlines() if line.strip()]
    return [
        {**r, "id": f"{tag}-{c}-{r['id']}", "document_id": f"{tag}-{c}-{r['title'].split(' — ')[0]}"}
        for c in range(copies)
        for r in records
    ]


# ----------------------------------------------------------------------------- the processes
def serve_reader(index_dir: str, model_name: str) -> None:
    """A reader process: loads the index, then answers one JSON command a line on stdin with one JSON line."""
    from dphr_haystack import PhraseIndex, PhraseSearcher
    from dphr_haystack.nodes import load_phrase_model

    model = load_phrase_model(model_name)
    started = time.perf_counter()
    index = PhraseIndex.load(index_dir, model=model)
    searcher = PhraseSearcher(index, model)
    _say({"loaded_s": time.perf_counter() - started, "memory_mib": proc_memory()})
    for line in sys.stdin:
        command = json.loads(line)
        started = time.perf_counter()
        if command["do"] == "refresh":
            changed = index.refresh()
            _say({"refresh_s": time.perf_counter() - started, "changed": changed, "passages": index.num_passages})
        elif command["do"] == "ask":
            hits = searcher.search_batch(command["questions"], "phrase", TOP_K)
            answers = [[(h.text, h.passage_id) for h in found] for found in hits]
            _say({"answers": answers, "ask_s": time.perf_counter() - started})
        else:
            return


def _say(payload: dict[str, Any]) -> None:
    print(json.dumps(payload), flush=True)


def crash_writer(index_dir: str, model_name: str, passages: int) -> None:
    """A writer process that adds ``passages`` copies of the user corpus (it is killed before it ends)."""
    from dphr_haystack import PhraseIndex
    from dphr_haystack.encode.add import add_passages
    from dphr_haystack.nodes import load_phrase_model

    model = load_phrase_model(model_name)
    index = PhraseIndex.load(index_dir, model=model)
    copies = -(-passages // 24)
    _say({"writing": passages})
    add_passages(index, model, user_passages(copies, "crash")[:passages], chunk_size=CRASH_CHUNK, progress=False)


class Reader:
    """The reader process, driven from here."""

    def __init__(self, index_dir: Path, model_name: str) -> None:
        self.proc = _module_process("--reader", str(index_dir), "--model", model_name, stdin=subprocess.PIPE)
        self.loaded = self._read()

    def ask(self, **command: Any) -> dict[str, Any]:
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def _read(self) -> dict[str, Any]:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the reader process ended: {self.proc.stderr.read()[-3000:]}")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()  # the reader's loop ends with its input
        self.proc.wait(timeout=60)


def _module_process(*args: str, stdin=None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.index.large_store_ops", *args],
        cwd=ROOT,
        env=env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# ----------------------------------------------------------------------------- REST
REST_YAML = """version: 1.26.4.post0
components:
  - name: DocumentStore
    type: PhraseDocumentStore
    params:
      embedding_dim: 384
      similarity: cosine
      phrase_index: {index}
  - name: Retriever
    type: PhraseRetriever
    params:
      document_store: DocumentStore
      model: {model}
      unit: phrase
      top_k: 5
pipelines:
  - name: query
    nodes:
      - name: Retriever
        inputs: [Query]
"""


def rest(index_dir: Path, model_name: str, questions: list[str], timeout: float) -> dict[str, Any]:
    """Seconds until the REST server answers ``/initialized`` on the index, and ``/query`` round trips."""
    with tempfile.TemporaryDirectory() as tmp:
        yaml = Path(tmp) / "large.yml"
        yaml.write_text(REST_YAML.format(index=index_dir.resolve(), model=model_name))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "PIPELINE_YAML_PATH": str(yaml), "QUERY_PIPELINE_NAME": "query"}
        command = [sys.executable, "-m", "uvicorn", "dphr_haystack.nodes.rest_api:app", "--port", str(port)]
        started = time.perf_counter()
        server = subprocess.Popen(command, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        base = f"http://127.0.0.1:{port}"
        try:
            while not _get(f"{base}/initialized"):
                if server.poll() is not None:
                    raise SystemExit(f"the REST server ended: {server.stderr.read().decode()[-3000:]}")
                if time.perf_counter() - started > timeout:
                    raise SystemExit(f"the REST server did not start within {timeout:.0f} s")
                time.sleep(0.5)
            ready = time.perf_counter() - started
            times, found = [], 0
            for question in questions:
                t0 = time.perf_counter()
                body = _post(f"{base}/query", {"query": question})
                times.append((time.perf_counter() - t0) * 1000)
                found += bool(body.get("answers"))
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=60)
    return {"ready_s": ready, "query_ms": percentiles(times), "queries": len(times), "answered": found}


def _get(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def _post(url: str, payload: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as r:
        return json.loads(r.read())


# ----------------------------------------------------------------------------- the run
def _counts(index_dir: Path) -> dict[str, int]:
    return json.loads((index_dir / "manifest.json").read_text())["counts"]


def _vectors_bytes(index_dir: Path) -> int:
    return (index_dir / "vectors.bin").stat().st_size


def _crash_ids(index) -> list[str]:
    """The live passages a killed crash writer committed (ids ``crash-…``)."""
    return [pid for pid in index.live_passage_ids() if pid.startswith("crash-")]


def _answered(reply: dict[str, Any]) -> bool:
    return any(NEW_ANSWER.lower() in text.lower() for text, _ in reply["answers"][0])


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from dphr_haystack import PhraseIndex
    from dphr_haystack.encode.add import add_passages
    from dphr_haystack.nodes import load_phrase_model

    started = time.perf_counter()
    probes = [ex.question for ex in squad_open_small_questions(args.questions)]
    before = _counts(args.index)
    steps: dict[str, Any] = {"counts_before": before}
    reader = Reader(args.index, args.model)
    steps["reader_load"] = reader.loaded
    answers_before = reader.ask(do="ask", questions=probes)
    steps["reader_answers_s"] = answers_before["ask_s"]
    model = load_phrase_model(args.model)
    t0 = time.perf_counter()
    writer = PhraseIndex.load(args.index, model=model)
    steps["writer_load_s"] = time.perf_counter() - t0
    added = user_passages()
    t0 = time.perf_counter()
    add_passages(writer, model, added, chunk_size=len(added), progress=False)
    steps["add"] = {"passages": len(added), "seconds": time.perf_counter() - t0}
    steps["add"]["reader_refresh"] = reader.ask(do="refresh")
    steps["add"]["reader_finds_new_answer"] = _answered(reader.ask(do="ask", questions=[NEW_QUESTION]))
    t0 = time.perf_counter()
    deleted = writer.delete_passages([p["id"] for p in added])
    steps["delete"] = {"passages": deleted, "seconds": time.perf_counter() - t0}
    steps["delete"]["reader_refresh"] = reader.ask(do="refresh")
    steps["delete"]["reader_finds_new_answer"] = _answered(reader.ask(do="ask", questions=[NEW_QUESTION]))
    del writer
    # a writer killed in the middle of an add
    committed = _counts(args.index)
    size = _vectors_bytes(args.index)
    crasher = _module_process(
        "--crash-writer", str(args.index), "--model", args.model, "--passages", str(args.crash_passages)
    )
    crasher.stdout.readline()  # it has loaded the index and starts writing
    time.sleep(args.kill_after)
    crasher.kill()
    crasher.wait()
    t0 = time.perf_counter()
    reopened = PhraseIndex.load(args.index, model=model)
    steps["crash"] = {
        "killed_after_s": args.kill_after,
        "passages_being_added": args.crash_passages,
        "counts_committed_before": committed,
        "counts_after_reopen": reopened.manifest["counts"],
        "vectors_bin_bytes_before": size,
        "vectors_bin_bytes_at_kill": _vectors_bytes(args.index),
        "reopen_s": time.perf_counter() - t0,
    }
    after = reopened.manifest["counts"]
    per_vector = size / committed["vectors"]
    kept = after["passages"] - committed["passages"]
    steps["crash"]["passages_kept"] = kept  # the killed writer's commits
    steps["crash"]["whole_commits_only"] = kept % CRASH_CHUNK == 0
    steps["crash"]["uncommitted_bytes_at_kill"] = steps["crash"]["vectors_bin_bytes_at_kill"] - round(
        after["vectors"] * per_vector
    )
    # what the killed writer committed, if it got that far, goes again: the index keeps the corpus it had
    steps["crash"]["deleted_committed"] = reopened.delete_passages(_crash_ids(reopened))
    again = user_passages(1, "after-crash")
    t0 = time.perf_counter()
    add_passages(reopened, model, again, chunk_size=len(again), progress=False)
    reopened.delete_passages([p["id"] for p in again])
    steps["crash"]["next_add_and_delete_s"] = time.perf_counter() - t0
    steps["crash"]["vectors_bin_bytes_after_next_commit"] = _vectors_bytes(args.index)
    del reopened
    steps["reader_final_refresh"] = reader.ask(do="refresh")
    answers_after = reader.ask(do="ask", questions=probes)
    reader.close()
    pairs = list(zip(answers_before["answers"], answers_after["answers"], strict=True))
    steps["probe_answers_changed"] = sum(a != b for a, b in pairs)  # any of the top 10 (text, passage)
    steps["probe_top_answers_changed"] = sum(a[:1] != b[:1] for a, b in pairs)
    steps["probe_changes"] = [
        {"question": q, "before": a[:3], "after": b[:3]} for q, (a, b) in zip(probes, pairs) if a != b
    ][:10]
    steps["counts_after"] = _counts(args.index)
    steps["rest"] = rest(args.index, args.model, probes[: args.rest_questions], args.rest_timeout)
    return {
        "machine": machine(),
        "model": args.model,
        "model_id": model_id(args.model),
        "index": str(args.index),
        "probe_questions": len(probes),
        "steps": steps,
        "seconds": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    s = result["steps"]
    add, delete, crash, rest_ = s["add"], s["delete"], s["crash"], s["rest"]
    loaded = s["reader_load"]
    rows = [
        ("reader loads the index", f"{loaded['loaded_s']:.1f} s, RSS {loaded['memory_mib']['VmRSS']:.0f} MiB"),
        ("writer loads the index", f"{s['writer_load_s']:.1f} s"),
        (f"add {add['passages']} passages (encode + commit)", f"{add['seconds']:.1f} s"),
        (
            "reader catches up",
            f"{add['reader_refresh']['refresh_s']:.2f} s, new answer found: {add['reader_finds_new_answer']}",
        ),
        (f"delete {delete['passages']} passages", f"{delete['seconds']:.1f} s"),
        (
            "reader catches up",
            f"{delete['reader_refresh']['refresh_s']:.2f} s, new answer still found: "
            f"{delete['reader_finds_new_answer']}",
        ),
        (
            f"writer killed {crash['killed_after_s']:.0f} s into adding {crash['passages_being_added']} passages",
            f"reopened in {crash['reopen_s']:.1f} s with {crash['counts_after_reopen']} (committed before: "
            f"{crash['counts_committed_before']}): {crash['passages_kept']} passages of its commits kept (whole "
            f"commits only: {crash['whole_commits_only']}), {crash['uncommitted_bytes_at_kill']:,} bytes it had "
            "appended after its last commit rolled back",
        ),
        ("next add + delete after the crash", f"{crash['next_add_and_delete_s']:.1f} s"),
        (
            f"probe questions ({result['probe_questions']}) whose top answer / top 10 changed",
            f"{s['probe_top_answers_changed']} / {s['probe_answers_changed']}",
        ),
        ("REST server ready (uvicorn, the index as its store)", f"{rest_['ready_s']:.1f} s"),
        (
            f"REST /query, {rest_['queries']} questions",
            f"p50 {rest_['query_ms']['p50_ms']:.0f} ms, p95 {rest_['query_ms']['p95_ms']:.0f} ms",
        ),
    ]
    return "\n".join(["| step | result |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)])


def plot(result: dict[str, Any], path: Path) -> None:
    """Seconds of each timed step."""
    s = result["steps"]
    steps = {
        "reader load": s["reader_load"]["loaded_s"],
        "writer load": s["writer_load_s"],
        "add 24": s["add"]["seconds"],
        "catch up (add)": s["add"]["reader_refresh"]["refresh_s"],
        "delete 24": s["delete"]["seconds"],
        "catch up (delete)": s["delete"]["reader_refresh"]["refresh_s"],
        "reopen after kill": s["crash"]["reopen_s"],
        "REST ready": s["rest"]["ready_s"],
    }
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.barh(list(steps), list(steps.values()))
    ax.set_xlabel("seconds")
    ax.set_title(f"{result['steps']['counts_before']['passages']:,} passages", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, default=INDEX)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--questions", type=int, default=100, help="probe questions asked before and after")
    parser.add_argument("--crash-passages", type=int, default=4800, help="passages the killed writer adds")
    parser.add_argument("--kill-after", type=float, default=20.0)
    parser.add_argument("--rest-questions", type=int, default=20)
    parser.add_argument("--rest-timeout", type=float, default=1800.0)
    parser.add_argument("--name", default="large_store_ops", help="results file: benchmarks/results/NAME.json")
    parser.add_argument("--reader", help=argparse.SUPPRESS)
    parser.add_argument("--crash-writer", help=argparse.SUPPRESS)
    parser.add_argument("--passages", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reader:
        return serve_reader(args.reader, args.model)
    if args.crash_writer:
        return crash_writer(args.crash_writer, args.model, args.passages)
    if not (args.index / "manifest.json").is_file():
        raise SystemExit(f"{args.index} is not a phrase index (see runs/scale/README.txt)")
    finish_result(args.name, measure(args), markdown, plot)


if __name__ == "__main__":
    main()
