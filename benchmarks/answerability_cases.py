"""The unanswerable question sets the answerability benchmarks share: NQ-open / TriviaQA questions and the user corpus.

The user corpus (``benchmarks/data/user_corpus``) is 24 paragraphs written for the project with 48 questions it
answers and 48 it does not (world knowledge, near misses, other entities); NQ-open and TriviaQA dev questions come
from ``../shared/data`` and are nearly all unanswerable over SQuAD text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, SHARED_DATA

USER_CORPUS = ROOT / "benchmarks" / "data" / "user_corpus"
OPEN_SETS = {
    "nq": SHARED_DATA / "nq-open" / "NQ-open.dev.jsonl.gz",
    "triviaqa": SHARED_DATA / "odqa-dpr" / "trivia-dev.qa.csv.gz",
}


def open_questions(path: Path, limit: int, seed: int) -> list:
    """``limit`` questions of an open-domain set (a seeded sample) as :class:`train.answerability_cases.Question`."""
    from dphr_haystack.evaluation import read_questions
    from train.answerability_cases import Question

    examples = read_questions(path, limit=limit, seed=seed)
    return [Question(ex.question, tuple(ex.answers)) for ex in examples]


def user_cases(model) -> tuple[Any, list]:
    """The user corpus' in-memory index and its 96 cases (corpus ``user-<kind>``)."""
    from dphr_haystack import PhraseIndex
    from dphr_haystack.encode.add import add_passages
    from train.answerability_cases import Case, Question

    passages = [json.loads(line) for line in (USER_CORPUS / "passages.jsonl").read_text().splitlines() if line]
    for p in passages:
        p["document_id"] = p["title"].split(" — ")[0]
    index = PhraseIndex.create(model, filter_threshold=model.config.filter_threshold)
    add_passages(index, model, passages, progress=False)
    cases = []
    for line in (USER_CORPUS / "questions.jsonl").read_text().splitlines():
        if line.strip():
            q = json.loads(line)
            question = Question(q["question"], tuple(q["answers"]), "", q.get("passage_id") or "")
            cases.append(Case(question, f"user-{q['kind']}", q["answerable"]))
    return index, cases
