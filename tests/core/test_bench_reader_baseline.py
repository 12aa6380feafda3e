"""The reader-baseline benchmark's scoring, on hand-made answers (no model, no data)."""

from __future__ import annotations

import pytest

from benchmarks.common import parse_readers
from benchmarks.quality.reader_baseline import (
    PHRASE,
    markdown,
    reader_system,
    round_robin,
    system_rows,
)
from dphr_haystack.evaluation import QAExample

EXAMPLES = [
    QAExample(qid="q1", question="What is the capital of France?", answers=("Paris",)),
    QAExample(qid="q2", question="Who wrote Hamlet?", answers=("William Shakespeare", "Shakespeare")),
]
TEXTS = {
    "d-paris": "Paris is the capital of France.",
    "d-hamlet": "Hamlet was written by William Shakespeare.",
    "d-other": "The Globe theatre stands in London.",
}


def test_round_robin_asks_each_system_each_question_in_turn_and_scores_the_top_answer():
    calls: list[tuple[str, str]] = []

    def system(name: str, answers: dict[str, tuple[str, str]]):
        def run(question: str):
            calls.append((name, question))
            text, doc_id = answers[question]
            return [(text, 0.9, doc_id), ("wrong", 0.1, "d-other")], [(doc_id, 1.0, TEXTS[doc_id])]

        return run

    phrase = system(PHRASE, {EXAMPLES[0].question: ("Paris", "d-paris"), EXAMPLES[1].question: ("Hamlet", "d-hamlet")})
    reader = system(
        reader_system(5),
        {EXAMPLES[0].question: ("London", "d-other"), EXAMPLES[1].question: ("William Shakespeare", "d-hamlet")},
    )
    results = round_robin(EXAMPLES, {PHRASE: phrase, reader_system(5): reader}, progress=False)
    assert calls == [(PHRASE, EXAMPLES[0].question), (reader_system(5), EXAMPLES[0].question)] + [
        (PHRASE, EXAMPLES[1].question),
        (reader_system(5), EXAMPLES[1].question),
    ]
    rows = {row["system"]: row for row in system_rows(results, EXAMPLES, TEXTS)}
    assert rows[PHRASE]["em@1"] == 0.5 and rows[reader_system(5)]["em@1"] == 0.5
    assert rows[PHRASE]["top_answer_passage_acc"] == 1.0  # "Hamlet" is wrong, but from the passage holding the answer
    assert rows[reader_system(5)]["top_answer_passage_acc"] == 0.5  # "London" from a passage without one
    assert rows[reader_system(5)]["f1@1"] == pytest.approx(0.5)
    versus = rows[reader_system(5)]["em@1_vs_phrase"]
    assert (versus["diff"], versus["gained"], versus["lost"]) == (0.0, 1, 1)
    assert rows[PHRASE]["p50_vs_phrase"] == 1.0 and "em@1_vs_phrase" not in rows[PHRASE]
    table = markdown(
        {
            "corpus_passages": 3,
            "questions": 2,
            "seed": 0,
            "phrase_model": "m",
            "reader": "r",
            "haystack": "farm-haystack 1.26, FARMReader",
            "threads": 1,
            "machine": {"cpu": "test"},
            "systems": list(rows.values()),
        }
    )
    assert f"| {reader_system(5)} | 50.0 | 50.0 | 50.0 |" in table


def test_readers_are_named_by_their_labels_or_directories():
    assert parse_readers(["runs/r/final"]) == {"reader": "runs/r/final"}
    assert parse_readers(["MiniLM=a/final", "MPNet=b/final"]) == {"MiniLM": "a/final", "MPNet": "b/final"}
    assert parse_readers(["a/minilm", "b/mpnet"]) == {"minilm": "a/minilm", "mpnet": "b/mpnet"}
    assert reader_system(5, "BM25", "MPNet") == "BM25 top-5 + MPNet"
    for bad in (["x=a", "x=b"], ["=a"], ["x="]):
        with pytest.raises(ValueError, match="LABEL=DIR"):
            parse_readers(bad)
    table = markdown(
        {
            "corpus_passages": 3,
            "questions": 2,
            "seed": 0,
            "phrase_model": "m",
            "reader": {"MiniLM": "a/final", "MPNet": "b/final"},
            "haystack": "farm-haystack 1.26, FARMReader",
            "threads": 2,
            "machine": {"cpu": "test"},
            "systems": [],
        }
    )
    assert "MiniLM `a/final`; MPNet `b/final`" in table
