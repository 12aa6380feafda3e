"""Haystack 1.x store: non-finite embeddings and non-string meta keys refused; range filters skip null values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dphr_haystack.errors import InvalidDocumentError

pytestmark = pytest.mark.unit

BAD_EMBEDDINGS = [
    np.array([0.1, math.nan, 0.3], dtype=np.float32),
    np.array([0.1, math.inf, 0.3], dtype=np.float32),
    np.array([-math.inf, 0.2, 0.3]),
]


def _store(tmp_path=None):
    from dphr_haystack.nodes import PhraseDocumentStore

    return PhraseDocumentStore(progress_bar=False, path=tmp_path)


@pytest.mark.parametrize("embedding", BAD_EMBEDDINGS, ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("on_disk", [False, True], ids=["memory", "path"])
def test_non_finite_embedding_is_refused_before_anything_is_stored(tmp_path, embedding, on_disk):
    from haystack.schema import Document

    store = _store(tmp_path / "store" if on_disk else None)
    good = Document(content="a fine document", id="good", embedding=np.array([0.1, 0.2, 0.3], dtype=np.float32))
    bad = Document(content="a broken document", id="bad", embedding=embedding)
    with pytest.raises(InvalidDocumentError, match=r"'bad'.*embedding"):
        store.write_documents([good, bad])
    assert store.get_document_count() == 0
    if on_disk:
        assert _store(tmp_path / "store").get_document_count() == 0
    store.write_documents([good])  # a finite embedding is stored
    assert [d.id for d in store.get_all_documents(return_embedding=True)] == ["good"]


def test_non_finite_embedding_in_a_dict_is_refused():
    store = _store()
    with pytest.raises(InvalidDocumentError, match="embedding"):
        store.write_documents([{"content": "text", "id": "x", "embedding": np.array([math.nan, 1.0])}])
    assert store.get_document_count() == 0


@pytest.mark.parametrize("meta", [{2: "c"}, {"nested": {(1, 2): "c"}}, {"list": [{3.5: "c"}]}])
def test_non_string_meta_key_is_refused(tmp_path, meta):
    from haystack.schema import Document

    store = _store(tmp_path / "store")
    doc = Document(content="text", id="d")
    doc.meta = meta  # Haystack 1.x's constructor turns the keys of the top level (only) into strings
    with pytest.raises(InvalidDocumentError, match="not a string") as caught:
        store.write_documents([doc])
    assert "key 2 " in str(caught.value) if 2 in meta else "key" in str(caught.value)
    assert store.get_document_count() == 0
    store.write_documents([Document(content="text", id="d", meta={"2": "c"})])
    with pytest.raises(InvalidDocumentError, match="not a string"):
        store.update_document_meta("d", {7: "x"})
    assert _store(tmp_path / "store").get_document_by_id("d").meta == {"2": "c"}


def _filter_docs():
    from haystack.schema import Document

    values = {"none": None, "one": 1, "two": 2, "three": 3, "listed": [None, 5]}
    docs = [Document(content=f"document {name}", id=name, meta={"a": value}) for name, value in values.items()]
    return docs + [Document(content="document missing", id="missing", meta={"b": 1})]


@pytest.mark.parametrize(
    ("filters", "want"),
    [
        ({"a": {"$gt": 1}}, {"two", "three", "listed"}),
        ({"a": {"$gte": 2}}, {"two", "three", "listed"}),
        ({"a": {"$lt": 3}}, {"one", "two"}),
        ({"a": {"$lte": 1}}, {"one"}),
        ({"$not": {"a": {"$gt": 1}}}, {"none", "one", "missing"}),
        ({"$or": [{"a": {"$gt": 2}}, {"b": 1}]}, {"three", "listed", "missing"}),
    ],
)
def test_range_filters_skip_null_and_missing_values(tmp_path, filters, want):
    store = _store(tmp_path / "store")
    store.write_documents(_filter_docs())
    assert {d.id for d in store.get_all_documents(filters=filters)} == want
    assert store.get_document_count(filters=filters) == len(want)
    reopened = _store(tmp_path / "store")
    assert {d.id for d in reopened.get_all_documents(filters=filters)} == want
    hits = store.query("document", filters=filters, top_k=10)
    assert {d.id for d in hits} == want


def test_range_filter_on_null_values_in_retrieval(indexed_retriever):
    from haystack.schema import Document

    store = indexed_retriever.document_store
    extra = [Document(content="Lyon is a city of France on the Rhone.", id="lyon", meta={"year": None})]
    store.index_documents(extra, indexed_retriever)
    store.update_document_meta("p0", {"title": "Paris", "topic": "city", "year": 2000})
    hits = indexed_retriever.retrieve("capital of France", filters={"year": {"$gt": 1990}}, top_k=5)
    assert {d.id for d in hits} == {"p0"}
    assert store.delete_documents(filters={"year": {"$lt": 2100}}) is None
    assert {d.id for d in store.get_all_documents()} == {"p1", "p2", "p3", "p4", "p5", "lyon"}


def test_rest_status_of_an_ivf_write_on_a_full_disk_is_507(tmp_path):
    """FAISS's raw RuntimeError was a 500; the IVF structure's write on a full disk is now IndexWriteError, 507."""
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    from dphr_haystack.errors import IndexWriteError
    from dphr_haystack.nodes.rest.guards import error_message, error_status
    from tests.core.test_store_values import _fill, _ivf_index
    from tests.reliability._disk_full import small_tmpfs

    with small_tmpfs(tmp_path, "2m") as mount:
        index = _ivf_index(mount / "idx")
        with index.writing():
            pass
        filler = _fill(mount, 8192)  # room for the tombstones and part of the FAISS file: FAISS's write fails
        with pytest.raises(IndexWriteError) as caught:
            index.delete_passages(["s1"])
        filler.unlink()
    assert error_status(caught.value) == 507
    assert "disk is full" in error_message(caught.value)
