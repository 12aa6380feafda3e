"""A trained phrase model against the shipped default, side by side on what a new default has to win.

    .venv/bin/python -m benchmarks.training.candidate --candidate runs/cpu-windows/calibrated --name cpu-windows \
        [--questions 2000] [--gold-questions 1000]

Every model is scored as it would ship: its own token filter, calibration and SQuAD-open-small phrase index (the one
``scripts/train_default_model.sh`` builds; ``python -m benchmarks.quality.squad_open_small --model M --only
phrases`` builds it otherwise), int8 queries, answers ranked by confidence (the searchers' default):

1. **Reading**: gold-window span EM / F1 (``train.reader.span_metrics``: the best span of the question's own
   answerable windows, cut by the model's own window settings, against the gold span) for ``--gold-questions``
   evenly spaced questions of the held-out validation articles;
2. **The open corpus** (SQuAD-open-small, 20,598 passages): phrase EM@1 / F1@1, passage acc@1 / acc@5, the share of
   top answers contained in the question and the AUROC of the top answer's confidence, for the held-out validation
   questions (in-sample: the calibrations were fitted on them) and ``--questions`` SQuAD-open-small questions that
   no model or calibration saw; vectors per passage;
3. each candidate minus the shipped model, question by question (paired: mean, standard error, McNemar's p).

Writes results/candidate_<name>.json and .png.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import (
    DEFAULT_MODEL,
    SQUAD_DEV,
    cached_open_small_phrases,
    finish_result,
    gold_window_spans,
    held_out_questions,
    hit_results,
    machine,
    model_id,
    pyplot,
    save_figure,
    squad_open_small_questions,
    validation_data,
)
from benchmarks.significance import paired

SHIPPED = DEFAULT_MODEL
SETS = ("validation", "unseen")
# per-question measures kept for the paired differences, and how they are named in the table
PAIRED = {"phrase_em@1": "EM@1", "phrase_f1@1": "F1@1", "passage_acc@1": "acc@1"}


def open_corpus(model, index, examples) -> tuple[dict[str, Any], dict[str, Any]]:
    """Scores of ``model`` over its index for ``examples`` (summary, per-question arrays)."""
    import numpy as np

    from dphr_haystack import PhraseSearcher
    from dphr_haystack.confidence import auroc, copies_question, question_words
    from dphr_haystack.evaluation import question_metrics

    questions = [ex.question for ex in examples]
    q_start, q_end = model.encode_queries(questions, batch_size=64, precision="int8")
    searcher = PhraseSearcher(index, model)
    answers = searcher.search_vectors(q_start, q_end, "phrase", 10, questions=questions)
    passages = searcher.search_vectors(q_start, q_end, "passage", 10, questions=questions)
    per_question = question_metrics(hit_results(examples, answers, passages, 5), 5, True, True, ks=(1, 5))
    right = per_question["phrase_em@1"].astype(bool).tolist()
    confidences = [a[0].confidence if a and a[0].confidence is not None else 0.0 for a in answers]
    copies = [bool(a) and copies_question(a[0].text, question_words(q)) for a, q in zip(answers, questions)]
    summary = {name: 100 * float(np.mean(per_question[name])) for name in (*PAIRED, "passage_acc@5")}
    summary.update(
        questions=len(examples),
        copies_question=100 * float(np.mean(copies)),
        auroc=auroc(confidences, right) if any(c > 0 for c in confidences) else None,
    )
    return summary, {name: per_question[name] for name in PAIRED}


def measure_model(
    name: str, data, examples, sets: dict[str, list], gold_questions: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One model on every measure (``data`` / ``examples``: the validation articles for the gold windows; ``sets``:
    the question sets asked of the open corpus): (its row, its per-question arrays by question set)."""
    from dphr_haystack.index.phrase_index import PhraseIndex
    from dphr_haystack.nodes import load_phrase_model

    started = time.perf_counter()
    model = load_phrase_model(name, "cpu")
    index = PhraseIndex.load(cached_open_small_phrases(model))
    row: dict[str, Any] = {
        "model": name,
        "model_id": model_id(name),
        "fingerprint": model.phrase_fingerprint()[:12],
        "window": f"{model.config.max_passage_length}/{model.config.passage_stride}",
        "filter_threshold": model.config.filter_threshold,
        "calibrated": model.config.calibration is not None,
        "vectors_per_passage": len(index) / index.num_passages,
        "gold_window": gold_window_spans(model, data, examples, gold_questions),
    }
    arrays = {}
    for key, qs in sets.items():
        row[key], arrays[key] = open_corpus(model, index, qs)
    row["seconds"] = time.perf_counter() - started
    print(
        f"{name}: gold-window EM {row['gold_window']['em']:.1f}, validation EM@1 "
        f"{row['validation']['phrase_em@1']:.2f}, unseen EM@1 {row['unseen']['phrase_em@1']:.2f}",
        flush=True,
    )
    return row, arrays


