"""Haystack 2 parity on SQuAD-open-small: the 2.x pipelines against the 1.x ones, same corpus, questions and index.

    .venv-hs2/bin/python -m benchmarks.haystack.haystack2_parity                 # after quality.squad_open_small
    .venv-hs2/bin/python -m benchmarks.haystack.haystack2_parity --model DIR --cache DIR   # another model, cache
    .venv-hs2/bin/python -m benchmarks.haystack.haystack2_parity --max-passages 600 --questions 40   # smoke run

Runs in the Haystack 2 environment (``.venv-hs2``) on what ``quality/squad_open_small.py`` (Haystack 1.x, ``.venv``)
measures: every paragraph of SQuAD train-rebuilt and dev-public with the same passage ids, the same sampled dev
questions (same seed, the held-out validation articles excluded), top-20, the same metrics
(:mod:`dphr_haystack.evaluation`), and the same phrase index: the 1.x build's cached
``<cache>/phrases-<fingerprint>-filter-<threshold>``, attached to one Haystack 2 ``PhraseDocumentStore`` without
encoding anything again. BM25, phrase passages, phrase answers and the BM25 + phrase hybrids (RRF, and the linear
fusion with the answers' confidence) are the YAML pipelines of ``pipelines/haystack2`` over that store; BM25 takes
the 1.x store's settings (BM25Okapi, Haystack 1.x's tokenisation) unless ``--bm25 haystack2`` asks for the 2.x
store's defaults (BM25L, Haystack 2's tokenisation). Even with the 1.x settings the BM25 scores are not the 1.x
ones: Haystack 2's in-memory BM25 counts a query term once however
often the question repeats it ("of", "the"), rank_bm25 (Haystack 1.x) once per occurrence.

When ``results/squad_open_small.json`` holds a 1.x run of the same model on the same phrase index, every metric is
compared with it: paired per question when that run's predictions are in the cache's ``eval/`` folder (and reproduce
its summary), else with binomial standard errors of two independent samples. A difference is within noise when it
is within 1.96 standard errors. Results: ``results/haystack2_parity.json`` and ``.png``; the 2.x per-question
predictions go to ``--predictions`` (never into the cache, which this benchmark only reads).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import (
    DEFAULT_MODEL,
    HAYSTACK2_BM25,
    RESULTS,
    SQUAD_DEV,
    SQUAD_TRAIN,
    finish_result,
    haystack2_phrase_store,
    machine,
    model_id,
    percentiles,
    phrase_cache,
    pyplot,
    save_figure,
    validation_titles,
)
from benchmarks.common import SQUAD_OPEN_SMALL_CACHE as CACHE
from benchmarks.significance import Z, paired, unpaired, within_noise

# (system, as named by quality.squad_open_small; Haystack 2 pipeline file; its phrase component, None without one)
SYSTEMS = [
    ("BM25", "bm25.yml", None),
    ("Phrase → passages", "phrase_passages.yml", "retriever"),
    ("Phrase answers", "phrase_qa.yml", "retriever"),
    ("Hybrid RRF (BM25 + phrase)", "hybrid_rrf.yml", "phrase"),
    ("Hybrid linear (BM25 + phrase confidence)", "hybrid_confidence.yml", "phrase"),
]
METRICS = ("phrase_em@1", "phrase_f1@1", "passage_acc@1", "passage_acc@5", "passage_acc@20", "mrr@20")
# The headline of parity: the hybrid's passage accuracy and the phrase answers' EM equal the 1.x pipelines'.
HEADLINE = [
    ("Hybrid RRF (BM25 + phrase)", "passage_acc@1"),
    ("Hybrid RRF (BM25 + phrase)", "passage_acc@5"),
    ("Hybrid RRF (BM25 + phrase)", "passage_acc@20"),
    ("Phrase answers", "phrase_em@1"),
]


# ----------------------------------------------------------------------------- systems
def evaluate_systems(store, examples: list, model: str, top_k: int = 20, progress: bool = True) -> list[tuple]:
    """Each system of :data:`SYSTEMS` through its shipped YAML pipeline over ``store``: ``(row, report)`` pairs."""
    from dphr_haystack.evaluation import markdown_table
    from dphr_haystack.haystack2 import PhraseDocumentStore, load_pipeline
    from dphr_haystack.haystack2.evaluation import evaluate_pipeline, pipeline_inputs

    out = []
    for name, yml, phrase_component in SYSTEMS:
        pipeline = load_pipeline(yml, overrides={phrase_component: {"model": model}} if phrase_component else None)
        stores = {
            c.document_store
            for _, c in pipeline.walk()
            if isinstance(getattr(c, "document_store", None), PhraseDocumentStore)
        }
        if stores != {store}:
            raise RuntimeError(f"{yml} does not query the benchmark's store")
        pipeline.warm_up()
        pipeline.run(pipeline_inputs(pipeline, examples[0].question, top_k))  # model loading is not query latency
        report = evaluate_pipeline(pipeline, examples, top_k=top_k, system=name, progress=progress)
        latency = percentiles([1000 * r.seconds for r in report.results])
        row = {"system": name, "pipeline": yml, "questions": len(examples), "metrics": report.summary}
        row["latency"] = latency
        out.append((row, report))
        if progress:
            print(markdown_table([report]).splitlines()[-1], f"p50 {latency['p50_ms']:.1f} ms", flush=True)
    return out


# ----------------------------------------------------------------------------- comparison with the 1.x run
def _baseline_results(eval_dir: Path, system: str, examples: list, row_1x: dict, top_k: int) -> tuple[list, str]:
    """The 1.x run's per-question results of ``system`` in ``examples`` order, or why they cannot be paired."""
    from dphr_haystack.evaluation import question_metrics, read_results, report_stem

    file = eval_dir / f"{report_stem(system)}.predictions.jsonl"
    if not file.is_file():
        return [], f"no {file}"
    by_qid = {r.qid: r for r in read_results(file)}
    if set(by_qid) != {ex.qid for ex in examples}:
        return [], f"{file.name} holds other questions"
    results = [by_qid[ex.qid] for ex in examples]
    metrics = row_1x["metrics"]
    values = question_metrics(results, top_k, "phrase_em@1" in metrics, "passage_acc@1" in metrics)
    if any(abs(float(np.mean(v)) - metrics[m]) > 1e-9 for m, v in values.items() if m in metrics):
        return [], f"{file.name} is not the run of results/squad_open_small.json (its summary differs)"
    return results, ""


