"""The reader-verification benchmark's out-of-fold fit (its span view is the core's SpanReader, tested in
tests/core/test_verification.py)."""

from __future__ import annotations

import numpy as np

from benchmarks.common import out_of_fold_confidences


def test_out_of_fold_scores_rank_a_separable_feature_first():
    rng = np.random.default_rng(0)
    labels = np.array([1.0] * 40 + [0.0] * 40)
    features = np.column_stack([labels * 2 + rng.normal(0, 0.5, 80), rng.normal(0, 1, 80)])
    scores = out_of_fold_confidences(features, labels)
    assert scores[labels == 1].mean() > 0.8 > 0.2 > scores[labels == 0].mean()
