"""PhraseRetriever and PhraseIndexer as Haystack 2 components, alone and in pipelines."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from haystack import Document, Pipeline
from haystack.components.writers import DocumentWriter
from haystack.dataclasses import ExtractedAnswer
from haystack.document_stores.types import DuplicatePolicy
from haystack.errors import FilterError

from dphr_haystack import DphrError, InvalidParameterError, InvalidQueryError
from dphr_haystack.haystack2 import PhraseDocumentStore, PhraseIndexer, PhraseRetriever
from dphr_haystack.model.cache import cached_models

pytestmark = pytest.mark.unit


@pytest.fixture
def filled(tiny_model_dir, hs2_docs, one_torch_thread):
    store = PhraseDocumentStore(progress_bar=False)
    indexer = PhraseIndexer(document_store=store, model=str(tiny_model_dir), progress_bar=False)
    out = indexer.run(documents=hs2_docs)
    assert out == {"documents_written": 6, "phrases_encoded": 6}
    return store


def test_retriever_outputs_documents_and_answers(filled, tiny_model_dir):
    retriever = PhraseRetriever(document_store=filled, model=str(tiny_model_dir), top_k=3)
    retriever.warm_up()
    out = retriever.run(query="Who wrote Hamlet?")
    docs, answers = out["documents"], out["answers"]
    assert 1 <= len(docs) <= 3 and len({d.id for d in docs}) == len(docs)
    assert [d.score for d in docs] == sorted((d.score for d in docs), reverse=True)
    for doc in docs:
        assert doc.content[doc.meta["best_phrase_start"] : doc.meta["best_phrase_end"]] == doc.meta["best_phrase"]
        assert 0.0 < doc.score < 1.0 and doc.meta["title"]  # stored meta kept
    for answer in answers:
        assert isinstance(answer, ExtractedAnswer) and answer.query == "Who wrote Hamlet?"
        span = answer.document_offset
        assert answer.document.content[span.start : span.end] == answer.data
        assert "raw_score" in answer.meta


def test_run_time_top_k_unit_and_filters(filled, tiny_model_dir):
    retriever = PhraseRetriever(document_store=filled, model=str(tiny_model_dir), top_k=10)
    assert len(retriever.run(query="capital city", top_k=2, unit="phrase")["answers"]) == 2
    out = retriever.run(query="capital city", unit="passage", top_k=6)
    assert len(out["documents"]) == 6
    only = {"field": "meta.topic", "operator": "in", "value": ["nature"]}
    out = retriever.run(query="river", filters=only)
    assert {d.id for d in out["documents"]} == {"p2", "p4"}
    assert {a.document.id for a in out["answers"]} <= {"p2", "p4"}


def test_unit_document_groups_by_document_id(tiny_model_dir, one_torch_thread):
    store = PhraseDocumentStore(progress_bar=False)
    docs = [
        Document(id=f"d{i}", content=text, meta={"document_id": "same" if i < 2 else f"g{i}"})
        for i, text in enumerate(["Paris is in France.", "Berlin is in Germany.", "The Nile is a river."])
    ]
    PhraseIndexer(document_store=store, model=str(tiny_model_dir), progress_bar=False).run(documents=docs)
    out = PhraseRetriever(document_store=store, model=str(tiny_model_dir)).run(query="a city", unit="document")
    assert len(out["documents"]) == 2
    assert {d.meta["phrase_document_id"] for d in out["documents"]} == {"same", "g2"}


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"top_k": 0}, InvalidParameterError),
        ({"unit": "sentence"}, InvalidParameterError),
        ({"filters": {"field": "meta.topic", "operator": "=="}}, FilterError),  # as InMemoryDocumentStore raises
        ({"filters": {"field": "meta.topic", "operator": "like", "value": "x"}}, FilterError),
        ({"filters": {"field": "meta.topic", "value": "x"}}, ValueError),
    ],
)
def test_bad_run_inputs_raise_typed_errors(filled, tiny_model_dir, kwargs, error):
    retriever = PhraseRetriever(document_store=filled, model=str(tiny_model_dir))
    with pytest.raises(error):
        retriever.run(query="capital", **kwargs)


def test_empty_query_and_bad_init_raise_typed_errors(filled, tiny_model_dir):
    with pytest.raises(InvalidQueryError):
        PhraseRetriever(document_store=filled, model=str(tiny_model_dir)).run(query="  ")
    for kwargs in ({"top_k": 0}, {"unit": "x"}, {"batch_size": 0}, {"device": "tpu"}, {"whole_words": "yes"}):
        with pytest.raises(InvalidParameterError) as info:
            PhraseRetriever(document_store=filled, model=str(tiny_model_dir), **kwargs)
        assert isinstance(info.value, DphrError)
    with pytest.raises(InvalidParameterError):
        PhraseRetriever(document_store=object())  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        PhraseIndexer(document_store=filled, policy="sometimes")  # type: ignore[arg-type]


def test_warm_up_loads_the_model_once(filled, tiny_model_dir):
    first = PhraseRetriever(document_store=filled, model=str(tiny_model_dir))
    second = PhraseRetriever(document_store=filled, model=str(tiny_model_dir))
    assert first.phrase_model is None
    first.warm_up()
    loaded = first.phrase_model
    first.warm_up()
    second.warm_up()
    assert first.phrase_model is loaded and second.phrase_model is loaded
    assert (str(tiny_model_dir), "cpu") in cached_models()  # the core's cache, shared with the 1.x nodes


def test_documents_from_a_document_writer_become_searchable(tiny_model_dir, hs2_docs, one_torch_thread):
    store = PhraseDocumentStore(progress_bar=False)
    pipeline = Pipeline()
    pipeline.add_component("writer", DocumentWriter(document_store=store, policy=DuplicatePolicy.OVERWRITE))
    pipeline.run({"writer": {"documents": hs2_docs}})
    assert store.phrase_count() == 0
    retriever = PhraseRetriever(document_store=store, model=str(tiny_model_dir), top_k=6)
    assert len(retriever.run(query="capital")["documents"]) == 6 and store.phrase_count() == 6
    lazy = PhraseDocumentStore(progress_bar=False)
    lazy.write_documents(hs2_docs)
    off = PhraseRetriever(document_store=lazy, model=str(tiny_model_dir), encode_missing=False)
    assert off.run(query="capital") == {"documents": [], "answers": []}
    PhraseIndexer(document_store=lazy, model=str(tiny_model_dir), progress_bar=False).run(documents=[])
    assert len(off.run(query="capital", top_k=6)["documents"]) == 6


def test_components_round_trip_through_to_dict(filled, tiny_model_dir):
    retriever = PhraseRetriever(
        document_store=filled,
        model=str(tiny_model_dir),
        unit="phrase",
        top_k=4,
        filters={"field": "meta.topic", "operator": "==", "value": "city"},
        passage_scoring="logsumexp",
    )
    again = PhraseRetriever.from_dict(retriever.to_dict())
    assert again.document_store is filled and again.to_dict() == retriever.to_dict()
    assert again.passage_scoring == "logsumexp"
    with pytest.raises(InvalidParameterError, match="passage_scoring"):
        PhraseRetriever(document_store=filled, model=str(tiny_model_dir), passage_scoring="sum")
    indexer = PhraseIndexer(document_store=filled, model=str(tiny_model_dir), policy=DuplicatePolicy.SKIP)
    again = PhraseIndexer.from_dict(indexer.to_dict())
    assert again.policy is DuplicatePolicy.SKIP and again.document_store is filled


def test_store_in_a_fresh_name_space_deserialises_empty(filled):
    data = filled.to_dict()
    data["init_parameters"]["index"] = f"other-{uuid.uuid4()}"
    assert PhraseDocumentStore.from_dict(data).count_documents() == 0


def test_answer_score_is_the_calibrated_confidence_when_the_model_has_one(filled):
    from dphr_haystack.documents.results import retrieved_answer
    from dphr_haystack.search import PhraseHit

    doc = filled.filter_documents()[0]
    plain = PhraseHit(text="Paris", score=250.0, passage_id=doc.id, document_id=doc.id, title="", start=0, end=5)
    calibrated = PhraseHit(
        text="Paris", score=250.0, passage_id=doc.id, document_id=doc.id, title="", start=0, end=5, confidence=0.42
    )
    assert retrieved_answer(calibrated, doc, scale=True).score == 0.42
    assert retrieved_answer(calibrated, doc, scale=True).meta == {  # no title: none to give
        "raw_score": 250.0,
        "phrase_document_id": doc.id,
        "confidence": 0.42,
    }
    titled = retrieved_answer(dataclasses.replace(calibrated, title="Paris (city)"), doc, scale=True)
    assert titled.meta["title"] == "Paris (city)"
    assert 0.9 < retrieved_answer(plain, doc, scale=True).score < 1.0  # expit(250 / 100)
    assert retrieved_answer(plain, doc, scale=False).score == 250.0
