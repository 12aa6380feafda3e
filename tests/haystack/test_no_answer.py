"""The 1.x PhraseRetriever's ``no_answer`` option: off by default and then nothing changes; on, the answers gain
"no answer" as Haystack 1.x's readers write it (empty text, no context, offsets (0, 0), no document), scored 1 − the
top answer's confidence, first when that confidence is below ``no_answer_threshold`` and last otherwise, in every
unit, per retriever, per query and per pipeline run; with a model whose calibration has a holds-answer, scored 1 −
P(the corpus holds an answer) and placed by it. Documents never change; bad values and a model without a
calibration are refused."""

from __future__ import annotations

import copy

import pytest
from haystack import Pipeline
from haystack.errors import PipelineSchemaError
from haystack.schema import Answer, Span

from dphr_haystack.errors import InvalidParameterError
from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever, load_pipeline
from dphr_haystack.search_options import NO_ANSWER_THRESHOLD
from tests.core.test_answers_every_unit import (
    DOCUMENTED,
    QUESTION,
    assert_holding_no_answer,
    save_calibrated,
    save_holding,
)
from tests.haystack.conftest import PIPELINES

pytestmark = pytest.mark.unit

UNITS = ["phrase", "passage", "document"]
TOP_K = 4


@pytest.fixture(scope="module")
def calibrated_dir(tmp_path_factory, _tiny_model_session):
    return save_calibrated(copy.deepcopy(_tiny_model_session), tmp_path_factory.mktemp("no-answer") / "calibrated")


def _retriever(model_dir, docs, **kwargs) -> PhraseRetriever:
    store = PhraseDocumentStore(progress_bar=False)
    retriever = PhraseRetriever(document_store=store, model=str(model_dir), device="cpu", top_k=TOP_K, **kwargs)
    store.index_documents(docs, retriever)
    return retriever


def _is_no_answer(answer: Answer) -> bool:
    return bool((answer.meta or {}).get("no_answer"))


def _assert_no_answer(answer: Answer, top: Answer | None) -> None:
    """``answer`` is "no answer" as Haystack 1.x's readers write it, scored against the top answer ``top``."""
    assert answer.answer == "" and answer.type == "extractive"
    assert answer.context is None and answer.document_ids is None
    assert answer.offsets_in_context == [Span(0, 0)] and answer.offsets_in_document == [Span(0, 0)]
    confidence = None if top is None else top.meta["confidence"]
    assert answer.meta == {"no_answer": True, "top_confidence": confidence}
    assert answer.score == pytest.approx(1.0 if top is None else 1.0 - confidence, abs=1e-12)


def _same_documents(got, expected) -> None:
    assert [(d.id, d.content, d.score, d.meta) for d in got] == [(d.id, d.content, d.score, d.meta) for d in expected]


def _same_answers(got, expected) -> None:
    assert [a.to_dict() for a in got] == [a.to_dict() for a in expected]


@pytest.mark.parametrize("unit", UNITS)
def test_off_by_default_nothing_changes(calibrated_dir, haystack_docs, unit):
    retriever = _retriever(calibrated_dir, haystack_docs, unit=unit)
    assert retriever.no_answer is False and retriever.no_answer_threshold is None  # the model's
    plain, _ = retriever.run_query(QUESTION)
    assert plain["answers"] and not any(_is_no_answer(a) for a in plain["answers"])
    assert all(a.answer for a in plain["answers"])
    off, _ = retriever.run_query(QUESTION, no_answer=False, no_answer_threshold=1.0)
    _same_answers(off["answers"], plain["answers"])
    _same_documents(off["documents"], plain["documents"])


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize(("threshold", "first"), [(1.0, True), (0.0, False)])
def test_no_answer_is_first_below_the_threshold_and_last_otherwise(
    calibrated_dir, haystack_docs, unit, threshold, first
):
    retriever = _retriever(calibrated_dir, haystack_docs, unit=unit)
    plain, _ = retriever.run_query(QUESTION)
    asked, _ = retriever.run_query(QUESTION, no_answer=True, no_answer_threshold=threshold)
    answers = asked["answers"]
    assert len(answers) == len(plain["answers"]) + 1
    assert [_is_no_answer(a) for a in answers].count(True) == 1
    marker, rest = (answers[0], answers[1:]) if first else (answers[-1], answers[:-1])
    _assert_no_answer(marker, plain["answers"][0])
    _same_answers(rest, plain["answers"])
    _same_documents(asked["documents"], plain["documents"])


