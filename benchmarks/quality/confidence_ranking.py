"""Ranking results by their answer's calibrated confidence instead of their score, on the whole SQuAD-open-small
phrase index, one run.

    .venv/bin/python -m benchmarks.quality.confidence_ranking [--questions 2000]

The shipped model's calibration predicts whether an answer is right from its answer ranker's score of 14 features
of it (its score among the first 50 candidates, agreement between candidates, how many of the question's words
surround it, ...). ``ranking="score"`` orders phrase answers by phrase score and passages by their best phrase's
(DensePhrases); ``ranking="confidence"`` (the searchers' default) reorders the first 50 phrase answers (the
calibration's depth; 10 passages) by that confidence. Both answer the same query vectors (int8, the default): the
validation questions (the held-out dev articles; the calibration was fitted on them, so they are
in-sample here) and ``--questions`` SQuAD-open-small questions it never saw. Reported: EM@1 / F1@1 / EM@5 of the
phrase answers, passage acc@1 / acc@5, AUROC and ECE of the top answer's confidence, p50 of one phrase search
(query vectors given, one thread, the two rankings in turn), and bootstrap 95% intervals of the EM@1 and acc@1 gains
on the unseen questions (paired, 1,000 resamples).
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

RANKINGS = ("score", "confidence")


def _per_question(examples, answers, passages) -> tuple[np.ndarray, np.ndarray]:
    """Each question's top answer right (EM) and top passage holding an answer, as 0/1 arrays."""
    em = [hit_scores([ex], [a], None, 1)["em@1"] for ex, a in zip(examples, answers, strict=True)]
    acc = [hit_scores([ex], None, [p], 1)["acc@1"] for ex, p in zip(examples, passages, strict=True)]
    return np.asarray(em), np.asarray(acc)


def _gain_interval(before: np.ndarray, after: np.ndarray, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(before), size=(1000, len(before)))
    gains = (after[picks] - before[picks]).mean(axis=1)
    return [float(np.percentile(gains, 2.5)), float(np.percentile(gains, 97.5))]


def _evaluate(index, model, examples) -> dict[str, Any]:
    import torch

    from dphr_haystack import PhraseSearcher
    from dphr_haystack.answers import exact_match
    from dphr_haystack.confidence import auroc, expected_calibration_error

    questions = [ex.question for ex in examples]
    q_start, q_end = model.encode_queries(questions, batch_size=64, precision="int8")
    out: dict[str, Any] = {}
    per_question = {}
    for ranking in RANKINGS:
        searcher = PhraseSearcher(index, model, ranking=ranking)
        answers = searcher.search_vectors(q_start, q_end, "phrase", 10, questions=questions)
        passages = searcher.search_vectors(q_start, q_end, "passage", 10, questions=questions)
        scores = hit_scores(examples, answers, passages, 5)
        em, acc = _per_question(examples, answers, passages)
        confidences = [a[0].confidence if a else 0.0 for a in answers]
        scores.update(
            em_at_5=float(
                np.mean([any(exact_match(h.text, ex.answers) for h in a[:5]) for ex, a in zip(examples, answers)])
            ),
            auroc=auroc(confidences, em.astype(bool).tolist()),
            ece=expected_calibration_error(confidences, em.astype(bool).tolist()),
        )
        per_question[ranking] = (em, acc)
        out[ranking] = scores
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    searchers = {r: PhraseSearcher(index, model, ranking=r) for r in RANKINGS}
    times: dict[str, list[float]] = {r: [] for r in RANKINGS}
    for i in range(min(300, len(questions))):
        for ranking, searcher in searchers.items():
            started = time.perf_counter()
            searcher.search_vectors(q_start[i : i + 1], q_end[i : i + 1], "phrase", 10, questions=questions[i : i + 1])
            times[ranking].append((time.perf_counter() - started) * 1000)
    torch.set_num_threads(threads)
    for ranking in RANKINGS:
        out[ranking]["p50_ms_search"] = statistics.median(times[ranking])
    (em0, acc0), (em1, acc1) = per_question["score"], per_question["confidence"]
    out["gain_interval"] = {"em@1": _gain_interval(em0, em1), "acc@1": _gain_interval(acc0, acc1)}
    return out


def measure(model_name: str, questions: int) -> dict[str, Any]:
    from dphr_haystack.index.phrase_index import PhraseIndex
    from dphr_haystack.nodes import load_phrase_model

    started = time.perf_counter()
    model = load_phrase_model(model_name, "cpu")
    index = PhraseIndex.load(cached_open_small_phrases(model))
    sets = {
        "validation (calibration fitted here)": held_out_questions(10_000),
        "SQuAD-open-small (unseen)": squad_open_small_questions(questions),
    }
    results = {name: _evaluate(index, model, examples) for name, examples in sets.items()}
    return {
        "machine": machine(),
        "model": model_name,
        "model_id": model_id(model_name),
        "vectors": len(index),
        "passages": index.num_passages,
        "questions": {name: len(examples) for name, examples in sets.items()},
        "results": results,
        "seconds": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Ranking by score vs by the calibrated confidence of the answer, `{result['model']}`, the SQuAD-open-small "
        f"index ({result['passages']:,} passages, {result['vectors']:,} vectors), int8 queries, "
        f"{result['machine']['cpu']}:",
        "",
        "| questions | ranking | EM@1 | F1@1 | EM@5 | passage acc@1 | passage acc@5 | AUROC | ECE | search p50 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, res in result["results"].items():
        for ranking in RANKINGS:
            r = res[ranking]
            cells = [f"{100 * r[k]:.2f}" for k in ("em@1", "f1@1", "em_at_5", "acc@1", "acc@5")]
            cells += [f"{r['auroc']:.3f}", f"{r['ece']:.3f}", f"{r['p50_ms_search']:.2f}"]
            lines.append(f"| {name} ({result['questions'][name]:,}) | {ranking} | " + " | ".join(cells) + " |")
    lines.append("")
    for name, res in result["results"].items():
        em, acc = res["gain_interval"]["em@1"], res["gain_interval"]["acc@1"]
        lines.append(
            f"- {name}: gain of confidence ranking, 95% bootstrap: EM@1 [{100 * em[0]:+.2f}, {100 * em[1]:+.2f}], "
            f"passage acc@1 [{100 * acc[0]:+.2f}, {100 * acc[1]:+.2f}]"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()
    names = list(result["results"])
    fig, axes = plt.subplots(1, 2, figsize=(9, 2.8))
    for ax, metric, label in ((axes[0], "em@1", "EM@1"), (axes[1], "acc@1", "passage acc@1")):
        x = np.arange(len(names))
        for i, ranking in enumerate(RANKINGS):
            values = [100 * result["results"][n][ranking][metric] for n in names]
            ax.bar(x + (i - 0.5) * 0.38, values, 0.38, label=f"by {ranking}")
        ax.set_xticks(x, [n.split(" (")[0] for n in names], fontsize=8)
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--questions", type=int, default=2000)
    args = parser.parse_args()
    finish_result("confidence_ranking", measure(args.model, args.questions), markdown, plot)


if __name__ == "__main__":
    main()
