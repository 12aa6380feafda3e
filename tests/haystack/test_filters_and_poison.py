"""Haystack 1.x: a filter the store does not implement is refused with a typed error on every path (store, retriever,
REST), never read as "match everything"; a document the store could not serve back as JSON (NaN, infinities, lone
surrogates) is refused at write time, with nothing of its write stored."""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys

import numpy as np
import pytest

from dphr_haystack.errors import DphrError, InvalidDocumentError, UnsupportedFilterError

pytestmark = pytest.mark.unit


def _nested(depth: int) -> dict:
    clause: dict = {"x": 1}
    for _ in range(depth):
        clause = {"$and": clause}
    return clause


# Each of these was parsed by Haystack into a clause matching every document (or failed untyped).
BAD_FILTERS = {
    "exists": {"x": {"$exists": True}},
    "regex": {"x": {"$regex": "a"}},
    "unknown": {"x": {"$foo": 1}},
    "unknown logical": {"$nor": {"x": 1}},
    "no operator": {"x": {}},
    "empty and": {"$and": {}},
    "empty not": {"$not": {}},
    "empty or list": {"$or": []},
    "one bad among good": {"$and": {"x": {"$eq": 1, "$exists": True}}},
    "not a field operator": {"x": {"$and": {"y": 1}}},
    "in without a list": {"x": {"$in": 1}},
    "range on a list": {"x": {"$gt": [1]}},
    "not a mapping": "x == 1",
    "deeply nested": _nested(5000),
}

GOOD_FILTERS = [
    ({"x": 1}, 1),
    ({"x": {"$eq": 1}}, 1),
    ({"x": [1, 2]}, 1),
    ({"x": {"$in": [1]}}, 1),
    ({"x": {"$gte": 1, "$lt": 2}}, 1),
    ({"$or": [{"x": 1}, {"x": 5}]}, 1),
    ({"$not": {"x": 1}}, 10),
    ({"x": {"$ne": 1}}, 10),
    ({"$and": {"x": {"$nin": [2, 3]}, "$not": {"x": 1}}}, 10),
    (_nested(30), 1),
]


def _store():
    from haystack.schema import Document

    from dphr_haystack.nodes import PhraseDocumentStore

    store = PhraseDocumentStore(progress_bar=False)
    store.write_documents([Document(content=f"d{i} words") for i in range(10)] + [Document("x words", meta={"x": 1})])
    return store


STORE_CALLS = {
    "get_all_documents": lambda s, f: s.get_all_documents(filters=f),
    "get_all_documents_generator": lambda s, f: list(s.get_all_documents_generator(filters=f)),
    "get_document_count": lambda s, f: s.get_document_count(filters=f),
    "delete_documents": lambda s, f: s.delete_documents(filters=f),
    "delete_documents with ids": lambda s, f: s.delete_documents(ids=[d.id for d in s.get_all_documents()], filters=f),
    "query": lambda s, f: s.query("words", filters=f),
    "query_batch": lambda s, f: s.query_batch(["words", "d1"], filters=f),
    "query_batch per query": lambda s, f: s.query_batch(["words", "d1"], filters=[None, f]),
    "query_by_embedding": lambda s, f: s.query_by_embedding(np.ones(768, dtype=np.float32), filters=f),
    "get_embedding_count": lambda s, f: s.get_embedding_count(filters=f),
    "matching_ids": lambda s, f: s.matching_ids(f),
    "get_all_labels": lambda s, f: s.get_all_labels(filters=f),
    "delete_labels": lambda s, f: s.delete_labels(filters=f),
}


@pytest.mark.parametrize("call", list(STORE_CALLS), ids=list(STORE_CALLS))
def test_every_store_path_refuses_unsupported_filters_and_keeps_the_documents(call):
    store = _store()
    for name, filters in BAD_FILTERS.items():
        with pytest.raises(UnsupportedFilterError) as info:
            STORE_CALLS[call](store, filters)
        assert isinstance(info.value, DphrError), name
        assert store.get_document_count() == 11, f"{call} with {name} removed documents"
    store.write_documents([{"content": "after", "meta": {"x": 2}}])  # the store still takes writes
    assert store.get_document_count() == 12


