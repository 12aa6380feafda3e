"""Bounded memory in the parts that see one passage or one shard at a time (the corpus-size curve is measured by
benchmarks/memory/indexing.py): windowing a huge passage takes memory linear in its length."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dphr_haystack import PhraseModelConfig
from dphr_haystack.model.inputs import TokenizedPassage, build_windows

pytestmark = pytest.mark.unit


class _Ids:
    cls_token_id, sep_token_id = 101, 102


def _passage(n: int, title: int = 0) -> TokenizedPassage:
    return TokenizedPassage(list(range(1000, 1000 + n)), np.zeros((n, 2), np.int32), list(range(title)))


def _reference_owner(n: int, spans: list[tuple[int, int]]) -> np.ndarray:
    """The max-context rule written out directly (quadratic): the best window per token, earlier on ties."""
    owner = np.zeros(n, dtype=np.int64)
    for k in range(n):
        scores = [min(k - a, b - 1 - k) + 0.01 * (b - a) if a <= k < b else -1.0 for a, b in spans]
        owner[k] = int(np.argmax(scores))
    return owner


@settings(max_examples=60, deadline=None, database=None, derandomize=True)
@given(n=st.integers(0, 400), length=st.integers(16, 64), stride=st.integers(0, 7), title=st.integers(0, 3))
def test_window_owners_follow_the_max_context_rule(n, length, stride, title):
    config = PhraseModelConfig(max_passage_length=length, passage_stride=stride, max_title_length=3)
    windows = build_windows(_Ids, [_passage(n, title)], config)
    owned = np.full(n, -1)
    spans = []
    prefix = 1 + (title + 1 if title else 0)  # [CLS] title [SEP]
    for w_idx, window in enumerate(windows):
        owned[window.owned_context] = w_idx
        context = window.input_ids[prefix:-1]  # context ids are 1000 + position: the window's span
        spans.append((context[0] - 1000, context[-1] - 1000 + 1) if context else (0, 0))
    assert (owned >= 0).all(), "a token has no window"
    assert np.array_equal(owned, _reference_owner(n, spans))


def test_windowing_a_huge_passage_takes_linear_memory():
    """200k subwords in 48-subword windows: the old per-window score matrix needed ~40 GB; now a few MB."""
    config = PhraseModelConfig(max_passage_length=48, passage_stride=8)
    passage = _passage(200_000)
    tracemalloc.start()
    try:
        windows = build_windows(_Ids, [passage], config)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sum(len(w.owned_context) for w in windows) == 200_000
    assert peak < 150 * 2**20, f"windowing peaked at {peak / 2**20:.0f} MiB"