@pytest.mark.parametrize("unit", UNITS)
def test_the_init_options_apply_to_every_query(calibrated_dir, haystack_docs, unit):
    first = _retriever(calibrated_dir, haystack_docs, unit=unit, no_answer=True, no_answer_threshold=1.0)
    last = _retriever(calibrated_dir, haystack_docs, unit=unit, no_answer=True, no_answer_threshold=0.0)
    assert _is_no_answer(first.run_query(QUESTION)[0]["answers"][0])
    assert _is_no_answer(last.run_query(QUESTION)[0]["answers"][-1])
    assert not _is_no_answer(last.run_query(QUESTION)[0]["answers"][0])
    # a query may turn it off or move it
    assert not any(_is_no_answer(a) for a in first.run_query(QUESTION, no_answer=False)[0]["answers"])
    assert _is_no_answer(first.run_query(QUESTION, no_answer_threshold=0.0)[0]["answers"][-1])
    # batches too
    out, _ = first.run_query_batch([QUESTION, "Who created Python?"])
    assert all(_is_no_answer(answers[0]) for answers in out["answers"])
    out, _ = first.run_query_batch([QUESTION, "Who created Python?"], no_answer=False)
    assert not any(_is_no_answer(a) for answers in out["answers"] for a in answers)


def test_the_default_threshold_places_it_by_the_top_confidence(calibrated_dir, haystack_docs):
    retriever = _retriever(calibrated_dir, haystack_docs, unit="phrase", no_answer=True)
    answers = retriever.run_query(QUESTION)[0]["answers"]
    top = next(a for a in answers if not _is_no_answer(a))
    expected_first = top.meta["confidence"] < NO_ANSWER_THRESHOLD
    assert _is_no_answer(answers[0] if expected_first else answers[-1])


def test_without_any_answer_no_answer_is_certain(calibrated_dir, haystack_docs):
    retriever = _retriever(calibrated_dir, haystack_docs, no_answer=True, no_answer_threshold=0.0)
    out, _ = retriever.run_query(QUESTION, filters={"topic": ["no such topic"]})
    assert out["documents"] == [] and len(out["answers"]) == 1
    _assert_no_answer(out["answers"][0], None)


def test_pipeline_params_turn_it_on_per_run(calibrated_dir, haystack_docs):
    retriever = _retriever(calibrated_dir, haystack_docs, unit="phrase")
    pipeline = Pipeline()
    pipeline.add_node(retriever, name="Retriever", inputs=["Query"])
    plain = pipeline.run(query=QUESTION)
    assert not any(_is_no_answer(a) for a in plain["answers"])
    for threshold, at in ((1.0, 0), (0.0, -1)):
        params = {"Retriever": {"no_answer": True, "no_answer_threshold": threshold}}
        result = pipeline.run(query=QUESTION, params=params)
        _assert_no_answer(result["answers"][at], plain["answers"][0])
        _same_documents(result["documents"], plain["documents"])
    batch = pipeline.run_batch(
        queries=[QUESTION], params={"Retriever": {"no_answer": True, "no_answer_threshold": 1.0}}
    )
    assert _is_no_answer(batch["answers"][0][0])
    assert not any(_is_no_answer(a) for a in pipeline.run(query=QUESTION)["answers"])  # only when asked
    with pytest.raises(Exception) as caught:  # Haystack wraps a node's error; its cause is the typed one
        pipeline.run(query=QUESTION, params={"Retriever": {"no_answer": "yes"}})
    assert isinstance(caught.value.__cause__ or caught.value, InvalidParameterError)


def test_yaml_takes_the_options_with_strict_types(calibrated_dir):
    def load(**params):
        return load_pipeline(
            PIPELINES / "phrase_qa.yml", overrides={"Retriever": {"model": str(calibrated_dir), **params}}
        )

    retriever = load(no_answer=True, no_answer_threshold=0.5).get_node("Retriever")
    assert retriever.no_answer is True and retriever.no_answer_threshold == 0.5
    assert load().get_node("Retriever").no_answer is False
    for bad in ({"no_answer": "yes"}, {"no_answer_threshold": "0.5"}):
        with pytest.raises(PipelineSchemaError):
            load(**bad)


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
        {"no_answer_threshold": float("nan")},
    ],
)
def test_bad_init_values_are_refused(calibrated_dir, bad):
    with pytest.raises(InvalidParameterError, match="no_answer"):
        PhraseRetriever(document_store=PhraseDocumentStore(progress_bar=False), model=str(calibrated_dir), **bad)


