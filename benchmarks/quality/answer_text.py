"""Answers that read well and scores a user can read: tidy phrase answers and confidence-scored passages, measured.

    .venv/bin/python -m benchmarks.quality.answer_text [--model dphr-minilm-squad] [--paragraphs 600]

The corpus of ``answer_trust``: the SQuAD dev-public paragraphs after the held-out validation articles (the
calibration's), indexed in memory with the model's filter. One run, same index and query vectors, side by side:

- phrase answers as DensePhrases' search returns them (``tidy_answers=False``) and tidy (the default: edges
  trimmed, duplicates folded): EM@1, EM@k, F1@1, how many different answers (normalised) the top k hold, how many
  top-k answers have edges trimming would change, index searches per query and p50 search time (query vectors
  encoded beforehand; the two searchers take turns on each question, A B B A, the faster of its two searches);
- the folding rules on one candidate list (the top 10k raw spans): none, equal normalised text or overlapping
  span in one passage (the default), equal normalised text only;
- passages (top 10) scored by their answer's confidence made monotone along the ranking: how often the cap
  changes a score, and per threshold t the passages scoring >= t and how many of them contain a gold answer and
  give the right answer; AUROC for "the passage contains an answer" of the score and of the raw phrase score.

Writes results/answer_text.json and .png.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import DEFAULT_MODEL, SQUAD_DEV, finish_result, machine, model_id, pyplot, save_figure

VALIDATION_PARAGRAPHS = 427
THRESHOLDS = (0.1, 0.2, 0.3, 0.5, 0.7)
PASSAGES = 10


def _phrase_runs(searchers, index, q_start, q_end, questions, top_k: int) -> list[tuple[list, list, int]]:
    """Each searcher's phrase hits per question, search times (ms: the faster of two searches of the question) and
    index searches per pass; the searchers take turns on every question (A B B A), so that a change of machine
    load hits them alike."""
    counts = [0] * len(searchers)
    current = 0
    search_tokens = index.search_tokens

    def counted(*args, **kwargs):
        counts[current] += 1
        return search_tokens(*args, **kwargs)

    runs = [([], []) for _ in searchers]
    index.search_tokens = counted
    try:
        for searcher in searchers:  # warm-up
            searcher.search_vectors(q_start[:1], q_end[:1], "phrase", top_k, questions=[questions[0].question])
        counts = [0] * len(searchers)
        order = list(range(len(searchers)))
        for i, q in enumerate(questions):
            best = [float("inf")] * len(searchers)
            for current in order + order[::-1]:  # A B B A: neither goes first more often
                t0 = time.perf_counter()
                found = searchers[current].search_vectors(
                    q_start[i : i + 1], q_end[i : i + 1], "phrase", top_k, questions=[q.question]
                )
                best[current] = min(best[current], (time.perf_counter() - t0) * 1000)
                if len(runs[current][0]) == i:
                    runs[current][0].append(found[0])
            for current, ms in enumerate(best):
                runs[current][1].append(ms)
    finally:
        index.search_tokens = search_tokens
    # every question was searched twice by each searcher: half the count is one pass's
    return [(hits, times, count / 2) for (hits, times), count in zip(runs, counts, strict=True)]


def _answer_scores(hits, questions, top_k: int) -> dict[str, float]:
    """EM@1, EM@k, F1@1 and the mean number of different (normalised) answers of per-question answer texts."""
    from dphr_haystack.answers import exact_match, f1_score, normalize_answer

    top = [h[0] if h else "" for h in hits]
    pairs = list(zip(hits, questions, strict=True))
    return {
        "em@1": 100 * float(np.mean([exact_match(t, q.answers) for t, q in zip(top, questions, strict=True)])),
        f"em@{top_k}": 100 * float(np.mean([any(exact_match(t, q.answers) for t in hs[:top_k]) for hs, q in pairs])),
        "f1@1": 100 * float(np.mean([f1_score(t, q.answers) for t, q in zip(top, questions, strict=True)])),
        "different_answers": float(np.mean([len({normalize_answer(t) for t in hs[:top_k]}) for hs in hits])),
    }


def _folded(index, hits, top_k: int, overlap: bool) -> list[str]:
    """Answer texts of raw spans (best first) trimmed and folded by equal normalised text, and by overlapping
    spans in one passage with ``overlap``."""
    from dphr_haystack.spans import AnswerFolder, trim_span

    folder, out = AnswerFolder(), []
    for i, hit in enumerate(hits):
        text = index.passages[hit.passage_row]["text"]
        start, end = trim_span(text, hit.start, hit.end)
        if folder.keep(text[start:end], hit.passage_row if overlap else ("answer", i), start, end):
            out.append(text[start:end])
        if len(out) == top_k:
            break
    return out


# Questions about Haystack's own markdown README (the installed farm-haystack package's metadata).
README_QUESTIONS = (
    "When did Haystack 1.x reach end of life?",
    "What is the new package name?",
    "Which document stores are available?",
    "What is an Agent powered by?",
)


def _readme_examples(model, top_k: int) -> dict[str, Any] | None:
    """Raw and tidy top-k answers (with confidences) to :data:`README_QUESTIONS` over the paragraphs of the
    installed farm-haystack's README (markdown), and the top passages' scores; None when it is not installed."""
    import re
    from importlib import metadata

    from dphr_haystack import PhraseIndex, PhraseSearcher
    from dphr_haystack.documents.results import document_scores
    from dphr_haystack.encode.add import add_passages

    try:
        readme = metadata.metadata("farm-haystack").get_payload()
    except metadata.PackageNotFoundError:
        return None
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", str(readme or "")) if len(p.strip()) > 40]
    if not paragraphs:
        return None
    index = PhraseIndex.create(model, filter_threshold=model.config.filter_threshold)
    passages = [{"id": f"readme-{i}", "title": "Haystack README", "text": p} for i, p in enumerate(paragraphs)]
    add_passages(index, model, passages, progress=False)
    raw, tidy = PhraseSearcher(index, model, tidy_answers=False), PhraseSearcher(index, model)
    examples = []
    for question in README_QUESTIONS:
        ranked = tidy.search(question, unit="passage", top_k=3)
        examples.append(
            {
                "question": question,
                "raw": [[h.text, h.confidence] for h in raw.search(question, top_k=top_k, unit="phrase")],
                "tidy": [[h.text, h.confidence] for h in tidy.search(question, top_k=top_k, unit="phrase")],
                "passages": [
                    [h.passage_id, h.score, score]
                    for h, score in zip(ranked, document_scores(ranked, True), strict=True)
                ],
            }
        )
    return {"paragraphs": len(paragraphs), "examples": examples}


def _auroc(scores, labels) -> float:
    from dphr_haystack.confidence import auroc

    return auroc(scores, labels)


def measure(model_name: str, paragraphs: int, max_questions: int, top_k: int) -> dict[str, Any]:
    from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher
    from dphr_haystack.answers import contains_answer, exact_match
    from dphr_haystack.confidence import ranked_confidences
    from dphr_haystack.encode.add import add_passages
    from dphr_haystack.spans import trim_span
    from train.data import load_squad
    from train.validation import unique_questions

    if not SQUAD_DEV.is_file():
        raise SystemExit(f"SQuAD dev not found at {SQUAD_DEV}: this benchmark needs ../shared/data")
    started = time.perf_counter()
    model = PhraseModel.load(model_name)
    data = load_squad(
        SQUAD_DEV, skip_paragraphs=VALIDATION_PARAGRAPHS, max_paragraphs=paragraphs, max_questions=max_questions
    )
    index = PhraseIndex.create(model, filter_threshold=model.config.filter_threshold)
    add_passages(index, model, data.passages, progress=True)
    questions = unique_questions(data.examples)
    q_start, q_end = model.encode_queries([q.question for q in questions])
    result: dict[str, Any] = {
        "machine": machine(),
        "model": model_name,
        "model_id": model_id(model_name),
        "paragraphs": len(data.passages),
        "questions": len(questions),
        "vectors": len(index),
        "top_k": top_k,
        "rows": [],
    }
    texts = {p["id"]: p["text"] for p in index.passages}
    searchers = [PhraseSearcher(index, model, tidy_answers=False), PhraseSearcher(index, model)]
    labels = ["raw spans (tidy_answers=False)", "tidy answers (default)"]
    for label, (hits, times, searches) in zip(
        labels, _phrase_runs(searchers, index, q_start, q_end, questions, top_k), strict=True
    ):
        trimmed = [
            h.text != texts[h.passage_id][slice(*trim_span(texts[h.passage_id], h.start, h.end))]
            for hs in hits
            for h in hs
        ]
        row = {"setting": label, **_answer_scores([[h.text for h in hs] for hs in hits], questions, top_k)}
        row.update(
            {
                "answers_trimming_would_change": 100 * float(np.mean(trimmed)),
                "full_lists": float(np.mean([len(hs) == top_k for hs in hits])),
                "searches_per_query": searches / len(questions),
                "p50_ms": statistics.median(times),
            }
        )
        result["rows"].append(row)
    # the folding rules side by side on one candidate list: the top 10 x k raw spans of each question
    deep = searchers[0].search_vectors(q_start, q_end, "phrase", 10 * top_k, questions=[q.question for q in questions])
    result["folding"] = [
        {"rule": rule, **_answer_scores([_folded(index, hs, top_k, overlap) for hs in deep], questions, top_k)}
        for rule, overlap in (("equal text or overlapping span (default)", True), ("equal text only", False))
    ]
    result["folding"].insert(
        0, {"rule": "none", **_answer_scores([[h.text for h in hs] for hs in deep], questions, top_k)}
    )
    # passages scored by their answers' confidences, made monotone along the ranking
    searcher = PhraseSearcher(index, model)
    passages = searcher.search_vectors(q_start, q_end, "passage", PASSAGES, questions=[q.question for q in questions])
    text = {p["id"]: p["text"] for p in index.passages}
    scores, own, raw, contains, right, capped_queries = [], [], [], [], [], 0
    for hits, q in zip(passages, questions, strict=True):
        confidences = [None if h.best_phrase.copies_question else h.best_phrase.confidence for h in hits]
        ranked = ranked_confidences(confidences)
        capped_queries += any(c is not None and s < c - 1e-12 for s, c in zip(ranked, confidences, strict=True))
        for hit, score, confidence in zip(hits, ranked, confidences, strict=True):
            scores.append(score)
            own.append(confidence if confidence is not None else score)
            raw.append(hit.score)
            contains.append(contains_answer(text[hit.passage_id], q.answers))
            right.append(not hit.best_phrase.copies_question and exact_match(hit.best_phrase.text, q.answers))
    scores_a, own_a = np.array(scores), np.array(own)
    contains_a, right_a = np.array(contains, dtype=bool), np.array(right, dtype=bool)
    result["passages"] = {
        "top_k": PASSAGES,
        "passages": len(scores),
        "score_below_own_confidence": 100 * float(np.mean(scores_a < own_a - 1e-12)),
        "mean_cap": float(np.mean(own_a - scores_a)),
        "queries_with_a_cap": 100 * capped_queries / len(questions),
        "auroc_contains_score": _auroc(scores, contains),
        "auroc_contains_raw": _auroc(raw, contains),
        "auroc_right_score": _auroc(scores, right),
        "auroc_right_raw": _auroc(raw, right),
        "thresholds": [
            {
                "threshold": t,
                "kept_per_query": float(np.sum(scores_a >= t)) / len(questions),
                "contain_answer": 100 * float(np.mean(contains_a[scores_a >= t])) if np.any(scores_a >= t) else None,
                "answer_right": 100 * float(np.mean(right_a[scores_a >= t])) if np.any(scores_a >= t) else None,
            }
            for t in THRESHOLDS
        ],
        "raw_range": [float(min(raw)), float(max(raw))],
    }
    result["readme"] = _readme_examples(model, top_k)
    result["seconds"] = time.perf_counter() - started
    return result


def markdown(result: dict[str, Any]) -> str:
    k = result["top_k"]
    lines = [
        f"Answer text, `{result['model']}`, {result['paragraphs']} SQuAD dev-public paragraphs outside the validation "
        f"articles ({result['questions']} questions, {result['vectors']} vectors), {result['machine']['cpu']} "
        f"({result['machine']['cores']} cores), one run:",
        "",
        f"| phrase answers | EM@1 | EM@{k} | F1@1 | different answers in top {k} "
        f"| top-{k} answers with untrimmed edges | index searches / query | p50 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['setting']} | {row['em@1']:.1f} | {row[f'em@{k}']:.1f} | {row['f1@1']:.1f} | "
            f"{row['different_answers']:.2f} | {row['answers_trimming_would_change']:.1f}% | "
            f"{row['searches_per_query']:.2f} | {row['p50_ms']:.1f} |"
        )
    lines += [
        "",
        f"Folding rules on one list of candidates per question (the top {10 * k} raw spans, trimmed):",
        "",
        f"| answers folded by | EM@1 | EM@{k} | different answers in top {k} |",
        "|---|---:|---:|---:|",
    ]
    for row in result["folding"]:
        lines.append(f"| {row['rule']} | {row['em@1']:.1f} | {row[f'em@{k}']:.1f} | {row['different_answers']:.2f} |")
    p = result["passages"]
    lines += [
        "",
        f"Passages (top {p['top_k']}) scored by their answer's confidence, capped by the answers ranked above "
        f"(raw phrase scores {p['raw_range'][0]:.0f} to {p['raw_range'][1]:.0f}): the cap lowers "
        f"{p['score_below_own_confidence']:.1f}% of the scores (mean {p['mean_cap']:.3f}), in "
        f"{p['queries_with_a_cap']:.1f}% of the queries. AUROC over all (question, passage) pairs, score vs raw: "
        f"passage contains an answer {p['auroc_contains_score']:.3f} vs {p['auroc_contains_raw']:.3f}, its answer is "
        f"right {p['auroc_right_score']:.3f} vs {p['auroc_right_raw']:.3f}.",
        "",
        "| score >= | passages kept / query | contain an answer | answer right |",
        "|---:|---:|---:|---:|",
    ]
    for row in p["thresholds"]:
        contain = f"{row['contain_answer']:.1f}%" if row["contain_answer"] is not None else "-"
        right = f"{row['answer_right']:.1f}%" if row["answer_right"] is not None else "-"
        lines.append(f"| {row['threshold']:.1f} | {row['kept_per_query']:.2f} | {contain} | {right} |")
    readme = result.get("readme")
    if readme:
        lines += [
            "",
            f"Haystack's README (farm-haystack package metadata, {readme['paragraphs']} markdown paragraphs), "
            f"top {k} answers (confidence) and top-3 passages (score, raw score):",
            "",
            "| question | raw spans | tidy answers | passages |",
            "|---|---|---|---|",
        ]
        for ex in readme["examples"]:
            raw = "; ".join(f"{_cell(t)} {c:.2f}" for t, c in ex["raw"])
            tidy = "; ".join(f"{_cell(t)} {c:.2f}" for t, c in ex["tidy"])
            passages = "; ".join(f"{s:.2f} ({r:.0f})" for _, r, s in ex["passages"])
            lines.append(f"| {ex['question']} | {raw} | {tidy} | {passages} |")
    return "\n".join(lines)


def _cell(text: str) -> str:
    """An answer as a markdown table cell: quoted, newlines and pipes escaped."""
    return repr(text).replace("|", "\\|")


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()
    k = result["top_k"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    ax = axes[0]
    names = [row["setting"].split(" (")[0] for row in result["rows"]]
    x = np.arange(len(names))
    ax.bar(x - 0.2, [row["em@1"] for row in result["rows"]], 0.4, label="EM@1")
    ax.bar(x + 0.2, [row[f"em@{k}"] for row in result["rows"]], 0.4, label=f"EM@{k}")
    ax.set_xticks(x, names, fontsize=8)
    ax.legend(fontsize=8)
    ax.set_title("phrase answers", fontsize=9)
    ax = axes[1]
    rows = result["passages"]["thresholds"]
    ax.plot([r["threshold"] for r in rows], [r["contain_answer"] or 0 for r in rows], marker="o", label="contain")
    ax.plot([r["threshold"] for r in rows], [r["answer_right"] or 0 for r in rows], marker="o", label="answer right")
    ax.set_xlabel("passage score threshold")
    ax.set_ylabel("% of passages kept")
    ax.legend(fontsize=8)
    ax.set_title("passages scoring >= threshold", fontsize=9)
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--paragraphs", type=int, default=600)
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--top-k", type=int, default=5)
    args = parser.parse_args()
    finish_result("answer_text", measure(args.model, args.paragraphs, args.questions, args.top_k), markdown, plot)


if __name__ == "__main__":
    main()
