"""Every retrieval unit answers with phrases that do not copy the question, scored by the calibrated confidence."""

from __future__ import annotations

import dataclasses
import math

import pytest

from dphr_haystack import PhraseIndex, PhraseSearcher
from dphr_haystack.answers import normalize_answer
from dphr_haystack.confidence import copies_question, question_words
from dphr_haystack.documents.results import best_phrase, retrieved
from dphr_haystack.encode.add import add_passages
from dphr_haystack.model.calibration import Answerability, Calibration, Verification
from dphr_haystack.search import RANKING_POOL
from tests.conftest import tiny_passages

pytestmark = pytest.mark.unit

# A question whose words the untrained tiny model's top phrases copy ("of"), with real words in it.
QUESTION = "What is the capital of France?"
# A calibration that uses every feature (values chosen so confidences spread over (0, 1)).
CALIBRATION = Calibration((0.8, 1.2, 0.6, 0.9), -0.3, (0.0, -2.0, -1.0, 0.5), (5.0, 1.0, 1.0, 1.0))


def calibrated(model):
    """``model`` (a per-test copy) carrying :data:`CALIBRATION` in its config."""
    model.config = dataclasses.replace(model.config, calibration=CALIBRATION.to_dict())
    return model


# top_k large enough that every unit's search sees every token of the tiny index: one candidate pool for all
EVERY = {"phrase": 1000, "passage": 20, "document": 20}


def save_calibrated(model, path):
    """A model directory of ``model`` with :data:`CALIBRATION` stored (what the Haystack retrievers load)."""
    calibrated(model).save(path)
    return path


def holds_answer(probability: float) -> Answerability:
    """A holds-answer that gives every query ``probability``."""
    bias = math.log(probability / (1 - probability))
    return Answerability((0.0,), bias, (0.0,), (1.0,), ("log_passages",))


def save_holding(model, path, probability: float, threshold: float | None = None):
    """A model directory of ``model`` with :data:`CALIBRATION` and a :func:`holds_answer` of ``probability`` (and
    its ``no_answer_threshold``, the one a search that passes none takes)."""
    stored = dataclasses.replace(CALIBRATION, holds_answer=holds_answer(probability), no_answer_threshold=threshold)
    model.config = dataclasses.replace(model.config, calibration=stored.to_dict())
    model.save(path)
    return path


def verification(reader) -> Verification:
    """A verification by the reader directory ``reader`` (values chosen so that the reader's view matters)."""
    return Verification(
        str(reader), (0.6, 0.9, 0.4, 0.3, -0.5), -0.2, (0.0, 0.0, -3.0, -1.0, -2.0), (1.5, 2.0, 1.0, 1.0, 2.0)
    )


def save_verified(model, path, reader):
    """A model directory of ``model`` with :data:`CALIBRATION` and a :func:`verification` by ``reader`` stored."""
    stored = dataclasses.replace(CALIBRATION, verification=verification(reader))
    model.config = dataclasses.replace(model.config, calibration=stored.to_dict())
    model.save(path)
    return path


# A model's documented thresholds on the other side of holds-answers 0.3 and 0.7 from the default one (0.4): a
# search that passes no threshold places "no answer" by the model's.
DOCUMENTED = [(0.3, 0.2), (0.7, 0.8)]


def assert_holding_no_answer(answers, holds: float, is_no_answer, threshold: float | None = None) -> None:
    """``answers`` (Haystack answers of a model whose every query holds an answer with probability ``holds``) give
    one "no answer", scored 1 − ``holds`` and placed by it against ``threshold`` (None: the default one), and every
    other answer carries ``holds``."""
    from dphr_haystack.search_options import NO_ANSWER_THRESHOLD

    assert [is_no_answer(a) for a in answers].count(True) == 1
    marker = answers[0] if holds < (NO_ANSWER_THRESHOLD if threshold is None else threshold) else answers[-1]
    top = next(a for a in answers if not is_no_answer(a))
    assert marker.meta == {
        "no_answer": True,
        "top_confidence": top.meta["confidence"],
        "holds_answer": pytest.approx(holds),
    }
    assert marker.score == pytest.approx(1.0 - holds, abs=1e-12)
    assert all(a.meta["holds_answer"] == pytest.approx(holds) for a in answers if not is_no_answer(a))


def real_copies(texts, question: str) -> list[str]:
    """The texts that copy ``question`` and have words of their own (not an article or punctuation only)."""
    words = question_words(question)
    return [t for t in texts if normalize_answer(t).split() and copies_question(t, words)]


@pytest.fixture
def index(tiny_model):
    idx = PhraseIndex.create(tiny_model)
    add_passages(idx, tiny_model, tiny_passages(), progress=False)
    return idx


def _key(phrase):
    return (phrase.passage_id, phrase.start, phrase.end)


def answers_of(hits):
    """The answers the Haystack layers build from ``hits`` (:func:`dphr_haystack.documents.results.retrieved`)."""
    stored = {p["id"]: p for p in tiny_passages()}
    return retrieved([(h, stored[best_phrase(h).passage_id]) for h in hits], lambda doc: {}, True)[1]


@pytest.mark.parametrize("unit", ["phrase", "passage", "document"])
def test_no_answer_of_any_unit_copies_the_question(tiny_model, index, unit):
    plain = PhraseSearcher(index, tiny_model, skip_question_copies=False, calibration=None)
    before = [a.phrase.text for a in answers_of(plain.search(QUESTION, unit=unit, top_k=6))]
    assert real_copies(before, QUESTION), "the question must contain a top phrase for this test to mean anything"
    answers = answers_of(PhraseSearcher(index, tiny_model, calibration=None).search(QUESTION, unit=unit, top_k=6))
    words = question_words(QUESTION)
    assert answers and all(not copies_question(a.phrase.text, words) for a in answers)


