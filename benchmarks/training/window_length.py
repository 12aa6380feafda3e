"""The window-length lever: how SQuAD falls into passage windows, and the shipped model read with other windows.

    .venv/bin/python -m benchmarks.training.window_length [--windows 192/64 256/96 384/128 512/128] [--threads 1]

1. **Data.** SQuAD train-rebuilt (and the held-out validation paragraphs) cut into windows by the training code
   itself (``train.data.PassageWindows`` and ``build_features``, with the shipped model's tokenizer and passage
   settings, only ``max_passage_length`` / ``passage_stride`` changed): the share of paragraphs that fit one
   window, windows per paragraph, context subwords per window, encoder input tokens per paragraph, and the
   (question, window) training features whose window does not hold the answer (kept by default, gold position 0
   = [CLS]). Skipped when ``../shared/data/squad/train-v1.1-rebuilt.json.gz`` is absent.
2. **Reading.** ``dphr-minilm-squad`` with only ``config.max_passage_length`` / ``passage_stride`` changed (its
   weights were trained on 192/64 windows; a new config is a new phrase fingerprint, so each setting gets its own
   in-memory index): the 427 held-out validation paragraphs (C0 of ``train.validation``) indexed with the model's
   own token filter and threshold (what ``dphr index`` would keep; with ``--unfiltered`` also every token); the
   2,645 distinct validation questions asked (phrase EM@1 / F1@1, passage acc@k, scored as ``dphr eval``), with
   the per-question EM@1 difference from the trained setting (McNemar); vectors and windows per passage; encoding
   seconds per 1,000 passages (the settings take turns for ``--timing-rounds`` rounds, the fastest of each kept;
   ratios within one run only, the cores are shared); and the gold-window
   span EM / F1 of ``train.reader.span_metrics`` (the reader stage's measure: the best span of each answerable
   window against the gold span) for ``--gold-questions`` evenly spaced questions (it encodes a window per
   question: ~5 min for all 2,645 on one busy core, against ~30 s for the index).

Writes results/window_length.json and .png.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import (
    DEFAULT_MODEL,
    KS,
    SQUAD_DEV,
    SQUAD_TRAIN,
    VALIDATION_PARAGRAPHS,
    finish_result,
    gold_window_spans,
    machine,
    model_id,
    pyplot,
    save_figure,
    validation_data,
)
from benchmarks.significance import paired

DEFAULT_WINDOWS = ("192/64", "256/96", "384/128", "512/128")


def parse_window(text: str) -> tuple[int, int]:
    """``LENGTH/STRIDE`` (overlap-mode stride) → (length, stride)."""
    length, sep, stride = text.partition("/")
    try:
        if not sep:
            raise ValueError
        return int(length), int(stride)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a window is LENGTH/STRIDE, e.g. 384/128; got {text!r}") from None


def window_config(config, length: int, stride: int):
    """``config`` with another passage window and stride, everything else kept (checked by the config itself)."""
    return replace(config, max_passage_length=length, passage_stride=stride)


def label(length: int, stride: int) -> str:
    return f"{length}/{stride}"


# ----------------------------------------------------------------------------- 1. data
def data_statistics(data, tokenizer, config) -> dict[str, Any]:
    """Windows and training features of ``data`` (``train.data.RCData``) as the rc stage builds them."""
    import numpy as np

    from train.data import PassageWindows, build_features

    started = time.perf_counter()
    windows = PassageWindows(tokenizer, config, data.passages)
    per_paragraph = np.array([len(w) for w in windows.windows])
    context = np.array([len(ids) - prefix - 1 for ws in windows.windows for _, ids, _, prefix in ws])
    lengths = np.array([len(ids) for ws in windows.windows for _, ids, _, _ in ws])
    features = build_features(data, windows, keep_unanswered_windows=True)
    answered = np.array([f.start > 0 for f in features])
    per_example = np.bincount([f.example for f in features], minlength=len(data.examples))
    positives = np.bincount([f.example for f in features if f.start > 0], minlength=len(data.examples))
    located = per_example > 0  # the answer span maps to context tokens (else the example has no feature at all)
    # a window holding questions of which at least one has no answer in it (passage-grouped batches train these)
    window_has_unanswered = {f.window for f in features if f.start == 0}
    return {
        "paragraphs": len(data.passages),
        "examples": len(data.examples),
        "fit_one_window": float((per_paragraph == 1).mean()),
        "windows_per_paragraph": float(per_paragraph.mean()),
        "windows_per_paragraph_max": int(per_paragraph.max()),
        "paragraphs_by_windows": {str(k): int((per_paragraph == k).sum()) for k in range(1, per_paragraph.max() + 1)},
        "windows": int(len(context)),
        "context_tokens_per_window": float(context.mean()),
        "window_tokens_mean": float(lengths.mean()),
        "encoded_tokens_per_paragraph": float(lengths.sum() / len(data.passages)),
        "attention_pairs_per_paragraph": float((lengths.astype(np.float64) ** 2).sum() / len(data.passages)),
        "features": len(features),
        "features_per_question": float(len(features) / max(1, located.sum())),
        "features_without_answer": float(1.0 - answered.mean()) if len(features) else 0.0,
        "windows_with_unanswered_question": float(len(window_has_unanswered) / max(1, len(context))),
        "questions_unlocated": int((~located).sum()),
        "questions_answer_in_no_window": int((located & (positives == 0)).sum()),
        "questions_answer_in_2plus_windows": float((positives >= 2).sum() / max(1, located.sum())),
        "seconds": time.perf_counter() - started,
    }


def context_lengths(data, tokenizer, config) -> dict[str, float]:
    """Percentiles of the paragraphs' context subwords and title subwords (independent of the window)."""
    import numpy as np

    from dphr_haystack.model.inputs import tokenize_passages

    tokenized = tokenize_passages(
        tokenizer, [p["text"] for p in data.passages], [p.get("title", "") for p in data.passages], config
    )
    n = np.array([len(t.context_ids) for t in tokenized])
    titles = np.array([len(t.title_ids) for t in tokenized])
    out = {f"p{q}": float(np.percentile(n, q)) for q in (50, 75, 90, 99)}
    return {**out, "mean": float(n.mean()), "max": int(n.max()), "title_mean": float(titles.mean())}


