"""Haystack 2 components and the document store deserialised from hostile data (``from_dict`` with serialised data
of the wrong shape or type): each ends in a typed DphrError, and good data still deserialises."""

from __future__ import annotations

import pytest

from dphr_haystack.errors import DphrError

pytestmark = pytest.mark.unit

# ----------------------------------------------------------------- Haystack 2 components from hostile dicts
_RETRIEVER = "dphr_haystack.haystack2.retriever.PhraseRetriever"
_INDEXER = "dphr_haystack.haystack2.indexer.PhraseIndexer"


def _store_dict() -> dict:
    from dphr_haystack.haystack2 import PhraseDocumentStore

    return PhraseDocumentStore(index="hostile-values").to_dict()


def _hostile(kind: str, case: str):
    """Serialised data of one hostile ``case`` for the component ``kind`` (retriever or indexer)."""
    type_name = _RETRIEVER if kind == "retriever" else _INDEXER
    good = {"document_store": _store_dict(), "model": "dphr-minilm-squad", "device": "cpu"}
    return {
        "not a dict": ["type", type_name],
        "init_parameters a list": {"type": type_name, "init_parameters": [1, 2]},
        "init_parameters a string": {"type": type_name, "init_parameters": "top_k=3"},
        "unknown key": {"type": type_name, "init_parameters": {**good, "bogus": 1}},
        "no store": {"type": type_name, "init_parameters": {"model": "dphr-minilm-squad"}},
        "store a number": {"type": type_name, "init_parameters": {**good, "document_store": 7}},
        "model a number": {"type": type_name, "init_parameters": {**good, "model": 5}},
        "model empty": {"type": type_name, "init_parameters": {**good, "model": ""}},
        "device a number": {"type": type_name, "init_parameters": {**good, "device": 3}},
        "device a list": {"type": type_name, "init_parameters": {**good, "device": ["cpu"]}},
        "batch_size a string": {"type": type_name, "init_parameters": {**good, "batch_size": "x"}},
        "wrong type name": {"type": "builtins.dict", "init_parameters": good},
        "no type": {"init_parameters": good},
        "top_k a string": {"type": type_name, "init_parameters": {**good, "top_k": "x"}},
        "top_k a list": {"type": type_name, "init_parameters": {**good, "top_k": [3]}},
        "policy unknown": {"type": type_name, "init_parameters": {**good, "policy": "BOGUS"}},
        "policy a number": {"type": type_name, "init_parameters": {**good, "policy": 3}},
    }[case]


_CASES = [
    "not a dict",
    "init_parameters a list",
    "init_parameters a string",
    "unknown key",
    "no store",
    "store a number",
    "model a number",
    "model empty",
    "device a number",
    "device a list",
    "batch_size a string",
    "wrong type name",
    "no type",
]
_RETRIEVER_CASES = [*_CASES, "top_k a string", "top_k a list"]
_INDEXER_CASES = [*_CASES, "policy unknown", "policy a number"]


@pytest.mark.parametrize(
    ("kind", "case"),
    [("retriever", c) for c in _RETRIEVER_CASES] + [("indexer", c) for c in _INDEXER_CASES],
)
def test_components_from_hostile_dicts_raise_typed_errors(kind, case):
    from dphr_haystack.haystack2 import PhraseIndexer, PhraseRetriever

    cls = PhraseRetriever if kind == "retriever" else PhraseIndexer
    with pytest.raises(DphrError):
        cls.from_dict(_hostile(kind, case))


_STORE = "dphr_haystack.haystack2.document_store.PhraseDocumentStore"
_STORE_CASES = {
    "not a dict": [1],
    "init_parameters a list": {"type": _STORE, "init_parameters": [1]},
    "init_parameters a string": {"type": _STORE, "init_parameters": "x"},
    "unknown key": {"type": _STORE, "init_parameters": {"bogus": 1}},
    "path a number": {"type": _STORE, "init_parameters": {"path": 5}},
    "path a list": {"type": _STORE, "init_parameters": {"path": [1]}},
    "no type": {"init_parameters": {}},
    "wrong type name": {"type": "builtins.dict", "init_parameters": {}},
}


@pytest.mark.parametrize("case", list(_STORE_CASES))
def test_a_document_store_from_a_hostile_dict_raises_a_typed_error(case):
    from dphr_haystack.haystack2 import PhraseDocumentStore

    with pytest.raises(DphrError):
        PhraseDocumentStore.from_dict(_STORE_CASES[case])


def test_a_good_dict_still_deserialises():
    from dphr_haystack.haystack2 import PhraseIndexer, PhraseRetriever

    init = {"document_store": _store_dict(), "model": "dphr-minilm-squad", "device": "cpu"}
    retriever = PhraseRetriever.from_dict({"type": _RETRIEVER, "init_parameters": {**init, "top_k": 3}})
    indexer = PhraseIndexer.from_dict({"type": _INDEXER, "init_parameters": {**init, "policy": "SKIP"}})
    assert retriever.top_k == 3 and indexer.policy.name == "SKIP"
