"""Which features of a phrase answer separate right from wrong answers: calibrations fitted and scored on disjoint
questions of the open corpus.

    nice -n 10 .venv/bin/python -m benchmarks.quality.confidence_features [--model dphr-minilm-squad]
        [--index runs/bench-cache/squad-open-small/phrases-...] [--questions 2000] [--refresh]

The questions of the held-out validation articles (the first 427 dev-public paragraphs, 2,645 distinct questions:
what ``python -m train.calibrate`` fits on) and ``--questions`` SQuAD-open-small questions (dev-public questions
outside those articles, :func:`benchmarks.common.squad_open_small_questions`) are asked once against the whole
SQuAD-open-small phrase index (opened read-only), each question's ranked candidates gathered as the searcher gathers
them for a top answer with a confidence (:func:`train.calibrate.ranked_candidates`), and cached under
``runs/confidence-features/`` so that feature experiments do not search again (``--refresh`` asks again).

Per feature set a logistic calibration is fitted on the validation questions and scored on the open-small
questions, which it never saw: AUROC of the top answer's confidence for right (exact match) vs wrong answers and
expected calibration error, with 95% bootstrap intervals, and the paired bootstrap interval of the AUROC gain over
today's four features; beside it the 5-fold cross-validated AUROC on the validation questions. Rows: the raw score,
today's four features, each answer feature of :func:`dphr_haystack.confidence.answer_features` added alone, each
feature tried and left out (computed here) added alone, all of the library's (``train.calibrate --no-ranker``), a
greedy forward selection by validation cross-validation, all of them. A check asks ``--check`` questions of each group
again through a searcher ranking by score with the shipped calibration (unless it calibrates an answer ranker's top
answers: ``benchmarks.quality.confidence_ranking`` measures those) and with all of the library's features (fitted on
the validation questions): the cached candidates must give its top answers and confidences; it also times the
searcher with each.
Writes results/confidence_features.json and .png.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import (
    DEFAULT_MODEL,
    ROOT,
    SQUAD_DEV,
    VALIDATION_PARAGRAPHS,
    finish_result,
    fit_predict,
    machine,
    model_id,
    out_of_fold_confidences,
    pyplot,
    save_figure,
    squad_open_small_questions,
)

DEFAULT_INDEX = ROOT / "runs" / "bench-cache" / "squad-open-small" / "phrases-d07799da8d9a-filter-1-b37ba89b"
CACHE = ROOT / "runs" / "confidence-features"
BATCH = 64
BOOTSTRAP = 1000


# ----------------------------------------------------------------------------- asking the questions once
def _questions(open_small: int) -> dict[str, list[dict[str, Any]]]:
    """The validation questions and the open-small questions: ``{qid, question, answers}`` each."""
    from train.data import load_squad
    from train.validation import unique_questions

    validation = unique_questions(load_squad(SQUAD_DEV, max_paragraphs=VALIDATION_PARAGRAPHS).examples)
    return {
        "validation": [{"qid": q.qid, "question": q.question, "answers": list(q.answers)} for q in validation],
        "open_small": [
            {"qid": q.qid, "question": q.question, "answers": list(q.answers)}
            for q in squad_open_small_questions(open_small)
        ],
    }


def _cache_path(index_dir: Path, model_name: str, open_small: int) -> Path:
    from dphr_haystack.confidence import CONFIDENCE_DEPTH  # how many candidates a question's search gathers

    manifest = json.loads((index_dir / "manifest.json").read_text())
    key = f"{manifest['uid'][:8]}-{manifest.get('faiss_generation', 0)}-{Path(model_name).name}-{open_small}"
    key += f"-depth{CONFIDENCE_DEPTH}"
    return CACHE / f"candidates-{key}.json.gz"


def collect(model_name: str, index_dir: Path, groups: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each question's ranked candidates as the searcher gathers them for a top answer with a confidence
    (:func:`train.calibrate.ranked_candidates`: trimmed, question copies left out, before folding), with the
    passages they come from."""
    from dataclasses import asdict

    from tqdm import tqdm

    from dphr_haystack import PhraseIndex, PhraseModel
    from train.calibrate import candidate_searcher, ranked_candidates

    model = PhraseModel.load(model_name)
    index = PhraseIndex.load(index_dir, model=model)  # a load never writes to the directory; neither does a search
    searcher = candidate_searcher(index, model)
    passages: dict[int, dict[str, str]] = {}
    out: dict[str, Any] = {"groups": {}, "index_vectors": len(index), "index_passages": index.num_passages}
    for name, questions in groups.items():
        records = []
        for b in tqdm(range(0, len(questions), BATCH), desc=f"ask {name}", unit="batch"):
            batch = questions[b : b + BATCH]
            for q, ranked in zip(batch, ranked_candidates(searcher, [q["question"] for q in batch]), strict=True):
                for h in ranked:
                    passage = index.passages[h.passage_row]
                    passages.setdefault(h.passage_row, {"title": passage.get("title", ""), "text": passage["text"]})
                fields = ("confidence", "copies_question")
                records.append(
                    {**q, "candidates": [{k: v for k, v in asdict(h).items() if k not in fields} for h in ranked]}
                )
        out["groups"][name] = records
    out["passages"] = {str(k): v for k, v in passages.items()}
    return out


