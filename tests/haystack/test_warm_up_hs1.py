"""Warming up the 1.x nodes: a PhraseRetriever's ``warm_up`` has its store read what the first search would
otherwise wait for (the passages' words, when the model's calibration weighs them), and the REST app warms its query
pipeline's phrase retrievers before it answers."""

from __future__ import annotations

import copy

import pytest

from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever
from tests.core.test_corpus_words import counted_passages, save_reading_corpus

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def reading_dir(tmp_path_factory, _tiny_model_session):
    return save_reading_corpus(copy.deepcopy(_tiny_model_session), tmp_path_factory.mktemp("warm") / "reading")


def _filled(path, model_dir, docs) -> PhraseDocumentStore:
    store = PhraseDocumentStore(path=str(path), progress_bar=False)
    retriever = PhraseRetriever(document_store=store, model=str(model_dir), device="cpu")
    store.write_documents(docs)
    store.update_embeddings(retriever)
    return store


def test_a_warmed_retriever_has_its_store_count_the_corpus_words(tmp_path, reading_dir, tiny_model_dir, haystack_docs):
    store = _filled(tmp_path / "store", reading_dir, haystack_docs)
    PhraseRetriever(document_store=store, model=str(tiny_model_dir), device="cpu").warm_up()
    phrase_index = store.get_phrase_index()
    assert counted_passages(phrase_index) == 0  # a calibration that does not weigh them: nothing read
    PhraseRetriever(document_store=store, model=str(reading_dir), device="cpu").warm_up()
    assert counted_passages(phrase_index) == phrase_index.num_live_passages == len(haystack_docs)
    PhraseRetriever(model=str(reading_dir), device="cpu").warm_up()  # no store: nothing to read


def test_the_rest_app_warms_its_phrase_retrievers_before_it_answers(tmp_path, reading_dir, haystack_docs):
    pytest.importorskip("fastapi", reason='the serve extra is not installed (pip install "dphr-haystack[serve]")')
    from dphr_haystack.nodes.rest import RestSettings, load_served_pipelines

    _filled(tmp_path / "store", reading_dir, haystack_docs)
    settings = RestSettings(
        store_path=tmp_path / "store",
        upload_dir=tmp_path / "uploads",
        phrase_retriever_params={"model": str(reading_dir), "device": "cpu"},
    )
    served = load_served_pipelines(settings)
    phrase_index = served.document_store.get_phrase_index()
    assert counted_passages(phrase_index) == phrase_index.num_live_passages == len(haystack_docs)