def compare(rows_2x: list[tuple], examples: list, baseline: dict, eval_dir: Path | None, top_k: int) -> dict:
    """Every metric of every system against the 1.x run ``baseline`` (paired where its predictions allow)."""
    from dphr_haystack.evaluation import question_metrics

    by_name = {row["system"]: row for row in baseline["systems"]}
    systems, reasons = [], []
    for row, report in rows_2x:
        row_1x = by_name.get(row["system"])
        if row_1x is None:
            continue
        results_1x, why = _baseline_results(eval_dir, row["system"], examples, row_1x, top_k) if eval_dir else ([], "")
        if why:
            reasons.append(f"{row['system']}: {why}")
        entry: dict[str, Any] = {"system": row["system"], "pairing": "paired" if results_1x else "binomial"}
        values_2x = question_metrics(report.results, top_k, report.has_answers, report.has_passages)
        values_1x = question_metrics(results_1x, top_k, report.has_answers, report.has_passages) if results_1x else {}
        metrics = {}
        for metric in METRICS:
            if metric not in row_1x["metrics"] or metric not in row["metrics"]:
                continue
            v1, v2 = row_1x["metrics"][metric], row["metrics"][metric]
            if results_1x:
                stats = paired(values_1x[metric], values_2x[metric])
            else:
                stats = unpaired(v1, int(row_1x["questions"]), v2, len(report.results))
            metrics[metric] = {"1.x": v1, "2.x": v2, **stats, "within_noise": within_noise(stats["diff"], stats["se"])}
        entry["metrics"] = metrics
        if results_1x:
            entry["identical"] = identical_outputs(results_1x, report.results, "phrase_em@1" in row_1x["metrics"])
        lat_1x, lat_2x = row_1x["latency"], row["latency"]
        entry["latency"] = {
            "1.x_p50_ms": lat_1x["p50_ms"],
            "2.x_p50_ms": lat_2x["p50_ms"],
            "1.x_p95_ms": lat_1x["p95_ms"],
            "2.x_p95_ms": lat_2x["p95_ms"],
            "p50_ratio": lat_2x["p50_ms"] / lat_1x["p50_ms"] if lat_1x["p50_ms"] else None,
        }
        systems.append(entry)
    by_system = {s["system"]: s["metrics"] for s in systems}
    headline = [{"system": s, "metric": m, **by_system[s][m]} for s, m in HEADLINE if m in by_system.get(s, {})]
    compared = [m for s in systems for m in s["metrics"].values()]
    return {
        "baseline_file": baseline.get("_file", "results/squad_open_small.json"),
        "baseline_date": baseline.get("machine", {}).get("date"),
        "baseline_machine": baseline.get("machine"),
        "baseline_questions": baseline.get("questions_sampled"),
        "pairing_notes": reasons,
        "systems": systems,
        "headline": headline,
        "headline_within_noise": bool(headline) and all(h["within_noise"] for h in headline),
        "metrics_compared": len(compared),
        "metrics_outside_noise": sum(not m["within_noise"] for m in compared),
    }


