"""Phrase answers that copy the question are skipped; calibrated confidences, AUROC and reliability."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from dphr_haystack import InvalidParameterError, PhraseIndex, PhraseSearcher
from dphr_haystack.confidence import (
    CONFIDENCE_DEPTH,
    FEATURES,
    auroc,
    confidence_features,
    copies_question,
    expected_calibration_error,
    fit_calibration,
    question_words,
    reliability,
)
from dphr_haystack.encode.add import add_passages
from dphr_haystack.model.calibration import Calibration
from tests.conftest import tiny_passages

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("phrase", "copied"),
    [
        ("Super Bowl 50", True),
        ("super bowl", True),
        ("The Super Bowl 50!", True),
        ("50", True),
        ("the", True),
        ("Denver Broncos", False),
        ("Bowl 5", False),
        ("Super 50", False),
        ("Super Bowl 50 MVP", False),
    ],
)
def test_copies_question_matches_whole_normalised_words_in_order(phrase, copied):
    assert copies_question(phrase, question_words("Who won Super Bowl 50?")) is copied


@pytest.fixture
def index(tiny_model):
    idx = PhraseIndex.create(tiny_model)
    add_passages(idx, tiny_model, tiny_passages(), progress=False)
    return idx


def test_searcher_skips_phrases_the_question_contains(tiny_model, index):
    q_start, q_end = tiny_model.encode_queries(["capital of france"])
    # raw spans: folding after skipping copies is tested in tests/core/test_answer_text.py
    plain = PhraseSearcher(index, tiny_model, skip_question_copies=False, calibration=None, tidy_answers=False)
    ranked = plain.search_vectors(q_start, q_end, unit="phrase", top_k=8)[0]
    copied = ranked[0].text
    question = f"What does {copied} mean?"
    skipping = PhraseSearcher(index, tiny_model, calibration=None, tidy_answers=False)
    got = skipping.search_vectors(q_start, q_end, unit="phrase", top_k=5, questions=[question])[0]
    words = question_words(question)
    assert all(not copies_question(h.text, words) for h in got)
    assert got[0].text != copied
    expected = [
        h
        for h in plain.search_vectors(q_start, q_end, unit="phrase", top_k=40)[0]
        if not copies_question(h.text, words)
    ][:5]
    assert [(h.passage_id, h.start, h.end) for h in got] == [(h.passage_id, h.start, h.end) for h in expected]
    # Off: the copy comes back; passages are ranked the same either way.
    again = plain.search_vectors(q_start, q_end, unit="phrase", top_k=1, questions=[question])[0]
    assert again[0].text == copied
    assert [
        (h.passage_id, h.score)
        for h in skipping.search_vectors(q_start, q_end, unit="passage", top_k=3, questions=[question])[0]
    ] == [
        (h.passage_id, h.score)
        for h in plain.search_vectors(q_start, q_end, unit="passage", top_k=3, questions=[question])[0]
    ]


def test_question_texts_must_match_the_query_vectors(tiny_model, index):
    q_start, q_end = tiny_model.encode_queries(["capital of france"])
    with pytest.raises(InvalidParameterError, match="question texts"):
        PhraseSearcher(index, tiny_model).search_vectors(q_start, q_end, questions=["a", "b"])


def _synthetic(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows, labels = [], []
    for _ in range(n):
        scores = np.sort(rng.normal(20, 3, size=CONFIDENCE_DEPTH))[::-1]
        features = confidence_features(scores, [f"answer {i}" for i in range(len(scores))])[0]
        rows.append(features)
        labels.append(rng.random() < 1 / (1 + np.exp(-(features[3] - 1.0) * 2)))  # right when far ahead
    return np.array(rows), np.array(labels)


def test_fitted_calibration_separates_and_is_calibrated():
    features, labels = _synthetic()
    calibration = fit_calibration(features, labels)
    confidence = calibration.confidence(features)
    assert ((confidence >= 0) & (confidence <= 1)).all()
    assert auroc(confidence, labels) > 0.75
    held_features, held_labels = _synthetic(seed=1)
    held = calibration.confidence(held_features)
    assert expected_calibration_error(held, held_labels) < 0.1
    assert sum(row["count"] for row in reliability(held, held_labels)) == len(held)
    assert Calibration.from_dict(calibration.to_dict()) == calibration


def test_features_reward_agreement_and_margin():
    agree = confidence_features([10.0, 9.0, 8.0], ["Paris", "paris", "Lyon"])
    disagree = confidence_features([10.0, 9.0, 8.0], ["Paris", "Lyon", "Nice"])
    names = list(FEATURES)
    assert agree[0, names.index("log_agreement")] > disagree[0, names.index("log_agreement")]
    assert agree[0, names.index("margin")] == pytest.approx(2.0)
    assert disagree[0, names.index("margin")] == pytest.approx(1.0)


def test_auroc_equals_the_pairwise_definition_with_ties():
    rng = np.random.default_rng(3)
    scores = rng.integers(0, 5, size=60).astype(float)
    labels = rng.random(60) < 0.4
    pairs = [(1.0 if p > n else 0.5 if p == n else 0.0) for p, n in itertools.product(scores[labels], scores[~labels])]
    assert auroc(scores, labels) == pytest.approx(np.mean(pairs))


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"features": list(FEATURES), "weights": [1.0], "bias": 0.0, "mean": [0.0] * 4, "scale": [1.0] * 4},
        {"features": ["score"], "weights": [1.0], "bias": 0.0, "mean": [0.0], "scale": [1.0]},
        {
            "features": list(FEATURES),
            "weights": [1.0] * 4,
            "bias": float("nan"),
            "mean": [0.0] * 4,
            "scale": [1.0] * 4,
        },
        {"features": list(FEATURES), "weights": [1.0] * 4, "bias": 0.0, "mean": [0.0] * 4, "scale": [0.0] * 4},
    ],
)
def test_malformed_calibrations_are_refused(bad):
    with pytest.raises(InvalidParameterError):
        Calibration.from_dict(bad)


def test_fit_needs_right_and_wrong_answers():
    with pytest.raises(InvalidParameterError):
        fit_calibration(np.zeros((5, len(FEATURES))), np.ones(5, dtype=bool))


def test_model_calibration_gives_confidences_independent_of_top_k(tiny_model, index, tmp_path):
    features, labels = _synthetic()
    calibration = fit_calibration(features, labels)
    model = dataclasses.replace(tiny_model.config, calibration=calibration.to_dict())
    tiny_model.config = model
    try:
        tiny_model.save(tmp_path / "calibrated")
    finally:
        tiny_model.config = dataclasses.replace(model, calibration=None)
    from dphr_haystack import PhraseModel

    loaded = PhraseModel.load(tmp_path / "calibrated")
    assert Calibration.from_dict(loaded.config.calibration) == calibration
    searcher = PhraseSearcher(index, loaded, tidy_answers=False)  # 30 answers: more than the tiny index has, folded
    one = searcher.search("capital of france", unit="phrase", top_k=1)[0]
    five = searcher.search("capital of france", unit="phrase", top_k=5)
    assert one.confidence is not None and 0.0 <= one.confidence <= 1.0
    assert five[0].confidence == pytest.approx(one.confidence)
    assert all(h.confidence is not None for h in five)
    many = searcher.search("capital of france", unit="phrase", top_k=3 * CONFIDENCE_DEPTH)
    assert len(many) == 3 * CONFIDENCE_DEPTH and all(h.confidence is not None for h in many)
    assert [h.text for h in many] == [
        h.text
        for h in PhraseSearcher(index, loaded, calibration=None, tidy_answers=False).search(
            "capital of france", unit="phrase", top_k=3 * CONFIDENCE_DEPTH
        )
    ]
    assert searcher.search("capital of france", unit="passage", top_k=2)[0].best_phrase.confidence is not None
    assert PhraseSearcher(index, loaded, calibration=None).search("capital of france", top_k=1)[0].confidence is None
    with pytest.raises(InvalidParameterError):
        PhraseSearcher(index, loaded, calibration="best")
