"""train.answerability: query tables gathered as the searcher searches, sub-corpora, the fitted answerability."""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest

from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher
from dphr_haystack.confidence import KNOWN_FEATURES, QUERY_FEATURES, fit_calibration
from dphr_haystack.encode.add import add_passages
from train.answerability import (
    QueryTable,
    choose_threshold,
    fit_table,
    gather,
    lower_cased,
    near_miss_table,
    table_report,
    threshold_sweep,
)
from train.answerability_cases import (
    Case,
    Question,
    article_cases,
    corpus_cases,
    invented_cases,
    invented_name,
    near_miss_cases,
)
from train.calibrate import write_calibrated

pytestmark = pytest.mark.unit


def _calibration():
    x = np.random.default_rng(0).normal(size=(100, len(KNOWN_FEATURES)))
    return fit_calibration(x, x[:, 4] > 0, names=KNOWN_FEATURES, depth=5)


def _questions(sample) -> list[Question]:
    title = {p["id"]: p["document_id"] for p in sample.passages}
    return [Question(ex.question, tuple(ex.answers), title[ex.passage_id], ex.passage_id) for ex in sample.examples]


def test_sub_corpora_hold_the_question_passage_or_none_of_its_article(sample_index):
    sample, index = sample_index
    questions = _questions(sample)
    article = np.array([p["document_id"] for p in index.passages])
    for size in (1, 2, None):
        cases = corpus_cases(index, questions, "c", random.Random(0), size)
        assert len(cases) == 2 * len(questions)
        for with_it, without in zip(cases[::2], cases[1::2], strict=True):
            gold = index.passage_row(with_it.question.passage_id)
            assert with_it.answerable and not without.answerable
            if size is None:  # one other article less
                assert with_it.allowed[gold] and not with_it.allowed.all()
                assert len(set(article[~with_it.allowed])) == 1
            else:
                assert with_it.allowed[gold] and with_it.allowed.sum() == min(size, index.num_passages)
            assert not (without.allowed & (article == with_it.question.title)).any()


@pytest.fixture
def two_paragraph_article(sample_index, tiny_model):
    """The sample's first question, an index where its article has a second paragraph, the articles by row, its
    passage row and that question asked with an answer no passage holds and with one the other paragraph holds."""
    sample, _ = sample_index
    question = _questions(sample)[0]
    first = next(p for p in sample.passages if p["id"] == question.passage_id)
    same_article = {**first, "id": "another", "text": "Another paragraph of the same article, on its history."}
    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, [*sample.passages, same_article], progress=False)
    article = np.array([p["document_id"] for p in index.passages])
    absent = dataclasses.replace(question, answers=("zqxv wholly absent answer",))
    elsewhere = dataclasses.replace(question, answers=("its history",))
    return question, index, article, index.passage_row(question.passage_id), absent, elsewhere


def test_a_near_miss_keeps_the_article_but_not_the_question_passage_nor_any_passage_with_its_answer(
    two_paragraph_article,
):
    question, index, article, gold, absent, elsewhere = two_paragraph_article
    kept = [r for r in np.flatnonzero(article == question.title) if r != gold]
    assert kept
    cases = near_miss_cases(index, [absent, elsewhere], "near", weight=0.5)
    assert [c.question for c in cases] == [absent]  # an answer another passage of the article holds: no near miss
    (case,) = cases
    assert case.corpus == "near" and not case.answerable and case.weight == 0.5
    assert not case.allowed[gold] and case.allowed.sum() == index.num_passages - 1 and case.allowed[kept].all()


