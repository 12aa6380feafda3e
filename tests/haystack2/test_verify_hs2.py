"""The 2.x PhraseRetriever's ``verify`` option: off by default and then nothing changes; on (init or ``run``, through
a pipeline too), the answers keep their texts and order while every confidence moves by the same log-odds; it
survives ``to_dict`` / ``from_dict``; a model without a verification is refused."""

from __future__ import annotations

import copy
import math

import pytest
from haystack import Pipeline

from dphr_haystack.errors import InvalidParameterError
from dphr_haystack.haystack2 import PhraseDocumentStore, PhraseRetriever
from tests.core.test_answers_every_unit import QUESTION, save_calibrated, save_verified
from tests.haystack2.test_no_answer import _retriever, filled_store

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def verified_dir(tmp_path_factory, _tiny_model_session, tiny_reader_dir):
    path = tmp_path_factory.mktemp("verify-hs2") / "model"
    return save_verified(copy.deepcopy(_tiny_model_session), path, tiny_reader_dir)


@pytest.fixture(scope="module")
def filled(verified_dir):
    return filled_store(verified_dir)


def _assert_verified(verified, plain) -> None:
    def logit(p: float) -> float:
        return math.log(p / (1 - p))

    assert [(a.data, a.document.id) for a in verified] == [(a.data, a.document.id) for a in plain]
    shifts = [logit(v.meta["confidence"]) - logit(p.meta["confidence"]) for v, p in zip(verified, plain)]
    assert max(shifts) - min(shifts) < 1e-6 and abs(shifts[0]) > 1e-6


@pytest.mark.parametrize("unit", ["phrase", "passage", "document"])
def test_verify_moves_the_confidences_when_asked_and_only_then(filled, verified_dir, unit):
    retriever = _retriever(filled, verified_dir, unit=unit)
    plain = retriever.run(query=QUESTION)["answers"]
    assert retriever.run(query=QUESTION, verify=False)["answers"] == plain
    _assert_verified(retriever.run(query=QUESTION, verify=True)["answers"], plain)
    checked = _retriever(filled, verified_dir, unit=unit, verify=True)
    _assert_verified(checked.run(query=QUESTION)["answers"], plain)
    again = PhraseRetriever.from_dict(checked.to_dict())
    assert again.verify is True
    _assert_verified(again.run(query=QUESTION)["answers"], plain)


def test_a_pipeline_passes_it_per_run(filled, verified_dir):
    pipeline = Pipeline()
    pipeline.add_component("retriever", _retriever(filled, verified_dir, unit="phrase"))
    plain = pipeline.run({"retriever": {"query": QUESTION}})["retriever"]["answers"]
    asked = pipeline.run({"retriever": {"query": QUESTION, "verify": True}})["retriever"]["answers"]
    _assert_verified(asked, plain)


def test_a_model_without_a_verification_is_refused(tmp_path, _tiny_model_session, filled):
    calibrated = save_calibrated(copy.deepcopy(_tiny_model_session), tmp_path / "calibrated")
    with pytest.raises(InvalidParameterError, match="train.verifier"):
        _retriever(PhraseDocumentStore(progress_bar=False), calibrated, verify=True)
    retriever = _retriever(PhraseDocumentStore(progress_bar=False), calibrated)
    with pytest.raises(InvalidParameterError, match="train.verifier"):
        retriever.run(query=QUESTION, verify=True)