def measure(candidates: list[str], questions: int, gold_questions: int) -> dict[str, Any]:
    import numpy as np

    started = time.perf_counter()
    data, examples = validation_data(None)
    sets = {"validation": held_out_questions(10_000), "unseen": squad_open_small_questions(questions)}
    rows, arrays = [], []
    for name in [SHIPPED, *candidates]:
        row, per_question = measure_model(name, data, examples, sets, gold_questions)
        rows.append(row)
        arrays.append(per_question)
    for row, per_question in zip(rows[1:], arrays[1:]):
        row["vs_shipped"] = {
            key: {
                metric: paired(np.asarray(arrays[0][key][metric]), np.asarray(per_question[key][metric]))
                for metric in PAIRED
            }
            for key in SETS
        }
    return {"machine": machine(), "rows": rows, "seconds": time.perf_counter() - started}


def _pct(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def markdown(result: dict[str, Any]) -> str:
    rows = result["rows"]
    lines = [
        "| model | window | vectors / passage | gold-window EM / F1 | validation EM@1 / F1@1 / acc@1 "
        "| unseen EM@1 / F1@1 / acc@1 / acc@5 | copies (val. / unseen) | AUROC (unseen) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        v, u, g = row["validation"], row["unseen"], row["gold_window"]
        lines.append(
            f"| {row['model']} | {row['window']} | {row['vectors_per_passage']:.1f} | {g['em']:.1f} / {g['f1']:.1f} "
            f"| {v['phrase_em@1']:.2f} / {v['phrase_f1@1']:.2f} / {v['passage_acc@1']:.2f} "
            f"| {u['phrase_em@1']:.2f} / {u['phrase_f1@1']:.2f} / {u['passage_acc@1']:.2f} / "
            f"{u['passage_acc@5']:.2f} | {v['copies_question']:.2f}% / {u['copies_question']:.2f}% "
            f"| {_pct(u['auroc'], 3)} |"
        )
    shipped = rows[0]
    lines += [
        "",
        f"Questions: {shipped['validation']['questions']:,} validation (in-sample for the calibrations), "
        f"{shipped['unseen']['questions']:,} SQuAD-open-small unseen; gold windows: "
        f"{shipped['gold_window']['questions']:,} validation questions.",
    ]
    for row in rows[1:]:
        for key in SETS:
            parts = []
            for metric, label in PAIRED.items():
                diff = row["vs_shipped"][key][metric]
                p = f", McNemar p {diff['mcnemar_p']:.3g}" if diff.get("mcnemar_p") is not None else ""
                parts.append(f"{label} {100 * diff['diff']:+.2f} ± {100 * diff['se']:.2f}{p}")
            lines.append(f"- {row['model']} − {SHIPPED}, {key}: " + "; ".join(parts))
    lines += ["", f"Run took {result['seconds'] / 60:.1f} min."]
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    import numpy as np

    plt = pyplot()
    rows = result["rows"]
    measures = [
        ("gold-window EM", lambda r: r["gold_window"]["em"]),
        ("validation EM@1", lambda r: r["validation"]["phrase_em@1"]),
        ("unseen EM@1", lambda r: r["unseen"]["phrase_em@1"]),
        ("unseen F1@1", lambda r: r["unseen"]["phrase_f1@1"]),
        ("unseen acc@1", lambda r: r["unseen"]["passage_acc@1"]),
    ]
    fig, ax = plt.subplots(figsize=(8.5, 3.6))
    x = np.arange(len(measures))
    width = 0.8 / len(rows)
    for i, row in enumerate(rows):
        values = [get(row) for _, get in measures]
        bars = ax.bar(x + (i - (len(rows) - 1) / 2) * width, values, width, label=row["model"])
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks(x, [name for name, _ in measures], fontsize=8)
    ax.set_ylabel("%")
    ax.set_title("trained phrase models against the shipped default", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--candidate", nargs="+", required=True, help="trained model directories")
    parser.add_argument("--name", required=True, help="results/candidate_<name>.json")
    parser.add_argument("--questions", type=int, default=2000, help="unseen SQuAD-open-small questions")
    parser.add_argument(
        "--gold-questions", type=int, default=1000, help="validation questions for the gold-window measure (0: all)"
    )
    args = parser.parse_args(argv)
    if not SQUAD_DEV.is_file():
        raise SystemExit(f"SQuAD dev-public not found at {SQUAD_DEV}: this benchmark needs ../shared/data")
    result = measure(args.candidate, args.questions, args.gold_questions)
    finish_result(f"candidate_{args.name}", result, markdown, plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