def run_data(model, windows: Sequence[tuple[int, int]], skip_train: bool) -> dict[str, Any]:
    """Data statistics of SQuAD train-rebuilt and of the validation paragraphs per window setting."""
    from train.data import load_squad

    corpora: dict[str, Any] = {}
    if skip_train:
        corpora["train"] = {"skipped": "--skip-train-stats"}
    elif not SQUAD_TRAIN.is_file():
        corpora["train"] = {"skipped": f"{SQUAD_TRAIN.name} not found under ../shared/data/squad"}
    else:
        corpora["train"] = {"data": load_squad(SQUAD_TRAIN)}
    corpora["validation"] = {"data": validation_data(None)[0]}
    out: dict[str, Any] = {}
    for name, entry in corpora.items():
        data = entry.pop("data", None)
        if data is None:
            out[name] = entry
            print(f"data statistics of {name}: {entry['skipped']}", flush=True)
            continue
        out[name] = {"context_subwords": context_lengths(data, model.tokenizer, model.config), "windows": {}}
        for length, stride in windows:
            stats = data_statistics(data, model.tokenizer, window_config(model.config, length, stride))
            out[name]["windows"][label(length, stride)] = stats
            print(
                f"{name} {label(length, stride)}: {100 * stats['fit_one_window']:.1f}% fit one window, "
                f"{100 * stats['features_without_answer']:.1f}% features without the answer "
                f"({stats['seconds']:.0f} s)",
                flush=True,
            )
    return out


