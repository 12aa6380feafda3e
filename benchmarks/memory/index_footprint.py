"""What a saved phrase index costs to keep and to serve: disk bytes by file, and the memory a process holds after
loading it and answering questions, per passage and extrapolated to a million passages.

    .venv/bin/python -m benchmarks.memory.index_footprint --index DIR [DIR ...] [--questions 200] [--name NAME]

Each index is measured in a fresh process that first loads the model and encodes the questions, reads its memory
(``/proc/self/status``), then loads the index (``PhraseIndex.load``) and answers the questions as a Haystack
retriever does (top 10 phrase answers each, the default searcher: candidates re-ranked from the stored vectors, the
answer ranker reading the passages' words). Reported apart, as they behave apart:

- **RAM** (``RssAnon``): the heap the index needs, the FAISS structure's codes, token and passage metadata, the
  passage records, the answer words cached so far. It must fit in memory.
- **page cache** (``RssFile``): pages of memory-mapped files the searches read (stored vectors for re-ranking and
  span scores). The kernel keeps them while memory is free and drops them when it is not; a search that needs a
  dropped page reads it from disk again.

The questions are SQuAD-open-small questions (``../shared/data``); per-million figures are the per-passage bytes
times 10^6 (each part grows with the passages: codes with their vectors, metadata and records with the passages).
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
    ROOT,
    finish_result,
    machine,
    model_id,
    proc_memory,
    pyplot,
    save_figure,
    squad_open_small_questions,
)

MIB = 2**20


def file_kind(name: str) -> str:
    """The part of an index a file holds."""
    if name == "vectors.bin":
        return "stored vectors"
    if name.startswith("faiss-") or name.endswith(".ivfdata"):
        return "FAISS structure"
    if name in ("tokens.bin", "passages.jsonl"):
        return "tokens + passages"
    if name in ("keys.bin", "key_rows.bin"):
        return "key vectors"
    return "other"


def _child(path: str, model_name: str, questions: int) -> dict[str, Any]:
    """Runs in the measured process."""
    import faiss  # noqa: F401  (imported before the baseline)

    from dphr_haystack import PhraseIndex, PhraseSearcher
    from dphr_haystack.nodes import load_phrase_model

    model = load_phrase_model(model_name, "cpu")
    examples = squad_open_small_questions(questions)
    texts = [ex.question for ex in examples]
    q_start, q_end = model.encode_queries(texts, batch_size=64, precision="int8")
    before = proc_memory()
    started = time.perf_counter()
    index = PhraseIndex.load(path, model=model)
    load_seconds = time.perf_counter() - started
    loaded = proc_memory()
    searcher = PhraseSearcher(index, model)
    started = time.perf_counter()
    hits = searcher.search_vectors(q_start, q_end, "phrase", 10, questions=texts)
    answer_seconds = time.perf_counter() - started
    answered = proc_memory()
    return {
        "index": path,
        "factory": index.faiss_factory,
        "search_params": index.search_params,
        "passages": index.num_passages,
        "vectors": len(index),
        "searched_vectors": index.num_searched_vectors,  # what FAISS holds: the key vectors of a keyed index
        "questions": len(texts),
        "answered": sum(bool(h) for h in hits),
        "load_seconds": load_seconds,
        "answer_seconds": answer_seconds,
        "loaded_ram_mib": loaded["RssAnon"] - before["RssAnon"],
        "ram_mib": answered["RssAnon"] - before["RssAnon"],
        "page_cache_mib": answered["RssFile"] - before["RssFile"],
    }


def measure(indexes: list[Path], model_name: str, questions: int) -> dict[str, Any]:
    started = time.perf_counter()
    rows = []
    for path in indexes:
        files: dict[str, int] = {}
        for file in Path(path).rglob("*"):
            if file.is_file():
                files[file_kind(file.name)] = files.get(file_kind(file.name), 0) + file.stat().st_size
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.memory.index_footprint", "--child", str(path), "--model", model_name]
            + ["--questions", str(questions)],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row["disk_bytes"] = files
        passages = row["passages"]
        row["per_passage"] = {
            "disk_bytes": sum(files.values()) / passages,
            "ram_bytes": row["ram_mib"] * MIB / passages,
            "page_cache_bytes": row["page_cache_mib"] * MIB / passages,
        }
        row["per_million_passages_gb"] = {k: v * 1e6 / 1e9 for k, v in row["per_passage"].items()}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {
        "machine": machine(),
        "model": model_name,
        "model_id": model_id(model_name),
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Saved phrase indexes loaded in a fresh process that answers {result['rows'][0]['questions']} "
        f"SQuAD-open-small questions (top 10 phrase answers, `{result['model']}`), {result['machine']['cpu']}:",
        "",
        "| index | structure | passages | vectors (FAISS) | disk B / passage | RAM B / passage "
        "| page cache B / passage | disk GB / 10^6 passages | RAM GB / 10^6 passages | load s | answers s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        p, m = r["per_passage"], r["per_million_passages_gb"]
        searched = r.get("searched_vectors", r["vectors"])
        lines.append(
            f"| {Path(r['index']).name} | `{r['factory']}` | {r['passages']:,} | {r['vectors']:,} ({searched:,}) | "
            f"{p['disk_bytes']:,.0f} | {p['ram_bytes']:,.0f} | {p['page_cache_bytes']:,.0f} | "
            f"{m['disk_bytes']:.1f} | {m['ram_bytes']:.1f} | {r['load_seconds']:.1f} | {r['answer_seconds']:.1f} |"
        )
    lines += [
        "",
        "Disk by part (MiB): "
        + "; ".join(
            f"{Path(r['index']).name}: " + ", ".join(f"{k} {v / MIB:,.0f}" for k, v in sorted(r["disk_bytes"].items()))
            for r in result["rows"]
        ),
    ]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 0.6 + 0.5 * len(result["rows"])))
    names = [f"{Path(r['index']).name}\n{r['factory']}" for r in result["rows"]]
    ram = [r["per_passage"]["ram_bytes"] / 1000 for r in result["rows"]]
    cache = [r["per_passage"]["page_cache_bytes"] / 1000 for r in result["rows"]]
    ax.barh(names, ram, label="RAM (RssAnon)", color="#4c72b0")
    ax.barh(names, cache, left=ram, label="page cache (RssFile)", color="#dd8452")
    ax.set_xlabel("KB per passage after answering")
    ax.tick_params(axis="y", labelsize=6)
    ax.legend(fontsize=7)
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path, nargs="+", help="saved phrase index directories")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--name", default="index_footprint", help="the result's name in benchmarks/results")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.model, args.questions)))
        return
    if not args.index:
        parser.error("--index DIR [DIR ...] is required")
    finish_result(args.name, measure(args.index, args.model, args.questions), markdown, plot)


if __name__ == "__main__":
    main()
