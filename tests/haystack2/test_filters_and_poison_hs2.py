"""Haystack 2: a filter with an operator or shape the store does not implement is refused before anything is read or
deleted (an error that is both this package's UnsupportedFilterError and Haystack's FilterError); a document the
store could not serve back (NaN, infinities, lone surrogates) is refused at write time, nothing of its write stored,
and the next write succeeds."""

from __future__ import annotations

import json
import math

import pytest
from haystack import Document
from haystack.errors import FilterError

from dphr_haystack.errors import DphrError, InvalidDocumentError, UnsupportedFilterError
from dphr_haystack.haystack2 import PhraseDocumentStore, PhraseRetriever

pytestmark = pytest.mark.unit

X = {"field": "meta.x", "operator": "==", "value": 1}


def _nested(depth: int) -> dict:
    condition: dict = X
    for _ in range(depth):
        condition = {"operator": "AND", "conditions": [condition]}
    return condition


BAD_FILTERS = {
    "unknown comparison": {"field": "meta.x", "operator": "exists", "value": True},
    "unknown after a match": {
        "operator": "OR",
        "conditions": [X, {"field": "meta.x", "operator": "$regex", "value": 1}],
    },
    "unknown logical": {"operator": "NOR", "conditions": [X]},
    "empty AND": {"operator": "AND", "conditions": []},
    "empty NOT": {"operator": "NOT", "conditions": []},
    "conditions not a list": {"operator": "AND", "conditions": X},
    "legacy syntax": {"x": {"$exists": True}},
    "missing value": {"field": "meta.x", "operator": "=="},
    "missing operator": {"field": "meta.x", "value": 1},
    "in without a list": {"field": "meta.x", "operator": "in", "value": 1},
    "field not a string": {"field": ["meta", "x"], "operator": "==", "value": 1},
    "deeply nested": _nested(5000),
    "not a mapping": "meta.x == 1",
}

GOOD_FILTERS = [
    (X, 1),
    ({"operator": "NOT", "conditions": [X]}, 10),
    ({"operator": "OR", "conditions": [X, {"field": "meta.x", "operator": "in", "value": [5]}]}, 1),
    ({"field": "meta.x", "operator": ">=", "value": 1}, 1),
    (_nested(30), 1),
]


def _store(path=None) -> PhraseDocumentStore:
    store = PhraseDocumentStore(path=path, progress_bar=False)
    store.write_documents(
        [Document(content=f"d{i} words") for i in range(10)] + [Document(content="x", meta={"x": 1})]
    )
    return store


STORE_CALLS = {
    "filter_documents": lambda s, f: s.filter_documents(f),
    "delete_by_filter": lambda s, f: s.delete_by_filter(f),
    "update_by_filter": lambda s, f: s.update_by_filter(f, {"y": 2}),
}


@pytest.mark.parametrize("call", list(STORE_CALLS))
def test_every_filter_path_refuses_unsupported_filters_and_keeps_the_documents(call):
    store = _store()
    before = {d.id: d.meta for d in store.filter_documents()}
    for name, filters in BAD_FILTERS.items():
        with pytest.raises(UnsupportedFilterError) as info:
            STORE_CALLS[call](store, filters)
        assert isinstance(info.value, DphrError) and isinstance(info.value, FilterError), name
        assert {d.id: d.meta for d in store.filter_documents()} == before, f"{call} with {name} changed documents"
    store.write_documents([Document(content="after")])
    assert store.count_documents() == 12


@pytest.mark.parametrize(("filters", "expected"), GOOD_FILTERS)
def test_supported_filters_still_select_what_they_say(filters, expected):
    store = _store()
    assert len(store.filter_documents(filters)) == expected
    assert store.delete_by_filter(filters) == expected
    assert store.count_documents() == 11 - expected


def test_the_retriever_refuses_unsupported_filters(tiny_model_dir):
    empty = PhraseDocumentStore(progress_bar=False)
    with pytest.raises(UnsupportedFilterError):
        PhraseRetriever(document_store=empty, model=str(tiny_model_dir)).run(
            query="x", filters=BAD_FILTERS["empty AND"]
        )
    store = _store()
    retriever = PhraseRetriever(document_store=store, model=str(tiny_model_dir), top_k=20)
    assert len(retriever.run(query="words", filters=X)["documents"]) == 1
    for filters in BAD_FILTERS.values():
        with pytest.raises(UnsupportedFilterError):
            retriever.run(query="words", filters=filters)
        if isinstance(filters, dict):
            with pytest.raises(UnsupportedFilterError):
                PhraseRetriever(document_store=store, model=str(tiny_model_dir), filters=filters)
    assert store.count_documents() == 11


NAN = float("nan")
BAD_DOCUMENTS = {
    "nan meta": Document(id="b1", content="bad", meta={"x": NAN}),
    "inf meta": Document(id="b2", content="bad", meta={"x": math.inf}),
    "-inf nested": Document(id="b3", content="bad", meta={"x": [1.0, {"y": -math.inf}]}),
    "lone surrogate in content": Document(id="b4", content="Hi \ud800"),  # an id: hashing it would fail
    "lone surrogate in meta": Document(id="b5", content="bad", meta={"title": "\udfff"}),
    "lone surrogate in a meta key": Document(id="b6", content="bad", meta={"\ud800": 1}),
    "lone surrogate in the id": Document(id="\udc00", content="bad"),
}


@pytest.mark.parametrize("on_disk", [False, True], ids=["memory", "path"])
def test_a_document_that_cannot_be_served_is_refused_with_its_whole_batch(tmp_path, on_disk):
    path = str(tmp_path / "store") if on_disk else None
    store = PhraseDocumentStore(path=path, progress_bar=False)
    store.write_documents([Document(content="kept one"), Document(content="kept two")])
    for name, bad in BAD_DOCUMENTS.items():
        with pytest.raises(InvalidDocumentError):
            store.write_documents([Document(content=f"fine {name}"), bad])
        assert sorted(d.content for d in store.filter_documents()) == ["kept one", "kept two"], name
    with pytest.raises(InvalidDocumentError):
        store.update_by_filter({"field": "content", "operator": "==", "value": "kept one"}, {"x": NAN})
    for i in range(20):  # later unrelated writes all succeed
        store.write_documents([Document(content=f"later {i}")])
    assert store.count_documents() == 22
    for doc in store.filter_documents():
        json.dumps(doc.to_dict(), allow_nan=False).encode("utf-8")
    if on_disk:
        store.close()
        reopened = PhraseDocumentStore(path=path, progress_bar=False)
        assert reopened.count_documents() == 22
