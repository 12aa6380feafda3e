"""The 2.x PhraseRetriever answers, in every unit, with phrases that do not copy the question, scored by the
calibrated confidence that unit=phrase gives the same phrase."""

from __future__ import annotations

import pytest

from dphr_haystack.confidence import copies_question, question_words
from dphr_haystack.haystack2 import PhraseDocumentStore, PhraseIndexer, PhraseRetriever
from tests.core.test_answers_every_unit import CALIBRATION, EVERY, QUESTION, real_copies, save_calibrated

pytestmark = pytest.mark.unit


@pytest.fixture
def calibrated_dir(tiny_model, tmp_path):
    return save_calibrated(tiny_model, tmp_path / "calibrated-model")


def _retriever(model_dir, docs, **kwargs) -> PhraseRetriever:
    store = PhraseDocumentStore(progress_bar=False)
    PhraseIndexer(document_store=store, model=str(model_dir), progress_bar=False).run(documents=docs)
    retriever = PhraseRetriever(document_store=store, model=str(model_dir), **kwargs)
    retriever.warm_up()
    return retriever


@pytest.mark.parametrize("unit", ["phrase", "passage", "document"])
def test_no_answer_copies_the_question(tiny_model_dir, hs2_docs, unit, one_torch_thread):
    plain = _retriever(tiny_model_dir, hs2_docs, skip_question_copies=False)
    assert real_copies([a.data for a in plain.run(query=QUESTION, unit=unit, top_k=6)["answers"]], QUESTION)
    answers = _retriever(tiny_model_dir, hs2_docs).run(query=QUESTION, unit=unit, top_k=6)["answers"]
    words = question_words(QUESTION)
    assert answers and all(not copies_question(a.data, words) for a in answers)


@pytest.mark.parametrize("unit", ["passage", "document"])
def test_answer_scores_are_the_phrase_units_calibrated_confidences(calibrated_dir, hs2_docs, unit, one_torch_thread):
    retriever = _retriever(calibrated_dir, hs2_docs)
    assert retriever.phrase_model.config.calibration == CALIBRATION.to_dict()
    phrase = {
        (a.document.id, a.document_offset.start, a.document_offset.end): a.score
        for a in retriever.run(query=QUESTION, unit="phrase", top_k=EVERY["phrase"])["answers"]
    }
    answers = retriever.run(query=QUESTION, unit=unit, top_k=EVERY[unit])["answers"]
    assert len(answers) >= 3
    words = question_words(QUESTION)
    for answer in answers:
        assert not copies_question(answer.data, words)
        assert 0.0 <= answer.score <= 1.0
        key = (answer.document.id, answer.document_offset.start, answer.document_offset.end)
        assert answer.score == pytest.approx(phrase[key], abs=1e-12)
        assert answer.meta["confidence"] == answer.score


def test_passage_ranking_and_raw_scores_do_not_change(calibrated_dir, tiny_model_dir, hs2_docs):
    plain = _retriever(tiny_model_dir, hs2_docs, skip_question_copies=False)
    fixed = _retriever(calibrated_dir, hs2_docs, ranking="score")
    before = plain.run(query=QUESTION, unit="passage", top_k=6)["documents"]
    after = fixed.run(query=QUESTION, unit="passage", top_k=6)["documents"]
    # ranked by score, the ranking and the raw scores stay; the calibrated model's documents score their answers'
    # confidences
    assert [(d.id, d.meta["phrase_score"]) for d in after] == [(d.id, d.meta["phrase_score"]) for d in before]
    scores = [d.score for d in after]
    assert scores == sorted(scores, reverse=True) and all(0.0 <= s <= 1.0 for s in scores)