def test_article_cases_search_the_question_article_alone_with_and_without_its_paragraph(
    sample_index, two_paragraph_article, tiny_model
):
    question, index, article, gold, absent, elsewhere = two_paragraph_article
    one_each = sample_index[1]
    assert article_cases(one_each, [absent], "article") == []  # an article of one paragraph: nothing to miss near
    cases = article_cases(index, [absent, elsewhere], "article", weight=2.0)
    assert [c.question for c in cases] == [absent, absent]  # an answer the article holds elsewhere: left out
    whole, near = cases
    assert whole.answerable and not near.answerable
    assert whole.corpus == near.corpus == "article" and whole.weight == near.weight == 2.0
    assert (whole.allowed == (article == question.title)).all() and whole.allowed[gold]
    assert not near.allowed[gold] and near.allowed.sum() == whole.allowed.sum() - 1
    table = near_miss_table({"dev": index}, tiny_model, _calibration(), [absent], 1.0, article_weight=0.5)
    assert [(c.corpus, c.answerable, c.weight) for c in table.cases] == [
        ("dev-near-miss", False, 1.0),
        ("article", True, 0.5),
        ("article", False, 0.5),
    ]
    assert near_miss_table({"dev": index}, tiny_model, _calibration(), [absent], 0.0) is None
    named = dataclasses.replace(absent, question="Which team won the Velmora cup?")
    asked = {"dev": [Case(named, "dev", True), Case(named, "dev", False)]}
    invented = near_miss_table({"dev": index}, tiny_model, _calibration(), [named], 0.0, invented=(asked, 0.3))
    # the answerable case, and the question over its whole article, asked about an invented name
    assert [(c.question.question, c.corpus, c.answerable, c.weight) for c in invented.cases] == [
        ("Which team won the Vilmure cup?", "dev-invented", False, 0.3),
        ("Which team won the Vilmure cup?", "article-invented", False, 0.3),
    ]