@pytest.mark.parametrize(("filters", "expected"), GOOD_FILTERS)
def test_supported_filters_still_select_what_they_say(filters, expected):
    store = _store()
    assert store.get_document_count(filters=filters) == expected
    assert len(store.get_all_documents(filters=filters)) == expected
    store.delete_documents(filters=filters)
    assert store.get_document_count() == 11 - expected


def test_a_range_filter_on_values_that_do_not_compare_is_a_typed_error():
    store = _store()
    store.write_documents([{"content": "text x", "meta": {"x": "a"}}])
    with pytest.raises(UnsupportedFilterError, match="compare"):
        store.delete_documents(filters={"x": {"$gt": 0}})
    assert store.get_document_count() == 12


def test_the_reported_delete_keeps_every_document():
    store = _store()
    with pytest.raises(UnsupportedFilterError, match=r"\$exists"):
        store.delete_documents(filters={"x": {"$exists": True}})
    assert store.get_document_count() == 11


def test_the_retriever_refuses_unsupported_filters(indexed_retriever):
    retriever = indexed_retriever
    everything = len(retriever.retrieve("capital", top_k=6))
    assert len(retriever.retrieve("capital", top_k=6, filters={"topic": "geography"})) < everything
    for filters in BAD_FILTERS.values():
        for call in (
            lambda f: retriever.retrieve("capital", filters=f),
            lambda f: retriever.retrieve_batch(["capital", "river"], filters=[None, f]),
            lambda f: retriever.run_query("capital", filters=f),
        ):
            with pytest.raises(UnsupportedFilterError):
                call(filters)
    assert retriever.document_store.get_document_count() == 6


def test_an_empty_store_refuses_unsupported_filters_too(tiny_retriever):
    with pytest.raises(UnsupportedFilterError):
        tiny_retriever.retrieve("capital", filters={"x": {"$exists": True}})


# ---------------------------------------------------------------------------------------------- poisoned documents
NAN = float("nan")
BAD_DOCUMENTS = {
    "nan meta": {"content": "bad", "meta": {"x": NAN}},
    "inf meta": {"content": "bad", "meta": {"x": math.inf}},
    "-inf nested in a list": {"content": "bad", "meta": {"x": [1.0, -math.inf]}},
    "nan nested in a dict": {"content": "bad", "meta": {"x": {"y": {"z": NAN}}}},
    "numpy nan": {"content": "bad", "meta": {"x": np.float32("nan")}},
    "lone surrogate in content": {"content": "Hi \ud800"},
    "lone surrogate in content, id given": {"content": "Hi \ud800", "id": "s1"},
    "lone surrogate in the id": {"content": "fine", "id": "\udc00"},
    "lone surrogate in meta": {"content": "bad", "meta": {"title": "\udfff"}},
    "lone surrogate in a meta key": {"content": "bad", "meta": {"\ud800": 1}},
}


@pytest.mark.parametrize("shared", [False, True], ids=["memory", "path"])
def test_a_document_that_cannot_be_served_is_refused_with_its_whole_batch(tmp_path, shared):
    from haystack.schema import Document

    from dphr_haystack.nodes import PhraseDocumentStore

    path = str(tmp_path / "store") if shared else None
    store = PhraseDocumentStore(progress_bar=False, path=path)
    store.write_documents([Document("kept one"), Document("kept two")])
    for name, bad in BAD_DOCUMENTS.items():
        batch = [{"content": f"fine {name}"}, bad, {"content": f"also fine {name}"}]
        with pytest.raises(InvalidDocumentError):
            store.write_documents(batch)
        assert store.get_document_count() == 2, name
        for doc in store.get_all_documents():
            json.dumps(doc.to_dict(), allow_nan=False).encode("utf-8")
    some = store.get_all_documents()[0]
    with pytest.raises(InvalidDocumentError):
        store.update_document_meta(some.id, {"x": NAN})
    assert store.get_document_by_id(some.id).meta == some.meta
    store.write_documents([Document("after", meta={"x": 1.5})])  # the next write succeeds
    assert store.get_document_count() == 3
    if shared:
        reopened = PhraseDocumentStore(path=path, progress_bar=False)
        assert sorted(d.content for d in reopened.get_all_documents()) == ["after", "kept one", "kept two"]


