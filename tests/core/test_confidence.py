"""Phrase answers that copy the question are skipped; calibrated confidences, AUROC and reliability."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re

import numpy as np
import pytest

from dphr_haystack import InvalidParameterError, PhraseIndex, PhraseSearcher
from dphr_haystack.answers import normalize_answer
from dphr_haystack.confidence import (
    CONFIDENCE_DEPTH,
    FEATURES,
    KNOWN_FEATURES,
    AnswerRanker,
    answer_confidences,
    answer_features,
    auroc,
    confidence_features,
    copies_question,
    expected_calibration_error,
    fit_calibration,
    fit_ranker,
    fits_kind,
    normalized_words,
    question_kind,
    question_words,
    reliability,
)
from dphr_haystack.encode.add import add_passages
from dphr_haystack.index.passages import PassageTable
from dphr_haystack.model.calibration import Z_LIMIT, Calibration
from dphr_haystack.spans import AnswerFolder, trim_span
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
        PhraseSearcher(index, tiny_model).search_vectors(q_start, q_end, questions=["a", "b"], unit="phrase")


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


def test_a_calibrated_confidences_ece_is_what_sampling_adds_and_shrinks_with_more_questions():
    from dphr_haystack.fitting import calibrated_ece

    rng = np.random.default_rng(2)
    small, large = rng.random(600), rng.random(6000)
    floor_small, floor_large = calibrated_ece(small), calibrated_ece(large)
    assert 0.02 < floor_small < 0.06 and floor_large < floor_small / 2  # ~1/sqrt(n)
    drawn = rng.random(600) < small  # labels that follow the confidences: at the floor, not above it
    assert expected_calibration_error(small, drawn) < 2 * floor_small
    assert expected_calibration_error(small, ~drawn) > 5 * floor_small  # labels against them: far above it
    assert calibrated_ece(np.zeros(50)) == 0.0 and calibrated_ece(np.ones(50)) == 0.0


def test_a_weighted_ece_is_the_ece_of_each_question_repeated_as_often_as_it_weighs():
    rng = np.random.default_rng(3)
    confidence = rng.random(300)
    right = rng.random(300) < confidence**2  # too sure: a clear ECE
    weights = rng.integers(0, 4, 300).astype(float)
    repeated = np.repeat(np.arange(300), weights.astype(int))
    weighted = expected_calibration_error(confidence, right, weights=weights)
    assert weighted == pytest.approx(expected_calibration_error(confidence[repeated], right[repeated]))
    assert weighted != pytest.approx(expected_calibration_error(confidence, right))  # the weights count
    table = reliability(confidence, right, weights=weights)
    assert sum(row["weight"] for row in table) == pytest.approx(weights.sum())
    assert sum(row["count"] for row in table) == int((weights > 0).sum())  # a question weighing 0 is left out
    assert "weight" not in reliability(confidence, right)[0]
    for bad in (np.ones(299), np.full(300, -1.0), np.full(300, np.nan)):
        with pytest.raises(InvalidParameterError, match="weights"):
            expected_calibration_error(confidence, right, weights=bad)


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
        {"features": ["raw_score"], "weights": [1.0], "bias": 0.0, "mean": [0.0], "scale": [1.0]},
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
    # 30 answers: more than the tiny index has, folded; ranked by score, the order the confidences are computed in
    searcher = PhraseSearcher(index, loaded, tidy_answers=False, ranking="score")
    one = searcher.search("capital of france", unit="phrase", top_k=1)[0]
    five = searcher.search("capital of france", unit="phrase", top_k=5)
    assert one.confidence is not None and 0.0 <= one.confidence <= 1.0
    assert five[0].confidence == pytest.approx(one.confidence)
    assert all(h.confidence is not None for h in five)
    many = searcher.search("capital of france", unit="phrase", top_k=3 * CONFIDENCE_DEPTH)
    assert len(many) == 3 * CONFIDENCE_DEPTH and all(h.confidence is not None for h in many)
    assert [h.text for h in many] == [
        h.text
        for h in PhraseSearcher(index, loaded, calibration=None, tidy_answers=False, ranking="score").search(
            "capital of france", unit="phrase", top_k=3 * CONFIDENCE_DEPTH
        )
    ]
    assert searcher.search("capital of france", unit="passage", top_k=2)[0].best_phrase.confidence is not None
    assert (
        PhraseSearcher(index, loaded, calibration=None)
        .search("capital of france", top_k=1, unit="phrase")[0]
        .confidence
        is None
    )
    with pytest.raises(InvalidParameterError):
        PhraseSearcher(index, loaded, calibration="best")


# ----------------------------------------------------------------------------- answer features
@dataclasses.dataclass(frozen=True)
class Candidate:
    """A ranked candidate as the answer features read it: ``text == passages[passage_row]["text"][start:end]``."""

    score: float
    text: str
    passage_row: int
    start: int
    end: int


PASSAGES = [
    {"title": "Eiffel Tower", "text": "The tower was designed by Gustave Eiffel. It stands in Lyon."},
    {"title": "Paris", "text": "Paris is a city. Eiffel lived there."},
    {"title": "Lyon", "text": "Lyon has an old tower."},
]


def _candidate(score: float, row: int, text: str, occurrence: int = 0) -> Candidate:
    passage = PASSAGES[row]["text"]
    start = -1
    for _ in range(occurrence + 1):
        start = passage.index(text, start + 1)
    return Candidate(score, text, row, start, start + len(text))


CANDIDATES = [
    _candidate(12.0, 0, "Gustave Eiffel"),
    _candidate(11.0, 1, "Eiffel"),
    _candidate(9.0, 0, "Eiffel"),
    _candidate(8.0, 2, "Lyon"),
]
ASKED = question_words("Who designed the tower in Paris?")  # content words: designed, tower, paris


def test_answer_features_on_a_hand_made_candidate_list():
    table = answer_features(KNOWN_FEATURES, CANDIDATES, asked=ASKED, passages=PASSAGES)
    column = {name: table[:, j] for j, name in enumerate(KNOWN_FEATURES)}
    # "The tower was designed by [Gustave Eiffel]. It stands in Lyon.": tower and designed near it, paris not
    assert column["window_support"][0] == pytest.approx(2 / 3)
    # "Paris is a city. [Eiffel] lived there." holds paris (its title and text) only
    assert column["window_support"][1] == pytest.approx(1 / 3)
    # passage supports: row 0 2/3 (tower, designed), row 1 1/3 (paris), row 2 1/3 (tower)
    assert column["support_gap"] == pytest.approx([2 / 3 - 1 / 3, 1 / 3 - 2 / 3, 2 / 3 - 1 / 3, 1 / 3 - 2 / 3])
    assert column["answer_words"].tolist() == [2, 1, 1, 1]
    # "Eiffel" is given by rows 1 and 0; "Gustave Eiffel" and "Lyon" by one passage each
    assert column["agreeing_passages"].tolist() == [1, 2, 2, 1]
    assert column["score_spread"] == pytest.approx([np.std([12.0, 11.0, 9.0, 8.0])] * 4)
    # the score features are confidence_features', column for column
    scored = confidence_features([c.score for c in CANDIDATES], [c.text for c in CANDIDATES])
    assert table[:, : len(FEATURES)] == pytest.approx(scored)
    # rows: the same values, in the order asked
    assert answer_features(KNOWN_FEATURES, CANDIDATES, [2, 0], ASKED, PASSAGES) == pytest.approx(table[[2, 0]])


def test_sentence_distance_kind_and_overlap_features_by_hand():
    names = ("sentence_support", "support_distance", "type_match", "question_overlap", "best_score")
    table = answer_features(names, CANDIDATES, asked=ASKED, passages=PASSAGES)
    column = {name: table[:, j] for j, name in enumerate(names)}
    # sentences: "The tower was designed by [Gustave Eiffel].", "[Eiffel] lived there.", "The tower was designed by
    # Gustave [Eiffel].", "[Lyon] has an old tower."
    assert column["sentence_support"] == pytest.approx([2 / 3, 0.0, 2 / 3, 1 / 3])
    # nearest question word: designed (1 word away), paris (2: "city", "is"), designed (2), tower (2: "has", "old")
    assert column["support_distance"] == pytest.approx(np.log1p([1, 2, 2, 2]))
    assert column["type_match"].tolist() == [1, 1, 1, 1]  # "who": names, all capitalised
    assert column["question_overlap"].tolist() == [0, 0, 0, 0]
    assert column["best_score"].tolist() == [12.0] * 4
    # a phrase with no question word in its passage is MAX_DISTANCE words away; a phrase of the question's words
    alone = [_candidate(3.0, 1, "city")]
    far = answer_features(names, alone, asked=question_words("When was the tower designed?"), passages=PASSAGES)
    assert far[0].tolist() == pytest.approx([0.0, np.log1p(100), 0.0, 0.0, 3.0])
    tower = answer_features(["question_overlap"], [_candidate(1.0, 2, "old tower")], asked=ASKED, passages=PASSAGES)
    assert tower[0, 0] == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("How many people live in Paris?", "number"),
        ("When was the tower built?", "number"),
        ("In what year did it open?", "number"),
        ("Who designed the tower?", "name"),
        ("Where does Eiffel live?", "name"),
        ("What is the tower made of?", None),
        ("Which architect won?", None),
    ],
)
def test_question_kinds(question, kind):
    assert question_kind(question) == kind
    assert question_kind(" ".join(question_words(question))) == kind  # as answer_features sees the question


def test_answer_kinds():
    assert fits_kind("number", "1889") and fits_kind("number", "three hundred") and fits_kind("number", "May 1")
    assert not fits_kind("number", "Gustave Eiffel")
    assert fits_kind("name", "Gustave Eiffel") and not fits_kind("name", "iron")


def test_a_candidate_below_the_reference_list_counts_its_own_passage():
    far = _candidate(1.0, 2, "tower")  # "Lyon has an old tower.": tower; position CONFIDENCE_DEPTH
    ranked = [_candidate(20.0 - i, 1, "Paris") for i in range(CONFIDENCE_DEPTH)] + [far]
    table = answer_features(["agreeing_passages", "support_gap"], ranked, [0, CONFIDENCE_DEPTH], ASKED, PASSAGES)
    assert table[:, 0].tolist() == [1, 1]
    assert table[1, 1] == pytest.approx(1 / 3 - 1 / 3)


def test_question_features_are_nan_without_the_question_and_count_at_their_mean():
    table = answer_features(KNOWN_FEATURES, CANDIDATES, [0, 1], None, PASSAGES)
    names = list(KNOWN_FEATURES)
    question_columns = [
        names.index(n)
        for n in ("window_support", "support_gap", "sentence_support", "support_distance", "type_match")
        + ("question_overlap",)
    ]
    assert np.isnan(table[:, question_columns]).all()
    assert not np.isnan(np.delete(table, question_columns, axis=1)).any()
    # a question of stopwords only has no content words to count
    assert np.isnan(
        answer_features(["window_support"], CANDIDATES, [0], question_words("Who was it?"), PASSAGES)
    ).all()
    calibration = Calibration(
        weights=tuple(range(1, len(names) + 1)), bias=0.5, mean=(0.3,) * len(names), scale=(2.0,) * len(names),
        features=KNOWN_FEATURES,
    )  # fmt: skip
    filled = table.copy()
    filled[:, question_columns] = 0.3
    assert calibration.confidence(table) == pytest.approx(calibration.confidence(filled))
    with pytest.raises(InvalidParameterError, match="passages"):
        answer_features(["window_support"], CANDIDATES, [0], ASKED)
    with pytest.raises(InvalidParameterError, match="unknown"):
        answer_features(["score", "length_of_moon"], CANDIDATES, [0], ASKED, PASSAGES)


# The calibration the shipped model stored before it was refitted over the answer features (four features).
FOUR_FEATURE_CALIBRATION = {
    "bias": -1.1162738264036476,
    "features": ["score", "log_softmax", "log_agreement", "margin"],
    "mean": [848.64505670616, -0.7732504986702657, -0.7029124515313522, 1.2076826993368974],
    "scale": [48.802759483655805, 0.45688032859108646, 0.4460213120141829, 1.3476709957866326],
    "weights": [0.48147249963749933, 0.2071060206926935, 0.6338009006297307, 0.04081826264013251],
}


def test_a_four_feature_calibration_computes_what_it_always_did():
    """A calibration stored over the first four features (as every model fitted before the answer features) loads
    and gives the confidences of its own formula, σ(w · (confidence_features − mean) / scale + b), the standardised
    features within ±Z_LIMIT, whatever the question and passages."""
    stored = json.loads(json.dumps(FOUR_FEATURE_CALIBRATION))
    assert stored["features"] == list(FEATURES)
    calibration = Calibration.from_dict(stored)
    assert calibration.features == FEATURES
    scores, texts = [c.score for c in CANDIDATES], [c.text for c in CANDIDATES]
    x = (confidence_features(scores, texts, [0, 3]) - np.array(stored["mean"])) / np.array(stored["scale"])
    x = np.clip(x, -Z_LIMIT, Z_LIMIT)
    expected = 1 / (1 + np.exp(-(x @ np.array(stored["weights"]) + stored["bias"])))
    for asked in (ASKED, None):
        got = answer_confidences(calibration, CANDIDATES, [0, 3], asked, PASSAGES)
        assert got == pytest.approx(expected, rel=1e-12, abs=0)
    assert answer_confidences(calibration, CANDIDATES, [0, 3]) == pytest.approx(expected, rel=1e-12, abs=0)
    # the same fit as before: today's features fitted as they were, stored under their names
    features, labels = _synthetic()
    assert fit_calibration(features, labels).features == FEATURES


def test_calibrations_over_the_answer_features_are_stored_and_checked():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, len(KNOWN_FEATURES)))
    y = rng.random(300) < 1 / (1 + np.exp(-2 * x[:, KNOWN_FEATURES.index("window_support")]))
    x[::7, KNOWN_FEATURES.index("support_gap")] = np.nan  # questions without the question's words
    calibration = fit_calibration(x, y, names=KNOWN_FEATURES)
    assert calibration.features == KNOWN_FEATURES
    assert all(np.isfinite(calibration.mean)) and np.isfinite(calibration.confidence(x)).all()
    assert Calibration.from_dict(calibration.to_dict()) == calibration
    subset = fit_calibration(x[:, [0, 5]], y, names=("score", "window_support"))
    assert Calibration.from_dict(subset.to_dict()).features == ("score", "window_support")
    good = subset.to_dict()
    for bad in (
        {**good, "features": ["score", "score"]},
        {**good, "features": ["score", "moon_phase"]},
        {**good, "features": ["score"]},
        {**good, "features": []},
    ):
        with pytest.raises(InvalidParameterError):
            Calibration.from_dict(bad)
    with pytest.raises(InvalidParameterError):
        fit_calibration(x, y, names=FEATURES)  # nine columns for four names


def test_searcher_confidences_use_the_calibrations_features(tiny_model, index):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, len(KNOWN_FEATURES)))
    calibration = fit_calibration(x, x[:, KNOWN_FEATURES.index("window_support")] > 0, names=KNOWN_FEATURES)
    question = "What is the capital of France?"
    searcher = PhraseSearcher(index, tiny_model, calibration=calibration, tidy_answers=False, ranking="score")
    # raw spans, top_k past the reference list, by score: the answers are the ranked candidates themselves
    hits = searcher.search(question, unit="phrase", top_k=2 * CONFIDENCE_DEPTH)
    assert len(hits) > CONFIDENCE_DEPTH
    expected = answer_confidences(calibration, hits, range(len(hits)), question_words(question), index.passages)
    assert [h.confidence for h in hits] == pytest.approx(expected.tolist())
    # without copies skipped the question's words still count; with no question text they count at their mean
    plain = PhraseSearcher(
        index, tiny_model, calibration=calibration, tidy_answers=False, skip_question_copies=False, ranking="score"
    )
    q_start, q_end = tiny_model.encode_queries([question])
    kept = plain.search_vectors(q_start, q_end, "phrase", 2 * CONFIDENCE_DEPTH, questions=[question])[0]
    blind = plain.search_vectors(q_start, q_end, "phrase", 2 * CONFIDENCE_DEPTH)[0]
    assert [h.text for h in kept] == [h.text for h in blind]
    rows = range(len(kept))
    asked = question_words(question)
    assert [h.confidence for h in kept] == pytest.approx(
        answer_confidences(calibration, kept, rows, asked, index.passages).tolist()
    )
    assert [h.confidence for h in blind] == pytest.approx(
        answer_confidences(calibration, blind, rows, None, index.passages).tolist()
    )
    passage = searcher.search(question, unit="passage", top_k=2)[0].best_phrase
    assert passage.confidence is not None and 0.0 <= passage.confidence <= 1.0


@pytest.mark.parametrize(
    "text",
    [
        "The Eiffel Tower's height, an (estimated) 330 m.",
        "A theatre—the 'Globe'!",
        "U.S. anthem\tthe\nend",
        "",
        "éÉ the",
    ],
)
def test_normalized_words_are_the_squad_normalised_words(text):
    assert normalized_words(text) == normalize_answer(text).split()


# ----------------------------------------------------------------------------- answer ranker
def _ranking_problem(queries: int = 300, k: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Candidates whose right answer is the one with the largest feature 1 (plus noise); feature 0 is noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(queries * k, 2))
    query = np.repeat(np.arange(queries), k)
    correct = np.zeros(queries * k, dtype=bool)
    for q in range(queries):
        at = np.flatnonzero(query == q)
        correct[at[np.argmax(x[at, 1] + 0.3 * rng.normal(size=k))]] = True
    return x, correct, query


def _top_right(scores: np.ndarray, correct: np.ndarray, query: np.ndarray) -> float:
    return float(
        np.mean([correct[at[np.argmax(scores[at])]] for at in (np.flatnonzero(query == q) for q in set(query))])
    )


def test_fitted_ranker_puts_the_right_answer_first():
    x, correct, query = _ranking_problem()
    ranker = fit_ranker(x, correct, query, names=("score", "window_support"))
    assert ranker.features == ("score", "window_support")
    assert ranker.weights[1] > 1.0 and abs(ranker.weights[0]) < 0.2 * ranker.weights[1]
    x_new, correct_new, query_new = _ranking_problem(seed=1)
    best = _top_right(x_new[:, 1], correct_new, query_new)  # the rule that made the answers (without its noise)
    assert best > 0.7 and _top_right(ranker.scores(x_new), correct_new, query_new) == pytest.approx(best, abs=0.01)
    assert _top_right(x_new[:, 0], correct_new, query_new) < 0.35  # by "score": chance is 1/6
    x_new[::5, 0] = np.nan  # a missing feature counts at its mean
    assert np.isfinite(ranker.scores(x_new)).all()
    assert AnswerRanker.from_dict(ranker.to_dict()) == ranker


def test_ranker_needs_queries_with_right_and_wrong_answers():
    x, correct, query = _ranking_problem(queries=4)
    with pytest.raises(InvalidParameterError, match="right and a wrong"):
        fit_ranker(x, np.zeros_like(correct), query, names=("score", "margin"))
    with pytest.raises(InvalidParameterError):
        fit_ranker(x, correct, query, names=("score",))  # two columns for one name


def _ranked_calibration() -> Calibration:
    ranker = AnswerRanker((1.5, -0.5), (0.3, 1.0), (0.2, 1.0), ("window_support", "answer_words"))
    return Calibration(
        (1.0, 0.5, 0.2), -0.4, (0.0, -1.0, 10.0), (1.0, 1.0, 2.0), ("rank_score", "rank_log_softmax", "best_score"),
        ranker,
    )  # fmt: skip


def test_rank_features_are_the_rankers_scores_and_their_log_softmax():
    calibration = _ranked_calibration()
    ranker = calibration.ranker
    rank = ranker.scores(answer_features(ranker.features, CANDIDATES, asked=ASKED, passages=PASSAGES))
    table = answer_features(calibration.features, CANDIDATES, None, ASKED, PASSAGES, ranker)
    assert table[:, 0] == pytest.approx(rank)
    assert table[:, 1] == pytest.approx(rank - np.logaddexp.reduce(rank))
    assert table[:, 2].tolist() == [12.0] * 4
    # the rows asked for, in their order; the softmax always over the reference list
    assert answer_features(calibration.features, CANDIDATES, [3, 1], ASKED, PASSAGES, ranker) == pytest.approx(
        table[[3, 1]]
    )
    # confidences rise with the rank score within a query: they order answers as the ranker does
    confidence = answer_confidences(calibration, CANDIDATES, range(4), ASKED, PASSAGES)
    assert np.argsort(-confidence).tolist() == np.argsort(-rank, kind="stable").tolist()
    below = [
        *(_candidate(20.0 - i, 1, "Paris") for i in range(CONFIDENCE_DEPTH)),
        _candidate(1.0, 0, "Gustave Eiffel"),
    ]
    row = answer_features(calibration.features, below, [CONFIDENCE_DEPTH], ASKED, PASSAGES, ranker)[0]
    own = ranker.scores(answer_features(ranker.features, below, asked=ASKED, passages=PASSAGES))
    assert row[1] == pytest.approx(own[-1] - np.logaddexp.reduce(own))  # its own score counted in
    with pytest.raises(InvalidParameterError, match="need an answer ranker"):
        answer_features(calibration.features, CANDIDATES, None, ASKED, PASSAGES)


def test_ranked_calibrations_are_stored_and_checked():
    calibration = _ranked_calibration()
    stored = json.loads(json.dumps(calibration.to_dict()))
    assert stored["ranker"]["features"] == ["window_support", "answer_words"]
    assert Calibration.from_dict(stored) == calibration
    for bad in (
        {k: v for k, v in stored.items() if k != "ranker"},  # rank features without a ranker
        {**stored, "ranker": {**stored["ranker"], "weights": [1.0]}},
        {**stored, "ranker": {**stored["ranker"], "features": ["window_support", "rank_score"]}},
        {**stored, "ranker": {**stored["ranker"], "scale": [0.0, 1.0]}},
        {**stored, "ranker": "best"},
    ):
        with pytest.raises(InvalidParameterError):
            Calibration.from_dict(bad)


def test_searcher_ranks_answers_by_a_ranked_calibration(tiny_model, index):
    calibration = _ranked_calibration()
    question = "What is the capital of France?"
    asked = question_words(question)
    by_score = PhraseSearcher(index, tiny_model, calibration=calibration, tidy_answers=False, ranking="score")
    hits = by_score.search(question, unit="phrase", top_k=CONFIDENCE_DEPTH)
    expected = answer_confidences(calibration, hits, range(len(hits)), asked, index.passages)
    assert [h.confidence for h in hits] == pytest.approx(expected.tolist())
    by_confidence = PhraseSearcher(index, tiny_model, calibration=calibration, tidy_answers=False)
    ranked = by_confidence.search(question, unit="phrase", top_k=CONFIDENCE_DEPTH)
    assert sorted(h.text for h in ranked) == sorted(h.text for h in hits)
    assert [h.confidence for h in ranked] == sorted((h.confidence for h in hits), reverse=True)


def test_folded_answers_are_the_most_confident_of_what_they_fold_under_the_confidence_ranking(tiny_model, index):
    """Under the confidence ranking, candidates are folded most confident first: an answer is the most confident of
    the candidates it folds (the calibration's top answer is the most confident candidate), not the best by score."""
    calibration = _ranked_calibration()
    depth, top_k = calibration.depth, 3
    raw = PhraseSearcher(index, tiny_model, skip_question_copies=False, calibration=None, tidy_answers=False)
    tidy = PhraseSearcher(index, tiny_model, calibration=calibration)
    questions = ["What is the capital of France?", "Who wrote Hamlet?", "When was the tower built?", "Where is Rome?"]
    q_start, q_end = tiny_model.encode_queries(questions)
    spans = raw.search_vectors(q_start, q_end, "phrase", 4 * depth, candidates=depth, questions=questions)
    answers = tidy.search_vectors(q_start, q_end, "phrase", top_k, candidates=depth, questions=questions)
    moved = 0
    for question, ranked, hits in zip(questions, spans, answers, strict=True):
        asked = question_words(question)
        # the candidates trimmed, copies of the question left out, best score first: at least ``depth`` of them, until
        # they hold ``top_k`` different answers
        kept, by_score, firsts = [], AnswerFolder(), []
        for hit in ranked:
            if len(firsts) == top_k and len(kept) >= depth:
                break
            text = index.passages[hit.passage_row]["text"]
            start, end = trim_span(text, hit.start, hit.end)
            if not copies_question(text[start:end], asked):
                kept.append(dataclasses.replace(hit, text=text[start:end], start=start, end=end))
                if by_score.keep(kept[-1].text, hit.passage_row, start, end):
                    firsts.append((kept[-1].text, hit.passage_row))
        confidence = answer_confidences(calibration, kept, range(len(kept)), asked, index.passages)
        folder, expected = AnswerFolder(), []
        for i in np.argsort(-confidence, kind="stable"):
            if folder.keep(kept[i].text, kept[i].passage_row, kept[i].start, kept[i].end):
                expected.append((kept[i].text, kept[i].passage_row, kept[i].start, float(confidence[i])))
        got = [(h.text, h.passage_row, h.start, h.confidence) for h in hits]
        assert [g[:3] for g in got] == [e[:3] for e in expected[:top_k]]
        assert [g[3] for g in got] == pytest.approx([e[3] for e in expected[:top_k]])
        assert hits[0].confidence == pytest.approx(confidence.max())
        moved += (hits[0].text, hits[0].passage_row) not in firsts
    assert moved, "some top answer must fold into a better-scored one for this test to mean anything"


class _WordIndex:
    """What phrase answers read of an index: one passage, one token per word."""

    def __init__(self, text: str) -> None:
        words = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
        self.tokens = np.zeros(
            len(words), dtype=[("passage", "i8"), ("position", "i8"), ("char_start", "i8"), ("char_end", "i8")]
        )
        self.tokens["position"] = np.arange(len(words))
        self.tokens["char_start"], self.tokens["char_end"] = zip(*words, strict=True)
        self.passages = [{"id": "p", "document_id": "p", "title": "", "text": text}]
        self.table = PassageTable()

    def passage_cache(self, name, derive):
        return self.table.cache(name, derive)


def test_answers_folded_together_by_the_confidence_ranking_are_made_up_from_the_next_candidates():
    """Folding most confident first can merge answers that were apart in score order (a long confident span over
    the shorter ones it holds): the next candidates by score make up the top-k. Before, such a question came back
    short of top_k however many phrases the index gave, and the search asked the index again with twice the
    candidates, up to every vector (seconds a query on SQuAD-open-small)."""
    from dphr_haystack.search import _phrase_answers

    index = _WordIndex("Alpha Beta Gamma Delta Epsilon Zeta")
    long_first = AnswerRanker((0.0, 2.0), (0.3, 1.0), (0.2, 1.0), ("window_support", "answer_words"))
    calibration = dataclasses.replace(_ranked_calibration(), ranker=long_first, depth=4)
    # (score, start row, end row, start score, end score), best first: three words, then the span over them
    phrases = [(10.0, 0, 0, 5, 5), (9.0, 1, 1, 4, 5), (8.0, 2, 2, 4, 4), (7.0, 0, 2, 5, 2)]
    phrases += [(6.0, 3, 3, 3, 3), (5.0, 4, 4, 2, 3), (4.0, 5, 5, 2, 2)]
    hits = _phrase_answers(index, phrases, 3, None, calibration, tidy=True, by_confidence=True)
    assert [h.text for h in hits] == ["Alpha Beta Gamma", "Delta", "Epsilon"]
    assert [h.confidence for h in hits] == sorted((h.confidence for h in hits), reverse=True)
    # the reference list (the first 4 candidates) is what the confidences read, whatever follows it
    alone = _phrase_answers(index, phrases[:5], 3, None, calibration, tidy=True, by_confidence=True)
    assert [h.confidence for h in alone] == pytest.approx([h.confidence for h in hits[:2]])
    assert len(alone) == 2  # the phrases ran out: as many answers as they hold


def test_passages_answer_with_their_most_confident_phrase_under_the_confidence_ranking(tiny_model, index):
    calibration = _ranked_calibration()
    question = "What is the capital of France?"
    q_start, q_end = tiny_model.encode_queries([question])
    by_score = PhraseSearcher(index, tiny_model, calibration=calibration, tidy_answers=False, ranking="score")
    by_confidence = PhraseSearcher(index, tiny_model, calibration=calibration, tidy_answers=False)
    scored = {h.passage_id: h for h in by_score.search_vectors(q_start, q_end, "passage", 20, questions=[question])[0]}
    ranked = by_confidence.search_vectors(q_start, q_end, "passage", 20, questions=[question])[0]
    confidences = [h.best_phrase.confidence for h in ranked]
    assert len(ranked) > 1 and confidences == sorted(confidences, reverse=True)
    for hit in ranked:
        plain = scored[hit.passage_id].best_phrase  # its best phrase by score, among the same answers
        assert hit.best_phrase.passage_row == plain.passage_row
        assert hit.best_phrase.confidence >= plain.confidence
    # some passage answers with a phrase other than its best one by score (the ranker weighs other features)
    assert any(h.best_phrase.text != scored[h.passage_id].best_phrase.text for h in ranked)


def test_a_calibration_stores_its_depth_and_a_stored_one_without_it_was_fitted_on_ten():
    calibration = _ranked_calibration()
    assert calibration.depth == CONFIDENCE_DEPTH == 20
    assert Calibration.from_dict(json.loads(json.dumps(calibration.to_dict()))) == calibration
    shallow = dataclasses.replace(calibration, depth=3)
    assert Calibration.from_dict(shallow.to_dict()).depth == 3
    assert Calibration.from_dict(FOUR_FEATURE_CALIBRATION).depth == 10  # stored before calibrations had a depth
    for bad in (0, -1, 2.5, "20", True):
        with pytest.raises(InvalidParameterError, match="depth"):
            Calibration.from_dict({**calibration.to_dict(), "depth": bad})
    features, labels = _synthetic()
    assert fit_calibration(features, labels, depth=7).depth == 7


def test_the_reference_list_is_the_calibrations_depth():
    """The score and agreement features read the first ``depth`` candidates; answer_confidences uses the
    calibration's."""
    scores, texts = [c.score for c in CANDIDATES], [c.text for c in CANDIDATES]
    two = confidence_features(scores, texts, depth=2)
    s = np.asarray(scores)
    assert two[:, 1] == pytest.approx(s - np.logaddexp.reduce(s[:2]))
    assert not np.allclose(two, confidence_features(scores, texts))  # the default depth holds all four
    calibration = dataclasses.replace(Calibration.from_dict(FOUR_FEATURE_CALIBRATION), depth=2)
    x = np.clip((two - np.array(calibration.mean)) / np.array(calibration.scale), -Z_LIMIT, Z_LIMIT)
    expected = 1 / (1 + np.exp(-(x @ np.array(calibration.weights) + calibration.bias)))
    assert answer_confidences(calibration, CANDIDATES, range(4)) == pytest.approx(expected)


def test_the_confidence_ranking_orders_as_many_phrase_answers_as_the_calibrations_depth(tiny_model, index):
    question = "What is the capital of France?"
    q_start, q_end = tiny_model.encode_queries([question])
    sizes = []
    for depth in (3, 12):
        calibration = dataclasses.replace(_ranked_calibration(), depth=depth)
        by_score = PhraseSearcher(index, tiny_model, calibration=calibration, tidy_answers=False, ranking="score")
        # the first ``depth`` by score, from one search of ``depth`` start and end tokens, as the ranking gathers them
        pool = by_score.search_vectors(q_start, q_end, "phrase", depth, candidates=depth, questions=[question])[0]
        sizes.append(len(pool))
        by_confidence = PhraseSearcher(index, tiny_model, calibration=calibration, tidy_answers=False)
        ranked = by_confidence.search_vectors(q_start, q_end, "phrase", 1, questions=[question])[0]
        best = max(pool, key=lambda h: h.confidence)
        assert (ranked[0].text, ranked[0].confidence) == (best.text, pytest.approx(best.confidence))
    assert 0 < sizes[0] < sizes[1]  # a deeper calibration ranks more answers


def test_a_feature_far_outside_the_fitted_range_counts_at_the_limit():
    """A linear score does not extrapolate: a feature 40 scales above its fitted mean (the score spread of a
    two-passage corpus against the open corpus a model was calibrated on) counts as Z_LIMIT scales."""
    calibration = Calibration(
        weights=(0.3, 1.0), bias=0.0, mean=(3.0, 0.0), scale=(1.5, 1.0), features=("score_spread", "score")
    )
    at_limit = calibration.confidence(np.array([[3.0 + 1.5 * Z_LIMIT, 0.0]]))
    far = calibration.confidence(np.array([[3.0 + 1.5 * 40, 0.0]]))
    assert far == pytest.approx(at_limit, rel=1e-12) and at_limit[0] < 1 / (1 + np.exp(-0.3 * 6))
    low = calibration.confidence(np.array([[3.0 - 1.5 * 40, 0.0]]))
    assert low == pytest.approx(1 / (1 + np.exp(0.3 * Z_LIMIT)), rel=1e-12)
