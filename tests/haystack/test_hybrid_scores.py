"""Scores of the Haystack 1.x pipelines a user can compare: phrase passages and every hybrid in [0, 1]; joined
answers folded like the phrase search folds its own."""

from __future__ import annotations

import pytest
from haystack.schema import Answer, Document, Span

from dphr_haystack.confidence import ranked_confidences
from dphr_haystack.nodes.joins import dedupe_answers, fuse_linear
from tests.core.test_answers_every_unit import save_calibrated
from tests.haystack.test_haystack_pipelines import QUERY, _fill, _load

pytestmark = pytest.mark.unit


@pytest.fixture
def calibrated_dir(tiny_model, tmp_path):
    return save_calibrated(tiny_model, tmp_path / "calibrated-model")


def test_phrase_passages_score_monotone_confidences(calibrated_dir, haystack_docs):
    pipeline = _load("phrase_passages.yml", calibrated_dir)
    _fill(pipeline, haystack_docs)
    docs = pipeline.run(query=QUERY, params={"Retriever": {"top_k": 6}})["documents"]
    assert len(docs) == 6
    confidences = [d.meta.get("best_phrase_confidence") for d in docs]
    assert confidences == sorted(confidences, reverse=True)  # ranked by the answers' confidences (the default)
    expected = ranked_confidences(confidences)
    assert [d.score for d in docs] == pytest.approx(expected)
    assert all(0.0 <= d.score <= 1.0 for d in docs)


@pytest.mark.parametrize("name", ["hybrid_rrf.yml", "hybrid_dpr.yml", "hybrid_answers.yml"])
def test_hybrid_scores_are_in_0_1_with_1_for_first_everywhere(calibrated_dir, haystack_docs, name):
    pipeline = _load(name, calibrated_dir)
    _fill(pipeline, haystack_docs)
    out = pipeline.run(query=QUERY, debug=True)
    docs = out["documents"]
    assert docs and all(0.0 <= d.score <= 1.0 + 1e-9 for d in docs)
    assert [d.score for d in docs] == sorted((d.score for d in docs), reverse=True)
    bm25 = [d.id for d in out["_debug"]["BM25"]["output"]["documents"]]
    phrase = [d.id for d in out["_debug"]["Retriever"]["output"]["documents"]]
    if bm25[0] == phrase[0]:
        assert docs[0].id == bm25[0] and docs[0].score == pytest.approx(1.0)
    else:
        assert docs[0].score < 1.0
    for answer in out.get("answers") or []:
        assert 0.0 <= answer.score <= 1.0


def test_linear_fusion_is_a_weighted_mean_of_minmax_scores():
    a, b = Document("a", id="a", score=30.0), Document("b", id="b", score=10.0)
    both_first = fuse_linear([[a, b], [Document("a", id="a", score=0.9), Document("b", id="b", score=0.1)]], [1, 3])
    assert [(d.id, d.score) for d in both_first] == [("a", pytest.approx(1.0)), ("b", pytest.approx(0.0))]
    split = fuse_linear([[a, b], [Document("b", id="b", score=0.9), Document("a", id="a", score=0.1)]], [1, 3])
    assert [(d.id, d.score) for d in split] == [("b", pytest.approx(0.75)), ("a", pytest.approx(0.25))]
    raw = fuse_linear([[a, b]], [2.0], normalization="none")
    assert [d.score for d in raw] == [60.0, 20.0]  # no normalisation: the raw weighted sum


def test_joined_answers_fold_equal_texts_and_overlapping_spans():
    answers = [
        Answer("`100`", score=0.5, document_ids=["d1"], offsets_in_document=[Span(4, 9)]),
        Answer("100", score=0.8, document_ids=["d2"], offsets_in_document=[Span(0, 3)]),
        Answer("100 by default", score=0.3, document_ids=["d2"], offsets_in_document=[Span(0, 14)]),
        Answer("by default", score=0.2, document_ids=["d2"], offsets_in_document=[Span(4, 14)]),
        Answer("top_k", score=0.4, document_ids=["d1"], offsets_in_document=[Span(10, 15)]),
        Answer("The top_k", score=0.1),  # no offsets: folded by its text
    ]
    kept = dedupe_answers(answers)
    assert [(a.answer, a.score) for a in kept] == [("100", 0.8), ("top_k", 0.4), ("by default", 0.2)]
    assert [a.answer for a in dedupe_answers(answers, top_k=2)] == ["100", "top_k"]
