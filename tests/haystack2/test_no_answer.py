"""The 2.x PhraseRetriever's ``no_answer`` option: off by default and then nothing changes; on, the answers gain
"no answer" as Haystack 2's readers give it (``ExtractedAnswer(data=None, document=None)``), scored 1 − the top
answer's confidence, first when that confidence is below ``no_answer_threshold`` and last otherwise, in every unit,
from the init values or ``run``'s; both survive ``to_dict`` / ``from_dict`` and a pipeline's YAML; with a model whose
calibration has a holds-answer, scored 1 − P(the corpus holds an answer) and placed by it. Documents never change;
bad values and a model without a calibration are refused."""

from __future__ import annotations

import copy

import pytest
from haystack import Pipeline
from haystack.dataclasses import ExtractedAnswer

from dphr_haystack.errors import InvalidParameterError
from dphr_haystack.haystack2 import ALLOWED_MODULES, PhraseDocumentStore, PhraseIndexer, PhraseRetriever
from dphr_haystack.search_options import NO_ANSWER_THRESHOLD
from tests.core.test_answers_every_unit import (
    DOCUMENTED,
    QUESTION,
    assert_holding_no_answer,
    save_calibrated,
    save_holding,
)

pytestmark = pytest.mark.unit

UNITS = ["phrase", "passage", "document"]
TOP_K = 4


@pytest.fixture(scope="module")
def calibrated_dir(tmp_path_factory, _tiny_model_session):
    return save_calibrated(copy.deepcopy(_tiny_model_session), tmp_path_factory.mktemp("no-answer") / "calibrated")


def filled_store(model_dir) -> PhraseDocumentStore:
    """A store with the six tiny passages encoded by the model in ``model_dir``."""
    from haystack import Document

    from tests.conftest import tiny_documents

    store = PhraseDocumentStore(progress_bar=False)
    PhraseIndexer(document_store=store, model=str(model_dir), progress_bar=False).run(
        documents=tiny_documents(Document)
    )
    return store


@pytest.fixture(scope="module")
def filled(calibrated_dir):
    """A store with the six tiny passages encoded by the calibrated model."""
    return filled_store(calibrated_dir)


def _retriever(store, model_dir, **kwargs) -> PhraseRetriever:
    retriever = PhraseRetriever(document_store=store, model=str(model_dir), top_k=TOP_K, device="cpu", **kwargs)
    retriever.warm_up()
    return retriever


def _is_no_answer(answer: ExtractedAnswer) -> bool:
    return bool(answer.meta.get("no_answer"))


def _assert_no_answer(answer: ExtractedAnswer, top: ExtractedAnswer | None) -> None:
    """``answer`` is "no answer" as Haystack 2's readers give it, scored against the top answer ``top``."""
    assert isinstance(answer, ExtractedAnswer)
    assert answer.query == QUESTION and answer.data is None and answer.document is None
    assert answer.document_offset is None and answer.context is None
    confidence = None if top is None else top.meta["confidence"]
    assert answer.meta == {"no_answer": True, "top_confidence": confidence}
    assert answer.score == pytest.approx(1.0 if top is None else 1.0 - confidence, abs=1e-12)


def _documents(out) -> list:
    return [(d.id, d.content, d.score, d.meta) for d in out["documents"]]


def _answers(answers) -> list:
    return [a.to_dict() for a in answers]


