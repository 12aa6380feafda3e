"""The key-token benchmark's row choice and row mapping."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from benchmarks.index.key_tokens import hit_passage_rows, key_rows, kmeans, map_rows, passage_keys


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


def tiny_index(vectors: np.ndarray, passage: np.ndarray):
    from dphr_haystack.index.codec import VectorCodec

    first = np.searchsorted(passage, np.arange(passage.max() + 1))
    return SimpleNamespace(
        tokens={"passage": passage},
        storage=SimpleNamespace(vectors=SimpleNamespace(view=lambda: vectors)),
        codec=VectorCodec("float32"),
        num_passages=int(passage.max()) + 1,
        first_token=first,
        num_tokens=np.diff(np.append(first, len(passage))),
    )


def test_kmeans_finds_two_separate_groups_from_any_start():
    x = np.array([[0, 0], [0, 1], [10, 10], [10, 11], [11, 10]], dtype=np.float32)
    centers, assign = kmeans(x, np.ones(5, np.float32), np.array([0, 1]))
    assert assign.tolist() in ([0, 0, 1, 1, 1], [1, 1, 0, 0, 0])
    assert np.allclose(sorted(map(tuple, centers.tolist())), [(0, 0.5), (31 / 3, 31 / 3)])


def test_weights_pull_a_centroid_towards_the_heavier_vector():
    x = np.array([[0, 0], [4, 0]], dtype=np.float32)
    centers, _ = kmeans(x, np.array([1, 3], np.float32), np.array([0]))
    assert centers.tolist() == [[3.0, 0.0]]


def test_centroid_keys_stand_for_their_clusters_best_token_and_short_passages_keep_their_tokens():
    vectors = np.array([[0, 0], [0, 1], [10, 10], [10, 11], [5, 5], [6, 6]], dtype=np.float32)
    index = tiny_index(vectors, np.array([0, 0, 0, 0, 1, 1]))
    scores = np.array([0.0, 3.0, 1.0, 2.0, 0.0, 0.0], dtype=np.float32)
    keys, rows = passage_keys(index, scores, 2, "centroids")
    assert rows.tolist() == [1, 3, 4, 5]  # passage 0: started from rows 1 and 3, each cluster's best; passage 1 whole
    assert keys.tolist() == [[0.0, 0.5], [10.0, 10.5], [5.0, 5.0], [6.0, 6.0]]
    filtered, filtered_rows = passage_keys(index, scores, 2, "filter")
    assert filtered_rows.tolist() == [1, 3, 4, 5] and filtered.tolist() == vectors[[1, 3, 4, 5]].tolist()


def test_filter_and_mean_keys_add_the_passage_mean_where_a_passage_has_more_tokens():
    vectors = np.array([[0, 0], [0, 2], [4, 4], [7, 7]], dtype=np.float32)
    index = tiny_index(vectors, np.array([0, 0, 0, 1]))
    keys, rows = passage_keys(index, np.array([0.0, 5.0, 1.0, 0.0], dtype=np.float32), 2, "filter+mean")
    assert rows.tolist() == [1, 1, 3]  # the best token, the mean (standing for the best token); passage 1 whole
    assert np.allclose(keys, [[0, 2], [4 / 3, 2], [7, 7]])


def test_spaced_centroid_keys_are_the_stores_own():
    vectors = np.array([[0, 0], [0, 1], [10, 10], [10, 11], [5, 5], [6, 6]], dtype=np.float32)
    index = tiny_index(vectors, np.array([0, 0, 0, 0, 1, 1]))
    keys, rows = passage_keys(index, np.zeros(6, np.float32), 2, "spaced-centroids")
    assert keys.tolist() == [[0.0, 0.5], [10.0, 10.5], [5.0, 5.0], [6.0, 6.0]]  # started from rows 0 and 3
    assert rows.tolist() == [0, 2, 4, 5]  # each centroid stands for the row nearest to it (ties: the earlier)
