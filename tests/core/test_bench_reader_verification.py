"""The reader-verification benchmark's span view and out-of-fold fit, on a tiny random reader (no data)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.common import out_of_fold_confidences
from benchmarks.quality.reader_verification import SpanReader


@pytest.fixture(scope="module")
def tiny_reader(tiny_reader_dir) -> SpanReader:
    return SpanReader(tiny_reader_dir, max_length=32)


def test_the_span_view_scores_the_answer_against_the_windows_spans(tiny_reader, one_torch_thread):
    context = "Hamlet is a tragedy written by William Shakespeare sometime between 1599 and 1601."
    start = context.index("William Shakespeare")
    view = tiny_reader.view("Who wrote Hamlet?", context, start, start + len("William Shakespeare"))
    assert view is not None and view["reader_gap"] <= 1e-6 and view["reader_logp"] <= 1e-6
    long_context = "filler words here. " * 40 + "Shakespeare"
    assert tiny_reader.view("Who?", long_context, len(long_context) - 11, len(long_context)) is None  # past the window


def test_out_of_fold_scores_rank_a_separable_feature_first():
    rng = np.random.default_rng(0)
    labels = np.array([1.0] * 40 + [0.0] * 40)
    features = np.column_stack([labels * 2 + rng.normal(0, 0.5, 80), rng.normal(0, 1, 80)])
    scores = out_of_fold_confidences(features, labels)
    assert scores[labels == 1].mean() > 0.8 > 0.2 > scores[labels == 0].mean()
