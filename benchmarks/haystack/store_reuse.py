"""Reusing a store across ``dphr eval`` runs: the first run encodes, the next ones open what it committed.

    .venv/bin/python -m benchmarks.haystack.store_reuse [--paragraphs 300] [--questions 100]

Each step is one ``dphr`` process, timed from start to exit (start-up, model load, indexing, the questions), on the
first ``--paragraphs`` SQuAD dev-public paragraphs and up to ``--questions`` distinct questions about them, with the
Haystack 1.x ``phrase_qa.yml`` pipeline (the shipped model):

1. ``dphr eval --corpus C`` without ``--store``: every run encodes every phrase (what a run cost before a store
   could be reused);
2. ``dphr eval --corpus C --store S``, first run: encodes and commits the documents and phrases to ``S``;
3. the same command again: opens ``S``, encodes nothing;
4. ``dphr index --corpus C --out IDX``, then ``dphr eval --store IDX``: the index's passages are the documents.

All runs must give the same predictions.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    DEFAULT_MODEL,
    ROOT,
    finish_result,
    machine,
    model_id,
    pyplot,
    save_figure,
    squad_passages,
)

_DPHR = "import sys; from dphr_haystack.cli import main; sys.exit(main(sys.argv[1:]))"


def _dphr(args: list[str]) -> tuple[float, str]:
    """Run one ``dphr`` command in a fresh process; its wall time and its output."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _DPHR, *args], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"dphr {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def _inputs(work: Path, paragraphs: int, questions: int) -> tuple[Path, Path, int]:
    passages, asked = squad_passages(limit=paragraphs)
    corpus = work / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in passages), encoding="utf-8")
    distinct = list({q["question"]: q for q in asked}.values())
    step = max(1, len(distinct) // questions)
    chosen = distinct[::step][:questions]
    file = work / "questions.jsonl"
    file.write_text(
        "".join(json.dumps({"question": q["question"], "answer": q["answers"]}) + "\n" for q in chosen),
        encoding="utf-8",
    )
    return corpus, file, len(chosen)


def _indexing_seconds(output: str) -> float:
    """The ``Retriever`` time of the ``indexed: ...`` line ``dphr eval`` prints (phrase encoding), 0 without."""
    match = re.search(r"Retriever ([0-9.]+)s", output)
    return float(match.group(1)) if match else 0.0


def _predictions(out: Path) -> list:
    lines = (out / "phrase.predictions.jsonl").read_text(encoding="utf-8").splitlines()
    return [[(p["text"], p["passage_id"]) for p in json.loads(line)["predictions"]] for line in lines]


def measure(paragraphs: int, questions: int, model: str) -> dict[str, Any]:
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="dphr-store-reuse-"))
    try:
        corpus, question_file, asked = _inputs(work, paragraphs, questions)

        def evaluate(name: str, *extra: str) -> dict[str, Any]:
            args = ["eval", "--pipeline", "phrase_qa.yml", "--set", f"Retriever.model={model}"]
            args += ["--questions", str(question_file), "--name", "phrase", "--out", str(work / name)]
            seconds, output = _dphr([*args, "--no-progress", *extra])
            summary = json.loads((work / name / "phrase.summary.json").read_text(encoding="utf-8"))
            return {
                "step": name,
                "seconds": seconds,
                "encoding_seconds": _indexing_seconds(output),
                "phrase_em@1": summary["metrics"]["phrase_em@1"],
                "predictions": _predictions(work / name),
            }

        rows = [
            evaluate("no_store", "--corpus", str(corpus)),
            evaluate("store_first_run", "--corpus", str(corpus), "--store", str(work / "store")),
            evaluate("store_second_run", "--corpus", str(corpus), "--store", str(work / "store")),
        ]
        index_seconds, _ = _dphr(
            ["index", "--model", model, "--corpus", str(corpus), "--out", str(work / "idx"), "--no-progress"]
        )
        rows.append(evaluate("dphr_index_store", "--store", str(work / "idx")))
        same = all(row["predictions"] == rows[0]["predictions"] for row in rows)
        for row in rows:
            del row["predictions"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    by_step = {row["step"]: row for row in rows}
    return {
        "machine": machine(),
        "model": model,
        "model_id": model_id(model),
        "paragraphs": paragraphs,
        "questions": asked,
        "rows": rows,
        "dphr_index_seconds": index_seconds,
        "same_predictions": same,
        "second_vs_first": by_step["store_second_run"]["seconds"] / by_step["store_first_run"]["seconds"],
        "seconds": time.perf_counter() - started,
    }


_LABELS = {
    "no_store": "`--corpus C` (no store: every run encodes)",
    "store_first_run": "`--corpus C --store S`, first run",
    "store_second_run": "`--corpus C --store S`, second run",
    "dphr_index_store": "`--store IDX` (built by `dphr index`)",
}


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"`dphr eval --pipeline phrase_qa.yml` (Haystack 1.x, `{result['model']}`) on the first "
        f"{result['paragraphs']} SQuAD dev-public paragraphs, {result['questions']} questions, one process per run, "
        f"{result['machine']['cpu']} ({result['machine']['cores']} cores):",
        "",
        "| run | wall s | phrase encoding s | EM@1 |",
        "|---|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {_LABELS[row['step']]} | {row['seconds']:.1f} | {row['encoding_seconds']:.1f} | "
            f"{100 * row['phrase_em@1']:.1f} |"
        )
    lines.append(
        f"\nsecond run / first run: {result['second_vs_first']:.2f}×; `dphr index` of the same corpus: "
        f"{result['dphr_index_seconds']:.1f} s; identical predictions in every run: {result['same_predictions']}"
    )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 2.4))
    rows = result["rows"][::-1]
    ax.barh([row["step"].replace("_", " ") for row in rows], [row["seconds"] for row in rows], color="#4c72b0")
    ax.set_xlabel(f"wall seconds of one dphr eval run ({result['paragraphs']} paragraphs)")
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paragraphs", type=int, default=300)
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args()
    finish_result("store_reuse", measure(args.paragraphs, args.questions, args.model), markdown, plot)


if __name__ == "__main__":
    main()
