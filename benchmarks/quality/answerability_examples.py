"""A user's first-hour questions about what their corpus does not hold: the top answer's confidence before (the
calibration alone), after (with the model's answerability) and verified (``verify=True``: the model's reader read it),
and P(the corpus holds an answer) without and with ``verify`` (the model's holds-answer: what places "no answer").

    .venv/bin/python -m benchmarks.quality.answerability_examples

Corpora: the first 4 and the first 20 paragraphs of ``benchmarks/data/user_corpus`` (a lake town, a software
company, written for the project) and the 1,702 shipped SQuAD dev-public paragraphs (the cached phrase index of
``benchmarks.quality.answerability``, built when missing). Writes results/answerability_examples.json.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import DEFAULT_MODEL, ROOT, machine, model_id, phrase_cache, write_result

USER_CORPUS = ROOT / "benchmarks" / "data" / "user_corpus" / "passages.jsonl"
QUESTIONS = {
    "4 user paragraphs": [
        "What is the capital of Kenya?",
        "When did the Normans conquer England?",
        "Who painted the Mona Lisa?",
        "Who founded Velmora?",
    ],
    "20 user paragraphs": ["Who painted the Mona Lisa?", "Who wrote Hamlet?", "Who founded Velmora?"],
    "1,702 shipped SQuAD paragraphs": [
        "When did the Normans conquer England?",
        "Who wrote Hamlet?",
        "Who painted the Mona Lisa?",
        "What is the capital of Kenya?",
        "Which NFL team won Super Bowl 50?",
    ],
}


def main() -> None:
    from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher
    from dphr_haystack.confidence import Calibration
    from dphr_haystack.encode.add import add_passages
    from train.answerability import dev_index

    started = time.perf_counter()
    model = PhraseModel.load(DEFAULT_MODEL)
    after = Calibration.from_dict(model.config.calibration)
    before = dataclasses.replace(after, answerability=None, holds_answer=None)
    user = [json.loads(line) for line in USER_CORPUS.read_text().splitlines() if line.strip()]

    def small(count: int) -> PhraseIndex:
        index = PhraseIndex.create(model, filter_threshold=model.config.filter_threshold)
        add_passages(index, model, [{**p, "document_id": p["title"]} for p in user[:count]], progress=False)
        return index

    indexes = {
        "4 user paragraphs": small(4),
        "20 user paragraphs": small(20),
        "1,702 shipped SQuAD paragraphs": dev_index(model, phrase_cache(model, ROOT / "benchmarks/cache/squad-dev")),
    }
    rows: list[dict[str, Any]] = []
    for corpus, questions in QUESTIONS.items():
        plain = PhraseSearcher(indexes[corpus], model, calibration=before)
        served = PhraseSearcher(indexes[corpus], model, calibration=after)
        checked = PhraseSearcher(indexes[corpus], model, calibration=after, verify=True)
        for question in questions:
            old, new = (
                plain.search(question, top_k=1, unit="phrase")[0],
                served.search(question, top_k=1, unit="phrase")[0],
            )
            read = checked.search(question, top_k=1, unit="phrase")[0]
            verified = read.confidence
            rows.append(
                {
                    "corpus": corpus,
                    "question": question,
                    "answer": new.text,
                    "same_answer": old.text == new.text,
                    "before": old.confidence,
                    "after": new.confidence,
                    "verified": verified,
                    "holds_answer": new.holds_answer,
                    "holds_answer_verified": read.holds_answer,
                    "unwritten_names": list(new.unwritten_names or ()),
                }
            )
            confidences = f"{old.confidence:.2f} -> {new.confidence:.2f} -> verified {verified:.2f}"
            if new.holds_answer is not None:
                confidences += f"; holds an answer {new.holds_answer:.2f} -> verified {read.holds_answer:.2f}"
            if new.unwritten_names:
                confidences += f"; no passage writes {', '.join(new.unwritten_names)}"
            print(f"{corpus} | {question} | {new.text!r} | {confidences}")
    result = {
        "machine": machine(),
        "model": DEFAULT_MODEL,
        "model_id": model_id(DEFAULT_MODEL),
        "command": ".venv/bin/python -m benchmarks.quality.answerability_examples",
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }
    print(f"wrote {write_result('answerability_examples', result)}")


if __name__ == "__main__":
    main()
