"""Resident memory of a loaded SQuAD-open-small store: the phrase index against the dense FAISS index.

    .venv/bin/python -m benchmarks.memory.store [--model dphr-minilm-squad]

Each variant runs in a fresh process that first imports what both need (numpy, faiss, torch, dphr_haystack), reads
its resident set (VmRSS) and then loads one index from ``benchmarks/cache/squad-open-small`` (built by
``quality.squad_open_small``): the phrase index of ``--model`` as ``PhraseIndex.load`` keeps it (vectors in their
stored codec, the FAISS structure, token and passage metadata), or the dense MiniLM embeddings of the same 20,598
passages in a float32 ``IndexFlatIP`` (what Haystack's FAISSDocumentStore holds). Reported: the RSS added by
the load, the bytes of the index files, and one search to prove the index answers. For the phrase index also what
its cache of the passages' words (what the answer features read, kept per passage once a search reads it) adds at
most: every passage's words read, with the RSS they add and the seconds they take.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    DEFAULT_MODEL,
    SQUAD_OPEN_SMALL_CACHE,
    finish_result,
    machine,
    model_id,
    proc_memory,
    pyplot,
    save_figure,
)


def _child(kind: str, model_name: str) -> dict[str, Any]:
    """Runs in the measured process: load one index and report the RSS it added."""
    import faiss  # noqa: F401  (imported before the baseline, as both variants need it)
    import numpy as np
    import torch  # noqa: F401

    from benchmarks.common import phrase_cache
    from dphr_haystack import PhraseIndex, PhraseModel
    from dphr_haystack.passage_words import cached_words

    model = PhraseModel.load(model_name)
    q_start, _ = model.encode_queries(["Which NFL team represented the AFC at Super Bowl 50?"])
    before = proc_memory()["VmRSS"]
    started = time.perf_counter()
    extra: dict[str, float] = {}
    if kind == "phrase":
        path = phrase_cache(model, SQUAD_OPEN_SMALL_CACHE)
        index = PhraseIndex.load(path, model=model)
        files = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        scores, _ = index.search_tokens(q_start, 10)
        items = len(index)
        after, loaded_at = proc_memory()["VmRSS"], time.perf_counter()
        words = cached_words(index)
        for row in range(index.num_passages):  # the cache's largest: every passage read once
            words(row)
        extra = {
            "answer_words_mib": proc_memory()["VmRSS"] - after,
            "answer_words_seconds": time.perf_counter() - loaded_at,
        }
    else:
        import faiss

        files_list = sorted((SQUAD_OPEN_SMALL_CACHE / "dense").glob("chunk-*.npy"))
        emb = np.concatenate([np.load(f, allow_pickle=False) for f in files_list]).astype(np.float32)
        index = faiss.IndexFlatIP(emb.shape[1])
        index.add(emb)
        del emb
        files = sum(f.stat().st_size for f in files_list)
        dense_query = np.random.default_rng(0).standard_normal((1, index.d)).astype(np.float32)
        scores, _ = index.search(dense_query, 10)
        items = index.ntotal
        after, loaded_at = proc_memory()["VmRSS"], time.perf_counter()
    return {
        **extra,
        "kind": kind,
        "items": int(items),
        "load_seconds": loaded_at - started,
        "rss_before_mib": before,
        "rss_after_mib": after,
        "added_rss_mib": after - before,
        "index_files_mib": files / 2**20,
        "searched": bool(np.isfinite(scores).all()),
    }


def measure(model_name: str) -> dict[str, Any]:
    started = time.perf_counter()
    rows = []
    for kind in ("phrase", "dense"):
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.memory.store", "--child", kind, "--model", model_name],
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {
        "machine": machine(),
        "model": model_name,
        "model_id": model_id(model_name),
        "rows": rows,
        "phrase_vs_dense": rows[0]["added_rss_mib"] / max(rows[1]["added_rss_mib"], 1e-9),
        "seconds": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Loaded SQuAD-open-small indexes (20,598 passages), `{result['model']}`, fresh process each, "
        f"{result['machine']['cpu']}:",
        "",
        "| index | vectors | RSS added by the load (MiB) | files (MiB) | load s |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        name = "phrase index (PhraseIndex.load)" if r["kind"] == "phrase" else "dense MiniLM, FAISS IndexFlatIP"
        lines.append(
            f"| {name} | {r['items']:,} | {r['added_rss_mib']:.0f} | {r['index_files_mib']:.0f} | "
            f"{r['load_seconds']:.1f} |"
        )
    lines.append(f"\nphrase / dense RSS: {result['phrase_vs_dense']:.1f}×")
    words = next((r for r in result["rows"] if "answer_words_mib" in r), None)
    if words is not None:
        lines.append(
            f"\nThe phrase index's cache of passage words (answer features), every passage read: "
            f"+{words['answer_words_mib']:.0f} MiB in {words['answer_words_seconds']:.1f} s."
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 2.2))
    ax.barh([r["kind"] for r in result["rows"]], [r["added_rss_mib"] for r in result["rows"]], color="#4c72b0")
    ax.set_xlabel("RSS added by loading the index (MiB)")
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--child", choices=["phrase", "dense"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.model)))
        return
    finish_result("store_memory", measure(args.model), markdown, plot)


if __name__ == "__main__":
    main()
