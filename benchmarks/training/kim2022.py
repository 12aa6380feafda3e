"""Kim et al. 2022 re-measured at our scale: unified loss, separately trained filter, validation subcorpora.

    # (a) unified loss vs the DensePhrases objective: two runs of train/configs/cpu_{ul,original}.yaml
    .venv/bin/python -m benchmarks.training.kim2022 loss --runs runs/cpu-ul runs/cpu-original
    # (b) hard-negative fine-tuning vs the same fine-tuning without: train/configs/cpu_hn{,_control}.yaml
    .venv/bin/python -m benchmarks.training.kim2022 hn --runs runs/cpu-hn runs/cpu-hn-control
    # (a) and (b) as continuations of the default model, three arms from one start (cpu_hn{,_control}_384.yaml,
    # cpu_original_384.yaml), written to kim2022_hn_384:
    .venv/bin/python -m benchmarks.training.kim2022 hn --baseline dphr-minilm-squad-384 --tag 384 \
        --runs runs/cpu-hn-384 runs/cpu-hn-control-384 runs/cpu-original-384
    # (c) the filter: AUC-PR and accuracy vs index size, separate filter vs the jointly trained one
    .venv/bin/python -m benchmarks.training.kim2022 filter \
        --models runs/cpu-ul/filter/final runs/cpu-original/rc/best
    # (d) checkpoint ranking on C0, R_r, H_k against the ranking on a large corpus, with rank correlations
    .venv/bin/python -m benchmarks.training.kim2022 validation \
        --checkpoints runs/kept/* --reference runs/kept/cpu-ul-50

Questions are those of the held-out validation articles (the first 8 dev-public articles, 427 paragraphs, which
``quality/squad_open_small.py`` never asks about), capped at ``--questions`` evenly spaced ones. The "large" corpus
is every dev-public paragraph (1,702) plus ``--extra-train-passages`` SQuAD train-rebuilt paragraphs (the whole
SQuAD-open-small corpus with ``--extra-train-passages all``). Phrase EM@1 and passage acc@k are computed exactly as
in training-time validation (``train.validation.evaluate_index``). Writes ``results/kim2022_<part>.json`` and ``.png``
(``kim2022_validation_full`` for (d) against the whole SQuAD-open-small corpus).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.checkpoints import load_checkpoint, score
from benchmarks.common import (
    KS,
    SQUAD_DEV,
    SQUAD_TRAIN,
    finish_result,
    gold_window_spans,
    machine,
    pyplot,
    save_figure,
    validation_data,
)


def large_corpus(extra_train: str) -> list[dict[str, Any]]:
    """Every dev-public paragraph plus ``extra_train`` train-rebuilt paragraphs (evenly spaced, or ``all``)."""
    import numpy as np

    from train.data import load_squad

    passages = load_squad(SQUAD_DEV).passages
    train = load_squad(SQUAD_TRAIN).passages
    if extra_train != "all":
        n = min(int(extra_train), len(train))
        train = [train[i] for i in np.linspace(0, len(train) - 1, n).round().astype(int)] if n else []
    return passages + train


# ----------------------------------------------------------------------------- (a) loss
def run_record(run: Path, stage: str, corpora: dict[str, list[dict[str, Any]]], examples) -> dict[str, Any]:
    """A training run's stage: its arguments, validation curve, wall time and its selected model's scores."""
    log = [json.loads(line) for line in (run / stage / "metrics.jsonl").read_text().splitlines() if line.strip()]
    args_file = json.loads((run / stage / "train_args.json").read_text())
    model_dir = next(run / stage / n for n in ("best", "final") if (run / stage / n / "dphr_config.json").is_file())
    model = load_checkpoint(str(model_dir))
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").is_file() else {}
    section = summary.get("recipe", {}).get(stage, {})
    return {
        "stage": stage,
        "model": str(model_dir),
        "train_args": args_file,
        "loss": section.get("loss"),
        "hard_per_example": section.get("hard_per_example") if stage == "hn" else 0,
        "init": section.get("init"),
        "train_seconds": summary.get("stages", {}).get(stage, {}).get("seconds"),
        "samples_per_s": summary.get("stages", {}).get(stage, {}).get("samples_per_s"),
        "curve": [
            {k: v for k, v in e.items() if k == "step" or k.endswith("/em@1") or k.endswith("/acc@20")}
            for e in log
            if any(k.endswith("/em@1") for k in e)
        ],
        "train_loss": [{"step": e["step"], "loss": e["loss"]} for e in log if "loss" in e],
        "scores": {name: score(model, passages, examples) for name, passages in corpora.items()},
    }


def _corpora(data, sub: dict[str, list[str]], extra_train: str) -> dict[str, list[dict[str, Any]]]:
    corpora = {name: [data.passages[data.passage_index[p]] for p in ids] for name, ids in sub.items()}
    corpora["large"] = large_corpus(extra_train)
    return corpora


def run_loss(args) -> dict[str, Any]:
    """Validation curves of each run and its selected model on C0, R_0.1 and the large corpus."""
    from train.validation import build_subcorpora

    data, examples = validation_data(args.questions)
    sub = build_subcorpora(data, None, (), (0.1,), seed=0)
    corpora = _corpora(data, sub, args.extra_train_passages)
    runs = {Path(run).name: run_record(Path(run), "rc", corpora, examples) for run in args.runs}
    return {
        "runs": runs,
        "questions": len(examples),
        "subcorpora": {k: len(v) for k, v in sub.items()},
        "large_passages": len(corpora["large"]),
    }


# ----------------------------------------------------------------------------- (b) hard negatives
def run_hn(args) -> dict[str, Any]:
    """Fine-tuning with mined hard negatives vs the same fine-tuning without, from one start model."""
    from train.validation import build_subcorpora

    data, examples = validation_data(args.questions)
    gold_data, gold_examples = validation_data(None)
    sub = build_subcorpora(data, load_checkpoint(args.baseline), (10,), (0.1,), seed=0)
    corpora = _corpora(data, sub, args.extra_train_passages)
    runs = {}
    for run in map(Path, args.runs):
        stage = "hn" if (run / "hn" / "metrics.jsonl").is_file() else "rc"
        runs[run.name] = run_record(run, stage, corpora, examples)
        if args.gold_questions:
            model = load_checkpoint(runs[run.name]["model"])
            runs[run.name]["gold_window"] = gold_window_spans(model, gold_data, gold_examples, args.gold_questions)
        mining = run / "mine" / "stats.json"
        if mining.is_file():
            runs[run.name]["mining"] = json.loads(mining.read_text())
    start_model = load_checkpoint(args.baseline)
    start = {
        "model": args.baseline,
        "scores": {name: score(start_model, passages, examples) for name, passages in corpora.items()},
    }
    if args.gold_questions:
        start["gold_window"] = gold_window_spans(start_model, gold_data, gold_examples, args.gold_questions)
    return {
        "start": start,
        "runs": runs,
        "questions": len(examples),
        "reference": args.baseline,
        "subcorpora": {k: len(v) for k, v in sub.items()},
        "large_passages": len(corpora["large"]),
    }


def hn_markdown(r: dict) -> str:
    corpora = list(r["start"]["scores"])
    sizes = {**r["subcorpora"], "large": r["large_passages"]}
    gold = "gold_window" in r["start"]
    lines = [
        f"Questions: {r['questions']} (held-out validation articles); H_10 built with `{r['reference']}`, the "
        "start model of every run. Phrase EM@1 / passage acc@20 (%) per corpus (passages)"
        + (
            f"; reading: span EM / F1 (%) in the gold window of {r['start']['gold_window']['questions']:,} "
            "validation questions"
            if gold
            else ""
        )
        + ":",
        "",
        "| model | loss | hard passages per question | steps × batch | train min | "
        + " | ".join(f"{c} ({sizes[c]})" for c in corpora)
        + (" | gold-window span EM / F1 |" if gold else " |"),
        "|---|---|---:|---:|---:|" + "---:|" * len(corpora) + ("---:|" if gold else ""),
    ]

    def cells(scores: dict) -> str:
        return " | ".join(f"{100 * scores[c]['em@1']:.1f} / {100 * scores[c]['acc@20']:.1f}" for c in corpora)

    def reading(entry: dict) -> str:
        g = entry.get("gold_window")
        return f" | {g['em']:.1f} / {g['f1']:.1f} |" if g else (" | – |" if gold else " |")

    lines.append(
        f"| start: `{r['start']['model']}` | – | – | – | – | {cells(r['start']['scores'])}{reading(r['start'])}"
    )
    for name, run in r["runs"].items():
        a = run["train_args"]
        minutes = f"{run['train_seconds'] / 60:.0f}" if run.get("train_seconds") else "–"
        lines.append(
            f"| {name} ({run['stage']}, best on {a.get('select_metric')}) | {run.get('loss') or '–'} | "
            f"{run['hard_per_example']} | "
            f"{a.get('max_steps')} × {a.get('batch_size')} | {minutes} | {cells(run['scores'])}{reading(run)}"
        )
    for name, run in r["runs"].items():
        if run.get("mining"):
            m = run["mining"]
            lines += [
                "",
                f"Mining ({name}): {int(m['questions']):,} training questions over {m['passages']:,} training "
                f"passages ({m['vectors']:,} vectors); {m['mean_negatives']:.1f} answer-free passages per "
                f"question among the top-10 phrases; {100 * m['short_fraction']:.1f}% of questions had none.",
            ]
    return "\n".join(lines)


def loss_markdown(r: dict) -> str:
    lines = [
        f"Questions: {r['questions']} (held-out validation articles). Large corpus: {r['large_passages']} passages.",
        "",
        "| run | loss | steps × batch | train min | corpus | passages | EM@1 | acc@1 | acc@5 | acc@20 |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for name, run in r["runs"].items():
        a = run["train_args"]
        minutes = f"{run['train_seconds'] / 60:.0f}" if run.get("train_seconds") else "–"
        for corpus, s in run["scores"].items():
            lines.append(
                f"| {name} | {run['loss']} | {a.get('max_steps')} × {a.get('batch_size')} | {minutes} | {corpus} | "
                f"{s['passages']} | {100 * s['em@1']:.1f} | {100 * s['acc@1']:.1f} | {100 * s['acc@5']:.1f} | "
                f"{100 * s['acc@20']:.1f} |"
            )
    return "\n".join(lines)


def loss_plot(r: dict, path: Path) -> None:
    plt = pyplot()

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, run in r["runs"].items():
        curve = run["curve"]
        key = next((k for k in (curve[0] if curve else {}) if k.endswith("/em@1")), None)
        if key:
            ax1.plot([c["step"] for c in curve], [100 * c[key] for c in curve], marker="o", label=f"{name} ({key})")
        corpora = list(run["scores"])
        ax2.plot(corpora, [100 * run["scores"][c]["em@1"] for c in corpora], marker="o", label=name)
    ax1.set(xlabel="step", ylabel="EM@1 (%)", title="validation during training")
    ax2.set(xlabel="corpus (small → large)", ylabel="phrase EM@1 (%)", title="selected model")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    save_figure(fig, path)


# ----------------------------------------------------------------------------- (c) filter
def run_filter(args) -> dict[str, Any]:
    """AUC-PR of each model's filter on the validation windows and its index-size/accuracy trade-off."""
    from train.data import PassageWindows, build_features
    from train.filter import choose_threshold, filter_metrics, filter_scores, threshold_sweep

    data, examples = validation_data(args.questions)
    large = large_corpus(args.extra_train_passages)
    models = {}
    for path in args.models:
        model = load_checkpoint(path)
        features = build_features(data, PassageWindows(model.tokenizer, model.config, data.passages))
        # window labels: each window once, every answer of its questions positive (what an index filter must
        # keep); question labels: each (question, window) with its own answer only (the earlier measure)
        auc = filter_metrics(filter_scores(model, data, features, labels="window"))
        auc_question = filter_metrics(filter_scores(model, data, features, labels="question"))
        rows = threshold_sweep(model, large, examples, [None, *args.thresholds], 64, KS)
        for row in rows:
            row["vectors_per_passage"] = row["vectors"] / len(large)
        within = choose_threshold(rows, "em@1", 0.01)  # the fewest vectors at <= 1 point of EM@1 lost
        smallest = next(r for r in rows if r["threshold"] == within["threshold"])
        models[path] = {
            "auc_pr": auc,
            "auc_pr_question_labels": auc_question,
            "filter_threshold": model.config.filter_threshold,
            "sweep": rows,
            "within_1pt": {**within, "vectors_per_passage": smallest["vectors_per_passage"]},
        }
    return {"models": models, "questions": len(examples), "passages": len(large)}


