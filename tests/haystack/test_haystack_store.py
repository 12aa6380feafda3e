"""PhraseDocumentStore beyond the conformance suite: phrases, filters, deletion, persistence, bad input."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from haystack.errors import DuplicateDocumentError
from haystack.nodes import BM25Retriever
from haystack.schema import Answer, Document, Label

from dphr_haystack.errors import InvalidParameterError, ModelMismatchError
from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

pytestmark = pytest.mark.unit


def _ids(docs):
    return [d.id for d in docs]


def test_default_store_needs_no_arguments():
    store = PhraseDocumentStore()
    assert store.in_memory and store.index == "document"
    assert store.get_document_count() == 0
    assert store.get_phrase_index() is None


def test_update_embeddings_encodes_only_new_documents(tiny_retriever, haystack_docs):
    store = tiny_retriever.document_store
    store.write_documents(haystack_docs[:4])
    first = store.update_embeddings(tiny_retriever)
    assert (first.encoded, first.skipped_existing) == (4, 0)
    store.write_documents(haystack_docs[4:])
    second = store.update_embeddings(tiny_retriever)
    assert (second.encoded, second.skipped_existing) == (2, 4)
    assert store.get_phrase_document_count() == 6
    phrase_index = store.get_phrase_index()
    assert store.get_phrase_count() == len(phrase_index) > 6  # phrases, not documents
    gone = int(phrase_index.num_tokens[phrase_index.passage_row(haystack_docs[0].id)])
    store.delete_documents(ids=[haystack_docs[0].id])
    assert store.get_phrase_count() == len(phrase_index) - gone
    store.write_documents(haystack_docs[:1])
    store.update_embeddings(tiny_retriever)
    again = store.update_embeddings(tiny_retriever, update_existing_embeddings=True)
    assert again.encoded == 6 and store.get_phrase_document_count() == 6


def test_update_embeddings_resumes_after_an_interruption(tiny_retriever, haystack_docs, monkeypatch):
    store = tiny_retriever.document_store
    store.write_documents(haystack_docs)
    model = tiny_retriever.phrase_model
    real = model.iter_encoded_pieces  # called once per chunk of documents
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("simulated crash in the second chunk")
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "iter_encoded_pieces", flaky)
    with pytest.raises(KeyboardInterrupt):
        store.update_embeddings(tiny_retriever, batch_size=2)  # commits every 2 documents
    assert store.get_phrase_document_count() == 2
    monkeypatch.setattr(model, "iter_encoded_pieces", real)
    stats = store.update_embeddings(tiny_retriever, batch_size=2)
    assert (stats.encoded, stats.skipped_existing) == (4, 2)
    assert store.get_phrase_document_count() == 6


def test_non_text_and_empty_documents_are_skipped_and_counted(tiny_retriever, haystack_docs):
    store = tiny_retriever.document_store
    table = Document(content=pd.DataFrame({"a": [1, 2]}), content_type="table", id="table-1")
    blank = Document(content="   ", id="blank-1")
    store.write_documents(haystack_docs + [table, blank])
    stats = store.update_embeddings(tiny_retriever)
    assert (stats.encoded, stats.skipped_non_text) == (6, 2)
    assert store.get_phrase_document_count() == 6


def test_deleting_documents_removes_their_phrases(indexed_retriever):
    store = indexed_retriever.document_store
    query = "What is the capital of France?"
    before = _ids(indexed_retriever.retrieve(query, top_k=6))
    assert "p0" in before
    store.delete_documents(ids=["p0"])
    after = _ids(indexed_retriever.retrieve(query, top_k=6))
    assert "p0" not in after and len(after) == 5
    store.delete_documents(filters={"topic": "nature"})
    assert sorted(_ids(indexed_retriever.retrieve(query, top_k=6))) == ["p1", "p3", "p5"]
    assert store.get_phrase_document_count() == 3
    store.delete_documents(ids=[])  # an empty id list deletes nothing
    assert store.get_document_count() == 3
    store.delete_documents()
    assert indexed_retriever.retrieve(query) == [] and store.get_phrase_index() is None


def test_filters_apply_to_phrases_passages_and_documents(indexed_retriever):
    query = "Which city is a capital?"
    for unit in ("phrase", "passage", "document"):
        indexed_retriever.unit = unit
        docs = indexed_retriever.retrieve(query, filters={"topic": {"$in": ["nature", "tech"]}}, top_k=5)
        assert docs and {d.meta["topic"] for d in docs} <= {"nature", "tech"}
        out, _ = indexed_retriever.run_query(query, filters={"title": "Hamlet"})
        assert {a.document_ids[0] for a in out["answers"]} == {"p3"}
    assert indexed_retriever.retrieve(query, filters={"topic": "no-such-topic"}) == []


def test_bm25_on_the_store_honours_filters_and_empty_store():
    store = PhraseDocumentStore(progress_bar=False)
    bm25 = BM25Retriever(document_store=store, top_k=3)
    assert bm25.retrieve("capital") == []
    store.write_documents(
        [
            Document("Paris is the capital of France.", meta={"lang": "en"}),
            Document("Berlin is the capital of Germany.", meta={"lang": "de"}),
            Document("Rivers flow into the sea.", meta={"lang": "en"}),
        ]
    )
    assert len(bm25.retrieve("capital")) == 3
    filtered = bm25.retrieve("capital", filters={"lang": "de"})
    assert [d.content for d in filtered] == ["Berlin is the capital of Germany."]
    store.delete_documents()
    assert bm25.retrieve("capital") == []


def test_duplicate_documents_follow_haystack_policy(tiny_retriever, haystack_docs):
    store = tiny_retriever.document_store
    store.index_documents(haystack_docs, tiny_retriever)
    changed = Document(content="Paris hosts the Eiffel Tower, built in 1889.", id="p0", meta={"title": "Paris"})
    with pytest.raises(DuplicateDocumentError):
        store.write_documents([changed], duplicate_documents="fail")
    store.write_documents([changed], duplicate_documents="skip")
    assert store.get_document_by_id("p0").content.startswith("Paris is the capital")
    assert store.get_phrase_document_count() == 6
    store.write_documents([changed])  # default policy: overwrite; the stale phrases go
    assert store.get_document_by_id("p0").content == changed.content
    assert store.get_phrase_document_count() == 5
    assert store.update_embeddings(tiny_retriever).encoded == 1
    tiny_retriever.unit = "phrase"
    answers = tiny_retriever.run_query("When was the tower built?", filters={"title": "Paris"}, top_k=10)[0]["answers"]
    assert answers and all(a.context == changed.content for a in answers)


def test_save_and_load_round_trip(indexed_retriever, tmp_path):
    store = indexed_retriever.document_store
    label = Label(
        query="capital of France?",
        document=store.get_document_by_id("p0"),
        is_correct_answer=True,
        is_correct_document=True,
        origin="gold-label",
        answer=Answer("Paris", document_ids=["p0"]),
    )
    store.write_labels([label])
    store.write_documents(
        [Document("A document with a dense embedding.", id="emb", embedding=np.arange(768, dtype=np.float32))],
        index="other",
    )
    store.save(tmp_path / "store")
    store.save(tmp_path / "store")  # saving over an existing directory replaces it
    loaded = PhraseDocumentStore.load(tmp_path / "store")
    assert sorted(_ids(loaded.get_all_documents())) == sorted(_ids(store.get_all_documents()))
    assert loaded.get_all_labels() == [label]
    other = loaded.get_document_by_id("emb", index="other")
    np.testing.assert_array_equal(other.embedding, np.arange(768, dtype=np.float32))
    queries = ["capital of France", "Who wrote Hamlet?"]
    expected = indexed_retriever.retrieve_batch(queries)
    indexed_retriever.document_store = loaded
    got = indexed_retriever.retrieve_batch(queries)
    assert [[(d.id, d.meta["best_phrase"]) for d in ds] for ds in got] == [
        [(d.id, d.meta["best_phrase"]) for d in ds] for ds in expected
    ]
    assert [d.score for ds in got for d in ds] == pytest.approx([d.score for ds in expected for d in ds])
    assert PhraseDocumentStore(load_path=str(tmp_path / "store")).get_phrase_document_count() == 6
    assert len(BM25Retriever(document_store=loaded).retrieve("Hamlet")) > 0


def test_phrase_index_built_with_another_model_is_refused(indexed_retriever, tiny_base_dir):
    other = PhraseRetriever(document_store=indexed_retriever.document_store, model=str(tiny_base_dir), device="cpu")
    with pytest.raises(ModelMismatchError):
        other.retrieve("capital")
    with pytest.raises(ModelMismatchError):
        indexed_retriever.document_store.update_embeddings(other)


def test_phrases_are_kept_per_haystack_index(tiny_retriever, haystack_docs):
    store = tiny_retriever.document_store
    store.index_documents(haystack_docs[:2], tiny_retriever)
    store.index_documents(haystack_docs[2:], tiny_retriever, index="second")
    assert store.get_phrase_document_count() == 2 and store.get_phrase_document_count("second") == 4
    assert set(_ids(tiny_retriever.retrieve("capital", index="second", top_k=10))) <= {"p2", "p3", "p4", "p5"}
    store.delete_index("second")
    assert store.get_phrase_index("second") is None


@pytest.mark.integration
@pytest.mark.skipif(not os.environ.get("DPHR_ES_HOST"), reason="set DPHR_ES_HOST to an Elasticsearch 7 host to run")
def test_elasticsearch_backed_store(tiny_model_dir, haystack_docs):
    host, _, port = os.environ["DPHR_ES_HOST"].partition(":")
    store = PhraseDocumentStore(
        elasticsearch_host=host,
        elasticsearch_port=int(port or 9200),
        index="dphr_test_docs",
        label_index="dphr_test_labels",
        progress_bar=False,
    )
    try:
        store.delete_documents()
        retriever = PhraseRetriever(document_store=store, model=str(tiny_model_dir), top_k=3, device="cpu")
        assert store.index_documents(haystack_docs, retriever).encoded == 6
        assert BM25Retriever(document_store=store).retrieve("Hamlet")[0].id == "p3"
        docs = retriever.retrieve("capital", filters={"topic": "city"})
        assert docs and {d.id for d in docs} <= {"p0", "p1"}
        store.delete_documents(ids=["p0"])
        assert "p0" not in _ids(retriever.retrieve("capital", top_k=6))
    finally:
        store.delete_index("dphr_test_docs")


def test_writes_do_not_rebuild_bm25_until_a_query(monkeypatch):
    """Ingesting in batches costs each write its batch, not the corpus: BM25 is rebuilt once, at the next query."""
    store = PhraseDocumentStore(progress_bar=False)
    rebuilds = []
    original = store.inner.update_bm25
    monkeypatch.setattr(store.inner, "update_bm25", lambda index=None: rebuilds.append(index) or original(index))
    for batch in range(5):
        store.write_documents([{"content": f"passage {batch}-{i} about topic{batch}"} for i in range(3)])
    store.delete_documents(ids=[store.get_all_documents()[0].id])
    assert rebuilds == []
    hits = store.query("topic4", top_k=3)
    assert rebuilds == ["document"] and {d.content for d in hits} == {f"passage 4-{i} about topic4" for i in range(3)}
    store.query("topic3", top_k=3)
    assert rebuilds == ["document"]  # nothing written since
    store.write_documents([{"content": "a new passage about topic9"}])
    assert [d.content for d in store.query("topic9", top_k=1)] == ["a new passage about topic9"]
    assert len(rebuilds) == 2


def test_a_store_opened_from_a_keyed_index_rebuilds_it_with_its_keys(tiny_model_dir, haystack_docs, tmp_path, caplog):
    import numpy as np

    from dphr_haystack import PhraseIndex

    store = PhraseDocumentStore(path=str(tmp_path / "made"), progress_bar=False, phrase_key_vectors=np.int64(2))
    retriever = PhraseRetriever(document_store=store, model=str(tiny_model_dir), top_k=3, device="cpu")
    store.index_documents(haystack_docs, retriever)  # a numpy integer is recorded as a number (JSON)
    source = store.get_phrase_index().path
    opened = PhraseDocumentStore.from_index(source, progress_bar=False)
    assert opened.phrase_key_vectors == 2 and opened.phrase_dtype == "float16"  # the index's own settings
    retriever.document_store = opened
    opened.delete_documents()  # every document: its phrase index goes, the next one is built as it was
    opened.index_documents(haystack_docs, retriever)
    assert opened.get_phrase_index().key_vectors == 2 and PhraseIndex.load(source).key_vectors == 2
    asking = PhraseDocumentStore(path=str(tmp_path / "made"), progress_bar=False, phrase_key_vectors=3)
    retriever.document_store = asking
    with caplog.at_level("WARNING"):
        asking.update_embeddings(retriever)
    assert "keeps phrase_key_vectors=2 (the store asks for 3)" in caplog.text  # its index keeps its keys
    assert asking.get_phrase_index().key_vectors == 2


def test_a_store_of_key_vectors_searches_them_and_saves_them(tiny_model_dir, haystack_docs, tmp_path):
    store = PhraseDocumentStore(progress_bar=False, phrase_key_vectors=2)
    retriever = PhraseRetriever(document_store=store, model=str(tiny_model_dir), top_k=3, device="cpu")
    store.index_documents(haystack_docs, retriever)
    phrase_index = store.get_phrase_index()
    assert phrase_index.key_vectors == 2 and phrase_index.num_searched_vectors == 12 < len(phrase_index)
    expected = retriever.retrieve_batch(["capital of France", "Who wrote Hamlet?"])
    assert all(len(docs) == 3 for docs in expected)
    store.save(tmp_path / "store")
    loaded = PhraseDocumentStore.load(tmp_path / "store")
    assert loaded.phrase_key_vectors == 2 and loaded.get_phrase_index().key_vectors == 2
    retriever.document_store = loaded
    got = retriever.retrieve_batch(["capital of France", "Who wrote Hamlet?"])
    assert [[d.id for d in ds] for ds in got] == [[d.id for d in ds] for ds in expected]
    with pytest.raises(InvalidParameterError, match="key_vectors"):
        PhraseDocumentStore(phrase_key_vectors=-1)