@pytest.mark.parametrize("unit", UNITS)
def test_off_by_default_nothing_changes(filled, calibrated_dir, unit):
    retriever = _retriever(filled, calibrated_dir, unit=unit)
    assert retriever.no_answer is False and retriever.no_answer_threshold is None  # the model's
    plain = retriever.run(query=QUESTION)
    assert plain["answers"] and not any(_is_no_answer(a) for a in plain["answers"])
    assert all(a.data for a in plain["answers"])
    off = retriever.run(query=QUESTION, no_answer=False, no_answer_threshold=1.0)
    assert _answers(off["answers"]) == _answers(plain["answers"]) and _documents(off) == _documents(plain)


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize(("threshold", "first"), [(1.0, True), (0.0, False)])
def test_no_answer_is_first_below_the_threshold_and_last_otherwise(filled, calibrated_dir, unit, threshold, first):
    retriever = _retriever(filled, calibrated_dir, unit=unit)
    plain = retriever.run(query=QUESTION)
    asked = retriever.run(query=QUESTION, no_answer=True, no_answer_threshold=threshold)
    answers = asked["answers"]
    assert len(answers) == len(plain["answers"]) + 1
    assert [_is_no_answer(a) for a in answers].count(True) == 1
    marker, rest = (answers[0], answers[1:]) if first else (answers[-1], answers[:-1])
    _assert_no_answer(marker, plain["answers"][0])
    assert _answers(rest) == _answers(plain["answers"])
    assert _documents(asked) == _documents(plain)


@pytest.mark.parametrize("unit", UNITS)
def test_the_init_options_apply_to_every_run(filled, calibrated_dir, unit):
    first = _retriever(filled, calibrated_dir, unit=unit, no_answer=True, no_answer_threshold=1.0)
    last = _retriever(filled, calibrated_dir, unit=unit, no_answer=True, no_answer_threshold=0.0)
    assert _is_no_answer(first.run(query=QUESTION)["answers"][0])
    answers = last.run(query=QUESTION)["answers"]
    assert _is_no_answer(answers[-1]) and not _is_no_answer(answers[0])
    assert not any(_is_no_answer(a) for a in first.run(query=QUESTION, no_answer=False)["answers"])
    assert _is_no_answer(first.run(query=QUESTION, no_answer_threshold=0.0)["answers"][-1])


def test_the_default_threshold_places_it_by_the_top_confidence(filled, calibrated_dir):
    answers = _retriever(filled, calibrated_dir, unit="phrase", no_answer=True).run(query=QUESTION)["answers"]
    top = next(a for a in answers if not _is_no_answer(a))
    assert _is_no_answer(answers[0] if top.meta["confidence"] < NO_ANSWER_THRESHOLD else answers[-1])


def test_without_any_answer_no_answer_is_certain(filled, calibrated_dir):
    retriever = _retriever(filled, calibrated_dir, no_answer=True, no_answer_threshold=0.0)
    nothing = {"field": "meta.topic", "operator": "==", "value": "no such topic"}
    out = retriever.run(query=QUESTION, filters=nothing)
    assert out["documents"] == [] and len(out["answers"]) == 1
    _assert_no_answer(out["answers"][0], None)


def test_the_options_round_trip_through_to_dict_and_yaml(filled, calibrated_dir):
    plain = PhraseRetriever(document_store=filled, model=str(calibrated_dir))
    data = plain.to_dict()["init_parameters"]
    assert data["no_answer"] is False and data["no_answer_threshold"] is None  # every search option is written
    retriever = PhraseRetriever(
        document_store=filled, model=str(calibrated_dir), no_answer=True, no_answer_threshold=0.5
    )
    data = retriever.to_dict()
    assert data["init_parameters"]["no_answer"] is True and data["init_parameters"]["no_answer_threshold"] == 0.5
    again = PhraseRetriever.from_dict(data)
    assert again.no_answer is True and again.no_answer_threshold == 0.5 and again.to_dict() == data

    pipeline = Pipeline()
    pipeline.add_component(
        "retriever",
        PhraseRetriever(document_store=filled, model=str(calibrated_dir), no_answer=True, no_answer_threshold=1.0),
    )
    loaded = Pipeline.loads(pipeline.dumps(), allowed_modules=ALLOWED_MODULES)
    out = loaded.run({"retriever": {"query": QUESTION}})["retriever"]
    assert _is_no_answer(out["answers"][0])
    out = loaded.run({"retriever": {"query": QUESTION, "no_answer_threshold": 0.0}})["retriever"]
    assert _is_no_answer(out["answers"][-1])
    out = loaded.run({"retriever": {"query": QUESTION, "no_answer": False}})["retriever"]
    assert not any(_is_no_answer(a) for a in out["answers"])


