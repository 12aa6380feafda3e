"""The Haystack 2 YAML pipelines in pipelines/haystack2: in sync with their builders, loadable, runnable."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from haystack import Pipeline
from haystack.core.errors import DeserializationError

from dphr_haystack import DEFAULT_MODEL
from dphr_haystack.haystack2 import ALLOWED_MODULES, PhraseDocumentStore, load_pipeline
from dphr_haystack.haystack2.pipelines import (
    CONFIDENCE_FUSION_WEIGHTS,
    PIPELINES,
    STORE_INDEX,
    write_pipeline_files,
)

FOLDER = Path(__file__).resolve().parents[2] / "pipelines" / "haystack2"

pytestmark = pytest.mark.unit


def test_yaml_files_match_their_builders(tmp_path):
    written = write_pipeline_files(tmp_path)
    assert sorted(f.name for f in written) == sorted(f.name for f in FOLDER.glob("*.yml"))
    for file in written:
        assert file.read_text() == (FOLDER / file.name).read_text(), f"regenerate {file.name}: write_pipeline_files"


def test_yaml_loads_without_an_allowlist_and_the_former_names_with_it():
    text = (FOLDER / "phrase_qa.yml").read_text()
    assert isinstance(Pipeline.loads(text), Pipeline)
    legacy = text.replace(
        "haystack_integrations.components.retrievers.dense_phrases.PhraseRetriever",
        "dphr_haystack.haystack2.retriever.PhraseRetriever",
    ).replace(
        "haystack_integrations.document_stores.dense_phrases.PhraseDocumentStore",
        "dphr_haystack.haystack2.document_store.PhraseDocumentStore",
    )
    with pytest.raises(DeserializationError, match="allowlist"):
        Pipeline.loads(legacy)
    assert isinstance(Pipeline.loads(legacy, allowed_modules=ALLOWED_MODULES), Pipeline)
    assert set(load_pipeline(FOLDER / "hybrid_rrf.yml").graph.nodes) == {"bm25", "phrase", "joiner"}


def _load(name: str, model_dir, index: str) -> Pipeline:
    text = (FOLDER / f"{name}.yml").read_text()
    text = text.replace(f"model: {DEFAULT_MODEL}", f"model: {model_dir}").replace(
        f"index: {STORE_INDEX}", f"index: {index}"
    )
    return Pipeline.loads(text, allowed_modules=ALLOWED_MODULES)


def test_index_then_query_through_yaml_pipelines(tiny_model_dir, hs2_docs, one_torch_thread):
    index = f"test-{uuid.uuid4()}"
    pipelines = {name: _load(name, tiny_model_dir, index) for name in PIPELINES}
    out = pipelines["indexing"].run({"indexer": {"documents": hs2_docs}})
    assert out["indexer"] == {"documents_written": 6, "phrases_encoded": 6}
    store = pipelines["hybrid_rrf"].get_component("bm25").document_store
    assert (
        isinstance(store, PhraseDocumentStore)
        and store is pipelines["phrase_qa"].get_component("retriever").document_store
    )
    assert store.count_documents() == 6 and store.phrase_count() == 6

    qa = pipelines["phrase_qa"].run({"retriever": {"query": "Who wrote Hamlet?"}})["retriever"]
    assert 1 <= len(qa["answers"]) <= 5 and all(a.data for a in qa["answers"])
    passages = pipelines["phrase_passages"].run({"retriever": {"query": "Who wrote Hamlet?", "top_k": 3}})["retriever"]
    assert len(passages["documents"]) == 3

    query = "Who wrote Hamlet?"
    hybrid = pipelines["hybrid_rrf"].run({"bm25": {"query": query}, "phrase": {"query": query}})
    joined = hybrid["joiner"]["documents"]
    assert joined and {d.id for d in joined} <= {d.id for d in hs2_docs}
    assert joined[0].id == "p3"  # BM25 finds "Hamlet"; the untrained phrase model cannot push it below first
    assert hybrid["phrase"]["answers"]  # the phrase answers come out of the hybrid too

    inputs = {"bm25": {"query": query}, "phrase": {"query": query}}
    fused = pipelines["hybrid_confidence"].run(inputs, include_outputs_from={"bm25", "phrase"})
    bm25 = {d.id: d.score for d in fused["bm25"]["documents"]}
    phrase = {d.id: d.score for d in fused["phrase"]["documents"]}
    assert all(0.0 <= v <= 1.0 for v in (*bm25.values(), *phrase.values()))  # scaled BM25, phrase scores
    w_bm25, w_phrase = CONFIDENCE_FUSION_WEIGHTS
    expected = {i: w_bm25 * bm25.get(i, 0.0) + w_phrase * phrase.get(i, 0.0) for i in set(bm25) | set(phrase)}
    got = {d.id: d.score for d in fused["joiner"]["documents"]}
    assert got and got == pytest.approx({i: expected[i] for i in got})
    assert list(got.values()) == sorted(got.values(), reverse=True)
