"""The passage-scoring benchmark's choice rule: the alternative only when it wins by more than two standard errors."""

from __future__ import annotations

import pytest

from benchmarks.quality.passage_scoring import choose
from benchmarks.significance import paired_difference


def test_paired_difference_is_the_mean_and_standard_error_of_per_question_differences():
    d = paired_difference([1.0, 0.5, 0.0, 1.0], [0.5, 0.5, 0.0, 0.0])
    assert d["mean"] == pytest.approx(0.375)
    assert d["se"] == pytest.approx(0.4787135538781691 / 2)  # sample std of (0.5, 0, 0, 1) over sqrt(4)


def test_choice_keeps_the_default_unless_the_gain_exceeds_two_standard_errors():
    assert choose({"mean": 0.004, "se": 0.003}) == "max"  # ahead, but within noise
    assert choose({"mean": 0.010, "se": 0.003}) == "logsumexp"
    assert choose({"mean": -0.010, "se": 0.003}) == "max"
    assert choose(paired_difference([1.0], [0.0])) == "max"  # one question: no standard error, no switch
