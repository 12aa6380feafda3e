"""Answerability: the query features, the corpus shift of confidences, its storage, and the searcher using it."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from dphr_haystack import InvalidParameterError, PhraseIndex, PhraseSearcher
from dphr_haystack.confidence import (
    QUERY_FEATURES,
    SUPPORT_FLOOR,
    Answerability,
    fit_answerability,
    name_share,
    normalized_words,
    query_features,
    question_names,
    question_words,
    shifted,
)
from dphr_haystack.corpus_judgement import CorpusJudgement, holds_answer_estimate, judge_corpus, no_answer_score
from dphr_haystack.encode.add import add_passages
from dphr_haystack.model.calibration import Calibration
from dphr_haystack.search import best_phrase
from tests.conftest import tiny_passages
from tests.core.test_confidence import ASKED, CANDIDATES, PASSAGES, _ranked_calibration


def _log(share: float) -> float:
    return math.log(SUPPORT_FLOOR + share)


def _answerability(**weights: float) -> Answerability:
    names = tuple(weights) or ("log_passages",)
    return Answerability(tuple(weights.values()) or (0.0,), -0.5, (0.0,) * len(names), (1.0,) * len(names), names)


@pytest.fixture
def index(tiny_model):
    idx = PhraseIndex.create(tiny_model)
    add_passages(idx, tiny_model, tiny_passages(), progress=False)
    return idx


def test_query_features_by_hand():
    table = dict(zip(QUERY_FEATURES, query_features(QUERY_FEATURES, CANDIDATES, 0, 0.8, ASKED, PASSAGES, 3)))
    assert table["top_logit"] == pytest.approx(math.log(4.0))
    # "The tower was designed by Gustave Eiffel...": tower and designed of designed / tower / paris
    assert table["top_support"] == pytest.approx(_log(2 / 3))
    assert table["best_support"] == pytest.approx(_log(2 / 3))
    assert table["best_title_support"] == pytest.approx(_log(1 / 3))  # "Eiffel Tower" and "Paris" hold one each
    assert table["window_support"] == pytest.approx(_log(2 / 3))
    assert table["log_passages"] == pytest.approx(math.log(4.0))
    assert table["best_score"] == 12.0
    # its one name, "Paris": not in the top answer's passage, in the title of row 1
    assert table["top_name_support"] == pytest.approx(_log(0.0))
    assert table["best_name_support"] == pytest.approx(_log(1.0))
    # another top answer: "Lyon" in row 2 ("Lyon has an old tower."): tower only
    lyon = dict(zip(QUERY_FEATURES, query_features(QUERY_FEATURES, CANDIDATES, 3, 0.5, ASKED, PASSAGES, 3)))
    assert lyon["top_support"] == pytest.approx(_log(1 / 3)) and lyon["top_logit"] == pytest.approx(0.0)
    # without the question the support features are NaN; a title with underscores reads as words
    blind = dict(zip(QUERY_FEATURES, query_features(QUERY_FEATURES, CANDIDATES, 0, 0.8, None, PASSAGES, 3)))
    assert np.isnan(blind["top_support"]) and blind["log_passages"] == pytest.approx(math.log(4.0))
    # plain words know no names: the name features are NaN (counted at their mean)
    unnamed = dict(zip(QUERY_FEATURES, query_features(QUERY_FEATURES, CANDIDATES, 0, 0.8, tuple(ASKED), PASSAGES, 3)))
    assert np.isnan(unnamed["best_name_support"]) and unnamed["top_support"] == table["top_support"]
    # nor does a question without names (written in lower case, its names cannot be told)
    lower = question_words("who designed paris?")
    assert np.isnan(query_features(("top_name_support",), CANDIDATES, 0, 0.8, lower, PASSAGES, 3)[0])
    underscored = [{**p, "title": p["title"].replace(" ", "_")} for p in PASSAGES]
    again = query_features(("best_title_support",), CANDIDATES, 0, 0.8, ASKED, underscored, 3)
    assert again[0] == pytest.approx(_log(1 / 3))
    with pytest.raises(InvalidParameterError, match="answerability over features"):
        query_features(("window_support", "margin"), CANDIDATES, 0, 0.8, ASKED, PASSAGES, 3)


@pytest.mark.parametrize(
    ("question", "names"),
    [
        ("Who was the first mayor of Port Calder?", ("port", "calder")),
        ("When was Ledgerline 3.0 released?", ("ledgerline", "30")),
        ("Which sculptor made the statue of Velmora's founders?", ("velmora",)),
        ("What is the latest release of Ledgerbook, the app made by Corvid Labs?", ("ledgerbook", "corvid", "labs")),
        ("Who composed The Magic Flute in 1791 and 1791?", ("magic", "flute", "1791")),  # articles dropped, once each
        ("Paris: what did I see in 2021?", ("2021",)),  # the first word and "I" are not names
        ("how many seeds does a flower produce?", ()),
    ],
)
def test_question_names(question, names):
    assert question_names(question) == names
    asked = question_words(question)
    assert asked.names == names and asked == tuple(normalized_words(question))  # a tuple of its words, as before


def test_name_share_matches_whole_words_possessives_and_plurals():
    passage = {"title": "Velmora_Museum", "text": "Velmora's 3.0 plan, by the Norman lords of Harrowgate."}
    assert name_share(("velmora", "30", "normans", "museum"), passage) == 1.0
    assert name_share(("velmor", "harrow", "calder", "harrowgate"), passage) == 0.25  # whole words only
    assert name_share((), passage) == 1.0


def _shift(calibration, confidence, searched: int = 3) -> float:
    return judge_corpus(calibration, CANDIDATES, confidence, ASKED, PASSAGES, searched).shift


def test_the_corpus_shift_makes_the_top_confidence_the_answerability_and_keeps_the_order():
    answerability = _answerability(log_passages=0.7, best_support=1.2)
    calibration = dataclasses.replace(_ranked_calibration(), answerability=answerability)
    confidence = {0: 0.9, 1: 0.6, 2: 0.3, 3: 0.05}
    shift = _shift(calibration, confidence)
    features = query_features(answerability.features, CANDIDATES, 0, 0.9, ASKED, PASSAGES, 3)
    expected = float(answerability.probability(features[None, :])[0])
    moved = {i: shifted(c, shift) for i, c in confidence.items()}
    assert moved[0] == pytest.approx(expected)
    assert sorted(moved, key=lambda i: -moved[i]) == [0, 1, 2, 3]
    # a bigger corpus, the same answers: a higher weight on log_passages raises them all
    assert _shift(calibration, confidence, 3000) > shift
    # no answerability, or no answers: nothing moves, nothing is judged
    assert judge_corpus(_ranked_calibration(), CANDIDATES, confidence, ASKED, PASSAGES, 3) == CorpusJudgement()
    assert judge_corpus(calibration, CANDIDATES, {}, ASKED, PASSAGES, 3) == CorpusJudgement()
    assert shifted(0.25, 0.0) == 0.25


def test_holds_answer_is_its_own_probability_of_the_same_features_and_scores_no_answer():
    answerability = _answerability(log_passages=0.7, best_support=1.2)
    holds = _answerability(best_support=2.0, top_logit=-0.3)
    calibration = dataclasses.replace(_ranked_calibration(), answerability=answerability, holds_answer=holds)
    confidence = {0: 0.9, 1: 0.6, 2: 0.3, 3: 0.05}
    judged = judge_corpus(calibration, CANDIDATES, confidence, ASKED, PASSAGES, 3)
    features = query_features(holds.features, CANDIDATES, 0, 0.9, ASKED, PASSAGES, 3)
    assert judged.holds_answer == pytest.approx(float(holds.probability(features[None, :])[0]))
    assert judged.shift == pytest.approx(_shift(dataclasses.replace(calibration, holds_answer=None), confidence))
    # without an answerability the answers stay, the holds-answer is still given
    alone = judge_corpus(
        dataclasses.replace(calibration, answerability=None), CANDIDATES, confidence, ASKED, PASSAGES, 3
    )
    assert alone == CorpusJudgement(0.0, judged.holds_answer)
    # "no answer" is scored by the holds-answer when there is one, else by the top answer's confidence
    assert no_answer_score(0.3, 0.8) == pytest.approx(0.2) and holds_answer_estimate(0.3, 0.8) == 0.8
    assert no_answer_score(0.3) == pytest.approx(0.7) and holds_answer_estimate(0.3, None) == 0.3
    assert no_answer_score(None) == 1.0 and holds_answer_estimate(None, None) is None


def test_answerability_is_stored_with_the_calibration_and_checked():
    calibration = dataclasses.replace(_ranked_calibration(), answerability=_answerability(top_logit=1.0))
    stored = json.loads(json.dumps(calibration.to_dict()))
    assert stored["answerability"]["features"] == ["top_logit"]
    assert Calibration.from_dict(stored) == calibration
    assert "answerability" not in _ranked_calibration().to_dict()
    for bad in (
        {**stored["answerability"], "features": ["rank_score"]},  # a candidate feature, not a query feature
        {**stored["answerability"], "weights": [1.0, 2.0]},
        {**stored["answerability"], "scale": [0.0]},
        "always",
    ):
        with pytest.raises(InvalidParameterError):
            Calibration.from_dict({**stored, "answerability": bad})
    with_holds = dataclasses.replace(calibration, holds_answer=_answerability(best_support=2.0))
    stored = json.loads(json.dumps(with_holds.to_dict()))
    assert stored["holds_answer"]["features"] == ["best_support"] and "holds_answer" not in calibration.to_dict()
    assert Calibration.from_dict(stored) == with_holds
    with pytest.raises(InvalidParameterError):
        Calibration.from_dict({**stored, "holds_answer": {**stored["holds_answer"], "features": ["reader_span"]}})


def test_fitted_answerability_separates_queries_by_their_support():
    rng = np.random.default_rng(0)
    support = rng.uniform(0, 1, 600)
    right = rng.uniform(0, 1, 600) < support**2
    fitted = fit_answerability(support[:, None], right, ("best_support",))
    p = fitted.probability(np.array([[0.05], [0.95]]))
    assert p[0] < 0.15 < 0.6 < p[1]
    # weighing the queries that have no right answer less raises every probability
    lighter = fit_answerability(support[:, None], right, ("best_support",), weights=np.where(right, 1.0, 0.25))
    assert (
        lighter.probability(np.array([[0.05], [0.5], [0.95]])) > fitted.probability(np.array([[0.05], [0.5], [0.95]]))
    ).all()
    with pytest.raises(InvalidParameterError, match="example weights"):
        fit_answerability(support[:, None], right, ("best_support",), weights=-np.ones(600))
    with pytest.raises(InvalidParameterError):
        fit_answerability(support[:, None], right, ("support_gap",))


@pytest.mark.parametrize("unit", ["phrase", "passage", "document"])
def test_the_searcher_gives_the_top_answer_its_corpus_probability_in_every_unit(tiny_model, index, unit):
    question = "What is the capital of France?"
    plain = _ranked_calibration()
    constant = dataclasses.replace(plain, answerability=_answerability())  # P = σ(-0.5) whatever the search
    before = PhraseSearcher(index, tiny_model, calibration=plain).search(question, unit=unit, top_k=5)
    after = PhraseSearcher(index, tiny_model, calibration=constant).search(question, unit=unit, top_k=5)
    assert [_text(h) for h in after] == [_text(h) for h in before]  # the same answers in the same order
    top = _confidence(after[0])
    assert top == pytest.approx(1 / (1 + math.exp(0.5)))
    assert all(_confidence(h) <= top + 1e-12 for h in after)


@pytest.mark.parametrize("unit", ["phrase", "passage", "document"])
def test_every_answer_of_a_query_carries_its_holds_answer_in_every_unit(tiny_model, index, unit):
    question = "What is the capital of France?"
    plain = _ranked_calibration()
    holds = dataclasses.replace(plain, holds_answer=_answerability(has_names=-1.0))  # σ(-1.5): "France" is a name
    before = PhraseSearcher(index, tiny_model, calibration=plain).search(question, unit=unit, top_k=5)
    after = PhraseSearcher(index, tiny_model, calibration=holds).search(question, unit=unit, top_k=5)
    assert [(_text(h), _confidence(h)) for h in after] == [(_text(h), _confidence(h)) for h in before]
    assert [best_phrase(h).holds_answer for h in after] == pytest.approx([1 / (1 + math.exp(1.5))] * len(after))
    assert all(best_phrase(h).holds_answer is None for h in before)


def test_the_searched_passages_are_the_corpus_size(tiny_model, index):
    question = "What is the capital of France?"
    calibration = dataclasses.replace(_ranked_calibration(), answerability=_answerability(log_passages=1.0))
    searcher = PhraseSearcher(index, tiny_model, calibration=calibration)
    allowed = np.zeros(index.num_passages, dtype=bool)
    allowed[:2] = True
    whole = searcher.search(question, top_k=1, unit="phrase")[0].confidence
    part = searcher.search(question, top_k=1, allowed_passages=allowed, unit="phrase")[0].confidence
    assert whole == pytest.approx(1 / (1 + math.exp(-(math.log1p(index.num_passages) - 0.5))))
    assert part == pytest.approx(1 / (1 + math.exp(-(math.log1p(2) - 0.5))))
    assert question_words(question)  # the question has content words: the support features are known


def test_a_lower_case_question_reads_its_names_from_the_corpus_truecasing(tiny_model, index):
    assert question_words("who wrote hamlet?", "Who wrote Hamlet?").names == ("hamlet",)
    assert question_words("who wrote hamlet?", "Who wrote Hamlet?") == question_words("who wrote hamlet?")
    calibration = dataclasses.replace(_ranked_calibration(), answerability=_answerability(has_names=2.0))
    searcher = PhraseSearcher(index, tiny_model, calibration=calibration)
    asked = ("When did Shakespeare write?", "when did shakespeare write?")
    cased, lower = (searcher.search(q, top_k=1, unit="phrase")[0] for q in asked)
    assert cased.confidence == pytest.approx(1 / (1 + math.exp(-1.5)))  # "Shakespeare" is a name: has_names 1
    assert lower.confidence == pytest.approx(cased.confidence)  # the corpus writes "Shakespeare": a name too
    # words the corpus writes in lower case, or never, are no names: has_names 0
    for unnamed in ("what is the capital?", "who wrote zorblax?"):
        top = searcher.search(unnamed, top_k=1, unit="phrase")[0]
        assert top.confidence == pytest.approx(1 / (1 + math.exp(0.5)))
    # a calibration that reads no names reads none from a lower-case question
    plain = PhraseSearcher(index, tiny_model, calibration=_ranked_calibration())
    assert plain._question_words(["who wrote hamlet?"])[0].names == ()


def _text(hit) -> str:
    return best_phrase(hit).text


def _confidence(hit) -> float:
    return float(best_phrase(hit).confidence)
