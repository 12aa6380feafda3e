"""Haystack 2.x store: non-finite embeddings and non-string meta keys refused; range filters skip null values."""

from __future__ import annotations

import math

import pytest

from dphr_haystack.documents.validation import check_storable
from dphr_haystack.errors import InvalidDocumentError

pytestmark = pytest.mark.unit


def _store(path=None):
    from dphr_haystack.haystack2 import PhraseDocumentStore

    return PhraseDocumentStore(path=str(path) if path is not None else None, progress_bar=False)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_check_storable_refuses_non_finite_haystack2_embeddings(value):
    from haystack import Document
    from haystack.dataclasses import SparseEmbedding

    doc = Document(content="text", id="d", embedding=[0.1, value])
    with pytest.raises(InvalidDocumentError, match="'d': embedding"):
        check_storable(doc.id, doc.content, doc.meta, embedding=doc.embedding)
    sparse = Document(content="text", id="s", sparse_embedding=SparseEmbedding(indices=[0, 4], values=[0.2, value]))
    with pytest.raises(InvalidDocumentError, match="'s': sparse embedding"):
        check_storable(sparse.id, sparse.content, sparse.meta, sparse_embedding=sparse.sparse_embedding)
    fine = Document(content="text", id="f", embedding=[0.1, 0.2], sparse_embedding=SparseEmbedding([1], [0.5]))
    check_storable(fine.id, fine.content, fine.meta, embedding=fine.embedding, sparse_embedding=fine.sparse_embedding)


def test_store_refuses_a_nan_embedding_before_anything_is_stored(tmp_path):
    from haystack import Document

    store = _store(tmp_path / "store")
    good = Document(content="a fine document", id="good", embedding=[0.1, 0.2])
    with pytest.raises(InvalidDocumentError, match="embedding"):
        store.write_documents([good, Document(content="broken", id="bad", embedding=[math.nan, 0.2])])
    assert store.count_documents() == 0


@pytest.mark.parametrize("meta", [{2: "c"}, {"nested": {3: "c"}}, {"list": [{None: "c"}]}])
def test_non_string_meta_key_is_refused(tmp_path, meta):
    from haystack import Document

    store = _store(tmp_path / "store")
    with pytest.raises(InvalidDocumentError, match="not a string") as caught:
        store.write_documents([Document(content="text", id="d", meta=meta)])
    assert "key 2 " in str(caught.value) if 2 in meta else "key" in str(caught.value)
    assert store.count_documents() == 0
    store.write_documents([Document(content="text", id="d", meta={"2": "c"})])
    with pytest.raises(InvalidDocumentError, match="not a string"):
        store.update_by_filter({"field": "id", "operator": "==", "value": "d"}, {7: "x"})
    assert store.filter_documents()[0].meta == {"2": "c"}


def _filter_docs():
    from haystack import Document

    values = {"none": None, "one": 1, "two": 2, "three": 3}
    docs = [Document(content=f"document {name}", id=name, meta={"a": value}) for name, value in values.items()]
    return docs + [Document(content="document missing", id="missing", meta={"b": 1})]


@pytest.mark.parametrize(
    ("filters", "want"),
    [
        ({"field": "meta.a", "operator": ">", "value": 1}, {"two", "three"}),
        ({"field": "meta.a", "operator": ">=", "value": 2}, {"two", "three"}),
        ({"field": "meta.a", "operator": "<", "value": 3}, {"one", "two"}),
        ({"field": "meta.a", "operator": "<=", "value": 1}, {"one"}),
        (
            {
                "operator": "OR",
                "conditions": [
                    {"field": "meta.a", "operator": ">", "value": 2},
                    {"field": "meta.b", "operator": "==", "value": 1},
                ],
            },
            {"three", "missing"},
        ),
    ],
)
def test_range_filters_skip_null_and_missing_values(tmp_path, filters, want):
    store = _store(tmp_path / "store")
    store.write_documents(_filter_docs())
    assert {d.id for d in store.filter_documents(filters)} == want
    reopened = _store(tmp_path / "reopened")
    reopened.write_documents(_filter_docs())
    assert {d.id for d in reopened.bm25_retrieval("document", filters=filters, top_k=10)} == want
