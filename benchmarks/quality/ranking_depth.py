"""How many phrase answers the confidence ranking should order: a calibration (answer ranker + calibration of its
top answers, as ``train.calibrate`` fits it) fitted at each depth on the validation questions, then asked through
a ``PhraseSearcher`` on SQuAD-open-small questions it never saw, one run.

    .venv/bin/python -m benchmarks.quality.ranking_depth [--depths 10,15,20,30,40] [--questions 2000]

A calibration of depth d reads the first d ranked candidates of a question (its features' reference list) and the
searchers order that many phrase answers by its confidence (passages and documents keep their 10). Per depth:
the share of questions with a right answer among the first d candidates (what any ranking could reach), EM@1 /
F1@1 of the phrase answers and passage acc@1 of the unseen questions, EM@1 of the validation questions (in-sample:
the calibration is fitted on them), AUROC of the top answer's confidence, and the p50 of one phrase search and one
passage search (query vectors encoded beforehand, one thread, the depths in turn on the same questions).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

from benchmarks.common import (
    DEFAULT_MODEL,
    cached_open_small_phrases,
    finish_result,
    held_out_questions,
    hit_scores,
    machine,
    model_id,
    pyplot,
    save_figure,
    squad_open_small_questions,
)
from benchmarks.significance import paired

DEPTHS = (10, 15, 20, 30, 40)
TIMED_QUESTIONS = 300


def _fit(searcher, examples, depth: int):
    """The calibration of ``depth`` fitted on ``examples`` as ``train.calibrate`` fits it (every question)."""
    from dphr_haystack.confidence import KNOWN_FEATURES
    from train.calibrate import candidate_table, fit_confidence

    table = candidate_table(searcher, examples, KNOWN_FEATURES, depth=depth)
    questions = np.arange(len(examples))
    return fit_confidence(table, searcher.index.passages, questions, KNOWN_FEATURES, ranked=True)


def _reachable(searcher, examples, depth: int) -> float:
    """The share of ``examples`` with a right answer among their first ``depth`` ranked candidates."""
    from dphr_haystack.answers import exact_match
    from train.calibrate import ranked_candidates

    ranked = ranked_candidates(searcher, [ex.question for ex in examples], depth=depth)
    return float(np.mean([any(exact_match(h.text, ex.answers) for h in r[:depth]) for ex, r in zip(examples, ranked)]))


def _answers(index, model, calibration, vectors, examples, units: tuple[str, ...]) -> dict[str, Any]:
    """EM@1 / F1@1 (and passage acc@1 with ``"passage"`` in ``units``), the top answer's AUROC, and each question's
    EM@1 and F1@1 (``per_question``, for the paired differences)."""
    from dphr_haystack import PhraseSearcher
    from dphr_haystack.answers import exact_match, f1_score
    from dphr_haystack.confidence import auroc

    searcher = PhraseSearcher(index, model, calibration=calibration)
    questions = [ex.question for ex in examples]
    answers = searcher.search_vectors(*vectors, "phrase", 10, questions=questions)
    passages = searcher.search_vectors(*vectors, "passage", 10, questions=questions) if "passage" in units else None
    scores = hit_scores(examples, answers, passages, 5)
    right = [bool(a) and exact_match(a[0].text, ex.answers) for ex, a in zip(examples, answers)]
    scores["auroc"] = auroc([a[0].confidence if a else 0.0 for a in answers], right)
    f1 = [f1_score(a[0].text, ex.answers) if a else 0.0 for ex, a in zip(examples, answers)]
    scores["per_question"] = {"em@1": np.asarray(right, dtype=float), "f1@1": np.asarray(f1)}
    return scores


def _latency(index, model, calibrations: dict[int, Any], vectors, questions: list[str]) -> dict[int, dict]:
    """p50 ms of one phrase and one passage search per depth, the depths in turn on each question."""
    import torch

    from dphr_haystack import PhraseSearcher

    searchers = {d: PhraseSearcher(index, model, calibration=c) for d, c in calibrations.items()}
    times: dict[int, dict[str, list[float]]] = {d: {"phrase": [], "passage": []} for d in searchers}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    q_start, q_end = vectors
    for i in range(min(TIMED_QUESTIONS, len(questions))):
        for unit in ("phrase", "passage"):
            for depth, searcher in searchers.items():
                started = time.perf_counter()
                searcher.search_vectors(q_start[i : i + 1], q_end[i : i + 1], unit, 10, questions=questions[i : i + 1])
                times[depth][unit].append(1000 * (time.perf_counter() - started))
    torch.set_num_threads(threads)
    return {d: {unit: statistics.median(v) for unit, v in t.items()} for d, t in times.items()}


def measure(model_name: str, questions: int, depths: tuple[int, ...]) -> dict[str, Any]:
    from tqdm import tqdm

    from dphr_haystack.index.phrase_index import PhraseIndex
    from dphr_haystack.nodes import load_phrase_model
    from train.calibrate import candidate_searcher

    started = time.perf_counter()
    model = load_phrase_model(model_name, "cpu")
    index = PhraseIndex.load(cached_open_small_phrases(model))
    validation, unseen = held_out_questions(10_000), squad_open_small_questions(questions)
    candidates = candidate_searcher(index, model)
    vectors = {  # int8 queries, as the default searchers encode them
        name: model.encode_queries([ex.question for ex in exs], batch_size=64, precision="int8")
        for name, exs in (("validation", validation), ("unseen", unseen))
    }
    calibrations, rows = {}, []
    for depth in tqdm(depths, desc="depths", unit="depth"):
        calibration = _fit(candidates, validation, depth)
        calibrations[depth] = calibration
        seen = _answers(index, model, calibration, vectors["validation"], validation, ("phrase",))
        new = _answers(index, model, calibration, vectors["unseen"], unseen, ("phrase", "passage"))
        rows.append(
            {
                "depth": depth,
                "reachable": _reachable(candidates, unseen, depth),
                "unseen": new,
                "validation": seen,
            }
        )
    latency = _latency(index, model, calibrations, vectors["unseen"], [ex.question for ex in unseen])
    first = rows[0]["unseen"]["per_question"]
    for row in rows:
        row["p50_ms"] = latency[row["depth"]]
        per_question = row["unseen"].pop("per_question")
        row["validation"].pop("per_question")
        row["vs_first"] = {metric: paired(first[metric], per_question[metric]) for metric in first}
    return {
        "machine": machine(),
        "model": model_name,
        "model_id": model_id(model_name),
        "vectors": len(index),
        "passages": index.num_passages,
        "questions": {"validation": len(validation), "unseen": len(unseen)},
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }


def _difference(row: dict[str, Any], metric: str) -> str:
    d = row["vs_first"][metric]
    p = f", p {d['mcnemar_p']:.3f}" if "mcnemar_p" in d else ""
    return f"{100 * d['diff']:+.2f} ± {100 * d['se']:.2f}{p}"


def markdown(result: dict[str, Any]) -> str:
    q = result["questions"]
    first = result["rows"][0]["depth"]
    lines = [
        f"Confidence ranking depth, `{result['model']}`, the SQuAD-open-small index ({result['passages']:,} passages, "
        f"{result['vectors']:,} vectors), int8 queries, {result['machine']['cpu']}: a calibration fitted at each "
        f"depth on {q['validation']:,} validation questions, asked on {q['unseen']:,} SQuAD-open-small questions it "
        f"never saw; p50 of one search (query vectors given, one thread, {TIMED_QUESTIONS} questions); "
        f"differences to depth {first} paired by question (± standard error, McNemar's p).",
        "",
        "| depth | right answer among the first d (%) | EM@1 | F1@1 | passage acc@1 | AUROC | validation EM@1 "
        f"(in-sample) | phrase search p50 ms | passage search p50 ms | EM@1 − depth {first} | F1@1 − depth {first} |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        u = r["unseen"]
        lines.append(
            f"| {r['depth']} | {100 * r['reachable']:.2f} | {100 * u['em@1']:.2f} | {100 * u['f1@1']:.2f} | "
            f"{100 * u['acc@1']:.2f} | {u['auroc']:.3f} | {100 * r['validation']['em@1']:.2f} | "
            f"{r['p50_ms']['phrase']:.2f} | {r['p50_ms']['passage']:.2f} | "
            f"{_difference(r, 'em@1')} | {_difference(r, 'f1@1')} |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()
    rows = result["rows"]
    depths = [r["depth"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3))
    axes[0].plot(depths, [100 * r["unseen"]["em@1"] for r in rows], marker="o", label="EM@1 (unseen)")
    axes[0].plot(depths, [100 * r["validation"]["em@1"] for r in rows], marker="o", label="EM@1 (validation)")
    axes[0].plot(depths, [100 * r["reachable"] for r in rows], marker="s", linestyle="--", label="right among first d")
    axes[0].set_xlabel("depth d")
    axes[0].set_ylabel("%")
    axes[0].legend(fontsize=7)
    for unit in ("phrase", "passage"):
        axes[1].plot(depths, [r["p50_ms"][unit] for r in rows], marker="o", label=f"{unit} search")
    axes[1].set_xlabel("depth d")
    axes[1].set_ylabel("p50 ms (query vectors given)")
    axes[1].legend(fontsize=7)
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--questions", type=int, default=2000)
    parser.add_argument(
        "--depths", type=lambda text: tuple(int(x) for x in text.split(",")), default=DEPTHS, help="e.g. 10,20"
    )
    args = parser.parse_args()
    if not args.depths or min(args.depths) < 1:
        parser.error("--depths must be positive integers")
    finish_result("ranking_depth", measure(args.model, args.questions, args.depths), markdown, plot)


if __name__ == "__main__":
    main()
