"""Truecasing of lower-cased questions: phrase EM with and without it, and how well the truecaser restores case.

    .venv/bin/python -m benchmarks.quality.truecase                     # shipped model, 200 paragraphs (a few minutes)
    .venv/bin/python -m benchmarks.quality.truecase --model DIR --paragraphs 600

DensePhrases truecases all-lowercase queries for its cased checkpoints (NQ and WebQuestions questions are
lower-cased). Part 1 indexes SQuAD dev-public paragraphs after the held-out validation articles, lower-cases
their questions and measures phrase EM@1 / F1@1 and passage acc@1/5/20 three ways: the original questions, the
lower-cased ones, the lower-cased ones truecased (``PhraseSearcher(truecase=True)``). With an uncased model (the
shipped ``dphr-minilm-squad`` lower-cases its input) all three must be identical: truecasing cannot change
what it encodes. Part 2 scores the truecaser itself on every SQuAD dev-public question: each question is
lower-cased, truecased with the statistics of all dev-public paragraphs (the corpus an index of them would
search) and compared word by word with the original; baseline: lower case with a capital first word. Part 3 times
the corpus truecaser a searcher builds over SQuAD-open-small at its first lower-case question.

Skips (exit 0) when ../shared/data holds no SQuAD dev file.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import (
    DEFAULT_MODEL,
    SQUAD_DEV,
    VALIDATION_PARAGRAPHS,
    cached_open_small_phrases,
    finish_result,
    machine,
    model_id,
    pyplot,
    save_figure,
    squad_passages,
)

PASSAGE_KS = (1, 5, 20)
SETTINGS = ("original", "lower-cased", "lower-cased, truecased")


def truecaser_accuracy(contexts: list[str], questions: list[str]) -> dict:
    """Word and whole-question accuracy of the corpus truecaser (and of the first-capital baseline)."""
    from dphr_haystack.model.truecase import WORD, TrueCaser

    started = time.perf_counter()
    caser = TrueCaser.from_texts(contexts)
    build_s = time.perf_counter() - started

    def score(fn) -> tuple[float, float, float]:
        right = total = whole = 0
        started = time.perf_counter()
        for question in questions:
            gold = [m.group() for m in WORD.finditer(question)]
            got = [m.group() for m in WORD.finditer(fn(question.lower()))]
            ok = sum(g == h for g, h in zip(gold, got, strict=True))
            right, total, whole = right + ok, total + len(gold), whole + (ok == len(gold))
        return right / total, whole / len(questions), 1000 * (time.perf_counter() - started) / len(questions)

    words, whole, ms = score(caser.truecase)
    base_words, base_whole, _ = score(lambda q: q[:1].upper() + q[1:])
    changed = sum(q != q.lower() for q in questions)
    return {
        "questions": len(questions),
        "questions_with_capitals": changed,
        "corpus_paragraphs": len(contexts),
        "words_right": 100 * words,
        "questions_right": 100 * whole,
        "baseline_words_right": 100 * base_words,
        "baseline_questions_right": 100 * base_whole,
        "build_s": build_s,
        "ms_per_question": ms,
    }


def corpus_build(model) -> dict:
    """Seconds a searcher over SQuAD-open-small takes to build its corpus truecaser (once, at its first lower-case
    question when it truecases or its answerability reads names)."""
    from dphr_haystack.index.phrase_index import PhraseIndex
    from dphr_haystack.model.truecase import CORPUS_SAMPLE, corpus_truecaser

    index = PhraseIndex.load(cached_open_small_phrases(model), model=model)
    started = time.perf_counter()
    caser = corpus_truecaser(index, model.tokenizer.get_vocab())
    return {
        "passages": index.num_passages,
        "sampled": min(CORPUS_SAMPLE, index.num_passages),
        "build_s": time.perf_counter() - started,
        "words": len(caser.forms),
    }


def run(model_name: str, paragraphs: int, top_k: int) -> dict:
    from dphr_haystack.answers import contains_answer, exact_match, f1_score
    from dphr_haystack.encode.add import add_passages
    from dphr_haystack.evaluation import accuracy_at, first_hit
    from dphr_haystack.index.phrase_index import PhraseIndex
    from dphr_haystack.model.phrase_model import PhraseModel
    from dphr_haystack.search import PhraseSearcher

    passages, questions = squad_passages(SQUAD_DEV)
    all_contexts, all_questions = [p["text"] for p in passages], [q["question"] for q in questions]
    chosen = passages[VALIDATION_PARAGRAPHS : VALIDATION_PARAGRAPHS + paragraphs]
    ids = {p["id"] for p in chosen}
    asked = [q for q in questions if q["passage_id"] in ids]

    model = PhraseModel.load(model_name)
    started = time.perf_counter()
    index = PhraseIndex.create(model, faiss_factory="Flat", filter_threshold=model.config.filter_threshold)
    add_passages(index, model, chosen, progress=False)
    index_s = time.perf_counter() - started
    searchers = {
        "original": PhraseSearcher(index, model, truecase=False),
        "lower-cased": PhraseSearcher(index, model, truecase=False),
        "lower-cased, truecased": PhraseSearcher(index, model, truecase=True),
    }
    texts = {
        "original": [q["question"] for q in asked],
        "lower-cased": [q["question"].lower() for q in asked],
        "lower-cased, truecased": [q["question"].lower() for q in asked],
    }
    rows, top1 = [], {}
    for name in SETTINGS:
        started = time.perf_counter()
        phrases = searchers[name].search_batch(texts[name], unit="phrase", top_k=1)
        ranked = searchers[name].search_batch(texts[name], unit="passage", top_k=top_k)
        seconds = time.perf_counter() - started
        em, f1, first = [], [], []
        for q, ph, ps in zip(asked, phrases, ranked, strict=True):
            text = ph[0].text if ph else ""
            em.append(exact_match(text, q["answers"]))
            f1.append(f1_score(text, q["answers"]))
            first.append(first_hit(contains_answer(h.text, q["answers"]) for h in ps))
        top1[name] = [(ph[0].passage_id, ph[0].start, ph[0].end) if ph else None for ph in phrases]
        rows.append(
            {
                "queries": name,
                "questions": len(asked),
                "phrase_em@1": 100 * float(np.mean(em)),
                "phrase_f1@1": 100 * float(np.mean(f1)),
                **{f"passage_acc@{k}": 100 * float(np.mean(accuracy_at(first, k))) for k in PASSAGE_KS},
                "seconds": seconds,
            }
        )
    tokenizer = model.tokenizer
    cased = tokenizer.tokenize("Paris") != tokenizer.tokenize("paris")
    return {
        "benchmark": "truecasing of lower-cased questions",
        "model": model_name,
        "model_id": model_id(model_name),
        "model_cased": cased,
        "model_truecase_default": model.config.truecase,
        "paragraphs": len(chosen),
        "vectors": len(index),
        "index_s": index_s,
        "top_k": top_k,
        "rows": rows,
        "top1_changed_by_truecasing": sum(
            a != b for a, b in zip(top1["lower-cased"], top1["lower-cased, truecased"], strict=True)
        ),
        "top1_changed_by_lowercasing": sum(a != b for a, b in zip(top1["original"], top1["lower-cased"], strict=True)),
        "truecaser": truecaser_accuracy(all_contexts, all_questions),
        "corpus_truecaser": corpus_build(model),
    }


def markdown(result: dict) -> str:
    t = result["truecaser"]
    kind = "cased" if result["model_cased"] else "uncased (its tokenizer lower-cases)"
    lines = [
        f"`{result['model']}` ({kind}) over {result['paragraphs']} SQuAD dev-public paragraphs after the held-out "
        f"validation articles ({result['vectors']:,} phrase vectors), their {result['rows'][0]['questions']} "
        "questions. Percentages.",
        "",
        "| queries | EM@1 | F1@1 | passage acc@1 | acc@5 | acc@20 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['queries']} | {row['phrase_em@1']:.1f} | {row['phrase_f1@1']:.1f} | {row['passage_acc@1']:.1f} "
            f"| {row['passage_acc@5']:.1f} | {row['passage_acc@20']:.1f} |"
        )
    lines += [
        "",
        f"Top-1 phrases changed by lower-casing: {result['top1_changed_by_lowercasing']}; by truecasing the "
        f"lower-cased questions: {result['top1_changed_by_truecasing']}."
        + (
            " An uncased model reads all three alike, so the expected effect is nil; the gain DensePhrases reports "
            "is for cased checkpoints, which this run does not measure."
            if not result["model_cased"]
            else ""
        ),
        "",
        f"Truecaser on all {t['questions']:,} dev-public questions, lower-cased, with the case statistics of all "
        f"{t['corpus_paragraphs']:,} dev-public paragraphs (built in {t['build_s']:.1f} s, "
        f"{t['ms_per_question']:.2f} ms per question): **{t['words_right']:.1f}%** of words and "
        f"{t['questions_right']:.1f}% of questions cased exactly as written, against {t['baseline_words_right']:.1f}%"
        f" / {t['baseline_questions_right']:.1f}% for lower case with a capital first word.",
    ]
    if "corpus_truecaser" in result:
        c = result["corpus_truecaser"]
        lines += [
            "",
            f"A searcher's corpus truecaser over SQuAD-open-small ({c['passages']:,} passages, {c['sampled']:,} "
            f"sampled, {c['words']:,} words counted): built in **{c['build_s']:.1f} s**, once, at its first "
            "lower-case question.",
        ]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    plt = pyplot()

    metrics = ["phrase_em@1", "phrase_f1@1", "passage_acc@1", "passage_acc@5", "passage_acc@20"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.27
    for i, row in enumerate(result["rows"]):
        ax.bar(np.arange(len(metrics)) + (i - 1) * width, [row[m] for m in metrics], width, label=row["queries"])
    ax.set_xticks(np.arange(len(metrics)), [m.replace("phrase_", "") for m in metrics])
    ax.set_ylabel("%")
    ax.set_title(f"{result['model']}: original, lower-cased, truecased questions")
    ax.legend(fontsize=8)
    t = result["truecaser"]
    bx.bar(["lower +\ncapital first", "truecaser"], [t["baseline_words_right"], t["words_right"]])
    bx.set_ylim(80, 100)
    bx.set_title("words cased right (%)")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--paragraphs", type=int, default=200)
    parser.add_argument("--top-k", type=int, default=20)
    args = parser.parse_args(argv)
    if not SQUAD_DEV.is_file():
        print(f"skipped: {SQUAD_DEV} not found (this benchmark needs ../shared/data)")
        return 0
    started = time.perf_counter()
    result = run(args.model, args.paragraphs, args.top_k)
    result.update(
        machine=machine(),
        seconds=time.perf_counter() - started,
        command="python -m benchmarks.quality.truecase " + " ".join(argv if argv is not None else sys.argv[1:]),
    )
    finish_result("truecase", result, markdown, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
