"""The 1.x PhraseRetriever's ``verify`` option, through the node, a pipeline and the REST server: off by default and
then nothing changes; on (at init, per query, per pipeline run, per request), the answers keep their texts and order
while every confidence moves by the same log-odds, the top one to the verification's probability; "no answer" then
weighs the verified confidence. A model without a verification is refused."""

from __future__ import annotations

import copy
import math

import pytest
from haystack import Pipeline

from dphr_haystack.errors import InvalidParameterError
from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever
from tests.conftest import tiny_passages
from tests.core.test_answers_every_unit import QUESTION, save_calibrated, save_verified
from tests.haystack.test_no_answer import _retriever
from tests.haystack.test_rest_errors import _env, _serve

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def verified_dir(tmp_path_factory, _tiny_model_session, tiny_reader_dir):
    path = tmp_path_factory.mktemp("verify-hs1") / "model"
    return save_verified(copy.deepcopy(_tiny_model_session), path, tiny_reader_dir)


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def _assert_verified(verified, plain) -> None:
    """The same answers in the same order, every confidence moved by one shift that is not zero."""
    assert [(a.answer, a.document_ids) for a in verified] == [(a.answer, a.document_ids) for a in plain]
    shifts = [_logit(v.meta["confidence"]) - _logit(p.meta["confidence"]) for v, p in zip(verified, plain)]
    assert max(shifts) - min(shifts) < 1e-6 and abs(shifts[0]) > 1e-6


@pytest.mark.parametrize("unit", ["phrase", "passage", "document"])
def test_verify_moves_the_confidences_when_asked_and_only_then(verified_dir, haystack_docs, unit):
    retriever = _retriever(verified_dir, haystack_docs, unit=unit)
    assert retriever.verify is False
    plain = retriever.run_query(QUESTION)[0]["answers"]
    assert retriever.run_query(QUESTION, verify=False)[0]["answers"] == plain
    _assert_verified(retriever.run_query(QUESTION, verify=True)[0]["answers"], plain)
    checked = _retriever(verified_dir, haystack_docs, unit=unit, verify=True)
    _assert_verified(checked.run_query(QUESTION)[0]["answers"], plain)
    assert checked.run_query(QUESTION, verify=False)[0]["answers"] == plain
    batch = checked.run_query_batch([QUESTION, QUESTION])[0]["answers"]
    _assert_verified(batch[1], plain)


def test_no_answer_weighs_the_verified_confidence(verified_dir, haystack_docs):
    retriever = _retriever(verified_dir, haystack_docs, unit="phrase", no_answer=True)
    answers = retriever.run_query(QUESTION, verify=True)[0]["answers"]
    marker = next(a for a in answers if (a.meta or {}).get("no_answer"))
    top = next(a for a in answers if not (a.meta or {}).get("no_answer"))
    assert marker.meta["top_confidence"] == top.meta["confidence"]
    assert marker.score == pytest.approx(1 - top.meta["confidence"])


def test_pipeline_params_turn_it_on_per_run(verified_dir, haystack_docs):
    pipeline = Pipeline()
    pipeline.add_node(_retriever(verified_dir, haystack_docs, unit="phrase"), name="Retriever", inputs=["Query"])
    plain = pipeline.run(query=QUESTION)["answers"]
    _assert_verified(pipeline.run(query=QUESTION, params={"Retriever": {"verify": True}})["answers"], plain)
    assert pipeline.run(query=QUESTION)["answers"] == plain


def test_a_model_without_a_verification_is_refused(tmp_path, _tiny_model_session, haystack_docs):
    calibrated = save_calibrated(copy.deepcopy(_tiny_model_session), tmp_path / "calibrated")
    with pytest.raises(InvalidParameterError, match="train.verifier"):
        PhraseRetriever(document_store=PhraseDocumentStore(), model=str(calibrated), device="cpu", verify=True)
    retriever = _retriever(calibrated, haystack_docs)
    with pytest.raises(InvalidParameterError, match="train.verifier"):
        retriever.run_query(QUESTION, verify=True)
    with pytest.raises(InvalidParameterError, match="verify"):
        retriever.run_query(QUESTION, verify="yes")


def test_the_rest_server_verifies_per_request(tmp_path, verified_dir):
    requests = pytest.importorskip("requests")
    pytest.importorskip("fastapi", reason='the serve extra is not installed (pip install "dphr-haystack[serve]")')
    text = "\n\n".join(p["text"] for p in tiny_passages()).encode()
    with _serve(tmp_path, _env(tmp_path, verified_dir)) as url:
        assert requests.post(f"{url}/file-upload", files={"files": ("notes.txt", text)}, timeout=300).ok

        def answers(path: str, body: dict) -> list[dict]:
            response = requests.post(f"{url}/{path}", json=body, timeout=120)
            assert response.status_code == 200, response.text
            found = response.json()
            return found["answers"] if path == "query" else found["columns"][0]["answers"]

        for path, plain_body, asked in (
            ("query", {"query": QUESTION}, {"query": QUESTION, "params": {"Retriever": {"verify": True}}}),
            ("compare", {"query": QUESTION, "top_k": 3}, {"query": QUESTION, "top_k": 3, "verify": True}),
        ):
            plain, verified = answers(path, plain_body), answers(path, asked)
            assert [a["answer"] for a in verified] == [a["answer"] for a in plain]
            assert verified[0]["meta"]["confidence"] != plain[0]["meta"]["confidence"]
            assert answers(path, plain_body) == plain  # only when asked
        refused = requests.post(f"{url}/compare", json={"query": QUESTION, "verify": "yes"}, timeout=60)
        assert refused.status_code == 422
