"""Whole-word phrases: search that never starts or ends a phrase inside a word, against search that may.

    .venv/bin/python -m benchmarks.quality.whole_words                  # shipped model, 1,000 questions
    .venv/bin/python -m benchmarks.quality.whole_words --model DIR --questions 300

Runs on the SQuAD-open-small phrase index that ``quality/squad_open_small.py --only phrases`` builds for the
model (same corpus, same held-out articles excluded, same question sampling). Each batch of questions is
encoded once; both settings search with the same query vectors, alternately, so their latencies are paired.
Reports phrase EM/F1 at 1, passage accuracy at 1/5/20, how many top-1 phrases cut a word, and the latency ratio.
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
    finish_result,
    machine,
    model_id,
    phrase_cache,
    pyplot,
    save_figure,
    validation_titles,
)
from benchmarks.common import SQUAD_OPEN_SMALL_CACHE as CACHE

SETTINGS = {"any subword": False, "whole words": True}
PASSAGE_KS = (1, 5, 20)


def cuts_a_word(index, hit) -> bool:
    """Does the phrase start or end inside a word of its passage?"""
    from dphr_haystack.spans import inside_word

    text = index.passages[hit.passage_row]["text"]
    return inside_word(text, hit.start) or inside_word(text, hit.end)


def run(model_name: str, questions: int, seed: int, top_k: int, batch_size: int) -> dict:
    from dphr_haystack.answers import contains_answer, exact_match, f1_score
    from dphr_haystack.evaluation import accuracy_at, first_hit, read_questions
    from dphr_haystack.index.phrase_index import PhraseIndex
    from dphr_haystack.model.phrase_model import PhraseModel
    from dphr_haystack.search import PhraseSearcher

    model = PhraseModel.load(model_name)
    index_dir = phrase_cache(model, CACHE)
    if not index_dir.is_dir():
        raise SystemExit(
            f"{index_dir} not found: build it with "
            f"`python -m benchmarks.quality.squad_open_small --model {model_name} --only phrases`"
        )
    index = PhraseIndex.load(index_dir, model=model)
    examples = read_questions(SQUAD_DEV, limit=questions, seed=seed, exclude_titles=validation_titles())
    searchers = {name: PhraseSearcher(index, model, whole_words=flag) for name, flag in SETTINGS.items()}
    per: dict[str, dict[str, list]] = {
        name: {"em": [], "f1": [], "cut": [], "first": [], "ms": []} for name in SETTINGS
    }
    from tqdm import tqdm

    for lo in tqdm(range(0, len(examples), batch_size), desc="questions", unit="batch"):
        batch = examples[lo : lo + batch_size]
        q_start, q_end = model.encode_queries([ex.question for ex in batch])
        order = list(SETTINGS) if (lo // batch_size) % 2 == 0 else list(reversed(SETTINGS))
        for name in order:
            started = time.perf_counter()
            phrases = searchers[name].search_vectors(q_start, q_end, unit="phrase", top_k=1)
            passages = searchers[name].search_vectors(q_start, q_end, unit="passage", top_k=top_k)
            per[name]["ms"].append(1000 * (time.perf_counter() - started) / len(batch))
            for ex, ph, ps in zip(batch, phrases, passages, strict=True):
                text = ph[0].text if ph else ""
                per[name]["em"].append(exact_match(text, ex.answers))
                per[name]["f1"].append(f1_score(text, ex.answers))
                per[name]["cut"].append(bool(ph) and cuts_a_word(index, ph[0]))
                per[name]["first"].append(first_hit(contains_answer(h.text, ex.answers) for h in ps))
    rows = []
    for name, values in per.items():
        rows.append(
            {
                "setting": name,
                "whole_words": SETTINGS[name],
                "questions": len(values["em"]),
                "phrase_em@1": 100 * float(np.mean(values["em"])),
                "phrase_f1@1": 100 * float(np.mean(values["f1"])),
                "top1_cuts_a_word": 100 * float(np.mean(values["cut"])),
                **{f"passage_acc@{k}": 100 * float(np.mean(accuracy_at(values["first"], k))) for k in PASSAGE_KS},
                "search_ms_per_question": float(np.mean(values["ms"])),
            }
        )
    base, whole = per["any subword"], per["whole words"]
    fixed = sum(w and not a for a, w in zip(base["em"], whole["em"]))
    broken = sum(a and not w for a, w in zip(base["em"], whole["em"]))
    return {
        "benchmark": "whole-word phrases",
        "model": model_name,
        "model_id": model_id(model_name),
        "index": index_dir.name,
        "vectors": len(index),
        "passages": index.num_passages,
        "seed": seed,
        "top_k": top_k,
        "rows": rows,
        "em_gained": fixed,
        "em_lost": broken,
        "latency_ratio_whole_vs_any": rows[1]["search_ms_per_question"] / rows[0]["search_ms_per_question"],
    }


def markdown(result: dict) -> str:
    lines = [
        f"SQuAD-open-small phrase index of `{result['model']}` ({result['passages']:,} passages, "
        f"{result['vectors']:,} vectors); {result['rows'][0]['questions']} dev-public questions (seed "
        f"{result['seed']}, held-out validation articles excluded). Same query vectors for both settings; "
        "search time excludes query encoding. Percentages.",
        "",
        "| phrases may | EM@1 | F1@1 | top-1 cuts a word | passage acc@1 | acc@5 | acc@20 | search ms/question |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {'start/end on word boundaries only' if row['whole_words'] else 'start/end on any subword'} | "
            f"{row['phrase_em@1']:.1f} | {row['phrase_f1@1']:.1f} | {row['top1_cuts_a_word']:.1f} | "
            f"{row['passage_acc@1']:.1f} | {row['passage_acc@5']:.1f} | {row['passage_acc@20']:.1f} | "
            f"{row['search_ms_per_question']:.1f} |"
        )
    lines += [
        "",
        f"Whole words turn {result['em_gained']} wrong top-1 answers right and {result['em_lost']} right ones "
        f"wrong; search time ratio whole / any: {result['latency_ratio_whole_vs_any']:.2f}.",
    ]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    plt = pyplot()

    metrics = ["phrase_em@1", "phrase_f1@1", "top1_cuts_a_word", "passage_acc@1", "passage_acc@5", "passage_acc@20"]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.38
    for i, row in enumerate(result["rows"]):
        ax.bar(
            np.arange(len(metrics)) + (i - 0.5) * width,
            [row[m] for m in metrics],
            width,
            label="word boundaries only" if row["whole_words"] else "any subword",
        )
    ax.set_xticks(np.arange(len(metrics)), [m.replace("phrase_", "") for m in metrics])
    ax.set_ylabel("%")
    ax.set_title(f"Whole-word phrases, {result['model']} on SQuAD-open-small")
    ax.legend()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = run(args.model, args.questions, args.seed, args.top_k, args.batch_size)
    result.update(
        machine=machine(),
        seconds=time.perf_counter() - started,
        command="python -m benchmarks.quality.whole_words " + " ".join(argv or sys.argv[1:]),
    )
    finish_result("whole_words", result, markdown, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