# ----------------------------------------------------------------------------- 2. the shipped model read
def read_setting(
    model, data, examples, filter_thresholds: Sequence[float | None], gold_questions: int | None
) -> dict[str, Any]:
    """Index the validation paragraphs with ``model`` as configured now, ask the questions, score the gold windows."""
    import numpy as np

    from dphr_haystack.evaluation import SearcherEvaluator, question_metrics, short_metrics
    from dphr_haystack.model.inputs import count_windows
    from dphr_haystack.search import PhraseSearcher
    from train.validation import build_index, qa_examples

    evaluator = SearcherEvaluator(qa_examples(examples), KS)
    tokenized = model.tokenize_passages([p["text"] for p in data.passages], [p["title"] for p in data.passages])
    out: dict[str, Any] = {
        "fingerprint": model.phrase_fingerprint()[:12],
        "windows_per_passage": float(np.mean([count_windows(t, model.config) for t in tokenized])),
        "indexes": {},
    }
    for threshold in filter_thresholds:
        started = time.perf_counter()
        index = build_index(model, data.passages, batch_size=32, filter_threshold=threshold)
        build_seconds = time.perf_counter() - started
        started = time.perf_counter()
        report = evaluator.report(PhraseSearcher(index, model))
        per_question = question_metrics(report.results, 1, True, True, report.settings["regex"], KS)
        out["indexes"]["none" if threshold is None else f"{threshold:g}"] = {
            "filter_threshold": threshold,
            **short_metrics(report.results, KS, regex=report.settings["regex"]),
            "em@1_per_question": per_question["phrase_em@1"].astype(int).tolist(),
            "vectors": len(index),
            "vectors_per_passage": len(index) / index.num_passages,
            "build_seconds": build_seconds,
            "build_seconds_per_1k": 1000 * build_seconds / index.num_passages,
            "search_seconds": time.perf_counter() - started,
        }
    out["gold_window"] = gold_window_spans(model, data, examples, gold_questions)
    return out


def run_reading(
    model,
    windows: Sequence[tuple[int, int]],
    filter_thresholds: Sequence[float | None],
    gold_questions: int | None,
    timing_rounds: int,
) -> dict:
    """The shipped model read with each window setting (its weights untouched), the trained setting first."""
    import numpy as np

    data, examples = validation_data(None)
    if len(data.passages) != VALIDATION_PARAGRAPHS:
        raise SystemExit(f"expected {VALIDATION_PARAGRAPHS} validation paragraphs, read {len(data.passages)}")
    trained = model.config
    trained_fingerprint = model.phrase_fingerprint()[:12]
    settings: dict[str, Any] = {}
    try:
        for length, stride in windows:
            model.config = window_config(trained, length, stride)
            name = label(length, stride)
            settings[name] = read_setting(model, data, examples, filter_thresholds, gold_questions)
            settings[name]["trained_setting"] = settings[name]["fingerprint"] == trained_fingerprint
            shown = {k: f"EM@1 {100 * v['em@1']:.1f}" for k, v in settings[name]["indexes"].items()}
            print(f"{name}: {shown}, gold-window EM {settings[name]['gold_window']['em']:.1f}", flush=True)
    finally:
        model.config = trained
    base = label(trained.max_passage_length, trained.passage_stride)
    if base in settings:  # per-question EM@1 differences from the trained window, on the same index kind
        for setting in settings.values():
            for key, row in setting["indexes"].items():
                ref = settings[base]["indexes"][key]["em@1_per_question"]
                row["em@1_vs_trained"] = paired(np.asarray(ref, float), np.asarray(row["em@1_per_question"], float))
    for setting in settings.values():  # the differences are kept, not the 0/1 lists
        for row in setting["indexes"].values():
            row.pop("em@1_per_question")
    timing = encoding_times(model, data.passages, windows, timing_rounds) if timing_rounds else {}
    for name, times in timing.items():
        settings[name]["encoding"] = times
    return {
        "passages": len(data.passages),
        "questions": len(examples),
        "timing_rounds": timing_rounds,
        "trained_window": base,
        "gold_questions": min(gold_questions or len(examples), len(examples)),
        "model_filter_threshold": trained.filter_threshold,
        "settings": settings,
    }


def encoding_times(model, passages, windows: Sequence[tuple[int, int]], rounds: int) -> dict[str, Any]:
    """Seconds to encode ``passages`` per window setting: the settings take turns for ``rounds`` rounds, the
    fastest round of each is kept (the cores are shared: interleaving spreads the load over all settings)."""
    texts, titles = [p["text"] for p in passages], [p["title"] for p in passages]
    trained = model.config
    seconds: dict[str, list[float]] = {label(*w): [] for w in windows}
    try:
        for _ in range(rounds):
            for length, stride in windows:
                model.config = window_config(trained, length, stride)
                started = time.perf_counter()
                model.encode_passages(texts, titles, batch_size=32)
                seconds[label(length, stride)].append(time.perf_counter() - started)
    finally:
        model.config = trained
    return {
        name: {"rounds": times, "best": min(times), "per_1k": 1000 * min(times) / len(passages)}
        for name, times in seconds.items()
    }