def _hit(candidate: dict[str, Any]):
    from dphr_haystack.search import PhraseHit

    return PhraseHit(**candidate)


def load_or_collect(model_name: str, index_dir: Path, open_small: int, refresh: bool) -> dict:
    """The cached candidates, collected (with the seconds it took) when missing, stale or ``refresh``."""
    path = _cache_path(index_dir, model_name, open_small)
    groups = _questions(open_small)
    wanted = {name: [q["qid"] for q in qs] for name, qs in groups.items()}
    if path.is_file() and not refresh:
        with gzip.open(path, "rt") as handle:
            cached = json.load(handle)
        if {name: [r["qid"] for r in rs] for name, rs in cached["groups"].items()} == wanted:
            return cached
    started = time.perf_counter()
    data = collect(model_name, index_dir, groups)
    data["collect_seconds"] = time.perf_counter() - started
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt") as handle:
        json.dump(data, handle)
    tmp.replace(path)
    return data


def searcher_check(
    model_name: str, index_dir: Path, records: list[dict[str, Any]], calibrations: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """Per calibration: of ``records``' questions asked again through a searcher ranking by score with it, for how
    many its top answer by score and its confidence are those the cached candidates give
    (:func:`answer_confidences`), and the searcher's milliseconds per question (query vectors encoded beforehand;
    the calibrations take turns, A B B A, the faster of each one's two passes)."""
    from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher
    from dphr_haystack.confidence import answer_confidences, question_words

    model = PhraseModel.load(model_name)
    index = PhraseIndex.load(index_dir, model=model)
    questions = [r["question"] for r in records]
    searchers = {
        name: PhraseSearcher(index, model, calibration=c, ranking="score") for name, c in calibrations.items()
    }
    # encoded as these (default) searchers encode them, and as the cached candidates were gathered
    precision = next(iter(searchers.values())).query_precision
    q_start, q_end = model.encode_queries(questions, batch_size=BATCH, precision=precision)
    served: dict[str, list] = {}
    seconds: dict[str, list[float]] = {name: [] for name in searchers}
    order = list(searchers)
    for name in order + order[::-1]:
        started = time.perf_counter()
        served[name] = searchers[name].search_vectors(q_start, q_end, "phrase", 1, questions=questions)
        seconds[name].append(time.perf_counter() - started)
    out = {}
    for name, calibration in calibrations.items():
        same = {"questions": 0, "top_answer": 0, "confidence": 0}
        for q, record, hits in zip(questions, records, served[name], strict=True):
            ranked = [_hit(c) for c in record["candidates"]]
            if not ranked or not hits:
                continue
            mine = answer_confidences(calibration, ranked, [0], question_words(q), index.passages)[0]
            same["questions"] += 1
            same["top_answer"] += int(hits[0].text == ranked[0].text)
            same["confidence"] += int(abs(hits[0].confidence - mine) < 1e-9)
        out[name] = {**same, "ms_per_question": 1000 * min(seconds[name]) / len(questions)}
    return out


def feature_cost(records: list[dict[str, Any]], passages: dict, calibrations: dict[str, Any]) -> dict[str, float]:
    """Per calibration, microseconds per question of :func:`answer_confidences` for the top answer alone."""
    from dphr_haystack.confidence import answer_confidences, question_words

    asked = [([_hit(c) for c in r["candidates"]], question_words(r["question"])) for r in records if r["candidates"]]
    out = {}
    for name, calibration in calibrations.items():
        started = time.perf_counter()
        for ranked, words in asked:
            answer_confidences(calibration, ranked, [0], words, passages)
        out[name] = 1e6 * (time.perf_counter() - started) / len(asked)
    return out


# ----------------------------------------------------------------------------- features tried and left out
# The library's features (dphr_haystack.confidence.answer_features, KNOWN_FEATURES) are computed by the library;
# these are the others this benchmark tried, computed here on the same candidates.
_NUMBER_QUESTION = (
    "how many", "how much", "what year", "which year", "how long", "how old", "how far", "how large", "how big",
    "how high", "how tall", "how often", "what percentage", "what percent", "what date", "what day", "when",
    "what time", "what number", "what century", "what decade", "what age", "how fast", "what temperature",
)  # fmt: skip


class Top:
    """One question's ranked candidates (the first ``CONFIDENCE_DEPTH``), its top answer and passages."""

    def __init__(self, question: str, ranked: list, passages: dict[int, dict[str, str]]) -> None:
        from dphr_haystack.answers import normalize_answer
        from dphr_haystack.confidence import CONFIDENCE_DEPTH, question_words

        self.question = question
        self.words = question_words(question)
        self.kept = ranked[:CONFIDENCE_DEPTH]
        self.top = ranked[0]
        self.passages = passages
        self.norm = [normalize_answer(c.text) for c in self.kept]
        s = np.array([c.score for c in self.kept], dtype=np.float64)
        self.scores = s
        self.p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()

    def content(self) -> set[str]:
        from dphr_haystack.confidence import STOPWORDS

        return {w for w in self.words if w not in STOPWORDS}

    def share(self, text: str) -> float:
        """Share of the question's content words (exact words) among the normalised words of ``text``."""
        from dphr_haystack.answers import normalize_answer

        content = self.content()
        return len(content & set(normalize_answer(text).split())) / len(content) if content else float("nan")


def _type_agreement(t: Top) -> float:
    digit = any(ch.isdigit() for ch in t.top.text)
    words = t.top.text.split()
    capital = bool(words) and all(w[:1].isupper() for w in words if w.lower() not in ("of", "the", "and", "de"))
    q = " " + " ".join(t.question.lower().replace("?", " ").split()) + " "
    if any(f" {cue} " in q for cue in _NUMBER_QUESTION):
        return 1.0 if digit else -1.0
    if "who" in q.split()[:3] or q.split()[:1] in (["whom"], ["whose"]):
        return 1.0 if capital and not digit else -1.0
    return 0.0


def _passage_margin(t: Top) -> float:
    other = [c.score for c in t.kept if c.passage_row != t.top.passage_row]
    return t.top.score - max(other) if other else 10.0


def _window_exact(t: Top) -> float:
    from dphr_haystack.answers import normalize_answer

    text = t.passages[t.top.passage_row]["text"]
    near = normalize_answer(text[: t.top.start]).split()[-20:] + normalize_answer(text[t.top.end :]).split()[:20]
    return t.share(" ".join(near))


TRIED: dict[str, Callable[[Top], float]] = {
    "start_end_gap": lambda t: t.top.start_score - t.top.end_score,
    "answer_subwords": lambda t: float(t.top.end_token - t.top.start_token + 1),
    "distinct_answers": lambda t: float(len(set(t.norm))),
    "distinct_passages": lambda t: float(len({c.passage_row for c in t.kept})),
    "entropy": lambda t: float(-(t.p * np.log(np.maximum(t.p, 1e-300))).sum()),
    "passage_mass": lambda t: float(
        np.log(max(t.p[[c.passage_row == t.top.passage_row for c in t.kept]].sum(), 1e-12))
    ),
    "passage_margin": _passage_margin,
    "has_digit": lambda t: float(any(ch.isdigit() for ch in t.top.text)),
    "capitalised": lambda t: float(t.top.text[:1].isupper()),
    "type_agreement": _type_agreement,
    "question_words": lambda t: float(len(t.words)),
    "answer_in_question": lambda t: len(set(t.norm[0].split()) & set(t.words)) / max(1, len(t.norm[0].split())),
    "passage_support": lambda t: t.share(
        t.passages[t.top.passage_row]["title"] + " " + t.passages[t.top.passage_row]["text"]
    ),
    "title_support": lambda t: t.share(t.passages[t.top.passage_row]["title"].replace("_", " ")),
    "window_support_exact_words": _window_exact,
}


def feature_table(
    records: list[dict[str, Any]], passages: dict[int, dict[str, str]], names: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Features (n, len(names)) and exact-match labels (n,) of each answered question's top answer: the library's
    (:func:`dphr_haystack.confidence.answer_features`) and those tried here (:data:`TRIED`)."""
    from dphr_haystack.answers import exact_match
    from dphr_haystack.confidence import KNOWN_FEATURES, answer_features, question_words

    library = [n for n in names if n in KNOWN_FEATURES]
    rows, labels = [], []
    for record in records:
        ranked = [_hit(c) for c in record["candidates"]]
        if not ranked:
            continue
        known = answer_features(library, ranked, [0], question_words(record["question"]), passages)[0]
        values = dict(zip(library, known, strict=True))
        top = Top(record["question"], ranked, passages)
        rows.append([values[n] if n in values else TRIED[n](top) for n in names])
        labels.append(exact_match(ranked[0].text, record["answers"]))
    return np.array(rows, dtype=np.float64), np.array(labels, dtype=bool)


# ----------------------------------------------------------------------------- fitting and scoring
def cross_validated_auroc(x: np.ndarray, y: np.ndarray, folds: int = 5, seed: int = 0) -> float:
    """AUROC of out-of-fold confidences (``folds``-fold cross-validation, pooled)."""
    from dphr_haystack.confidence import auroc

    return auroc(out_of_fold_confidences(x, y, folds, seed), y)


def forward_selection(x: np.ndarray, y: np.ndarray, names: Sequence[str], base: int, gain: float) -> list[str]:
    """Greedy forward selection on cross-validated AUROC (validation questions only): starting from the first
    ``base`` columns, add the column that raises it most while that raises it by more than ``gain``."""
    chosen = list(range(base))
    best = cross_validated_auroc(x[:, chosen], y)
    while True:
        trials = {j: cross_validated_auroc(x[:, [*chosen, j]], y) for j in range(base, x.shape[1]) if j not in chosen}
        if not trials:
            break
        j = max(trials, key=trials.__getitem__)
        if trials[j] - best <= gain:
            break
        chosen.append(j)
        best = trials[j]
    return [names[j] for j in chosen]


def bootstrap(y: np.ndarray, confidences: dict[str, np.ndarray], baseline: str, seed: int = 0) -> dict[str, dict]:
    """AUROC and ECE per feature set with 95% bootstrap intervals (questions resampled), and the paired interval of
    each set's AUROC minus the baseline's."""
    from dphr_haystack.confidence import auroc, expected_calibration_error

    rng = np.random.default_rng(seed)
    samples = [rng.integers(0, len(y), len(y)) for _ in range(BOOTSTRAP)]
    base_aurocs = np.array([auroc(confidences[baseline][s], y[s]) for s in samples])
    out = {}
    for name, c in confidences.items():
        aurocs = np.array([auroc(c[s], y[s]) for s in samples])
        eces = np.array([expected_calibration_error(c[s], y[s]) for s in samples])
        gain = aurocs - base_aurocs
        out[name] = {
            "auroc": auroc(c, y),
            "auroc_ci": np.percentile(aurocs, [2.5, 97.5]).tolist(),
            "ece": expected_calibration_error(c, y),
            "ece_ci": np.percentile(eces, [2.5, 97.5]).tolist(),
            "auroc_gain": auroc(c, y) - auroc(confidences[baseline], y),
            "auroc_gain_ci": np.percentile(gain, [2.5, 97.5]).tolist(),
        }
    return out


# ----------------------------------------------------------------------------- the run
def measure(model_name: str, index_dir: Path, open_small: int, refresh: bool, gain: float, check: int) -> dict:
    from dphr_haystack import PhraseModel
    from dphr_haystack.confidence import ANSWER_FEATURES, FEATURES, KNOWN_FEATURES, fit_calibration
    from dphr_haystack.model.calibration import Calibration

    if not SQUAD_DEV.is_file():
        raise SystemExit(f"SQuAD dev not found at {SQUAD_DEV}: this benchmark needs ../shared/data")
    started = time.perf_counter()
    data = load_or_collect(model_name, index_dir, open_small, refresh)
    passages = {int(k): v for k, v in data["passages"].items()}
    names = [*KNOWN_FEATURES, *TRIED]
    x_fit, y_fit = feature_table(data["groups"]["validation"], passages, names)
    x_test, y_test = feature_table(data["groups"]["open_small"], passages, names)
    column = {n: i for i, n in enumerate(names)}
    base = list(FEATURES)
    selected = forward_selection(x_fit, y_fit, names, len(base), gain)
    sets: dict[str, list[str]] = {"raw score only": ["score"], "today's 4 features": base}
    sets.update({f"+ {n}": [*base, n] for n in ANSWER_FEATURES})
    sets.update({f"+ {n} (tried)": [*base, n] for n in TRIED})
    sets[f"library's {len(KNOWN_FEATURES)} (train.calibrate --no-ranker)"] = list(KNOWN_FEATURES)
    sets["greedy selection (validation CV)"] = selected
    sets["all"] = names
    confidences, cv = {}, {}
    for label, chosen in sets.items():
        cols = [column[n] for n in chosen]
        confidences[label] = fit_predict(x_fit[:, cols], y_fit, x_test[:, cols])
        cv[label] = cross_validated_auroc(x_fit[:, cols], y_fit)
    stored = PhraseModel.load(model_name).config.calibration
    if stored is not None and stored.get("ranker") is not None:
        stored = None  # it calibrates its answer ranker's top answers: benchmarks.quality.confidence_ranking
    if stored is not None:
        calibration = Calibration.from_dict(stored)
        confidences["shipped calibration"] = calibration.confidence(
            x_test[:, [column[n] for n in calibration.features]]
        )
        sets["shipped calibration"] = list(calibration.features)
    scored = bootstrap(y_test, confidences, "today's 4 features")
    checked = {
        f"library's {len(KNOWN_FEATURES)}": fit_calibration(
            x_fit[:, : len(KNOWN_FEATURES)], y_fit, names=KNOWN_FEATURES
        )
    }
    if stored is not None:
        checked["shipped"] = Calibration.from_dict(stored)
    sample = data["groups"]["validation"][:check] + data["groups"]["open_small"][:check]
    check_result = searcher_check(model_name, index_dir, sample, checked) if check else {}
    cost = feature_cost(data["groups"]["open_small"], passages, checked)
    rows = [
        {"set": label, "features": sets[label], "validation_cv_auroc": cv.get(label), **scored[label]}
        for label in confidences
    ]
    return {
        "machine": machine(),
        "model": model_name,
        "model_id": model_id(model_name),
        "index": str(index_dir.relative_to(ROOT)) if index_dir.is_relative_to(ROOT) else str(index_dir),
        "index_vectors": data["index_vectors"],
        "index_passages": data["index_passages"],
        "fit_questions": len(y_fit),
        "fit_em@1": float(y_fit.mean()),
        "test_questions": len(y_test),
        "test_em@1": float(y_test.mean()),
        "unanswered": {g: sum(1 for r in rs if not r["candidates"]) for g, rs in data["groups"].items()},
        "searcher_check": check_result,
        "confidence_us_per_question": cost,
        "selection_gain": gain,
        "selected": selected,
        "bootstrap": BOOTSTRAP,
        "collect_seconds": data["collect_seconds"],
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }


def _interval(pair: Sequence[float]) -> str:
    return f"[{pair[0]:.3f}, {pair[1]:.3f}]"


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Phrase-answer confidence features, `{result['model']}`, the whole SQuAD-open-small phrase index "
        f"({result['index_vectors']:,} vectors, {result['index_passages']:,} passages); fitted on "
        f"{result['fit_questions']:,} validation questions (EM@1 {100 * result['fit_em@1']:.1f}), scored on "
        f"{result['test_questions']:,} SQuAD-open-small questions it never saw "
        f"(EM@1 {100 * result['test_em@1']:.1f}); 95% bootstrap intervals ({result['bootstrap']} resamples), "
        f"{result['machine']['cpu']}:",
        "",
        "| feature set | validation CV AUROC | AUROC | AUROC gain over today's | ECE |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        cv = row["validation_cv_auroc"]
        lines.append(
            f"| {row['set']} | {'' if cv is None else f'{cv:.3f}'} | {row['auroc']:.3f} {_interval(row['auroc_ci'])}"
            f" | {row['auroc_gain']:+.3f} {_interval(row['auroc_gain_ci'])}"
            f" | {row['ece']:.3f} {_interval(row['ece_ci'])} |"
        )
    lines += [
        "",
        f"Greedy forward selection (validation CV AUROC gain > {result['selection_gain']}): "
        f"{', '.join(result['selected'])}.",
    ]
    for name, check in result["searcher_check"].items():
        lines.append(
            f"Asked again through a searcher ranking by score with the {name} calibration, {check['questions']} "
            "questions: "
            f"the cached candidates give its top answer for {check['top_answer']} and its confidence for "
            f"{check['confidence']}; {check['ms_per_question']:.1f} ms a question (query vectors encoded "
            f"beforehand; the top answer's confidence alone: {result['confidence_us_per_question'][name]:.0f} µs)."
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()
    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(7.5, 0.26 * len(rows) + 1.2))
    y = np.arange(len(rows))[::-1]
    aurocs = [r["auroc"] for r in rows]
    low = [r["auroc"] - r["auroc_ci"][0] for r in rows]
    high = [r["auroc_ci"][1] - r["auroc"] for r in rows]
    ax.errorbar(aurocs, y, xerr=[low, high], fmt="o", markersize=3, capsize=2)
    ax.axvline(0.80, color="grey", linestyle="--", linewidth=1, label="requirement 0.80")
    base = next(r["auroc"] for r in rows if r["set"] == "today's 4 features")
    ax.axvline(base, color="tab:orange", linestyle=":", linewidth=1, label="today's 4 features")
    ax.set_yticks(y, [r["set"] for r in rows], fontsize=7)
    ax.set_xlabel("AUROC of the top answer's confidence, right vs wrong (unseen questions)")
    ax.legend(fontsize=7, loc="lower right")
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--index", type=Path, default=DEFAULT_INDEX, help="a phrase index built with --model")
    parser.add_argument("--questions", type=int, default=2000, help="SQuAD-open-small questions to score on")
    parser.add_argument("--gain", type=float, default=0.002, help="least CV AUROC gain to add a feature")
    parser.add_argument("--refresh", action="store_true", help="ask the questions again")
    parser.add_argument("--check", type=int, default=150, help="questions per group re-asked through the searcher")
    args = parser.parse_args()
    if not (args.index / "manifest.json").is_file():
        raise SystemExit(
            f"{args.index}: no phrase index (build SQuAD-open-small with benchmarks.quality.squad_open_small)"
        )
    result = measure(args.model, args.index, args.questions, args.refresh, args.gain, args.check)
    finish_result("confidence_features", result, markdown, plot)


if __name__ == "__main__":
    main()