@pytest.mark.parametrize(
    "bad",
    [
        {"no_answer": "true"},
        {"no_answer": 1},
        {"no_answer": None},
        {"no_answer_threshold": -0.1},
        {"no_answer_threshold": 1.5},
        {"no_answer_threshold": "0.5"},
        {"no_answer_threshold": True},
    ],
)
def test_bad_init_values_are_refused(filled, calibrated_dir, bad):
    with pytest.raises(InvalidParameterError, match="no_answer"):
        PhraseRetriever(document_store=filled, model=str(calibrated_dir), **bad)
    data = PhraseRetriever(document_store=filled, model=str(calibrated_dir)).to_dict()
    data["init_parameters"].update(bad)
    with pytest.raises(InvalidParameterError, match="no_answer"):
        PhraseRetriever.from_dict(data)


@pytest.mark.parametrize(
    "bad",
    [
        {"no_answer": "true"},
        {"no_answer": 0},
        {"no_answer": True, "no_answer_threshold": 2},
        {"no_answer": True, "no_answer_threshold": -1e-9},
        {"no_answer": True, "no_answer_threshold": "1"},
        {"no_answer": False, "no_answer_threshold": float("nan")},  # checked even when off
    ],
)
def test_bad_run_values_are_refused(filled, calibrated_dir, bad):
    with pytest.raises(InvalidParameterError, match="no_answer"):
        _retriever(filled, calibrated_dir).run(query=QUESTION, **bad)


def test_a_model_without_a_calibration_is_refused(tiny_model_dir, hs2_docs):
    store = PhraseDocumentStore(progress_bar=False)
    PhraseIndexer(document_store=store, model=str(tiny_model_dir), progress_bar=False).run(documents=hs2_docs)
    assert _retriever(store, tiny_model_dir).run(query=QUESTION)["answers"]  # off: answers as before
    with pytest.raises(InvalidParameterError, match="calibration"):
        _retriever(store, tiny_model_dir).run(query=QUESTION, no_answer=True)
    with pytest.raises(InvalidParameterError, match="calibration"):
        _retriever(store, tiny_model_dir, no_answer=True).run(query=QUESTION)


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("holds", [0.3, 0.7])  # either side of the default threshold, whatever the confidences
def test_a_holds_answer_scores_and_places_no_answer(tmp_path, _tiny_model_session, unit, holds):
    model_dir = save_holding(copy.deepcopy(_tiny_model_session), tmp_path / "holding", holds)
    retriever = _retriever(filled_store(model_dir), model_dir, unit=unit, no_answer=True)
    answers = retriever.run(query=QUESTION)["answers"]
    assert_holding_no_answer(answers, holds, _is_no_answer)


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize(("holds", "documented"), DOCUMENTED)
def test_a_model_s_documented_threshold_places_no_answer_unless_the_search_gives_one(
    tmp_path, _tiny_model_session, unit, holds, documented
):
    model_dir = save_holding(copy.deepcopy(_tiny_model_session), tmp_path / "holding", holds, documented)
    retriever = _retriever(filled_store(model_dir), model_dir, unit=unit, no_answer=True)
    assert_holding_no_answer(retriever.run(query=QUESTION)["answers"], holds, _is_no_answer, documented)
    given = retriever.run(query=QUESTION, no_answer_threshold=NO_ANSWER_THRESHOLD)["answers"]
    assert_holding_no_answer(given, holds, _is_no_answer)


def test_the_answers_and_no_answer_name_what_no_document_writes(tmp_path, _tiny_model_session):
    from tests.core.test_corpus_words import save_reading_corpus

    model_dir = save_reading_corpus(copy.deepcopy(_tiny_model_session), tmp_path / "reading")
    retriever = _retriever(filled_store(model_dir), model_dir, unit="phrase", no_answer=True)
    answers = retriever.run(query="Who founded Quillfern?")["answers"]
    assert answers[0].data is None and all(a.meta["unwritten_names"] == ["Quillfern"] for a in answers)
    answers = retriever.run(query=QUESTION)["answers"]  # "France" is written
    assert not any("unwritten_names" in a.meta for a in answers)
