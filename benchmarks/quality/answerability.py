"""Answers that say "not in this corpus": the answerability and the confidence from 5 passages to 20,000.

    .venv/bin/python -m benchmarks.quality.answerability [--questions 600] [--open-questions 600] [--no-open]

Questions the model's calibration and answerability never saw (SQuAD dev-public questions outside the held-out
validation articles, as SQuAD-open-small asks them) are searched, as a default ``PhraseSearcher`` searches, over
corpora that hold their answer and corpora that do not (:mod:`train.answerability`): sub-corpora of 5, 50 and 500
dev paragraphs (the question's paragraph and random others / random paragraphs of other articles), all 1,702 dev
paragraphs with and without the question's article, and SQuAD-open-small's 20,598 paragraphs the same two ways
(its cached phrase index: ``python -m benchmarks.quality.squad_open_small`` builds it). Unanswerable sets besides:
NQ-open and TriviaQA dev questions over the dev paragraphs and over SQuAD-open-small (nearly all unanswerable
there: counted unanswerable), near misses (the SQuAD questions over either corpus less their own paragraph, where no
other paragraph of their article holds an answer: ``squad-paragraph-removed``), the same questions over their own
article alone, with and without their paragraph (a small store about one topic: ``squad-article-alone``), and the
small user corpus of ``benchmarks/data/user_corpus`` (24 paragraphs written for the project, 48 questions it answers,
48 it does not: world knowledge, near misses, other entities).

For each: the top answer's confidence before (the calibration alone) and after (with the answerability), AUROC of
answerable vs unanswerable questions of it and of what places "no answer" (the calibration's holds-answer, P(the corpus
holds an answer), when it has one), and at the model's threshold for the search
(:func:`~dphr_haystack.search_options.no_answer_threshold`: its verification's with ``--verify``) the share of
unanswerable questions that get "no answer" first and of right top answers lost; per corpus size, EM@1, AUROC right vs
wrong and ECE of the answerable questions (with 95% bootstrap intervals over the questions) and a reliability curve,
and the ECE of those questions with the same questions over the corpus without their article, weighing as the fit
weighs an unanswerable case (the mix of questions the top answer's P(right given the corpus) is fitted for). A
sample of searches is repeated with the fitted calibration to check that the searcher returns what the table computes.
``--lower-case`` asks every question in lower case (as NQ's are written; the searcher then reads a question's names
from the corpus' truecasing of it). ``--verify`` also lets the model's verification reader read every top answer
(:mod:`dphr_haystack.verification`): "before" is then the answerability and "after" the verified confidence, and "no
answer" is placed by the verified holds-answer (the unverified one reported beside it). Writes
results/answerability.json and .png (``--name`` another name).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.answerability_cases import OPEN_SETS, open_questions, user_cases
from benchmarks.common import (
    DEFAULT_MODEL,
    ROOT,
    SQUAD_DEV,
    cached_open_small_phrases,
    finish_result,
    machine,
    model_id,
    phrase_cache,
    pyplot,
    save_figure,
)

SIZES = ("5", "50", "500", "dev", "open")
NEAR_MISS = "squad-paragraph-removed"  # the question's paragraph removed, the rest of its article kept (near misses)
ARTICLE_ONLY = "squad-article-alone"  # the question's article alone, with and without its paragraph
THRESHOLDS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)
SWEEP_SHOWN = (0.3, 0.4, 0.5, 0.6, 0.65, 0.7)  # the thresholds of the per-set table
BOOTSTRAP = 1000  # resamples of a size's questions for the intervals of its ECE and AUROC


def _lower_cased(case):
    question = dataclasses.replace(case.question, question=case.question.question.lower())
    return dataclasses.replace(case, question=question)


def _stats(p: np.ndarray, answerable: np.ndarray, correct: np.ndarray, threshold: float) -> dict[str, Any]:
    from dphr_haystack.confidence import auroc

    no = ~answerable
    right = correct & answerable
    return {
        "answerable": int(answerable.sum()),
        "unanswerable": int(no.sum()),
        "auroc_answerable_vs_not": auroc(p, answerable),
        "auroc_right_vs_unanswerable": auroc(p[right | no], right[right | no]),
        "mean_confidence_unanswerable": float(p[no].mean()) if no.any() else None,
        "no_answer_share": float((p[no] < threshold).mean()) if no.any() else None,
        "right_lost_share": float((p[right] < threshold).mean()) if right.any() else None,
        "by_threshold": [
            {
                "threshold": t,
                "no_answer_share": float((p[no] < t).mean()) if no.any() else None,
                "right_lost_share": float((p[right] < t).mean()) if right.any() else None,
            }
            for t in THRESHOLDS
        ],
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher
    from dphr_haystack.confidence import (
        Calibration,
        auroc,
        expected_calibration_error,
        reliability,
    )
    from dphr_haystack.search_options import PhraseSearchOptions, no_answer_threshold
    from dphr_haystack.verification import verification_reader
    from train.answerability import UNANSWERABLE_WEIGHT, concatenate, dev_index, gather
    from train.answerability_cases import Case, all_cases, article_cases, near_miss_cases, squad_questions
    from train.verifier import verification_inputs, verified_probability

    started = time.perf_counter()
    model = PhraseModel.load(args.model)
    calibration = Calibration.from_dict(model.config.calibration)
    if calibration.answerability is None:
        raise SystemExit(f"{args.model} has no answerability: run python -m train.answerability")
    if args.verify and calibration.verification is None:
        raise SystemExit(f"{args.model} has no verification: run python -m train.verifier")
    plain = dataclasses.replace(calibration, answerability=None)
    held = squad_questions(SQUAD_DEV, slice(8, None))
    questions = random.Random(args.seed).sample(held, min(args.questions, len(held)))
    dev = dev_index(model, phrase_cache(model, ROOT / "benchmarks" / "cache" / "squad-dev"))
    open_index = None if args.no_open else PhraseIndex.load(cached_open_small_phrases(model), model=model)
    indexes = {"dev": dev, "open": open_index}
    cases = all_cases(dev, questions, args.seed + 1, open_index)
    for where in [k for k, v in indexes.items() if v is not None]:
        cases[where] += near_miss_cases(indexes[where], questions, f"{NEAR_MISS}-{where}")
    cases["dev"] += article_cases(dev, questions, ARTICLE_ONLY)
    for name, path in OPEN_SETS.items():
        asked = open_questions(path, args.open_questions, args.seed)
        for where in [k for k, v in indexes.items() if v is not None]:
            cases[where] += [Case(q, f"{name}-{where}", False) for q in asked]
    indexes["user"], cases["user"] = user_cases(model)
    if args.lower_case:  # every question as a user typing in lower case asks it
        cases = {name: [_lower_cased(case) for case in found] for name, found in cases.items()}
    reader = verification_reader(calibration.verification) if args.verify else None
    tables = {name: gather(indexes[name], model, plain, found, reader=reader) for name, found in cases.items()}
    table = concatenate(list(tables.values()))
    after = calibration.answerability.query_probability(table.features)
    after[np.isnan(table.features[:, 0])] = 0.0  # no answer at all
    before = table.confidence
    if args.verify:  # the answerability before, the verified confidence after
        before, after = after, verified_probability(calibration.verification, verification_inputs(table, calibration))
    holds, no_answer_by = _holds_answer(calibration, table, after, args.verify)
    plain_holds = _holds_answer(calibration, table, after, False)[0]  # with verify: what a search without it gives
    corpus = np.array([c.corpus for c in table.cases])
    answerable = table.holds
    threshold = no_answer_threshold(PhraseSearchOptions(verify=args.verify), calibration)  # the model's
    result: dict[str, Any] = {
        "no_answer_by": no_answer_by,
        "machine": machine(),
        "model": args.model,
        "model_id": model_id(args.model),
        "threshold": threshold,
        "lower_case": bool(args.lower_case),
        "labels": ["answerability", "verified"] if args.verify else ["calibration", "answerability"],
        "reader": calibration.verification.reader if args.verify else None,
        "reader_precision": calibration.verification.reader_precision if args.verify else None,
        "questions": len(questions),
        "cases": len(table.cases),
        "sizes": {},
        "unanswerable_sets": {},
        "thresholds": [],
    }
    # per corpus size: the answerable questions' calibration, and the question over the corpus without its article
    for size in SIZES:
        rows = np.flatnonzero(corpus == size)
        if not len(rows):
            continue
        yes = rows[answerable[rows]]
        right = table.correct[yes]
        # the questions over this size with and without their answer, as the fit weighs them (its share of
        # unanswerable questions): the mix the top answer's P(right given the corpus) is fitted for
        mixed = np.where(answerable[rows], 1.0, UNANSWERABLE_WEIGHT)
        result["sizes"][size] = {
            "em@1": float(right.mean()),
            "unanswerable_share_mixed": float(mixed[~answerable[rows]].sum() / mixed.sum()),
            "before": {
                "auroc_right_vs_wrong": auroc(before[yes], right),
                "ece": expected_calibration_error(before[yes], right),
                "ece_mixed": expected_calibration_error(before[rows], table.correct[rows], weights=mixed),
            },
            "after": {
                "auroc_right_vs_wrong": auroc(after[yes], right),
                "auroc_right_vs_wrong_interval": _bootstrap(auroc, after[yes], right, args.seed),
                "ece": expected_calibration_error(after[yes], right),
                "ece_interval": _bootstrap(expected_calibration_error, after[yes], right, args.seed),
                "reliability": reliability(after[yes], right),
                "ece_mixed": expected_calibration_error(after[rows], table.correct[rows], weights=mixed),
                "ece_mixed_interval": _bootstrap(
                    expected_calibration_error, after[rows], table.correct[rows], args.seed, weights=mixed
                ),
                "reliability_mixed": reliability(after[rows], table.correct[rows], weights=mixed),
            },
        }
        for label, p in _scores(before, after, holds, plain_holds, args.verify):
            result["unanswerable_sets"].setdefault(f"squad-article-removed-{size}", {})[label] = _stats(
                p[rows], answerable[rows], table.correct[rows], threshold
            )
    # near misses: the same questions over the whole corpus less their own paragraph, against them over all of it
    for where in ("dev", "open"):
        rows = np.flatnonzero(corpus == f"{NEAR_MISS}-{where}")
        if len(rows):
            both = np.concatenate([np.flatnonzero((corpus == where) & answerable), rows])
            for label, p in _scores(before, after, holds, plain_holds, args.verify):
                result["unanswerable_sets"].setdefault(f"{NEAR_MISS}-{where}", {})[label] = _stats(
                    p[both], answerable[both], table.correct[both], threshold
                )
    # a corpus of one article (a user's store about one topic): the question with its paragraph and without it
    rows = np.flatnonzero(corpus == ARTICLE_ONLY)
    for label, p in _scores(before, after, holds, plain_holds, args.verify):
        result["unanswerable_sets"].setdefault(ARTICLE_ONLY, {})[label] = _stats(
            p[rows], answerable[rows], table.correct[rows], threshold
        )
    # open-domain question sets over SQuAD text, against the SQuAD questions over the same whole corpus
    for name in OPEN_SETS:
        for where in ("dev", "open"):
            rows = np.flatnonzero(corpus == f"{name}-{where}")
            if not len(rows):
                continue
            yes = np.flatnonzero((corpus == where) & answerable)
            both = np.concatenate([yes, rows])
            for label, p in _scores(before, after, holds, plain_holds, args.verify):
                result["unanswerable_sets"].setdefault(f"{name}-over-{where}", {})[label] = _stats(
                    p[both], answerable[both], table.correct[both], threshold
                )
            result["unanswerable_sets"][f"{name}-over-{where}"]["top_answer_right_anyway"] = float(
                np.mean([_any_right(table.texts[i], table.cases[i]) for i in rows])
            )
    users = np.flatnonzero(np.char.startswith(corpus.astype(str), "user-"))
    for kind in ("general", "near", "other-entity"):
        rows = np.concatenate([users[answerable[users]], np.flatnonzero(corpus == f"user-{kind}")])
        for label, p in _scores(before, after, holds, plain_holds, args.verify):
            result["unanswerable_sets"].setdefault(f"user-corpus-{kind}", {})[label] = _stats(
                p[rows], answerable[rows], table.correct[rows], threshold
            )
    result["user_corpus_em@1"] = float(table.correct[users[answerable[users]]].mean())
    # the whole trade-off: every threshold over all SQuAD sizes and unanswerable sets, on what places "no answer"
    squad = np.isin(corpus, SIZES)
    for t in THRESHOLDS:
        right = table.correct & squad
        no = ~answerable
        result["thresholds"].append(
            {
                "threshold": t,
                "no_answer_share": float((holds[no] < t).mean()),
                "right_lost_share": float((holds[right] < t).mean()),
                "answerable_lost_share": float((holds[answerable & squad] < t).mean()),
            }
        )
    result["searcher_check"] = _check_searcher(
        PhraseSearcher, indexes, model, calibration, table, after, holds, args.seed, args.verify
    )
    result["seconds"] = time.perf_counter() - started
    return finish_result(args.name, result, _markdown, _plot)


def _scores(before, after, holds, plain_holds, verify: bool) -> list[tuple[str, np.ndarray]]:
    """The scores each unanswerable set is judged by: the confidence before and after, what places "no answer" and,
    with ``verify``, what places it in a search without it."""
    return [("before", before), ("after", after), ("holds_answer", holds)] + (
        [("holds_answer_unverified", plain_holds)] if verify else []
    )


def _holds_answer(calibration, table, after: np.ndarray, verify: bool) -> tuple[np.ndarray, str]:
    """What places "no answer" for each case, as the searcher computes it, and its name: the calibration's
    holds-answer (the verification's, with ``verify``, when it has one), else the top answer's confidence."""
    from train.verifier import verification_inputs, verified_probability

    if calibration.holds_answer is None:
        return after, "top answer's confidence"
    verified = calibration.verification.holds_answer if verify and calibration.verification else None
    if verified is not None:
        inputs = verification_inputs(table, calibration, holds=True)
        return verified_probability(verified, inputs), "P(the corpus holds an answer), verified"
    holds = calibration.holds_answer.query_probability(table.features)
    return holds * ~np.isnan(table.features[:, 0]), "P(the corpus holds an answer)"


def _bootstrap(
    statistic, p: np.ndarray, labels: np.ndarray, seed: int, rounds: int = BOOTSTRAP, weights: np.ndarray | None = None
) -> list[float]:
    """The 95% bootstrap interval of ``statistic(p, labels)`` (with ``weights``: ``statistic(p, labels,
    weights=...)``) over the questions (resampled with replacement)."""
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(rounds):
        pick = rng.integers(0, len(p), len(p))
        if labels[pick].any() and not labels[pick].all():
            extra = {} if weights is None else {"weights": weights[pick]}
            values.append(statistic(p[pick], labels[pick], **extra))
    return [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]


def _any_right(text: str, case) -> bool:
    from dphr_haystack.answers import exact_match

    return bool(case.question.answers) and exact_match(text, case.question.answers)


def _check_searcher(
    searcher_cls, indexes, model, calibration, table, after, holds, seed: int, verify: bool = False, n: int = 40
) -> dict:
    """Repeat ``n`` searches with the fitted calibration (``verify`` as the benchmark): their top confidences and
    P(the corpus holds an answer) against the table's."""
    from train.answerability import case_searcher

    rng = random.Random(seed)
    where = {"5": "dev", "50": "dev", "500": "dev", "dev": "dev", "open": "open", ARTICLE_ONLY: "dev"}
    diffs, holds_diffs = [], []
    for i in rng.sample(range(len(table.cases)), min(n, len(table.cases))):
        case = table.cases[i]
        name = "user" if case.corpus.startswith("user-") else where.get(case.corpus, case.corpus.split("-")[-1])
        searcher, allowed = case_searcher(searcher_cls(indexes[name], model, calibration=calibration), case)
        searcher.verify = verify
        hits = searcher.search(case.question.question, unit="phrase", top_k=1, allowed_passages=allowed)
        if hits:
            diffs.append(abs(float(hits[0].confidence) - float(after[i])))
            if hits[0].holds_answer is not None:
                holds_diffs.append(abs(float(hits[0].holds_answer) - float(holds[i])))
    return {
        "searches": len(diffs),
        "max_abs_difference": max(diffs) if diffs else None,
        "max_abs_difference_holds_answer": max(holds_diffs) if holds_diffs else None,
    }


def _markdown(result: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    before, after = result.get("labels", ["calibration", "answerability"])
    by = result.get("no_answer_by", "top answer's confidence")
    lines = [
        f'Threshold {result["threshold"]}: a question whose {by} is below it is answered "no answer" first; '
        f'AUROC answerable vs not of the confidence, "before" the {before}, "after" the {after}, and of {by}'
        + (" (a search without verify → with it)." if result.get("labels") == ["answerability", "verified"] else "."),
        "",
        f"| unanswerable set | answerable / unanswerable | AUROC confidence before → after | AUROC {by} |"
        " no answer (unanswerable) | right answers lost |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in result["unanswerable_sets"].items():
        b, a = row["before"], row["after"]
        h = row.get("holds_answer", a)
        u = row.get("holds_answer_unverified")  # with verify: a search without it, then with it
        lines.append(
            f"| {name} | {a['answerable']} / {a['unanswerable']} | {b['auroc_answerable_vs_not']:.3f} → "
            f"{a['auroc_answerable_vs_not']:.3f} | **{_pair(h, u, 'auroc_answerable_vs_not', _three)}** | "
            f"{_pair(h, u, 'no_answer_share', pct)} | {_pair(h, u, 'right_lost_share', pct)} |"
        )
    share = next((row.get("unanswerable_share_mixed") for row in result["sizes"].values()), None)
    mixed = f" ECE with {100 * share:.0f}% unanswerable before → after [95% interval] |" if share is not None else ""
    lines += [
        "",
        "| corpus (passages) | EM@1 | AUROC right vs wrong before → after [95% interval] |"
        " ECE answerable before → after [95% interval] |" + mixed,
        "|---|---|---|---|" + ("---|" if mixed else ""),
    ]
    for size, row in result["sizes"].items():
        b, a = row["before"], row["after"]
        label = {"dev": "1,702", "open": "20,598"}.get(size, size)
        auroc_in, ece_in = a.get("auroc_right_vs_wrong_interval"), a.get("ece_interval")
        line = (
            f"| {label} | {100 * row['em@1']:.1f} | {b['auroc_right_vs_wrong']:.3f} → {a['auroc_right_vs_wrong']:.3f}"
            f"{_interval(auroc_in)} | {b['ece']:.3f} → {a['ece']:.3f}{_interval(ece_in)} |"
        )
        if mixed:
            line += f" {b['ece_mixed']:.3f} → {a['ece_mixed']:.3f}{_interval(a.get('ece_mixed_interval'))} |"
        lines.append(line)
    return "\n".join(lines + _sweep_lines(result, pct))


def _sweep_lines(result: dict[str, Any], pct) -> list[str]:
    """Per unanswerable set, at each threshold of :data:`SWEEP_SHOWN`: the share of its unanswerable questions
    that get "no answer" first / of its right top answers lost (results without the sweep: nothing)."""
    sets = {name: row["holds_answer"].get("by_threshold") for name, row in result["unanswerable_sets"].items()}
    if not all(sets.values()):
        return []
    by = result.get("no_answer_by", "top answer's confidence")
    lines = [
        "",
        f'By threshold on {by}: unanswerable questions answered "no answer" first / right top answers lost.',
        "",
        "| unanswerable set | " + " | ".join(f"{t:g}" for t in SWEEP_SHOWN) + " |",
        "|---|" + "---|" * len(SWEEP_SHOWN),
    ]
    for name, sweep in sets.items():
        at = {row["threshold"]: row for row in sweep}
        cells = [f"{pct(at[t]['no_answer_share'])} / {pct(at[t]['right_lost_share'])}" for t in SWEEP_SHOWN]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _three(x: float) -> str:
    return f"{x:.3f}"


def _pair(holds: dict, unverified: dict | None, key: str, show) -> str:
    """``holds[key]`` shown, after ``unverified[key]`` when there is one (a search without verify, then with it)."""
    return show(holds[key]) if unverified is None else f"{show(unverified[key])} → {show(holds[key])}"


def _interval(bounds: list[float] | None) -> str:
    return "" if not bounds else f" [{bounds[0]:.3f}–{bounds[1]:.3f}]"


def _plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    mixed = bool(result["sizes"]) and all("reliability_mixed" in row["after"] for row in result["sizes"].values())
    fig, axes = plt.subplots(1, 3 if mixed else 2, figsize=(15 if mixed else 10, 4.2))
    panels = [("reliability", "ece", "answerable questions, by corpus size (passages)")]
    if mixed:
        share = next(iter(result["sizes"].values()))["unanswerable_share_mixed"]
        title = f"with {100 * share:.0f}% unanswerable (as fitted), by corpus size"
        panels.append(("reliability_mixed", "ece_mixed", title))
    for ax, (curve, ece, title) in zip(axes, panels, strict=False):
        _reliability_panel(ax, result, curve, ece, title)
    ax = axes[-1]
    names = list(result["unanswerable_sets"])
    shown = result.get("labels", ["calibration", "answerability"])
    bars = [("before", shown[0]), ("after", shown[1]), ("holds_answer", result.get("no_answer_by", ""))]
    for k, (label, text) in enumerate(bars):
        values = [result["unanswerable_sets"][n][label]["auroc_answerable_vs_not"] for n in names]
        ax.barh(np.arange(len(names)) + 0.27 * k, values, height=0.27, label=text)
    ax.axvline(0.85, color="grey", linestyle=":", linewidth=1)
    ax.set_yticks(np.arange(len(names)) + 0.27, names, fontsize=7)
    ax.set_xlim(0.4, 1.0)
    ax.set_xlabel("AUROC, answerable vs unanswerable")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3)
    fig.tight_layout()
    save_figure(fig, path)


def _reliability_panel(ax, result: dict[str, Any], curve: str, ece: str, title: str) -> None:
    """Per corpus size, the verified (or answerability) confidence's reliability curve ``curve`` and its ``ece``."""
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1)
    for size, row in result["sizes"].items():
        label = {"dev": "1,702", "open": "20,598"}.get(size, size)
        rows = row["after"][curve]
        ax.plot(
            [r["confidence"] for r in rows],
            [r["accuracy"] for r in rows],
            marker="o",
            label=f"{label} (ECE {row['after'][ece]:.3f})",
        )
    ax.set_xlabel("confidence of the top answer")
    ax.set_ylabel("exact-match rate")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--questions", type=int, default=600)
    parser.add_argument("--open-questions", type=int, default=600)
    parser.add_argument("--no-open", action="store_true", help="leave out SQuAD-open-small")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lower-case", action="store_true", help="ask every question in lower case")
    parser.add_argument("--verify", action="store_true", help="the verification's reader reads every top answer")
    parser.add_argument("--name", default="answerability", help="results/NAME.json and .png (default: %(default)s)")
    args = parser.parse_args()
    if not SQUAD_DEV.is_file():
        raise SystemExit(f"SQuAD dev not found at {SQUAD_DEV}: this benchmark needs ../shared/data")
    measure(args)


if __name__ == "__main__":
    main()