# ---------------------------------------------------------------------------------------------- REST
@pytest.fixture(scope="module")
def rest(tmp_path_factory, tiny_model_dir):
    """The REST app in this process (``dphr_haystack.nodes.rest_api`` builds its pipelines once per process, on
    import): its query pipeline's store and retriever, emptied for each test by the tests themselves. Nothing of
    Haystack's own ``rest_api`` package is used, installed or not."""
    httpx = pytest.importorskip("httpx")
    if "dphr_haystack.nodes.rest_api" not in sys.modules:
        from tests.haystack.conftest import PIPELINES

        tmp = tmp_path_factory.mktemp("rest")
        env = {
            "PIPELINE_YAML_PATH": str(PIPELINES / "rest_api.yml"),
            "DOCUMENTSTORE_PARAMS_PATH": str(tmp / "store"),
            "RETRIEVER_PARAMS_MODEL": str(tiny_model_dir),
            "RETRIEVER_PARAMS_DEVICE": "cpu",
            "FILE_UPLOAD_PATH": str(tmp / "uploads"),
        }
        saved = {name: os.environ.get(name) for name in env}
        os.environ.update(env)
        try:
            from dphr_haystack.nodes.rest_api import app
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    else:
        from dphr_haystack.nodes.rest_api import app

    pipeline = app.state.served.query
    store = app.state.served.document_store

    def request(method: str, url: str, **kwargs):
        async def send():
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                return await client.request(method, url, timeout=120, **kwargs)

        return asyncio.run(send())

    return request, store, pipeline.get_node("Retriever")


def _fill(store, retriever, count: int = 10) -> None:
    from haystack.schema import Document

    from tests.conftest import tiny_passages

    store.delete_documents()
    texts = [p["text"] for p in tiny_passages()]
    docs = [Document(f"{texts[i % len(texts)]} ({i})", meta={"n": i}) for i in range(count)]
    store.index_documents(docs + [Document("Paris is in France. (x)", meta={"x": "one"})], retriever)


def test_rest_refuses_unsupported_filters_and_deletes_nothing(rest):
    request, store, retriever = rest
    _fill(store, retriever)
    total = store.get_document_count()
    query = {"query": "What is the capital of France?", "params": {"Retriever": {"top_k": 20}}}
    assert len(request("POST", "/query", json=query).json()["documents"]) == total
    for name, filters in BAD_FILTERS.items():
        if name == "deeply nested":
            filters = _nested(200)  # JSON's own nesting limit is about that
        for url, body in (
            ("/documents/delete_by_filters", {"filters": filters}),
            ("/documents/get_by_filters", {"filters": filters}),
            ("/query", {**query, "params": {"Retriever": {"top_k": 20, "filters": filters}}}),
        ):
            response = request("POST", url, json=body)
            # 400: refused by the store's filter check; 422: by the REST API's request schema; never 5xx
            assert response.status_code in (400, 422), (
                f"{url} took {name}: {response.status_code} {response.text[:200]}"
            )
            assert "Traceback" not in response.text
            assert store.get_document_count() == total, f"{url} with {name} deleted documents"
    assert store.get_phrase_document_count() == total
    kept = request("POST", "/documents/delete_by_filters", json={"filters": {"x": "one"}})  # REST reads 1 as "1"
    assert kept.status_code == 200 and store.get_document_count() == total - 1


def test_rest_refuses_a_poisoned_upload_and_keeps_serving(rest, tmp_path):
    request, store, retriever = rest
    _fill(store, retriever, 3)
    total = store.get_document_count()
    upload = tmp_path / "notes.txt"
    upload.write_text("Berlin is the capital of Germany.\n\nRome is in Italy.", encoding="utf-8")
    for meta in ('{"x": NaN}', '{"x": [1, Infinity]}', '{"title": "\\ud800"}'):
        with upload.open("rb") as handle:
            response = request(
                "POST", "/file-upload", files={"files": ("notes.txt", handle, "text/plain")}, data={"meta": meta}
            )
        assert response.status_code in (400, 422), f"{meta}: {response.status_code} {response.text[:200]}"
        assert store.get_document_count() == total
    query = {"query": "What is the capital of France?", "params": {"Retriever": {"top_k": 20}}}
    for url, body in (("/query", query), ("/documents/get_by_filters", {"filters": {}})):
        response = request("POST", url, json=body)
        assert response.status_code == 200, response.text[:300]
