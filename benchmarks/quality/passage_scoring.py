"""How phrase passages score their phrases: the best phrase (max) vs all of them (logsumexp), alone and in the hybrid.

    .venv/bin/python -m benchmarks.quality.passage_scoring                 # after quality.squad_open_small (its cache)
    .venv/bin/python -m benchmarks.quality.passage_scoring --validation-questions 200 --questions 100   # quicker

The SQuAD-open-small store (every SQuAD train-rebuilt and dev-public paragraph, BM25 and the cached phrase index of
``--model``) ranks passages through the shipped ``phrase_passages.yml`` pipeline once per ``passage_scoring`` of
``PhraseRetriever``: ``max`` (a passage scores its best retrieved phrase, Lee et al. 2021b) and ``logsumexp`` (the
log-sum-exp of all of its retrieved phrases' scores), and through ``bm25.yml``; Haystack's own ``JoinDocuments``
(reciprocal rank fusion, unweighted, as ``hybrid_rrf.yml``) fuses BM25 with each. Two question sets, top 20 each:
validation questions of the held-out articles (their paragraphs are in the corpus; no benchmark samples them), which
choose, and the 300 SQuAD-open-small questions, which only report. ``logsumexp`` is chosen only when its validation
phrase-passage MRR@20 beats ``max`` by more than twice the standard error of the paired per-question difference;
otherwise the default stays.
Writes ``results/passage_scoring.json`` and ``.png``.
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
from benchmarks.rankings import fused_scores, passage_metrics, passage_scores, pipeline_rankings, shipped_pipeline
from benchmarks.significance import paired_difference

SCORINGS = ("max", "logsumexp")
METRICS = ("passage_acc@1", "passage_acc@5", "passage_acc@20", "mrr@20")


def choose(difference: dict[str, float]) -> str:
    """``logsumexp`` only when it beats ``max`` by more than two standard errors, else the default ``max``."""
    return "logsumexp" if difference["mean"] > 2 * difference["se"] else "max"


def markdown(result: dict) -> str:
    d = result["validation_mrr_difference"]
    lines = [
        f"SQuAD-open-small store ({result['phrase_index']}), top {result['top_k']} passages through "
        f"`phrase_passages.yml` (`passage_scoring`), `bm25.yml` and their unweighted reciprocal rank fusion "
        f"(Haystack's JoinDocuments, as `hybrid_rrf.yml`). Validation: {result['validation_questions']} questions "
        f"of the held-out articles (they choose); benchmark: the {result['questions']} SQuAD-open-small questions. "
        f"Validation MRR@20 of phrase passages, logsumexp − max: {100 * d['mean']:+.2f} ± {100 * d['se']:.2f} "
        f"(paired standard error); chosen (more than 2 SE, else the default): **{result['chosen']}**.",
        "",
        "| system | val acc@1 | val acc@5 | val acc@20 | val MRR@20 | bench acc@1 | bench acc@5 | bench acc@20 "
        "| bench MRR@20 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def cells(m: dict) -> str:
        return " | ".join(f"{100 * m[k]:.1f}" for k in METRICS)

    rows = [("BM25", result["bm25"])]
    for s in SCORINGS:
        rows += [(f"phrase passages, {s}", result["phrase"][s]), (f"hybrid RRF, {s}", result["hybrid"][s])]
    for name, m in rows:
        lines.append(f"| {name} | {cells(m['validation'])} | {cells(m['bench'])} |")
    lines += ["", f"Run took {result['seconds'] / 60:.1f} min."]
    return "\n".join(lines)


def plot(result: dict, path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, split in zip(axes, ("validation", "bench"), strict=True):
        names = ["BM25"] + [f"{kind}\n{s}" for s in SCORINGS for kind in ("phrase", "hybrid")]
        values = [result["bm25"][split]["passage_acc@1"]] + [
            result[kind][s][split]["passage_acc@1"] for s in SCORINGS for kind in ("phrase", "hybrid")
        ]
        bars = ax.bar(range(len(names)), [100 * v for v in values], color=["gray"] + ["tab:blue", "tab:orange"] * 2)
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
        ax.set_xticks(range(len(names)), names, fontsize=8)
        ax.set_title(f"{split} ({result['validation_questions' if split == 'validation' else 'questions']} q)")
    axes[0].set_ylabel("passage acc@1 (%)")
    fig.suptitle("Phrase passages scored by their best phrase (max) or all phrases (logsumexp)")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    args = split_arguments(__doc__.split("\n")[0]).parse_args(argv)
    started = time.perf_counter()
    splits = question_splits(args)
    store, phrase_index = squad_open_small_store(args.model)
    bm25 = shipped_pipeline("bm25.yml", store)
    bm25_ranked = {name: pipeline_rankings(bm25, ex, args.top_k, f"{name} BM25") for name, ex in splits.items()}
    result = {
        "model": args.model,
        "phrase_index": phrase_index,
        "validation_questions": len(splits["validation"]),
        "questions": len(splits["bench"]),
        "seed": args.seed,
        "top_k": args.top_k,
        "bm25": {name: passage_scores(ex, bm25_ranked[name], args.top_k) for name, ex in splits.items()},
        "phrase": {},
        "hybrid": {},
    }
    reciprocal_ranks = {}
    for scoring in SCORINGS:
        phrase = shipped_pipeline("phrase_passages.yml", store, {"model": args.model, "passage_scoring": scoring})
        ranked = {name: pipeline_rankings(phrase, ex, args.top_k, f"{name} {scoring}") for name, ex in splits.items()}
        result["phrase"][scoring] = {name: passage_scores(ex, ranked[name], args.top_k) for name, ex in splits.items()}
        reciprocal_ranks[scoring] = passage_metrics(splits["validation"], ranked["validation"], args.top_k)["mrr@20"]
        result["hybrid"][scoring] = {
            name: fused_scores(ex, list(zip(bm25_ranked[name], ranked[name], strict=True)), None, args.top_k)
            for name, ex in splits.items()
        }
    result["validation_mrr_difference"] = paired_difference(reciprocal_ranks["logsumexp"], reciprocal_ranks["max"])
    result["chosen"] = choose(result["validation_mrr_difference"])
    result["seconds"] = time.perf_counter() - started
    result["machine"] = machine()
    finish_result("passage_scoring", result, markdown, plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
