"""The filter benchmark's oracle packing: whole answers, the cheapest first, within the budget."""

from __future__ import annotations

from benchmarks.index.filter_thresholds import pack_answers


def test_takes_the_cheapest_answers_first_and_stops_at_the_budget():
    questions = [
        {frozenset({1, 2})},  # two new rows
        {frozenset({3})},  # one
        {frozenset({2, 4}), frozenset({5, 6})},  # one once row 2 is kept
        {frozenset({7, 8})},
    ]
    assert pack_answers(questions, 1) == {3}
    assert pack_answers(questions, 3) == {1, 2, 3}
    assert pack_answers(questions, 4) == {1, 2, 3, 4}
    assert pack_answers(questions, 6) == {1, 2, 3, 4, 7, 8}


def test_an_answer_already_kept_costs_nothing_and_no_budget_keeps_nothing():
    questions = [{frozenset({1, 2})}, {frozenset({2, 1})}, {frozenset({9})}]
    assert pack_answers(questions, 2) == {9}  # greedy: the one-row answer first
    assert pack_answers(questions, 3) == {1, 2, 9}  # the second {1, 2} adds nothing
    assert pack_answers(questions, 0) == set()
    assert pack_answers([], 8) == set()
