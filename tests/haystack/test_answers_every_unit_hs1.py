"""The 1.x PhraseRetriever answers, in every unit, with phrases that do not copy the question, scored by the
calibrated confidence that unit=phrase gives the same phrase."""

from __future__ import annotations

import pytest

from dphr_haystack.confidence import copies_question, question_words
from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever
from tests.core.test_answers_every_unit import CALIBRATION, EVERY, QUESTION, real_copies, save_calibrated

pytestmark = pytest.mark.unit


@pytest.fixture
def calibrated_dir(tiny_model, tmp_path):
    return save_calibrated(tiny_model, tmp_path / "calibrated-model")


def _retriever(model_dir, docs, **kwargs) -> PhraseRetriever:
    store = PhraseDocumentStore(progress_bar=False)
    retriever = PhraseRetriever(document_store=store, model=str(model_dir), device="cpu", **kwargs)
    store.index_documents(docs, retriever)
    return retriever


def _answers(retriever: PhraseRetriever, unit: str, top_k: int):
    retriever.unit = unit
    out, _ = retriever.run_query(QUESTION, top_k=top_k)
    return out["answers"]


@pytest.mark.parametrize("unit", ["phrase", "passage", "document"])
def test_no_answer_copies_the_question(tiny_model_dir, haystack_docs, unit, one_torch_thread):
    plain = _retriever(tiny_model_dir, haystack_docs, skip_question_copies=False)
    assert real_copies([a.answer for a in _answers(plain, unit, 6)], QUESTION)
    answers = _answers(_retriever(tiny_model_dir, haystack_docs), unit, 6)
    words = question_words(QUESTION)
    assert answers and all(not copies_question(a.answer, words) for a in answers)


@pytest.mark.parametrize("unit", ["passage", "document"])
def test_answer_scores_are_the_phrase_units_calibrated_confidences(calibrated_dir, haystack_docs, unit):
    retriever = _retriever(calibrated_dir, haystack_docs)
    assert retriever.phrase_model.config.calibration == CALIBRATION.to_dict()
    phrase = {
        (a.document_ids[0], a.offsets_in_document[0].start, a.offsets_in_document[0].end): a.score
        for a in _answers(retriever, "phrase", EVERY["phrase"])
    }
    answers = _answers(retriever, unit, EVERY[unit])
    assert len(answers) >= 3
    words = question_words(QUESTION)
    for answer in answers:
        assert not copies_question(answer.answer, words)
        key = (answer.document_ids[0], answer.offsets_in_document[0].start, answer.offsets_in_document[0].end)
        assert 0.0 <= answer.score <= 1.0
        assert answer.score == pytest.approx(phrase[key], abs=1e-12)
        assert answer.meta["confidence"] == answer.score


def test_passage_ranking_and_raw_scores_do_not_change(calibrated_dir, tiny_model_dir, haystack_docs):
    plain = _retriever(tiny_model_dir, haystack_docs, skip_question_copies=False, unit="passage")
    fixed = _retriever(calibrated_dir, haystack_docs, unit="passage", ranking="score")
    before, after = plain.retrieve(QUESTION, top_k=6), fixed.retrieve(QUESTION, top_k=6)
    # ranked by score, the ranking and the raw scores stay; the calibrated model's documents score their answers'
    # confidences
    assert [(d.id, d.meta["phrase_score"]) for d in after] == [(d.id, d.meta["phrase_score"]) for d in before]
    scores = [d.score for d in after]
    assert scores == sorted(scores, reverse=True) and all(0.0 <= s <= 1.0 for s in scores)
