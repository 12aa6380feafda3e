"""The key-token benchmark's row choice and row mapping."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from benchmarks.index.key_tokens import hit_passage_rows, key_rows, map_rows


def test_keeps_each_passages_best_rows_ties_to_the_earlier_row_in_row_order():
    index = SimpleNamespace(tokens={"passage": np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])})
    scores = np.array([0.1, 0.9, 0.5, 0.3, 0.3, 2.0, -1.0, 2.0, 0.0], dtype=np.float32)
    assert key_rows(index, scores, 1).tolist() == [1, 3, 5]
    assert key_rows(index, scores, 2).tolist() == [1, 2, 3, 4, 5, 7]
    assert key_rows(index, scores, 9).tolist() == list(range(9))  # a passage shorter than the budget: all of it


def test_maps_key_rows_to_whole_rows_and_keeps_none():
    rows = np.array([1, 2, 5, 7])
    assert map_rows(np.array([[3, 0, -1], [2, -1, 1]]), rows).tolist() == [[7, 1, -1], [5, -1, 2]]


def test_hit_passages_are_read_whole_once_each():
    index = SimpleNamespace(
        tokens={"passage": np.array([0, 0, 1, 1, 1, 2])},
        first_token=np.array([0, 2, 5]),
        num_tokens=np.array([2, 3, 1]),
    )
    assert hit_passage_rows(index, np.array([3, -1]), np.array([4, 0])).tolist() == [0, 1, 2, 3, 4]
    assert hit_passage_rows(index, np.array([-1]), np.array([-1])).tolist() == []