def test_gathered_features_are_what_the_searcher_computes_and_leave_its_confidences(sample_index, tiny_model):
    sample, index = sample_index
    calibration = _calibration()
    questions = _questions(sample)
    cases = [Case(q, "all", True) for q in questions] + corpus_cases(index, questions[:3], "one", random.Random(1), 1)
    table = gather(index, tiny_model, calibration, cases, batch_size=4, progress=False)
    assert table.features.shape == (len(cases), len(QUERY_FEATURES))
    searcher = PhraseSearcher(index, tiny_model, calibration=calibration)
    for i, case in enumerate(cases):
        if case.allowed is None:
            hits = searcher.search(case.question.question, top_k=1, unit="phrase")
        else:  # a sub-corpus is searched as an index of those passages alone, encoded anew here
            small = PhraseIndex.create(tiny_model)
            add_passages(small, tiny_model, [sample.passages[r] for r in np.flatnonzero(case.allowed)], progress=False)
            hits = PhraseSearcher(small, tiny_model, calibration=calibration).search(
                case.question.question, top_k=1, unit="phrase"
            )
        assert table.texts[i] == hits[0].text
        assert table.confidence[i] == pytest.approx(hits[0].confidence)  # the recorder moves nothing
        top_logit = table.features[i, QUERY_FEATURES.index("top_logit")]
        assert 1 / (1 + np.exp(-top_logit)) == pytest.approx(hits[0].confidence, abs=1e-6)
        searched = int(case.allowed.sum()) if case.allowed is not None else index.num_passages
        assert table.features[i, QUERY_FEATURES.index("log_passages")] == pytest.approx(np.log1p(searched))
        assert table.correct[i] == (case.answerable and hits[0].text in case.question.answers)
    # the fitted answerability, stored with the model: the searcher's top confidence is its probability
    table.correct[: len(questions) // 2] = True  # labels with both classes
    table.correct[len(questions) // 2 :] = False
    answerability = fit_table(table)
    report = table_report(table, answerability.probability(table.features))
    assert set(report) == {"all", "one"} and report["all"]["unanswerable"] == 0
    fitted = dataclasses.replace(calibration, answerability=answerability)
    served = PhraseSearcher(index, tiny_model, calibration=fitted)
    for i, case in enumerate(cases[:4]):
        top = served.search(case.question.question, top_k=1, unit="phrase")[0]
        expected = answerability.probability(table.features[i : i + 1])[0]
        assert top.confidence == pytest.approx(expected, abs=1e-9)
        assert top.text == table.texts[i]  # the same answer, its confidence moved
    # the holds-answer, fitted on whether the corpus holds the answer: what the searcher gives every answer
    holds = fit_table(table, unanswerable_weight=1.0, holds=True)
    assert holds.features == QUERY_FEATURES and not np.array_equal(holds.weights, answerability.weights)
    served = PhraseSearcher(index, tiny_model, calibration=dataclasses.replace(fitted, holds_answer=holds))
    for i, case in enumerate(cases[:4]):
        top = served.search(case.question.question, top_k=1, unit="phrase")[0]
        assert top.holds_answer == pytest.approx(holds.probability(table.features[i : i + 1])[0], abs=1e-9)


def test_the_answerability_is_written_into_the_model_config(sample_index, tiny_model, tmp_path):
    sample, index = sample_index
    calibration = _calibration()
    cases = [Case(q, "all", True) for q in _questions(sample)]
    table = gather(index, tiny_model, calibration, cases, progress=False)
    table.correct[::2] = True
    table.correct[1::2] = False
    fitted = dataclasses.replace(calibration, answerability=fit_table(table)).to_dict()
    tiny_model.save(tmp_path / "model")
    write_calibrated(tmp_path / "model", tmp_path / "out", fitted)
    stored = json.loads((tmp_path / "out" / "dphr_config.json").read_text())["calibration"]
    assert stored["answerability"]["features"] == list(QUERY_FEATURES)
    assert PhraseModel.load(tmp_path / "out").config.calibration == fitted


def test_the_fit_also_counts_each_named_question_as_if_asked_in_lower_case():
    rng = np.random.default_rng(0)
    n = 400
    features = rng.normal(size=(n, len(QUERY_FEATURES)))
    column = {name: j for j, name in enumerate(QUERY_FEATURES)}
    held = rng.random(n) < 0.5  # the question's names are in the corpus, or not
    features[:, column["top_name_support"]] = np.where(held, 0.0, -3.0)
    features[:, column["best_name_support"]] = np.where(held, 0.0, -3.0)
    features[:, column["has_names"]] = 1.0
    correct = held & (rng.random(n) < 0.8)
    cases = [Case(Question(f"q{i}", ("a",)), "all", bool(h)) for i, h in enumerate(held)]
    table = QueryTable(cases, features, correct, np.full(n, 0.5), [""] * n)
    lower = lower_cased(features[:3])
    assert np.isnan(lower[:, column["top_name_support"]]).all() and (lower[:, column["has_names"]] == 0).all()
    assert (lower[:, column["all_names_in_corpus"]] == 1.0).all()  # no names found: none the corpus fails to write
    assert np.array_equal(lower[:, column["top_logit"]], features[:3, column["top_logit"]])
    plain, both = fit_table(table, lower_case_weight=0.0), fit_table(table)
    assert plain.mean[column["has_names"]] == 1.0 and both.mean[column["has_names"]] == pytest.approx(0.5)
    kept = QueryTable([dataclasses.replace(c, lower_case=False) for c in cases], *dataclasses.astuple(table)[1:])
    assert fit_table(kept).mean[column["has_names"]] == 1.0  # cases that must not be asked in lower case are not
    # names held or missing tell right from wrong; a question whose names cannot be told lies in between
    p = both.probability(np.vstack([features[held][:1], features[~held][:1], lower_cased(features[held][:1])]))
    assert p[1] < p[2] < p[0]


def test_an_invented_name_respells_the_longest_name_wherever_it_is_asked():
    assert invented_name("Which Super Bowl was hosted in San Diego in 2003?") == (
        "Which Sapir Bowl was hosted in San Diego in 2003?"
    )
    assert invented_name("Did Calder visit Port Calder?") == "Did Celdir visit Port Celdir?"
    # a first word, short or lower-case words and numbers are not names to respell
    assert invented_name("Where was Bob born in 1990?") is None
    assert invented_name("who played jason in friday the 13th") is None


def test_invented_cases_are_answerable_cases_asked_without_an_answer_and_weigh_in_the_fit():
    mask = np.array([True, False])
    cases = [
        Case(Question("When did Velmora get its charter?", ("1412",)), "5", True, mask),
        Case(Question("When did Velmora get its charter?", ("1412",)), "5", False, ~mask),
        Case(Question("how deep is the lake", ("40 m",)), "5", True, mask),
    ]
    (invented,) = invented_cases(cases, 0.5)
    assert invented.question.question == "When did Vilmure get its charter?"
    assert invented.question.answers == ("1412",) and invented.corpus == "5-invented"
    assert not invented.answerable and invented.allowed is mask and invented.weight == 0.5
    assert not invented.lower_case  # asked in lower case it would look answerable: never counted so
    # a case's weight scales it in the fit: many light cases move it less than as many whole ones
    rng = np.random.default_rng(1)
    n = 300
    features = rng.normal(size=(n, len(QUERY_FEATURES)))
    answerable = rng.random(n) < 0.5
    features[:, 0] += np.where(answerable, 1.0, -1.0)
    correct = answerable & (rng.random(n) < 0.7)
    weight = np.where(answerable, 1.0, 0.05)

    def table(weights):
        made = [Case(Question(f"q{i}", ("a",)), "all", bool(a), None, float(w)) for i, (a, w) in enumerate(weights)]
        return QueryTable(made, features, correct, np.full(n, 0.5), [""] * n)

    whole = fit_table(table(zip(answerable, np.ones(n))), lower_case_weight=0.0)
    light = fit_table(table(zip(answerable, weight)), lower_case_weight=0.0)
    low = features[~answerable]
    assert light.probability(low).mean() > whole.probability(low).mean()


def test_the_threshold_sweep_finds_the_largest_threshold_that_keeps_each_size_s_right_answers():
    sizes = ("5", "50", "500", "dev")
    cases, holds, correct = [], [], []
    for size in sizes:
        for i in range(20):  # right answers at 0.32, 0.37, ... 1.27 capped; one unanswerable case at 0.1
            cases.append(Case(Question(f"q{i}", ("a",)), size, True))
            holds.append(min(0.32 + 0.05 * i, 1.0) if size != "dev" else 0.9)
            correct.append(True)
        cases.append(Case(Question("x", ("a",)), size, False))
        holds.append(0.1)
        correct.append(False)
    n = len(cases)
    table = QueryTable(cases, np.zeros((n, len(QUERY_FEATURES))), np.array(correct), np.full(n, 0.5), [""] * n)
    report = threshold_sweep(table, np.array(holds), most_lost=0.05)
    at = {row["threshold"]: row for row in report["threshold_sweep"]}
    assert at[0.35]["5"]["right_lost_share"] == pytest.approx(1 / 20) and at[0.35]["5"]["no_answer_share"] == 1.0
    assert at[0.4]["50"]["right_lost_share"] == pytest.approx(2 / 20) and at[0.9]["dev"]["right_lost_share"] == 0.0
    assert report["largest_threshold_within_lost"] == 0.35  # 0.4 would lose 2 of 20 at 5, 50 and 500 passages
    assert report["chosen_threshold"] == choose_threshold(report["threshold_sweep"])


def _row(threshold: float, *shares: tuple[float, float]) -> dict:
    """A sweep row: per corpus size, (share of its unanswerable cases turned away, share of its right ones lost)."""
    sizes = {str(i): {"no_answer_share": a, "right_lost_share": b} for i, (a, b) in enumerate(shares)}
    return {"threshold": threshold, **sizes}


def test_the_chosen_threshold_turns_away_most_unanswerable_questions_else_keeps_right_answers():
    sweep = [
        _row(0.3, (0.95, 0.02), (0.70, 0.01)),
        _row(0.4, (0.97, 0.04), (0.81, 0.03)),  # the first at which every size turns away 80%
        _row(0.5, (0.99, 0.06), (0.90, 0.05)),
    ]
    assert choose_threshold(sweep) == 0.4
    # turning 80% away would lose more than 10% somewhere: the largest within 5% lost instead
    costly = [*sweep[:1], _row(0.4, (0.97, 0.04), (0.79, 0.03)), _row(0.5, (0.99, 0.12), (0.85, 0.05))]
    assert choose_threshold(costly) == 0.4
    assert choose_threshold([_row(0.3, (0.5, 0.2), (0.5, 0.0))]) is None
