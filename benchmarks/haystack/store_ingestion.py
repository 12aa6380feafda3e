"""Ingesting many small documents into a store with a ``path``, code versions side by side.

    .venv/bin/python -m benchmarks.haystack.store_ingestion --checkout before=/tmp/before \\
        [--checkout after=/work/main] [--documents 20000] [--batch 100] [--rounds 1] [--layers 1,2] [--name NAME]

``--documents`` synthetic documents (20-40 words each, the same for every checkout: built from ``--seed``) are
written by ``write_documents`` in batches of ``--batch`` to a new store directory, for the Haystack 1.x store
(``dphr_haystack.nodes.PhraseDocumentStore(path=...)``, run by ``--python1``) and the Haystack 2.x store
(``dphr_haystack.haystack2.PhraseDocumentStore(path=...)``, run by ``--python2``). Measured: the wall time of the
whole ingestion, the time of the last ``--tail`` batches (does one write cost more as the store grows?), and the
reopen time (a new store object on the same path, counting its documents).

Each measurement is two fresh processes (the ingestion, then the reopen) with ``PYTHONPATH=DIR`` and ``cwd=DIR``
for ``--checkout NAME=DIR``; the worker (``WORKER``) uses only the public store API every version has. Rounds
alternate the checkouts (round 1: A B, round 2: B A, ...), so a machine that slows down mid-run does not favour one
version.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, finish_result, machine, pyplot, save_figure

WORKER = r"""
import json, random, sys, time
from pathlib import Path

mode, layer, path = sys.argv[1], sys.argv[2], Path(sys.argv[3])
count, batch, seed, tail = (int(v) for v in sys.argv[4:8])
if layer == "1":
    from haystack.schema import Document
    from dphr_haystack.nodes import PhraseDocumentStore

    def counted(store):
        return store.get_document_count()
else:
    from haystack import Document
    from dphr_haystack.haystack2 import PhraseDocumentStore

    def counted(store):
        return store.count_documents()

if mode == "reopen":  # a new process: no cache of the writer's survives
    t0 = time.perf_counter()
    documents = counted(PhraseDocumentStore(path=str(path), progress_bar=False))
    print(json.dumps({"reopen_s": time.perf_counter() - t0, "reopened_documents": documents}))
    sys.exit()
rng = random.Random(seed)
syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "fe", "gu", "hi", "ja", "be"]
words = sorted({"".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(3000)})
texts = [" ".join(rng.choice(words) for _ in range(rng.randint(20, 40))) + "." for _ in range(count)]
docs = [Document(content=text, id=f"doc-{i}", meta={"title": f"T{i % 97}", "n": i}) for i, text in enumerate(texts)]
started = time.perf_counter()
store = PhraseDocumentStore(path=str(path), progress_bar=False)
batches = []
for first in range(0, count, batch):
    t0 = time.perf_counter()
    store.write_documents(docs[first : first + batch])
    batches.append(time.perf_counter() - t0)
