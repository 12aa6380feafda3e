"""The index benchmarks' calibration of the top answer: ECE and AUROC right vs wrong from searcher hits."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks.common import confidence_scores

pytestmark = pytest.mark.unit


def _hit(text: str, confidence: float | None):
    return SimpleNamespace(text=text, confidence=confidence)


def test_the_top_answer_is_scored_and_a_question_without_one_is_a_wrong_answer_at_zero():
    examples = [SimpleNamespace(answers=["Denver Broncos"]), SimpleNamespace(answers=["1889"])] * 2
    answers = [
        [_hit("the Denver Broncos", 0.9), _hit("Carolina Panthers", 0.95)],  # only the first hit counts: right
        [_hit("1887", 0.6)],  # wrong
        [],  # no answer: wrong at confidence 0
        [_hit("1889", None)],  # right, no confidence: 0
    ]
    scores = confidence_scores(examples, answers)
    # confidences 0.9 (right), 0.6 (wrong), 0 (wrong), 0 (right): pairs right > wrong 2 of 4, one tie
    assert scores["auroc_right_vs_wrong"] == pytest.approx(2.5 / 4)
    # bins: [0, 0.1) holds 0, 0 (one right: accuracy 0.5), [0.6, 0.7) 0.6 wrong, [0.9, 1.0] 0.9 right
    assert scores["ece"] == pytest.approx((2 * 0.5 + 0.6 + 0.1) / 4)
    assert confidence_scores(examples[:2], answers[:2])["auroc_right_vs_wrong"] == 1.0
