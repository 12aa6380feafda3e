"""The Haystack 2 PhraseRetriever sends its store exactly the search options of the shared cases (the Haystack 1.x
suite checks its retriever against the same cases, so both send identical options for identical settings), takes
each option under the contract's name and default, shows each as a checked attribute and serialises all of them."""

from __future__ import annotations

import copy

import pytest

from dphr_haystack.errors import InvalidParameterError
from dphr_haystack.haystack2 import PhraseDocumentStore, PhraseRetriever
from dphr_haystack.search_options import DEFAULT_SEARCH_OPTIONS, SEARCH_OPTION_NAMES, PhraseSearchOptions
from tests.core.test_answers_every_unit import save_verified
from tests.search_contract import CASES, assert_signature_follows_the_contract

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def calibrated_dir(tmp_path_factory, _tiny_model_session, tiny_reader_dir):
    """A calibrated model whose calibration has a verification (``verify=True`` needs one)."""
    path = tmp_path_factory.mktemp("contract") / "calibrated"
    return save_verified(copy.deepcopy(_tiny_model_session), path, tiny_reader_dir)


def _recording(store: PhraseDocumentStore, monkeypatch) -> list[PhraseSearchOptions]:
    """The options of each phrase search ``store`` is asked for (it finds nothing)."""
    sent: list[PhraseSearchOptions] = []

    def search_phrases(model, queries, options=DEFAULT_SEARCH_OPTIONS, filters=None):
        sent.append(options)
        return [[] for _ in queries]

    monkeypatch.setattr(store, "search_phrases", search_phrases)
    return sent


def test_the_signature_names_every_option_with_the_contract_default():
    assert_signature_follows_the_contract(PhraseRetriever)


@pytest.mark.parametrize(("case", "init", "query", "sent"), CASES, ids=[c[0] for c in CASES])
def test_run_sends_the_cases_options(calibrated_dir, monkeypatch, case, init, query, sent):
    store = PhraseDocumentStore(progress_bar=False)
    recorded = _recording(store, monkeypatch)
    retriever = PhraseRetriever(document_store=store, model=str(calibrated_dir), device="cpu", **init)
    assert retriever.search_options == PhraseSearchOptions(**init)
    retriever.run(query="Who wrote Hamlet?", **query)
    assert [options.to_params() for options in recorded] == [sent]


@pytest.mark.parametrize(("case", "init", "query", "sent"), CASES, ids=[c[0] for c in CASES])
def test_every_option_survives_to_dict_and_from_dict(calibrated_dir, case, init, query, sent):
    store = PhraseDocumentStore(progress_bar=False)
    retriever = PhraseRetriever(document_store=store, model=str(calibrated_dir), device="cpu", **init)
    data = retriever.to_dict()
    assert {name: data["init_parameters"][name] for name in SEARCH_OPTION_NAMES} == {
        **PhraseSearchOptions().to_params(),
        **init,
    }
    assert PhraseRetriever.from_dict(data).search_options == retriever.search_options


def test_options_are_checked_attributes(calibrated_dir):
    retriever = PhraseRetriever(
        document_store=PhraseDocumentStore(progress_bar=False), model=str(calibrated_dir), device="cpu"
    )
    retriever.top_k = 3
    assert retriever.top_k == 3 and retriever.to_dict()["init_parameters"]["top_k"] == 3
    with pytest.raises(InvalidParameterError, match="ranking="):
        retriever.ranking = "relevance"
    assert retriever.ranking == "confidence"
    with pytest.raises(InvalidParameterError, match="top_k="):
        retriever.run(query="Who wrote Hamlet?", top_k=0)