def identical_outputs(results_1x: list, results_2x: list, answers: bool = True) -> dict[str, float | None]:
    """Fractions of questions where both layers returned the same top answer (None without 1.x answers), the same
    top passage, the same top-20 passage list."""

    def same(key) -> float:
        return float(np.mean([key(a) == key(b) for a, b in zip(results_1x, results_2x, strict=True)]))

    return {
        "top_answer": same(lambda r: r.predictions[0]["text"] if r.predictions else None) if answers else None,
        "top_passage": same(lambda r: r.passages[0]["id"] if r.passages else None),
        "top_20_passages": same(lambda r: [p["id"] for p in r.passages[:20]]),
    }


def load_baseline(path: Path, model: str, phrase_index: str, top_k: int) -> tuple[dict | None, str]:
    """The 1.x results if they measured ``model`` on ``phrase_index`` at ``top_k``, else None and why not."""
    if not path.is_file():
        return None, f"{path} not found: run benchmarks.quality.squad_open_small in .venv first"
    baseline = json.loads(path.read_text())
    theirs = (
        baseline.get("phrase_model"),
        baseline.get("model_id"),
        baseline.get("build", {}).get("phrase_index"),
        baseline.get("top_k"),
    )
    ours = (model, model_id(model), phrase_index, top_k)
    if theirs != ours:
        return None, f"{path.name} measured (model, model id, phrase index, top-k) {theirs}, not {ours}"
    baseline["_file"] = f"results/{path.name}" if path.parent == RESULTS else str(path)
    return baseline, ""


