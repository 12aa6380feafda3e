"""Fusing BM25 and phrase passages: the weights chosen on validation questions, for reciprocal rank fusion and for
the linear fusion of BM25's score with the phrase answers' confidence.

    .venv/bin/python -m benchmarks.quality.hybrid_weights                 # after quality.squad_open_small (its cache)
    .venv/bin/python -m benchmarks.quality.hybrid_weights --validation-questions 200 --questions 100   # quicker

The SQuAD-open-small store (every SQuAD train-rebuilt and dev-public paragraph, BM25 and the cached phrase index of
``--model``) answers two question sets through the shipped ``bm25.yml`` and ``phrase_passages.yml`` pipelines,
top 20 each: validation questions of the held-out articles (their paragraphs are in the corpus; no benchmark samples
them) and the 300 SQuAD-open-small questions. Two fusions of the two rankings of every question, for each BM25
weight w (phrase weight 1 − w):

- Haystack's own ``JoinDocuments`` (``reciprocal_rank_fusion``); w = 0.5 is the unweighted fusion of
  ``hybrid_rrf.yml``. With Haystack's fixed RRF constant of 61, a BM25 weight of 0.6 or more already puts all of
  BM25's top 20 above every passage only the phrase side found, so acc@1 alone would trade away acc@20.
- The project's ``LinearFusionJoin`` without normalisation (``hybrid_confidence.yml``): w · BM25's scaled score
  (in [0, 1]) + (1 − w) · the passage's answer confidence (P(right), capped down the phrase ranking).

The weight with the best validation MRR@20 (ties: the one nearest 0.5) is the one to put in the pipeline; the best
validation acc@1 is reported too. The benchmark questions are reported for every weight but choose nothing. (The
phrase side's answer ranker was fitted on the validation questions, so they favour it a little.) Writes
``results/hybrid_weights.json`` and ``.png``.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import (
    finish_result,
    machine,
    pyplot,
    question_splits,
    save_figure,
    split_arguments,
    squad_open_small_store,
)
from benchmarks.rankings import fused_scores, linear_scores, passage_scores, rankings

WEIGHTS = (0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.8)
LINEAR_WEIGHTS = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


def choose(rows: list[dict], metric: str = "mrr@20") -> float:
    """The weight with the best validation ``metric``; ties: the weight nearest 0.5."""
    return max(rows, key=lambda row: (row["validation"][metric], -abs(row["weight"] - 0.5)))["weight"]


def markdown(result: dict) -> str:
    lines = [
        f"SQuAD-open-small store ({result['phrase_index']}), BM25 and phrase-passage rankings of top "
        f"{result['top_k']} through `bm25.yml` and `phrase_passages.yml`, fused by Haystack's JoinDocuments "
        f"(reciprocal rank fusion, BM25 weight w, phrase 1 − w). Validation: {result['validation_questions']} "
        f"questions of the held-out articles; benchmark: the {result['questions']} SQuAD-open-small questions. "
        f"Chosen on validation MRR@20: **w = {result['chosen_weight']}** (on validation acc@1 alone: "
        f"w = {result['best_acc1_weight']}).",
        "",
        "| BM25 weight | val acc@1 | val acc@5 | val acc@20 | val MRR@20 | bench acc@1 | bench acc@5 | bench acc@20 "
        "| bench MRR@20 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def cells(m: dict) -> str:
        return " | ".join(f"{100 * m[k]:.1f}" for k in ("passage_acc@1", "passage_acc@5", "passage_acc@20", "mrr@20"))

    for name, key in (("BM25 alone", "bm25"), ("phrase alone", "phrase"), ("unweighted (no weights)", "unweighted")):
        lines.append(
            f"| {name} | {cells(result['single'][key]['validation'])} | {cells(result['single'][key]['bench'])} |"
        )
    for row in result["rows"]:
        mark = " (chosen)" if row["weight"] == result["chosen_weight"] else ""
        lines.append(f"| {row['weight']}{mark} | {cells(row['validation'])} | {cells(row['bench'])} |")
    lines += [
        "",
        "Linear fusion, w · BM25 scaled score + (1 − w) · phrase answer confidence (`hybrid_confidence.yml`): chosen "
        f"on validation MRR@20 **w = {result['linear_chosen_weight']}** (on validation acc@1 alone: "
        f"w = {result['linear_best_acc1_weight']}).",
        "",
        "| BM25 weight | val acc@1 | val acc@5 | val acc@20 | val MRR@20 | bench acc@1 | bench acc@5 | bench acc@20 "
        "| bench MRR@20 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["linear_rows"]:
        mark = " (chosen)" if row["weight"] == result["linear_chosen_weight"] else ""
        lines.append(f"| {row['weight']}{mark} | {cells(row['validation'])} | {cells(row['bench'])} |")
    lines += ["", f"Run took {result['seconds'] / 60:.1f} min."]
    return "\n".join(lines)


def plot(result: dict, path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    weights = [r["weight"] for r in result["rows"]]
    linear = [r["weight"] for r in result["linear_rows"]]
    for split, style in (("validation", "-o"), ("bench", "-s")):
        ax.plot(weights, [100 * r[split]["passage_acc@1"] for r in result["rows"]], style, label=f"RRF, {split}")
        values = [100 * r[split]["passage_acc@1"] for r in result["linear_rows"]]
        ax.plot(linear, values, style, mfc="none", label=f"linear (confidence), {split}")
        ax.axhline(
            100 * result["single"]["bm25"][split]["passage_acc@1"],
            ls="--",
            color="tab:blue" if split == "validation" else "tab:orange",
            lw=0.8,
            label=f"BM25 alone, {split}",
        )
    ax.axvline(result["chosen_weight"], color="gray", lw=0.8, ls=":")
    ax.set_xlabel("BM25 weight w (phrase passages 1 − w)")
    ax.set_ylabel("passage acc@1 (%)")
    ax.set_title("BM25 + phrase passages: weighted RRF and linear fusion")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    args = split_arguments(__doc__.split("\n")[0]).parse_args(argv)
    started = time.perf_counter()
    splits = question_splits(args)
    store, phrase_index = squad_open_small_store(args.model)
    ranked = {name: rankings(store, args.model, ex, args.top_k, name) for name, ex in splits.items()}

    def per_split(score) -> dict:
        return {name: score(splits[name], ranked[name]) for name in splits}

    single = {
        "bm25": per_split(lambda ex, r: passage_scores(ex, [pair[0] for pair in r], args.top_k)),
        "phrase": per_split(lambda ex, r: passage_scores(ex, [pair[1] for pair in r], args.top_k)),
        "unweighted": per_split(lambda ex, r: fused_scores(ex, r, None, args.top_k)),
    }
    rows = [{"weight": w, **per_split(lambda ex, r, w=w: fused_scores(ex, r, w, args.top_k))} for w in WEIGHTS]
    linear = [
        {"weight": w, **per_split(lambda ex, r, w=w: linear_scores(ex, r, w, args.top_k))} for w in LINEAR_WEIGHTS
    ]
    result = {
        "model": args.model,
        "phrase_index": phrase_index,
        "validation_questions": len(splits["validation"]),
        "questions": len(splits["bench"]),
        "seed": args.seed,
        "top_k": args.top_k,
        "single": single,
        "rows": rows,
        "chosen_weight": choose(rows),
        "best_acc1_weight": choose(rows, "passage_acc@1"),
        "linear_rows": linear,
        "linear_chosen_weight": choose(linear),
        "linear_best_acc1_weight": choose(linear, "passage_acc@1"),
        "seconds": time.perf_counter() - started,
        "machine": machine(),
    }
    finish_result("hybrid_weights", result, markdown, plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
