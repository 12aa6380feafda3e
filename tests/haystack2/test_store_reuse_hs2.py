"""Haystack 2: a phrase index directory (``dphr index``) opened as the PhraseDocumentStore, and the PhraseRetriever's
``filter_policy`` and ``device`` taken and serialised as Haystack's own retrievers and components do."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from haystack import Document, Pipeline
from haystack.document_stores.types import FilterPolicy
from haystack.utils import ComponentDevice

from dphr_haystack.encode.add import add_passages
from dphr_haystack.errors import InvalidParameterError
from dphr_haystack.haystack2 import ALLOWED_MODULES, PhraseDocumentStore, PhraseIndexer, PhraseRetriever
from dphr_haystack.index.phrase_index import PhraseIndex
from dphr_haystack.model.phrase_model import PhraseModel
from tests.conftest import TINY_TOPICS, tiny_passages

pytestmark = pytest.mark.unit
QUERIES = ["What is the capital of France?", "Who wrote Hamlet?", "Which river flows into the sea?"]


def _digest(path: Path) -> dict[str, str]:
    return {
        str(f.relative_to(path)): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(path.rglob("*"))
        if f.is_file() and f.name != ".dphr.lock"
    }


@pytest.fixture
def built_index(tmp_path, tiny_model) -> Path:
    """What ``dphr index`` writes: the tiny passages (with a meta field) in a phrase index directory."""
    passages = [{**p, "meta": {"topic": topic}} for p, topic in zip(tiny_passages(), TINY_TOPICS, strict=True)]
    index = PhraseIndex.create(tiny_model, path=tmp_path / "idx")
    add_passages(index, tiny_model, passages, progress=False)
    return tmp_path / "idx"


def _results(retriever: PhraseRetriever) -> list:
    return [
        [(d.id, round(d.score, 5), d.meta["best_phrase"]) for d in retriever.run(query=q)["documents"]]
        for q in QUERIES
    ]


def test_a_phrase_index_directory_opens_as_a_store(built_index, tiny_model_dir, monkeypatch, one_torch_thread):
    before = _digest(built_index)
    encodings = {"n": 0}
    real = PhraseModel.iter_encoded_pieces

    def counted(model, *args, **kwargs):
        encodings["n"] += 1
        return real(model, *args, **kwargs)

    monkeypatch.setattr(PhraseModel, "iter_encoded_pieces", counted)
    store = PhraseDocumentStore.from_index(built_index, progress_bar=False)
    assert store.count_documents() == 6 and store.phrase_count() == 6 and store.pending_documents() == []
    paris = store.filter_documents({"field": "id", "operator": "==", "value": "p0"})[0]
    assert paris.content == tiny_passages()[0]["text"]
    assert paris.meta == {"title": "Paris", "document_id": "p0", "topic": "city"}
    retriever = PhraseRetriever(document_store=store, model=str(tiny_model_dir), top_k=3, device="cpu")
    from_index = _results(retriever)
    assert encodings["n"] == 0  # encode_missing found nothing to encode
    own = PhraseDocumentStore(progress_bar=False)
    own.write_documents([Document(id=d.id, content=d.content, meta=d.meta) for d in store.filter_documents()])
    own_retriever = PhraseRetriever(document_store=own, model=str(tiny_model_dir), top_k=3, device="cpu")
    assert _results(own_retriever) == from_index
    # Serialised, it names the directory: another process (here: after close) opens the same store from it.
    data = retriever.to_dict()
    assert data["init_parameters"]["document_store"]["init_parameters"]["phrase_index"] == str(built_index)
    assert PhraseRetriever.from_dict(data).document_store is store  # the live store of this process
    store.close()
    reopened = PhraseRetriever.from_dict(data)
    assert reopened.document_store is not store and _results(reopened) == from_index
    # Its phrase changes go to a private copy: the directory is never written.
    store.write_documents([Document(id="rome", content="Rome is the capital of Italy.", meta={"title": "Rome"})])
    store.delete_documents(["p3"])
    assert "rome" in {d.id for d in retriever.run(query="capital of Italy", top_k=6)["documents"]}
    assert store.phrase_count() == 6 and encodings["n"] > 0
    assert _digest(built_index) == before
    with pytest.raises(InvalidParameterError, match="phrase_index"):
        PhraseDocumentStore(path=str(built_index.parent / "s"), phrase_index=str(built_index))


def test_filter_policy_replaces_or_merges_and_round_trips(tiny_model_dir, hs2_docs, one_torch_thread):
    store = PhraseDocumentStore(progress_bar=False)
    PhraseIndexer(document_store=store, model=str(tiny_model_dir), progress_bar=False).run(documents=hs2_docs)
    city = {"field": "meta.topic", "operator": "==", "value": "city"}
    paris = {"field": "meta.title", "operator": "==", "value": "Paris"}
    nature = {"field": "meta.topic", "operator": "==", "value": "nature"}

    def ids(retriever, **run) -> set[str]:
        return {d.id for d in retriever.run(query="capital", top_k=6, **run)["documents"]}

    replace = PhraseRetriever(document_store=store, model=str(tiny_model_dir), filters=city, device="cpu")
    assert replace.filter_policy is FilterPolicy.REPLACE
    assert ids(replace) == {"p0", "p1"} and ids(replace, filters=nature) == {"p2", "p4"}
    merge = PhraseRetriever(
        document_store=store, model=str(tiny_model_dir), filters=city, filter_policy="merge", device="cpu"
    )
    assert merge.filter_policy is FilterPolicy.MERGE
    assert ids(merge, filters=paris) == {"p0"} and ids(merge) == {"p0", "p1"}  # both apply
    assert ids(merge, filters=nature) == {"p2", "p4"}  # on the same field the run's filter wins, as in Haystack
    data = merge.to_dict()
    assert data["init_parameters"]["filter_policy"] == "merge"
    assert PhraseRetriever.from_dict(data).filter_policy is FilterPolicy.MERGE
    old = replace.to_dict()
    del old["init_parameters"]["filter_policy"]  # a pipeline saved before filter_policy existed
    assert PhraseRetriever.from_dict(old).filter_policy is FilterPolicy.REPLACE
    with pytest.raises(InvalidParameterError, match="filter_policy"):
        PhraseRetriever(document_store=store, model=str(tiny_model_dir), filter_policy="union")
    with pytest.raises(InvalidParameterError, match="filter_policy"):
        PhraseRetriever(document_store=store, model=str(tiny_model_dir), filter_policy=1)


def test_device_is_a_component_device_and_round_trips_through_yaml(tiny_model_dir, one_torch_thread):
    store = PhraseDocumentStore(progress_bar=False)
    cpu = ComponentDevice.from_str("cpu")
    for given in (cpu, "cpu", " CPU ", {"type": "single", "device": "cpu"}):
        retriever = PhraseRetriever(document_store=store, model=str(tiny_model_dir), device=given)
        assert retriever.device == cpu
        assert retriever.to_dict()["init_parameters"]["device"] == {"type": "single", "device": "cpu"}
    for auto in (None, "auto"):
        retriever = PhraseRetriever(document_store=store, model=str(tiny_model_dir), device=auto)
        assert retriever.device is None and retriever.to_dict()["init_parameters"]["device"] is None
    gpu = PhraseRetriever(document_store=store, model=str(tiny_model_dir), device="cuda:1")
    assert gpu.device == ComponentDevice.from_str("cuda:1")
    for bad in ("mps", "tpu", 3, ["cpu"], {"type": "single"}, ComponentDevice.from_str("mps")):
        with pytest.raises(InvalidParameterError, match="device"):
            PhraseRetriever(document_store=store, model=str(tiny_model_dir), device=bad)
    # A pipeline with both components: dumped to YAML and loaded again, each keeps its device and filter policy.
    pipeline = Pipeline()
    pipeline.add_component(
        "retriever",
        PhraseRetriever(document_store=store, model=str(tiny_model_dir), device=cpu, filter_policy=FilterPolicy.MERGE),
    )
    pipeline.add_component("indexer", PhraseIndexer(document_store=store, model=str(tiny_model_dir), device="cpu"))
    text = pipeline.dumps()
    assert "device: cpu" in text and "type: single" in text and "filter_policy: merge" in text
    loaded = Pipeline.loads(text, allowed_modules=ALLOWED_MODULES)
    retriever, indexer = loaded.get_component("retriever"), loaded.get_component("indexer")
    assert (retriever.device, retriever.filter_policy, indexer.device) == (cpu, FilterPolicy.MERGE, cpu)
    retriever.warm_up()
    assert str(next(retriever.phrase_model.parameters()).device) == "cpu"
    # Files written before: a plain device string still loads with its meaning.
    old = PhraseRetriever(document_store=store, model=str(tiny_model_dir)).to_dict()
    old["init_parameters"]["device"] = "auto"
    assert PhraseRetriever.from_dict(old).device is None