ingest = time.perf_counter() - started
print(json.dumps({
    "ingest_s": ingest,
    "first_batches_s": sum(batches[:tail]),
    "last_batches_s": sum(batches[-tail:]),
    "batches": len(batches),
    "directory_bytes": sum(f.stat().st_size for f in path.rglob("*") if f.is_file()),
}))
"""


def _worker(python: str, directory: Path, mode: str, layer: str, path: Path, args: argparse.Namespace) -> dict:
    env = {**os.environ, "PYTHONPATH": str(directory), "HAYSTACK_TELEMETRY_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    numbers = [str(v) for v in (args.documents, args.batch, args.seed, args.tail)]
    command = [python, "-c", WORKER, mode, layer, str(path), *numbers]
    done = subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{mode} of layer {layer} on {directory} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_worker(python: str, directory: Path, layer: str, args: argparse.Namespace) -> dict[str, Any]:
    """One measurement on the checkout ``directory``: the ingestion in a fresh process of ``python``, then the
    reopen in another."""
    work = Path(tempfile.mkdtemp(prefix="dphr-ingestion-"))
    try:
        row = _worker(python, directory, "ingest", layer, work / "store", args)
        row.update(_worker(python, directory, "reopen", layer, work / "store", args))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return row


def parse_checkouts(values: list[str]) -> dict[str, Path]:
    checkouts = {}
    for value in values:
        name, sep, directory = value.partition("=")
        if not sep or not name or not Path(directory).is_dir():
            raise SystemExit(f"--checkout takes NAME=DIR with an existing DIR, got {value!r}")
        checkouts[name] = Path(directory).resolve()
    return checkouts


def measure(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    checkouts = parse_checkouts(args.checkout)
    pythons = {"1": args.python1, "2": args.python2}
    layers = [layer for layer in args.layers.split(",") if layer]
    runs = []
    for round_number in range(args.rounds):
        order = list(checkouts) if round_number % 2 == 0 else list(checkouts)[::-1]
        for layer in layers:
            for name in order:
                row = run_worker(pythons[layer], checkouts[name], layer, args)
                row.update({"checkout": name, "layer": layer, "round": round_number + 1})
                print(
                    f"round {row['round']} layer {layer} {name}: ingest {row['ingest_s']:.1f} s, last "
                    f"{args.tail} batches {row['last_batches_s']:.2f} s, reopen {row['reopen_s']:.2f} s",
                    flush=True,
                )
                runs.append(row)
    summary = []
    for layer in layers:
        for name in checkouts:
            rows = [r for r in runs if r["layer"] == layer and r["checkout"] == name]
            summary.append(
                {
                    "layer": layer,
                    "checkout": name,
                    **{
                        key: statistics.median(r[key] for r in rows)
                        for key in ("ingest_s", "first_batches_s", "last_batches_s", "reopen_s", "directory_bytes")
                    },
                    "reopened_documents": rows[0]["reopened_documents"],
                }
            )
    return {
        "machine": machine(),
        "checkouts": {name: str(path) for name, path in checkouts.items()},
        "commits": {name: _commit(path) for name, path in checkouts.items()},
        "documents": args.documents,
        "batch": args.batch,
        "tail": args.tail,
        "seed": args.seed,
        "rounds": args.rounds,
        "pythons": pythons,
        "runs": runs,
        "summary": summary,
        "seconds": time.perf_counter() - started,
    }


def _commit(path: Path) -> str | None:
    done = subprocess.run(["git", "-C", str(path), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return done.stdout.strip() or None


_LAYERS = {"1": "Haystack 1.x", "2": "Haystack 2.x"}


def markdown(result: dict[str, Any]) -> str:
    tail, batch = result["tail"], result["batch"]
    lines = [
        f"`write_documents` of {result['documents']:,} synthetic documents (20-40 words) in batches of {batch} to a "
        f"store with a `path`, one process per measurement, median of {result['rounds']} round(s), "
        f"{result['machine']['cpu']} ({result['machine']['cores']} cores):",
        "",
        f"| layer | checkout | ingest s | first {tail} batches s | last {tail} batches s | reopen + count s | "
        "directory MB | documents reopened |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["summary"]:
        lines.append(
            f"| {_LAYERS[row['layer']]} | {row['checkout']} (`{result['commits'][row['checkout']]}`) | "
            f"{row['ingest_s']:.1f} | {row['first_batches_s']:.2f} | {row['last_batches_s']:.2f} | "
            f"{row['reopen_s']:.2f} | {row['directory_bytes'] / 1e6:.1f} | {row['reopened_documents']:,} |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 2.4))
    rows = result["summary"][::-1]
    labels = [f"{_LAYERS[r['layer']]} {r['checkout']}" for r in rows]
    ax.barh(labels, [r["ingest_s"] for r in rows], color="#4c72b0")
    ax.set_xlabel(f"wall seconds to ingest {result['documents']:,} documents")
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkout", action="append", required=True, help="NAME=DIR (repeatable)")
    parser.add_argument("--documents", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--tail", type=int, default=10, help="batches timed at the start and at the end")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--layers", default="1,2", help="1 (Haystack 1.x), 2 (Haystack 2.x) or 1,2")
    parser.add_argument("--python1", default=str(ROOT / ".venv" / "bin" / "python"))
    parser.add_argument("--python2", default=str(ROOT / ".venv-hs2" / "bin" / "python"))
    parser.add_argument("--name", default="store_ingestion", help="results file: benchmarks/results/NAME.json")
    args = parser.parse_args()
    finish_result(args.name, measure(args), markdown, plot)


if __name__ == "__main__":
    main()