# ----------------------------------------------------------------------------- report
def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def markdown(r: dict) -> str:
    lines = [f"Model `{r['model']}` (id {r['model_id']}); torch threads {r['machine']['torch_threads']}.", ""]
    for name, corpus in r["data"].items():
        if "skipped" in corpus:
            lines += [f"**Data ({name})**: skipped ({corpus['skipped']}).", ""]
            continue
        c = corpus["context_subwords"]
        first = next(iter(corpus["windows"].values()))
        lines += [
            f"**Data ({name}: {first['paragraphs']:,} paragraphs, {first['examples']:,} questions)**; context "
            f"subwords per paragraph: median {c['p50']:.0f}, p75 {c['p75']:.0f}, p90 {c['p90']:.0f}, p99 "
            f"{c['p99']:.0f}, max {c['max']}; title {c['title_mean']:.1f} subwords on average.",
            "",
            "| window | paragraphs in one window (%) | windows / paragraph | context subwords / window | "
            "encoder tokens / paragraph | Σ L² / paragraph (rel.) | features / question | "
            "features without the answer (%) | windows holding a question answered elsewhere (%) | "
            "questions with the answer in ≥ 2 windows (%) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        ref = first["attention_pairs_per_paragraph"]
        for w, s in corpus["windows"].items():
            lines.append(
                f"| {w} | {_pct(s['fit_one_window'])} | {s['windows_per_paragraph']:.3f} | "
                f"{s['context_tokens_per_window']:.1f} | {s['encoded_tokens_per_paragraph']:.1f} | "
                f"{s['attention_pairs_per_paragraph'] / ref:.2f} | {s['features_per_question']:.3f} | "
                f"{_pct(s['features_without_answer'])} | {_pct(s['windows_with_unanswered_question'])} | "
                f"{_pct(s['questions_answer_in_2plus_windows'])} |"
            )
        lines.append("")
    read = r["reading"]
    lines += [
        f"**The shipped model read with other windows** (weights trained on {read['trained_window']}; "
        f"{read['passages']} validation paragraphs = C0, {read['questions']:,} distinct questions; filter "
        f"threshold {read['model_filter_threshold']} = the model's own, `none` = every token kept). EM@1 Δ: "
        "per-question difference from the trained window on the same kind of index (± s.e., McNemar p). "
        f"Encode s / 1k passages: the fastest of {read.get('timing_rounds', 0)} interleaved rounds (without "
        "rounds: the index build, encoding + filter + Flat add), one process, ratio to the trained window; "
        "comparable within this run only. "
        f"Gold-window span EM / F1 (%): {read['gold_questions']:,} evenly spaced questions, each answerable "
        "window of each scored.",
        "",
        "| window | filter | windows / passage | vectors / passage | EM@1 | F1@1 | acc@1 | acc@20 | EM@1 Δ | "
        "encode s / 1k passages | gold-window span EM / F1 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = read["settings"].get(read["trained_window"])
    for w, s in read["settings"].items():
        g = s["gold_window"]
        for key, row in s["indexes"].items():
            d = row.get("em@1_vs_trained")
            delta = (
                "–"
                if d is None or w == read["trained_window"]
                else (f"{100 * d['diff']:+.1f} ± {100 * d['se']:.1f} (p {d['mcnemar_p']:.2g})")
            )
            if "encoding" in s and base is not None and "encoding" in base:
                per_1k, ratio = s["encoding"]["per_1k"], s["encoding"]["best"] / base["encoding"]["best"]
            else:
                per_1k, ratio = row["build_seconds_per_1k"], None
                if base is not None and key in base["indexes"]:
                    ratio = row["build_seconds"] / base["indexes"][key]["build_seconds"]
            timing = f"{per_1k:.0f}" + (f" ({ratio:.2f}×)" if ratio is not None else "")
            lines.append(
                f"| {w} | {key} | {s['windows_per_passage']:.2f} | {row['vectors_per_passage']:.1f} | "
                f"{_pct(row['em@1'])} | {_pct(row['f1@1'])} | {_pct(row['acc@1'])} | {_pct(row['acc@20'])} | "
                f"{delta} | {timing} | {g['em']:.1f} / {g['f1']:.1f} "
                f"({g['questions']:,} windows) |"
            )
    lines += [
        "",
        "Training treats a window without the answer as a feature with gold start = end = 0 ([CLS]) "
        "(`data.keep_unanswered_windows`, default true, set false by no recipe): the densephrases loss trains the "
        "query toward its window's [CLS] state (which the index never stores) and uses that state as the "
        "question's in-batch gold vector; the unified loss makes [CLS] the positive against every token of the "
        "window and of the other passages' windows; the token filter loss leaves such features out.",
    ]
    return "\n".join(lines)


def plot(r: dict, path: Path) -> None:
    plt = pyplot()
    settings = r["reading"]["settings"]
    timed = all("encoding" in s for s in settings.values())
    fig, axes = plt.subplots(1, 3 if timed else 2, figsize=(16 if timed else 11.5, 4.2))
    ax1, ax2 = axes[0], axes[1]
    for name, corpus in r["data"].items():
        if "skipped" in corpus:
            continue
        ws = list(corpus["windows"])
        xs = [int(w.split("/")[0]) for w in ws]
        ax1.plot(xs, [100 * corpus["windows"][w]["fit_one_window"] for w in ws], marker="o", label=f"{name}: fit")
        ax1.plot(
            xs,
            [100 * corpus["windows"][w]["features_without_answer"] for w in ws],
            marker="s",
            linestyle="--",
            label=f"{name}: features without answer",
        )
    ax1.set(xlabel="window (subwords)", ylabel="%", title="SQuAD paragraphs in training windows")
    ws = list(settings)
    xs = [int(w.split("/")[0]) for w in ws]
    for key in next(iter(settings.values()))["indexes"]:
        ax2.plot(xs, [100 * settings[w]["indexes"][key]["em@1"] for w in ws], marker="o", label=f"EM@1 (filter {key})")
        ax2.plot(
            xs, [100 * settings[w]["indexes"][key]["acc@1"] for w in ws], marker="^", label=f"acc@1 (filter {key})"
        )
    ax2.plot(
        xs, [settings[w]["gold_window"]["em"] for w in ws], marker="s", linestyle="--", label="gold-window span EM"
    )
    ax2.axvline(int(r["reading"]["trained_window"].split("/")[0]), color="grey", linestyle=":", label="trained window")
    ax2.set(xlabel="inference window (subwords)", ylabel="%", title=f"{r['model']} read with other windows (C0)")
    if timed:
        axes[2].bar(ws, [settings[w]["encoding"]["per_1k"] for w in ws])
        axes[2].set(xlabel="window / stride", ylabel="s / 1,000 passages", title="encoding time (fastest round)")
        axes[2].grid(alpha=0.3, axis="y")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--windows", nargs="+", type=parse_window, default=[parse_window(w) for w in DEFAULT_WINDOWS])
    parser.add_argument("--skip-train-stats", action="store_true", help="only the validation paragraphs' statistics")
    parser.add_argument(
        "--unfiltered", action="store_true", help="also index every token (no filter) for each setting"
    )
    parser.add_argument(
        "--gold-questions",
        type=int,
        default=1000,
        help="evenly spaced questions for the gold-window span measure (0: all; it encodes a window per question)",
    )
    parser.add_argument(
        "--timing-rounds", type=int, default=2, help="interleaved encoding-time rounds per setting (0: none)"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args(argv)
    if not SQUAD_DEV.is_file():
        raise SystemExit(f"SQuAD dev-public not found at {SQUAD_DEV}: this benchmark needs ../shared/data")
    import torch

    from dphr_haystack.model.phrase_model import PhraseModel

    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    load_start = os.getloadavg()
    model = PhraseModel.load(args.model)
    windows = list(dict.fromkeys(args.windows))
    trained = (model.config.max_passage_length, model.config.passage_stride)
    if trained in windows:  # the trained setting first: the others are compared with it
        windows.remove(trained)
        windows.insert(0, trained)
    for length, stride in windows:
        window_config(model.config, length, stride)  # a bad setting fails before the long work
    thresholds: list[float | None] = [model.config.filter_threshold]
    if args.unfiltered and model.config.filter_threshold is not None:
        thresholds.append(None)
    result: dict[str, Any] = {
        "model": args.model,
        "model_id": model_id(args.model),
        "machine": machine(),
        "load_average_start": load_start,
        "windows": [label(*w) for w in windows],
        "data": run_data(model, windows, args.skip_train_stats),
    }
    result["reading"] = run_reading(model, windows, thresholds, args.gold_questions, args.timing_rounds)
    result["seconds"] = time.perf_counter() - started
    finish_result("window_length", result, markdown, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
