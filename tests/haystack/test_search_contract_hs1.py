"""The Haystack 1.x PhraseRetriever sends its store exactly the search options of the shared cases (the Haystack 2
suite checks its component against the same cases, so both send identical options for identical settings), takes
each option under the contract's name and default, and shows each as a checked attribute."""

from __future__ import annotations

import copy

import pytest

from dphr_haystack.errors import InvalidParameterError
from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever
from dphr_haystack.search_options import DEFAULT_SEARCH_OPTIONS, PhraseSearchOptions
from tests.core.test_answers_every_unit import save_verified
from tests.search_contract import CASES, assert_signature_follows_the_contract

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def calibrated_dir(tmp_path_factory, _tiny_model_session, tiny_reader_dir):
    """A calibrated model whose calibration has a verification (``verify=True`` needs one)."""
    path = tmp_path_factory.mktemp("contract") / "calibrated"
    return save_verified(copy.deepcopy(_tiny_model_session), path, tiny_reader_dir)


class RecordingStore(PhraseDocumentStore):
    """A store that records the options of each phrase search and finds nothing."""

    def __init__(self):
        super().__init__(progress_bar=False)
        self.sent: list[PhraseSearchOptions] = []

    def search_phrases(self, model, queries, options=DEFAULT_SEARCH_OPTIONS, filters=None, index=None, model_name=""):
        self.sent.append(options)
        return [[] for _ in queries]


def test_the_signature_names_every_option_with_the_contract_default():
    assert_signature_follows_the_contract(PhraseRetriever)


@pytest.mark.parametrize(("case", "init", "query", "sent"), CASES, ids=[c[0] for c in CASES])
def test_each_path_sends_the_cases_options(calibrated_dir, case, init, query, sent):
    store = RecordingStore()
    retriever = PhraseRetriever(document_store=store, model=str(calibrated_dir), device="cpu", **init)
    assert retriever.search_options == PhraseSearchOptions(**init)
    retriever.run(root_node="Query", query="Who wrote Hamlet?", **query)
    retriever.run_query("Who wrote Hamlet?", **query)
    retriever.run_batch(root_node="Query", queries=["Who wrote Hamlet?"], **query)
    retriever.run_query_batch(["Who wrote Hamlet?"], **query)
    assert [options.to_params() for options in store.sent] == [sent] * 4


def test_retrieve_sends_top_k_and_scale_score_per_call(calibrated_dir):
    store = RecordingStore()
    retriever = PhraseRetriever(document_store=store, model=str(calibrated_dir), device="cpu", top_k=4)
    retriever.retrieve("Who wrote Hamlet?", top_k=2, scale_score=False)
    retriever.retrieve_batch(["Who wrote Hamlet?"], batch_size=3)
    assert store.sent == [
        DEFAULT_SEARCH_OPTIONS.replaced(top_k=2, scale_score=False),
        DEFAULT_SEARCH_OPTIONS.replaced(top_k=4, batch_size=3),
    ]


def test_options_are_checked_attributes(calibrated_dir):
    retriever = PhraseRetriever(document_store=RecordingStore(), model=str(calibrated_dir), device="cpu")
    retriever.top_k = 3
    assert retriever.top_k == 3 and retriever.search_options.top_k == 3
    with pytest.raises(InvalidParameterError, match="ranking="):
        retriever.ranking = "relevance"
    assert retriever.ranking == "confidence"
    with pytest.raises(InvalidParameterError, match="top_k="):
        retriever.run_query("Who wrote Hamlet?", top_k=0)


@pytest.mark.parametrize(("case", "init", "query", "sent"), CASES, ids=[c[0] for c in CASES])
def test_a_pipeline_passes_a_querys_options_as_the_rest_server_does(calibrated_dir, case, init, query, sent):
    """The REST server's ``/query`` hands its ``params`` to ``Pipeline.run``: the same options reach the store."""
    from haystack import Pipeline

    store = RecordingStore()
    pipeline = Pipeline()
    retriever = PhraseRetriever(document_store=store, model=str(calibrated_dir), device="cpu", **init)
    pipeline.add_node(retriever, name="Retriever", inputs=["Query"])
    pipeline.run(query="Who wrote Hamlet?", params={"Retriever": query})
    assert [options.to_params() for options in store.sent] == [sent]
