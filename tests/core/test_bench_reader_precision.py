"""The reader-precision benchmark's reads: unseen questions, their gold span, and a near miss that writes no answer."""

from __future__ import annotations

import json

import pytest

from benchmarks.common import VALIDATION_ARTICLES
from benchmarks.speed.reader_precision import near_miss_reads


def _article(title: str, paragraphs: list[tuple[str, str, str]]) -> dict:
    return {
        "title": title,
        "paragraphs": [
            {
                "context": context,
                "qas": [
                    {"id": f"{title}{k}", "question": q, "answers": [{"text": a, "answer_start": context.index(a)}]}
                ]
                if q
                else [],
            }
            for k, (context, q, a) in enumerate(paragraphs)
        ],
    }


def test_near_misses_share_most_words_write_no_answer_and_skip_validation_articles(tmp_path):
    held_out = [_article(f"V{i}", [("Held out text.", "Held?", "Held")]) for i in range(VALIDATION_ARTICLES)]
    lake = _article(
        "Lake",
        [
            ("The lake town was founded in 1821 by fishermen.", "When was the lake town founded?", "1821"),
            ("The lake town has a harbour built by fishermen.", "", ""),  # shares most words: the near miss
            ("Trains arrive twice a day.", "", ""),
            ("Fishermen in 1821 sailed the lake.", "", ""),  # writes the answer: never a near miss
        ],
    )
    alone = _article("Alone", [("Only one paragraph, Berlin.", "Which city?", "Berlin")])  # no other paragraph
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({"data": [*held_out, lake, alone]}))
    (read,) = near_miss_reads(path, questions=10, seed=0)
    assert read["question"] == "When was the lake town founded?"
    start, end = read["span"]
    assert read["context"][start:end] == "1821"
    assert read["near_context"].startswith("The lake town has a harbour")
    start, end = read["near_span"]
    assert read["near_context"][start:end] == "The"


@pytest.mark.parametrize("questions", [0, 1])
def test_at_most_the_questions_asked_for(tmp_path, questions):
    lake = _article("Lake", [("A town in 1821.", "When?", "1821"), ("A town by a lake.", "", "")])
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({"data": [_article("V", [("x", "", "")])] * VALIDATION_ARTICLES + [lake]}))
    assert len(near_miss_reads(path, questions=questions, seed=0)) == questions