@pytest.mark.parametrize(
    "bad",
    [
        {"no_answer": "true"},
        {"no_answer": 0},
        {"no_answer": True, "no_answer_threshold": 2},
        {"no_answer": True, "no_answer_threshold": -1e-9},
        {"no_answer": True, "no_answer_threshold": "1"},
        {"no_answer": False, "no_answer_threshold": "1"},  # checked even when off
    ],
)
def test_bad_query_values_are_refused(calibrated_dir, haystack_docs, bad):
    retriever = _retriever(calibrated_dir, haystack_docs)
    with pytest.raises(InvalidParameterError, match="no_answer"):
        retriever.run_query(QUESTION, **bad)
    with pytest.raises(InvalidParameterError, match="no_answer"):
        retriever.run_query_batch([QUESTION], **bad)


def test_a_model_without_a_calibration_is_refused(tiny_model_dir, haystack_docs):
    with pytest.raises(InvalidParameterError, match="calibration"):
        PhraseRetriever(
            document_store=PhraseDocumentStore(progress_bar=False), model=str(tiny_model_dir), no_answer=True
        )
    retriever = _retriever(tiny_model_dir, haystack_docs)
    assert retriever.run_query(QUESTION)[0]["answers"]  # off: answers as before
    with pytest.raises(InvalidParameterError, match="calibration"):
        retriever.run_query(QUESTION, no_answer=True)


# ----------------------------------------------------------------- the REST API (rest_api.yml in process)
@pytest.fixture(scope="module")
def rest(tmp_path_factory, calibrated_dir):
    """The shipped REST app over a store with the six tiny passages, served with the calibrated tiny model."""
    pytest.importorskip("fastapi", reason='the serve extra is not installed (pip install "dphr-haystack[serve]")')
    pytest.importorskip("httpx")
    from dphr_haystack.nodes.rest.app import build_app
    from dphr_haystack.nodes.rest.settings import RestSettings
    from tests.conftest import tiny_passages
    from tests.haystack.test_rest_uploads import AsgiClient

    tmp = tmp_path_factory.mktemp("rest-no-answer")
    settings = RestSettings(
        store_path=tmp / "store",
        upload_dir=tmp / "uploads",
        phrase_retriever_params={"model": str(calibrated_dir), "device": "cpu"},
    )
    client = AsgiClient(build_app(settings))
    text = "\n\n".join(p["text"] for p in tiny_passages()).encode()
    response = client.post("/file-upload", files=[("files", ("notes.txt", text))])
    assert response.status_code == 200, response.text
    return client


def _rest_no_answer(answer: dict) -> bool:
    return bool((answer.get("meta") or {}).get("no_answer"))


def _assert_rest_no_answer(answer: dict, top: dict) -> None:
    """A JSON "no answer": Haystack's Answer with empty text, offsets (0, 0), no context and no document."""
    assert answer["answer"] == "" and answer["type"] == "extractive"
    assert answer.get("context") is None and answer.get("document_ids") is None
    assert answer["offsets_in_context"] == [{"start": 0, "end": 0}]
    assert answer["offsets_in_document"] == [{"start": 0, "end": 0}]
    assert answer["meta"] == {"no_answer": True, "top_confidence": top["meta"]["confidence"]}
    assert answer["score"] == pytest.approx(1.0 - top["meta"]["confidence"], abs=1e-9)


def _query(rest, params: dict | None = None, path: str = "/query", **body):
    response = rest.post(path, json={"query": QUESTION, **({"params": params} if params else {}), **body})
    assert response.status_code == 200, response.text
    return response.json()


def test_rest_query_adds_no_answer_per_request(rest):
    plain = _query(rest)
    assert plain["answers"] and not any(_rest_no_answer(a) for a in plain["answers"])
    for threshold, at in ((1.0, 0), (0.0, -1)):
        body = _query(rest, {"Retriever": {"no_answer": True, "no_answer_threshold": threshold}})
        assert len(body["answers"]) == len(plain["answers"]) + 1
        _assert_rest_no_answer(body["answers"][at], plain["answers"][0])
        rest_of = body["answers"][1:] if at == 0 else body["answers"][:-1]
        assert rest_of == plain["answers"] and body["documents"] == plain["documents"]
    # a pipeline-wide param reaches the retriever too; a request without it gets none
    assert _rest_no_answer(_query(rest, {"no_answer": True, "no_answer_threshold": 1.0})["answers"][0])
    assert not any(_rest_no_answer(a) for a in _query(rest)["answers"])
    batch = rest.post(
        "/query-batch",
        json={
            "queries": [QUESTION, "Who created Python?"],
            "params": {"Retriever": {"no_answer": True, "no_answer_threshold": 1.0}},
        },
    )
    assert batch.status_code == 200, batch.text
    assert all(_rest_no_answer(one["answers"][0]) for one in batch.json())