@pytest.mark.parametrize("unit", ["passage", "document"])
@pytest.mark.parametrize("scoring", ["max", "logsumexp"])
def test_passage_and_document_ranking_and_scores_do_not_change(tiny_model, index, unit, scoring):
    q_start, q_end = tiny_model.encode_queries([QUESTION])
    plain = PhraseSearcher(index, tiny_model, skip_question_copies=False, calibration=None, passage_scoring=scoring)
    skipping = PhraseSearcher(index, calibrated(tiny_model), passage_scoring=scoring, ranking="score")
    before = plain.search_vectors(q_start, q_end, unit=unit, top_k=6, questions=[QUESTION])[0]
    after = skipping.search_vectors(q_start, q_end, unit=unit, top_k=6, questions=[QUESTION])[0]
    ids = "passage_id" if unit == "passage" else "document_id"
    assert [(getattr(h, ids), h.score) for h in after] == [(getattr(h, ids), h.score) for h in before]


@pytest.mark.parametrize("unit", ["phrase", "passage", "document"])
def test_confidence_ranking_reorders_the_score_ranking_by_answer_confidence(tiny_model, index, unit):
    q_start, q_end = tiny_model.encode_queries([QUESTION])
    model = calibrated(tiny_model)

    def ranked(top_k: int, **options) -> list:
        searcher = PhraseSearcher(index, model, **options)
        return searcher.search_vectors(q_start, q_end, unit=unit, top_k=top_k, questions=[QUESTION])[0]

    pool = CALIBRATION.depth if unit == "phrase" else RANKING_POOL[unit]
    by_score = ranked(pool, ranking="score")
    expected = sorted(by_score, key=lambda h: -best_phrase(h).confidence)  # stable: ties keep the score order
    assert [_key(best_phrase(h)) for h in expected] != [_key(best_phrase(h)) for h in by_score]  # it reorders
    for top_k in (3, pool):
        by_confidence = ranked(top_k)
        confidences = [best_phrase(h).confidence for h in by_confidence]
        assert confidences == sorted(confidences, reverse=True)
        assert [_key(best_phrase(h)) for h in by_confidence] == [_key(best_phrase(h)) for h in expected[:top_k]]
        raw = {_key(best_phrase(h)): h.score for h in by_score}  # scores stay the phrase-derived ones
        assert [h.score for h in by_confidence] == [raw[_key(best_phrase(h))] for h in by_confidence]


def test_confidence_ranking_without_a_calibration_is_the_score_ranking(tiny_model, index):
    q_start, q_end = tiny_model.encode_queries([QUESTION])
    default = PhraseSearcher(index, tiny_model, calibration=None)
    by_score = PhraseSearcher(index, tiny_model, calibration=None, ranking="score")
    for unit in ("phrase", "passage"):
        assert default.search_vectors(q_start, q_end, unit=unit, top_k=4) == by_score.search_vectors(
            q_start, q_end, unit=unit, top_k=4
        )


@pytest.mark.parametrize("unit", ["passage", "document"])
def test_answer_confidence_equals_the_phrase_units(tiny_model, index, unit):
    """Over one candidate pool (the whole tiny index), a passage's or document's answer has the confidence the
    same phrase has as a phrase answer."""
    searcher = PhraseSearcher(index, calibrated(tiny_model))
    q_start, q_end = tiny_model.encode_queries([QUESTION])
    every = len(index)
    phrases = searcher.search_vectors(
        q_start, q_end, unit="phrase", top_k=10 * every, candidates=every, questions=[QUESTION]
    )[0]
    confidence = {_key(h): h.confidence for h in phrases}
    hits = searcher.search_vectors(q_start, q_end, unit=unit, top_k=6, candidates=every, questions=[QUESTION])[0]
    assert len(hits) >= 3
    for hit in hits:
        phrase = best_phrase(hit)
        assert phrase.confidence is not None and 0.0 <= phrase.confidence <= 1.0
        assert phrase.confidence == pytest.approx(confidence[_key(phrase)], abs=1e-12)


@pytest.mark.parametrize("unit", ["phrase", "passage", "document"])
@pytest.mark.parametrize("scale", [True, False])
def test_retrieved_answer_scores_are_the_calibrated_confidences(tiny_model, index, unit, scale):
    searcher = PhraseSearcher(index, calibrated(tiny_model))
    hits = searcher.search(QUESTION, unit=unit, top_k=6)
    stored = {p["id"]: p for p in tiny_passages()}
    pairs = [(h, stored[best_phrase(h).passage_id]) for h in hits]
    _, answers = retrieved(pairs, lambda doc: {}, scale)
    assert answers
    words = question_words(QUESTION)
    for answer in answers:
        assert not copies_question(answer.phrase.text, words)
        assert 0.0 <= answer.score <= 1.0 and answer.score == answer.phrase.confidence
        assert answer.meta["confidence"] == answer.score


def test_without_a_calibration_answers_keep_the_scaled_score(tiny_model, index):
    hits = PhraseSearcher(index, tiny_model).search(QUESTION, unit="passage", top_k=6)
    stored = {p["id"]: p for p in tiny_passages()}
    _, answers = retrieved([(h, stored[h.passage_id]) for h in hits], lambda doc: {}, True)
    assert answers and all(a.phrase.confidence is None and "confidence" not in a.meta for a in answers)
    assert all(0.0 < a.score < 1.0 for a in answers)