# ----------------------------------------------------------------------------- report
def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def markdown(r: dict) -> str:
    lines = [
        f"Haystack 2 (haystack-ai {r['haystack_ai']}) pipelines of `pipelines/haystack2` over one "
        f"`PhraseDocumentStore`: SQuAD-open-small, {r['corpus_passages']:,} passages, "
        f"{r['questions_sampled']} dev-public questions (seed {r['seed']}, {len(r['held_out_titles'])} held-out "
        f"articles excluded), top-{r['top_k']}. "
        f"Phrase model `{r['phrase_model']}` (id {r['model_id']}); phrase index `{r['phrase_index']}` "
        f"({r['phrase_vectors']:,} vectors) from the 1.x build, attached in {r['attach_seconds']:.0f} s without "
        f"re-encoding. BM25: {r['bm25']['algorithm']}, {r['bm25']['settings']} settings. Accuracies in %.",
        "",
        "| system | pipeline | EM@1 | F1@1 | acc@1 | acc@5 | acc@20 | MRR@20 | p50 ms | p95 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in r["systems"]:
        m, lat = row["metrics"], row["latency"]
        cells = " | ".join(_pct(m.get(k)) for k in METRICS)
        lines.append(
            f"| {row['system']} | `{row['pipeline']}` | {cells} | {lat['p50_ms']:.1f} | {lat['p95_ms']:.1f} |"
        )
    lines += [
        "",
        f"Each PhraseRetriever run first checks the store for documents without phrases (`encode_missing`): "
        f"{r['pending_check_ms']:.2f} ms on this store, inside the phrase latencies above.",
    ]
    cmp = r.get("comparison")
    if cmp is None:
        lines += ["", f"No comparison with Haystack 1.x: {r['comparison_skipped']}."]
        return "\n".join(lines)
    pairing = {s["pairing"] for s in cmp["systems"]}
    how = (
        "paired per question (the 1.x run's predictions)"
        if pairing == {"paired"}
        else "binomial standard errors of two independent samples (an over-statement of the noise on the same "
        "questions: a weaker check than a paired one)"
        if pairing == {"binomial"}
        else "paired where the 1.x predictions allowed, else binomial"
    )
    lines += [
        "",
        f"Against Haystack 1.x (`{cmp['baseline_file']}`, run {cmp['baseline_date']}), {how}; "
        f"noise = ±{Z} standard errors of the difference (95%):",
        "",
        "| system | metric | 1.x | 2.x | 2.x − 1.x | noise ± | questions gained / lost | verdict |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for s in cmp["systems"]:
        for metric, m in s["metrics"].items():
            flips = f"{m['gained']} / {m['lost']} (p {m['mcnemar_p']:.2f})" if "gained" in m else "–"
            verdict = "within noise" if m["within_noise"] else "**outside noise**"
            lines.append(
                f"| {s['system']} | {metric} | {_pct(m['1.x'])} | {_pct(m['2.x'])} | {100 * m['diff']:+.1f} | "
                f"{100 * Z * m['se']:.1f} | {flips} | {verdict} |"
            )
    lines += [
        "",
        "| system | same top answer | same top passage | same top-20 list | p50 ms 1.x | p50 ms 2.x | 2.x / 1.x |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in cmp["systems"]:
        same = s.get("identical", {})
        lat = s["latency"]
        ratio = f"{lat['p50_ratio']:.2f}" if lat["p50_ratio"] else "–"
        lines.append(
            f"| {s['system']} | {_pct(same.get('top_answer'))} | {_pct(same.get('top_passage'))} | "
            f"{_pct(same.get('top_20_passages'))} | {lat['1.x_p50_ms']:.1f} | {lat['2.x_p50_ms']:.1f} | {ratio} |"
        )
    headline = ", ".join(f"{h['system']} {h['metric']} {100 * h['diff']:+.1f}" for h in cmp["headline"])
    lines += [
        "",
        f"**Verdict: {'within noise' if cmp['headline_within_noise'] else 'NOT within noise'}** for the hybrid's "
        f"passage accuracy and the phrase answers' EM@1 ({headline}); {cmp['metrics_outside_noise']} of "
        f"{cmp['metrics_compared']} compared metrics outside noise. Latencies compare only when both runs had the "
        f"machine to themselves (1.x run on {(cmp['baseline_machine'] or {}).get('cpu', '?')}; this one: load average "
        f"{r['load_average_start'][0]:.1f} at the start, {r.get('load_average_end', [float('nan')])[0]:.1f} at "
        "the end).",
    ]
    if cmp["pairing_notes"]:
        lines += ["", "Not paired: " + "; ".join(cmp["pairing_notes"]) + "."]
    return "\n".join(lines)


def plot(r: dict, path: Path) -> None:
    """Left: 2.x − 1.x per system and metric with the ±1.96 SE band (or the 2.x accuracies alone); right: p50."""
    plt = pyplot()
    fig, (acc_ax, lat_ax) = plt.subplots(1, 2, figsize=(13, 4.8))
    cmp = r.get("comparison")
    if cmp:
        labels, diffs, errs, colors = [], [], [], []
        for s in cmp["systems"]:
            for metric, m in s["metrics"].items():
                labels.append(f"{s['system']}: {metric}")
                diffs.append(100 * m["diff"])
                errs.append(100 * Z * m["se"])
                colors.append("tab:green" if m["within_noise"] else "tab:red")
        y = np.arange(len(labels))
        acc_ax.errorbar(diffs, y, xerr=errs, fmt="none", ecolor="tab:gray", capsize=3)
        acc_ax.scatter(diffs, y, c=colors, zorder=3)
        acc_ax.axvline(0, color="black", lw=0.8)
        acc_ax.set_yticks(y, labels, fontsize=7)
        acc_ax.invert_yaxis()
        acc_ax.set_xlabel("2.x − 1.x (points), bars ±1.96 SE")
        acc_ax.set_title(f"Haystack 2 vs 1.x, {r['questions_sampled']} questions")
    else:
        rows = r["systems"]
        width = 0.26
        for i, k in enumerate((1, 5, 20)):
            values = [100 * row["metrics"].get(f"passage_acc@{k}", 0.0) for row in rows]
            acc_ax.bar(np.arange(len(rows)) + (i - 1) * width, values, width, label=f"acc@{k}")
        acc_ax.set_xticks(np.arange(len(rows)), [row["system"] for row in rows], rotation=20, ha="right", fontsize=8)
        acc_ax.set_ylabel("passage accuracy (%)")
        acc_ax.set_title(f"Haystack 2, {r['questions_sampled']} questions")
        acc_ax.legend()
    names = [row["system"] for row in r["systems"]]
    y = np.arange(len(names))
    lat_ax.barh(y + 0.2, [row["latency"]["p50_ms"] for row in r["systems"]], 0.4, label="2.x", color="tab:blue")
    if cmp:
        by = {s["system"]: s["latency"]["1.x_p50_ms"] for s in cmp["systems"]}
        lat_ax.barh(y - 0.2, [by.get(n, 0.0) for n in names], 0.4, label="1.x", color="tab:gray")
    lat_ax.set_yticks(y, names, fontsize=8)
    lat_ax.invert_yaxis()
    lat_ax.set_xscale("log")
    lat_ax.set_xlabel("p50 ms per query (log)")
    lat_ax.legend()
    save_figure(fig, path)


# ----------------------------------------------------------------------------- main
def build_hint(model: str, max_passages: int | None) -> str:
    smoke = f" --max-passages {max_passages}" if max_passages else ""
    return (
        f"build it in the Haystack 1.x environment: `.venv/bin/python -m benchmarks.quality.squad_open_small "
        f"--model {model} --only phrases{smoke}` (resumable; the default --cache is where it writes)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="phrase model: as for quality.squad_open_small")
    parser.add_argument(
        "--cache",
        type=Path,
        default=CACHE,
        help=f"the 1.x build's cache, read only (default {CACHE.relative_to(CACHE.parents[2])})",
    )
    parser.add_argument("--questions", type=int, default=300, help="dev questions to sample (default 300)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument(
        "--max-passages",
        type=int,
        default=None,
        help="smoke run: only the first N dev paragraphs (the 1.x smoke build's cache <cache>-smokeN)",
    )
    parser.add_argument(
        "--bm25",
        choices=sorted(HAYSTACK2_BM25),
        default="haystack1",
        help="BM25 of the store: the 1.x store's BM25Okapi and tokenisation (default) or Haystack 2's defaults",
    )
    parser.add_argument(
        "--baseline", type=Path, default=None, help="1.x results (default results/squad_open_small*.json)"
    )
    parser.add_argument(
        "--predictions",
        type=Path,
        default=None,
        help="where the 2.x per-question predictions go (default benchmarks/cache/haystack2-parity/<model name>)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    args = parser.parse_args(argv)
    import importlib.metadata

    import torch

    from dphr_haystack.evaluation import markdown_table, read_questions
    from dphr_haystack.haystack2.pipelines import corpus_documents
    from dphr_haystack.index.phrase_index import MANIFEST
    from dphr_haystack.model.cache import load_phrase_model

    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    if not SQUAD_TRAIN.is_file() or not SQUAD_DEV.is_file():
        raise SystemExit("SQuAD train-rebuilt and dev-public are needed (../shared/data/squad)")
    smoke = f"_smoke{args.max_passages}" if args.max_passages else ""
    cache = args.cache.with_name(f"{args.cache.name}-smoke{args.max_passages}") if args.max_passages else args.cache
    started = time.perf_counter()
    load_start = os.getloadavg()
    model = load_phrase_model(args.model)
    phrase_dir = phrase_cache(model, cache)
    if not (phrase_dir / MANIFEST).is_file():
        raise SystemExit(f"phrase index {phrase_dir} not found: {build_hint(args.model, args.max_passages)}")
    docs = corpus_documents([SQUAD_DEV] if args.max_passages else [SQUAD_TRAIN, SQUAD_DEV])[: args.max_passages]
    held_out = validation_titles()
    examples = read_questions(SQUAD_DEV, limit=args.questions, seed=args.seed, exclude_titles=held_out)
    attach_start = time.perf_counter()
    try:
        store = haystack2_phrase_store(docs, phrase_dir, model, args.bm25)
    except SystemExit as exc:
        raise SystemExit(f"{exc}: {build_hint(args.model, args.max_passages)}") from None
    attach_seconds = time.perf_counter() - attach_start
    pending_check = []
    for _ in range(3):  # what every PhraseRetriever run does first (encode_missing): the lightest of 3
        tick = time.perf_counter()
        store.pending_documents()
        pending_check.append(time.perf_counter() - tick)
    print(
        f"store: {len(docs)} documents, phrase index {phrase_dir.name} attached in {attach_seconds:.0f}s", flush=True
    )
    try:
        rows = evaluate_systems(store, examples, args.model, args.top_k)
        phrase_vectors = len(store.phrase_index)
    finally:
        store.close()
    predictions = (
        args.predictions or CACHE.parent / f"haystack2-parity{smoke.replace('_', '-')}" / Path(args.model).name
    )
    for _, report in rows:
        report.write(predictions)
    print(markdown_table([report for _, report in rows]))
    result: dict[str, Any] = {
        "benchmark": "SQuAD-open-small, Haystack 2 parity",
        "phrase_model": args.model,
        "model_id": model_id(args.model),
        "phrase_index": phrase_dir.name,
        "phrase_vectors": phrase_vectors,
        "haystack_ai": importlib.metadata.version("haystack-ai"),
        "bm25": {
            "settings": args.bm25,
            "algorithm": HAYSTACK2_BM25[args.bm25].get("bm25_algorithm", "BM25L"),
            **HAYSTACK2_BM25[args.bm25],
        },
        "corpus_passages": len(docs),
        "questions_sampled": len(examples),
        "held_out_titles": held_out,
        "seed": args.seed,
        "top_k": args.top_k,
        "attach_seconds": attach_seconds,
        "pending_check_ms": 1000 * min(pending_check),
        "systems": [row for row, _ in rows],
        "predictions_dir": str(predictions),
        "load_average_start": load_start,
    }
    baseline_file = args.baseline or RESULTS / f"squad_open_small{smoke}.json"
    baseline, why = load_baseline(baseline_file, args.model, phrase_dir.name, args.top_k)
    if baseline is not None:
        eval_dir = cache / "eval" / Path(args.model).name
        result["comparison"] = compare(rows, examples, baseline, eval_dir, args.top_k)
    else:
        result["comparison_skipped"] = why
    result["machine"] = machine()
    result["seconds"] = time.perf_counter() - started
    result["command"] = " ".join(
        [".venv-hs2/bin/python -m benchmarks.haystack.haystack2_parity", *(argv or sys.argv[1:])]
    )
    finish_result("haystack2_parity" + smoke, result, markdown, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