def test_rest_compare_adds_no_answer_to_the_answers_column_only(rest):
    plain = _query(rest, path="/compare", top_k=3)
    columns = {c["name"]: c for c in plain["columns"]}
    assert not any(_rest_no_answer(a) for c in plain["columns"] for a in c["answers"])
    for threshold, at in ((1.0, 0), (0.0, -1)):
        body = _query(rest, path="/compare", top_k=3, no_answer=True, no_answer_threshold=threshold)
        asked = {c["name"]: c for c in body["columns"]}
        answers = asked["answers"]["answers"]
        _assert_rest_no_answer(answers[at], columns["answers"]["answers"][0])
        assert [a for a in answers if not _rest_no_answer(a)] == columns["answers"]["answers"]
        for name, column in asked.items():
            assert column["documents"] == columns[name]["documents"]
            if name != "answers":
                assert column["answers"] == columns[name]["answers"]
    off = _query(rest, path="/compare", top_k=3, no_answer=False, no_answer_threshold=1.0)
    assert not any(_rest_no_answer(a) for c in off["columns"] for a in c["answers"])


@pytest.mark.parametrize(
    "params",
    [
        {"Retriever": {"no_answer": "yes"}},
        {"Retriever": {"no_answer": 1}},
        {"Retriever": {"no_answer": True, "no_answer_threshold": 1.5}},
        {"Retriever": {"no_answer": True, "no_answer_threshold": -0.5}},
        {"Retriever": {"no_answer": True, "no_answer_threshold": "0.5"}},
        {"Retriever": {"no_answer": True, "no_answer_threshold": True}},
        {"no_answer": "true"},
    ],
)
def test_rest_bad_no_answer_params_are_400_json(rest, params):
    for path, body in (("/query", {"query": QUESTION}), ("/query-batch", {"queries": [QUESTION]})):
        response = rest.post(path, json={**body, "params": params})
        assert response.status_code == 400, (path, response.status_code, response.text[:300])
        message = " ".join(response.json()["errors"])
        assert "no_answer" in message and "Traceback" not in response.text


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"no_answer": "true"}, 422),
        ({"no_answer": 1}, 422),
        ({"no_answer": True, "no_answer_threshold": "0.5"}, 422),
        ({"no_answer": True, "no_answer_threshold": True}, 422),
        ({"no_answer": True, "no_answer_threshold": 1.5}, 400),
        ({"no_answer": False, "no_answer_threshold": -1}, 400),
    ],
)
def test_rest_bad_compare_options_are_4xx_json(rest, body, status):
    response = rest.post("/compare", json={"query": QUESTION, **body})
    assert response.status_code == status, response.text[:300]
    assert response.json()["errors"] and "Traceback" not in response.text


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("holds", [0.3, 0.7])  # either side of the default threshold, whatever the confidences
def test_a_holds_answer_scores_and_places_no_answer(tmp_path, _tiny_model_session, haystack_docs, unit, holds):
    model_dir = save_holding(copy.deepcopy(_tiny_model_session), tmp_path / "holding", holds)
    answers = _retriever(model_dir, haystack_docs, unit=unit, no_answer=True).run_query(QUESTION)[0]["answers"]
    assert_holding_no_answer(answers, holds, _is_no_answer)


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize(("holds", "documented"), DOCUMENTED)
def test_a_model_s_documented_threshold_places_no_answer_unless_the_search_gives_one(
    tmp_path, _tiny_model_session, haystack_docs, unit, holds, documented
):
    model_dir = save_holding(copy.deepcopy(_tiny_model_session), tmp_path / "holding", holds, documented)
    retriever = _retriever(model_dir, haystack_docs, unit=unit, no_answer=True)
    assert_holding_no_answer(retriever.run_query(QUESTION)[0]["answers"], holds, _is_no_answer, documented)
    given = retriever.run_query(QUESTION, no_answer_threshold=NO_ANSWER_THRESHOLD)[0]["answers"]
    assert_holding_no_answer(given, holds, _is_no_answer)


def test_the_answers_and_no_answer_name_what_no_document_writes(tmp_path, _tiny_model_session, haystack_docs):
    from tests.core.test_corpus_words import save_reading_corpus

    model_dir = save_reading_corpus(copy.deepcopy(_tiny_model_session), tmp_path / "reading")
    retriever = _retriever(model_dir, haystack_docs, unit="phrase", no_answer=True)
    answers = retriever.run_query("Who founded Quillfern?")[0]["answers"]
    assert _is_no_answer(answers[0]) and all(a.meta["unwritten_names"] == ["Quillfern"] for a in answers)
    answers = retriever.run_query(QUESTION)[0]["answers"]  # "France" is written
    assert not any("unwritten_names" in a.meta for a in answers)