def filter_markdown(r: dict) -> str:
    lines = [
        f"AUC-PR on the validation windows; sweep over {r['passages']} passages, {r['questions']} questions.",
        "",
        "| model | AUC-PR (start or end) | threshold | vectors / passage | EM@1 | acc@20 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, m in r["models"].items():
        if "within_1pt" in m:
            w = m["within_1pt"]
            lines.insert(
                1,
                f"- `{name}`: AUC-PR {m['auc_pr']['auc_pr']:.3f} window labels / "
                f"{m['auc_pr_question_labels']['auc_pr']:.3f} question labels; fewest vectors within 1 EM@1 point "
                f"of no filtering: **{w['vectors_per_passage']:.1f} per passage** (threshold {w['threshold']}, "
                f"EM@1 {100 * w['chosen']:.1f} vs {100 * w['reference']:.1f})",
            )
    for name, m in r["models"].items():
        for row in m["sweep"]:
            t = "none" if row["threshold"] is None else f"{row['threshold']:g}"
            lines.append(
                f"| {name} | {m['auc_pr']['auc_pr']:.3f} | {t} | {row['vectors_per_passage']:.1f} | "
                f"{100 * row['em@1']:.1f} | {100 * row['acc@20']:.1f} |"
            )
    return "\n".join(lines)


def filter_plot(r: dict, path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, m in r["models"].items():
        rows = sorted(m["sweep"], key=lambda row: row["vectors_per_passage"])
        label = f"{Path(name).parent.parent.name}/{Path(name).parent.name} (AUC-PR {m['auc_pr']['auc_pr']:.3f})"
        ax.plot(
            [row["vectors_per_passage"] for row in rows],
            [100 * row["em@1"] for row in rows],
            marker="o",
            label=f"EM@1 {label}",
        )
        ax.plot(
            [row["vectors_per_passage"] for row in rows],
            [100 * row["acc@20"] for row in rows],
            marker="s",
            linestyle="--",
            label=f"acc@20 {label}",
        )
    ax.set(
        xscale="log",
        xlabel="vectors per passage (log)",
        ylabel="%",
        title="index size vs accuracy by filter threshold",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, path)


# ----------------------------------------------------------------------------- (d) validation corpora
def run_validation(args) -> dict[str, Any]:
    """Each checkpoint on C0, R_r, H_k (built with the reference) and the large corpus; rank correlations."""
    from scipy.stats import kendalltau, spearmanr

    from train.validation import build_subcorpora, evaluate_index

    data, examples = validation_data(args.questions)
    sub = build_subcorpora(data, load_checkpoint(args.reference), args.hard_k, args.random_fractions, seed=0)
    large_index, threshold, large = None, None, []
    if args.large_index:
        from dphr_haystack.index.phrase_index import PhraseIndex

        large_index = PhraseIndex.load(args.large_index)
        threshold = large_index.filter_threshold  # the subcorpora get the same token filter
    else:
        large = large_corpus(args.extra_train_passages)
    table: dict[str, dict[str, Any]] = {}
    for path in args.checkpoints:
        model = load_checkpoint(path)
        row = {
            name: score(
                model,
                [data.passages[data.passage_index[p]] for p in ids],
                examples,
                corpus=name,
                filter_threshold=threshold,
            )
            for name, ids in sub.items()
        }
        if large_index is not None:
            if model.phrase_fingerprint() != large_index.model_fingerprint:
                raise SystemExit(f"{path}: its phrase encoder did not build {args.large_index}")
            started = time.perf_counter()
            row["large"] = {
                **evaluate_index(large_index, model, examples, KS),
                "passages": large_index.num_passages,
                "vectors": len(large_index),
                "seconds": time.perf_counter() - started,
            }
        else:
            row["large"] = score(model, large, examples, corpus="large")
        table[path.removeprefix("runs/")] = row
        print(path, {k: round(100 * v["em@1"], 1) for k, v in row.items()}, flush=True)
    correlations = {}
    names = list(table)
    for metric in ("em@1", "acc@20"):
        full = [table[n]["large"][metric] for n in names]
        for corpus in sub:
            small = [table[n][corpus][metric] for n in names]
            correlations[f"{corpus}/{metric}"] = {
                "kendall_tau": float(kendalltau(small, full).statistic),
                "spearman": float(spearmanr(small, full).statistic),
                "best_matches_large": names[max(range(len(names)), key=small.__getitem__)]
                == names[max(range(len(names)), key=full.__getitem__)],
            }
    return {
        "checkpoints": table,
        "reference": args.reference,
        "subcorpora": {k: len(v) for k, v in sub.items()},
        "questions": len(examples),
        "large_passages": large_index.num_passages if large_index else len(large),
        "large_index": args.large_index,
        "filter_threshold": threshold,
        "correlations": correlations,
    }


def validation_markdown(r: dict) -> str:
    corpora = list(r["subcorpora"]) + ["large"]
    sizes = {**r["subcorpora"], "large": r["large_passages"]}
    large = (
        f"the phrase index `{Path(r['large_index']).name}` (filter threshold {r['filter_threshold']}, also applied "
        "to the subcorpora)"
        if r.get("large_index")
        else "dev-public plus train-rebuilt paragraphs"
    )
    lines = [
        f"{len(r['checkpoints'])} checkpoints, {r['questions']} questions; H_k built with `{r['reference']}`; "
        f"large corpus: {large}.",
        "",
        "Phrase EM@1 (%) per corpus (passages in brackets):",
        "",
        "| checkpoint | " + " | ".join(f"{c} ({sizes[c]})" for c in corpora) + " |",
        "|---|" + "---:|" * len(corpora),
    ]
    for name, row in r["checkpoints"].items():
        lines.append(f"| {name} | " + " | ".join(f"{100 * row[c]['em@1']:.1f}" for c in corpora) + " |")
    lines += [
        "",
        "Rank correlation with the large corpus over the checkpoints:",
        "",
        "| subcorpus / metric | Kendall τ | Spearman ρ | picks the large corpus's best |",
        "|---|---:|---:|---|",
    ]
    for key, c in r["correlations"].items():
        lines.append(
            f"| {key} | {c['kendall_tau']:.2f} | {c['spearman']:.2f} | {'yes' if c['best_matches_large'] else 'no'} |"
        )
    return "\n".join(lines)


def validation_plot(r: dict, path: Path) -> None:
    plt = pyplot()

    corpora = list(r["subcorpora"]) + ["large"]
    sizes = {**r["subcorpora"], "large": r["large_passages"]}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    for name, row in r["checkpoints"].items():
        xs = sorted(corpora, key=sizes.__getitem__)
        ax1.plot([sizes[c] for c in xs], [100 * row[c]["em@1"] for c in xs], marker="o", label=name)
    ax1.set(
        xscale="log",
        xlabel="corpus size (passages, log)",
        ylabel="phrase EM@1 (%)",
        title="checkpoints on subcorpora of growing size",
    )
    ax1.legend(fontsize=7)
    ax1.grid(alpha=0.3)
    keys = [k for k in r["correlations"] if k.endswith("/em@1")]
    ax2.bar([k.split("/")[0] for k in keys], [r["correlations"][k]["kendall_tau"] for k in keys])
    ax2.set(
        ylabel="Kendall τ with the large corpus (EM@1)",
        title="does the small corpus rank checkpoints right?",
        ylim=(-1, 1),
    )
    ax2.grid(alpha=0.3, axis="y")
    save_figure(fig, path)


PARTS = {
    "loss": (run_loss, loss_markdown, loss_plot),
    "hn": (run_hn, hn_markdown, loss_plot),
    "filter": (run_filter, filter_markdown, filter_plot),
    "validation": (run_validation, validation_markdown, validation_plot),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=sorted(PARTS))
    parser.add_argument(
        "--runs",
        nargs="+",
        help="(loss, hn) run directories; defaults: runs/cpu-ul runs/cpu-original "
        "(loss), runs/cpu-hn runs/cpu-hn-control (hn)",
    )
    parser.add_argument("--baseline", default="runs/shipped-v1", help="(hn) the start model of both runs")
    parser.add_argument(
        "--models",
        nargs="+",
        default=["runs/cpu-ul/filter/final", "runs/cpu-original/rc/best"],
        help="(filter) model directories",
    )
    parser.add_argument(
        "--thresholds", nargs="+", type=float, default=[-3.0, -2.0, -1.0, -0.5, 0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0]
    )
    parser.add_argument("--checkpoints", nargs="+", default=[], help="(validation) checkpoint model directories")
    parser.add_argument("--reference", help="(validation) model that builds H_k (default: the first checkpoint)")
    parser.add_argument("--hard-k", nargs="+", type=int, default=[1, 10])
    parser.add_argument("--random-fractions", nargs="+", type=float, default=[0.1, 0.5])
    parser.add_argument("--questions", type=int, default=400, help="validation questions (evenly spaced)")
    parser.add_argument(
        "--extra-train-passages",
        default="2300",
        help="train-rebuilt paragraphs added to dev-public for the large corpus, or 'all'",
    )
    parser.add_argument(
        "--large-index",
        help="(validation) an existing phrase index as the large corpus, e.g. "
        "SQuAD-open-small's from quality/squad_open_small.py; every checkpoint must share its phrase "
        "encoder (query-side checkpoints), and the subcorpora get its filter threshold",
    )
    parser.add_argument(
        "--gold-questions", type=int, default=1000, help="(hn) gold-window reading questions per model (0: skip)"
    )
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--tag", help="suffix of the result's name (kim2022_<part>_<tag>), to keep it beside an earlier model's"
    )
    args = parser.parse_args(argv)
    args.runs = args.runs or {
        "loss": ["runs/cpu-ul", "runs/cpu-original"],
        "hn": ["runs/cpu-hn", "runs/cpu-hn-control"],
    }.get(args.part, [])
    if args.part == "validation":
        if len(args.checkpoints) < 3:
            parser.error("validation needs at least 3 --checkpoints to rank")
        args.reference = args.reference or args.checkpoints[0]
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    run, markdown, plot = PARTS[args.part]
    started = time.perf_counter()
    result = {
        "command": "python -m benchmarks.training.kim2022 " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine(),
        **run(args),
    }
    result["seconds"] = time.perf_counter() - started
    # Against the whole SQuAD-open-small corpus: kept beside the smaller-scale run.
    full = args.part == "validation" and (args.extra_train_passages == "all" or bool(args.large_index))
    name = f"kim2022_{args.part}" + ("_full" if full else "") + (f"_{args.tag}" if args.tag else "")
    finish_result(name, result, markdown, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
