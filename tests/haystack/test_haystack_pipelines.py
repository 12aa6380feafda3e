"""Every pipelines/*.yml loads and runs; schema errors; joins; YAML round trip."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from haystack import Pipeline
from haystack.errors import PipelineConfigError, PipelineSchemaError
from haystack.schema import Answer, Document

from dphr_haystack.errors import ModelLoadError
from dphr_haystack.nodes import LinearFusionJoin, PhraseDocumentStore, PhraseRetriever, load_pipeline
from dphr_haystack.nodes.joins import dedupe_answers, fuse_linear, fuse_rrf, minmax

PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"

QUERY = "Who wrote the tragedy Hamlet?"


def _load(name: str, tiny_model_dir, pipeline_name: str | None = None, **extra):
    overrides = {"DocumentStore": {"progress_bar": False}}
    text = (PIPELINES / name).read_text()
    if "type: PhraseRetriever" in text:
        overrides["Retriever"] = {"model": str(tiny_model_dir), "device": "cpu"}
    overrides.update(extra)
    return load_pipeline(PIPELINES / name, pipeline_name, overrides=overrides)


def _fill(pipeline, docs):
    store = pipeline.get_document_store()
    assert isinstance(store, PhraseDocumentStore)
    retriever = pipeline.get_node("Retriever")
    if retriever is not None:
        store.index_documents(docs, retriever)
    else:
        store.write_documents(docs)
    return store


def test_every_pipeline_file_is_tested():
    tested = {
        "phrase_qa.yml",
        "phrase_passages.yml",
        "bm25.yml",
        "bm25_reader.yml",
        "dense_passages.yml",
        "hybrid_rrf.yml",
        "hybrid_dpr.yml",
        "hybrid_answers.yml",
        "hybrid_confidence.yml",
        "indexing.yml",
        "dense_faiss.yml",
        "rest_api.yml",  # served and tested over HTTP in test_rest_api.py
    }
    assert {p.name for p in PIPELINES.glob("*.yml")} == tested


@pytest.mark.unit
def test_phrase_qa(tiny_model_dir, haystack_docs):
    pipeline = _load("phrase_qa.yml", tiny_model_dir)
    _fill(pipeline, haystack_docs)
    out = pipeline.run(query=QUERY, params={"Retriever": {"top_k": 3}})
    assert len(out["answers"]) == 3 and all(a.type == "extractive" for a in out["answers"])
    assert out["documents"] and {a.document_ids[0] for a in out["answers"]} == {d.id for d in out["documents"]}
    batch = pipeline.run_batch(queries=[QUERY, "capital of France"], params={"Retriever": {"top_k": 2}})
    assert [len(a) for a in batch["answers"]] == [2, 2]
    filtered = pipeline.run(query=QUERY, params={"Retriever": {"filters": {"topic": "tech"}}})
    assert {d.id for d in filtered["documents"]} == {"p5"}


@pytest.mark.unit
def test_phrase_passages(tiny_model_dir, haystack_docs):
    pipeline = _load("phrase_passages.yml", tiny_model_dir)
    _fill(pipeline, haystack_docs)
    out = pipeline.run(query=QUERY)
    assert len(out["documents"]) == 6 and "answers" not in out
    assert all("best_phrase" in d.meta for d in out["documents"])


@pytest.mark.unit
def test_bm25(tiny_model_dir, haystack_docs):
    pipeline = _load("bm25.yml", tiny_model_dir)
    _fill(pipeline, haystack_docs)
    assert pipeline.run(query=QUERY)["documents"][0].id == "p3"


@pytest.mark.unit
def test_bm25_reader_reads_only_the_passages_bm25_found(tiny_model_dir, tiny_reader_dir, haystack_docs):
    reader = {"model_name_or_path": str(tiny_reader_dir), "use_gpu": False, "max_seq_len": 64, "doc_stride": 16}
    pipeline = _load("bm25_reader.yml", tiny_model_dir, Reader={**reader, "max_query_length": 24})
    _fill(pipeline, haystack_docs)
    output = pipeline.run(query=QUERY, params={"BM25": {"top_k": 1}, "Reader": {"top_k": 3}})
    answers = output["answers"]
    assert 1 <= len(answers) <= 3 and [d.id for d in output["documents"]] == ["p3"]
    for answer in answers:
        assert answer.document_ids == ["p3"] and answer.answer
        start, end = answer.offsets_in_document[0].start, answer.offsets_in_document[0].end
        assert haystack_docs[3].content[start:end] == answer.answer
    wider = pipeline.run(query=QUERY, params={"BM25": {"top_k": 6}, "Reader": {"top_k": 20}})
    assert {i for a in wider["answers"] for i in a.document_ids} - {"p3"}  # more passages, answers from them


@pytest.mark.unit
def test_bm25_reader_reads_an_mpnet_reader_with_its_own_weights(tiny_model_dir, tiny_mpnet_reader_dir, haystack_docs):
    """FARMReader knows no MPNet: it falls back to transformers' AutoModel (logging that this "can cause crashes"),
    which keeps the reader's encoder and span head, so the base-size MPNet reader runs in bm25_reader.yml as is."""
    import torch
    from safetensors.torch import load_file

    reader = {"model_name_or_path": str(tiny_mpnet_reader_dir), "use_gpu": False, "max_seq_len": 64}
    pipeline = _load("bm25_reader.yml", tiny_model_dir, Reader={**reader, "doc_stride": 16, "max_query_length": 24})
    saved = load_file(tiny_mpnet_reader_dir / "model.safetensors")
    loaded = pipeline.get_node("Reader").inferencer.model
    head = loaded.prediction_heads[0].feed_forward.feed_forward[0]
    torch.testing.assert_close(head.weight, saved["qa_outputs.weight"])
    encoder = loaded.language_model.model.state_dict()
    assert type(loaded.language_model.model).__name__ == "MPNetModel"
    shared = [key for key in encoder if f"mpnet.{key}" in saved]  # all but the pooler, which QA models lack
    assert len(shared) == len(encoder) - 2 and all(k.startswith("pooler.") for k in set(encoder) - set(shared))
    for key in shared:
        torch.testing.assert_close(encoder[key], saved[f"mpnet.{key}"])
    _fill(pipeline, haystack_docs)
    answers = pipeline.run(query=QUERY, params={"BM25": {"top_k": 1}, "Reader": {"top_k": 3}})["answers"]
    assert answers and all(a.document_ids == ["p3"] for a in answers)
    for answer in answers:
        start, end = answer.offsets_in_document[0].start, answer.offsets_in_document[0].end
        assert haystack_docs[3].content[start:end] == answer.answer


@pytest.mark.integration
def test_dense_passages_on_the_offline_minilm(minilm_available, haystack_docs):
    pipeline = load_pipeline(PIPELINES / "dense_passages.yml", overrides={"DocumentStore": {"progress_bar": False}})
    store = _fill(pipeline, haystack_docs)
    store.update_embeddings(pipeline.get_node("Dense"))
    assert store.get_embedding_count() == 6
    assert pipeline.run(query="Which river flows into the Mediterranean?")["documents"][0].id == "p2"


@pytest.mark.integration
def test_dense_faiss_gives_the_in_memory_ranking(minilm_available, haystack_docs):
    from haystack.schema import Document

    memory = load_pipeline(PIPELINES / "dense_passages.yml", overrides={"DocumentStore": {"progress_bar": False}})
    store = _fill(memory, haystack_docs)
    store.update_embeddings(memory.get_node("Dense"))
    faiss = load_pipeline("dense_faiss.yml")
    # The same embeddings written into Haystack's FAISSDocumentStore (exact inner product over normalised vectors).
    faiss.get_document_store().write_documents(
        [
            Document(content=d.content, id=d.id, meta=d.meta, embedding=d.embedding)
            for d in store.get_all_documents(return_embedding=True)
        ]
    )
    for query in ("Which river flows into the Mediterranean?", "Who wrote Hamlet?", "capital of France"):
        ours = memory.run(query=query, params={"Dense": {"top_k": 6}})["documents"]
        theirs = faiss.run(query=query, params={"Dense": {"top_k": 6}})["documents"]
        assert [d.id for d in ours] == [d.id for d in theirs]
        assert [d.score for d in ours] == pytest.approx([d.score for d in theirs], abs=1e-4)


@pytest.mark.unit
def test_hybrid_rrf(tiny_model_dir, haystack_docs):
    pipeline = _load("hybrid_rrf.yml", tiny_model_dir)
    _fill(pipeline, haystack_docs)
    docs = pipeline.run(query=QUERY)["documents"]
    assert len(docs) == 6 and len({d.id for d in docs}) == 6
    assert docs[0].score == pytest.approx(max(d.score for d in docs))


@pytest.mark.unit
def test_hybrid_confidence_adds_bm25_scores_and_phrase_confidences(tiny_model_dir, haystack_docs):
    pipeline = _load("hybrid_confidence.yml", tiny_model_dir)
    _fill(pipeline, haystack_docs)
    out = pipeline.run(query=QUERY, debug=True)
    bm25 = {d.id: d.score for d in out["_debug"]["BM25"]["output"]["documents"]}
    phrase = {d.id: d.score for d in out["_debug"]["Retriever"]["output"]["documents"]}
    assert all(0.0 <= v <= 1.0 for v in (*bm25.values(), *phrase.values()))  # scaled BM25, confidences
    w_bm25, w_phrase = pipeline.get_node("Join").weights
    assert (w_bm25, w_phrase) == (0.7, 0.3)  # as benchmarks/quality/hybrid_weights.py chose them
    expected = {i: w_bm25 * bm25.get(i, 0.0) + w_phrase * phrase.get(i, 0.0) for i in set(bm25) | set(phrase)}
    got = {d.id: d.score for d in out["documents"]}
    assert got == pytest.approx({i: expected[i] for i in got})
    assert list(got.values()) == sorted(expected.values(), reverse=True)[: len(got)]
    assert all(0.0 <= v <= 1.0 for v in got.values())


@pytest.mark.unit
def test_hybrid_dpr_fuses_minmax_bm25_plus_1_1_phrase(tiny_model_dir, haystack_docs):
    pipeline = _load("hybrid_dpr.yml", tiny_model_dir)
    _fill(pipeline, haystack_docs)
    out = pipeline.run(query=QUERY, debug=True)
    bm25 = {d.id: d.score for d in out["_debug"]["BM25"]["output"]["documents"]}
    phrase = {d.id: d.score for d in out["_debug"]["Retriever"]["output"]["documents"]}
    nb = dict(zip(bm25, minmax(list(bm25.values()))))
    npr = dict(zip(phrase, minmax(list(phrase.values()))))
    # the weighted mean (BM25 + 1.1 phrase) / 2.1: in [0, 1], ranked as the DPR sum
    expected = {i: (nb.get(i, 0.0) + 1.1 * npr.get(i, 0.0)) / 2.1 for i in set(bm25) | set(phrase)}
    got = {d.id: d.score for d in out["documents"]}
    assert got == pytest.approx(expected)
    assert [d.score for d in out["documents"]] == sorted(got.values(), reverse=True)
    assert max(phrase.values()) > 1.0  # raw phrase scores reach the join (scale_score: false)


@pytest.mark.unit
def test_hybrid_answers_returns_answers_and_fused_documents(tiny_model_dir, haystack_docs):
    pipeline = _load("hybrid_answers.yml", tiny_model_dir)
    _fill(pipeline, haystack_docs)
    out = pipeline.run(query=QUERY)
    assert 0 < len(out["answers"]) <= 5 and all(isinstance(a, Answer) for a in out["answers"])
    assert 0 < len(out["documents"]) <= 10
    assert "p3" in [d.id for d in out["documents"]][:2]  # BM25 ranks it first; RRF keeps it near the top
    batch = pipeline.run_batch(queries=[QUERY, "capital of Germany"])
    assert len(batch["answers"]) == len(batch["documents"]) == 2


@pytest.mark.unit
def test_the_indexing_pipeline_alone_makes_documents_answerable(tiny_model_dir, tmp_path, haystack_docs):
    files = []
    for doc in haystack_docs:
        path = tmp_path / f"{doc.meta['title']}.txt"
        path.write_text(doc.content)
        files.append(path)
    (tmp_path / "empty.txt").write_text("")
    indexing = _load(
        "indexing.yml", tiny_model_dir, DocumentStore={"progress_bar": False, "path": str(tmp_path / "s")}
    )
    titles = [{"title": f.stem} for f in files] + [{"title": "empty"}]
    indexing.run(file_paths=files + [tmp_path / "empty.txt"], meta=titles)
    store = indexing.get_document_store()
    assert store.get_document_count() == 6  # the PreProcessor drops the empty file
    assert store.get_phrase_document_count() == 6  # phrases committed with the documents: no update_embeddings needed
    docs = indexing.get_node("Retriever").retrieve("Who created Python?", top_k=6)
    assert {d.meta["title"] for d in docs} == {f.stem for f in files}
    stats = store.update_embeddings(indexing.get_node("Retriever"))
    assert (stats.encoded, stats.skipped_existing) == (0, 6)
    query = _load("phrase_qa.yml", tiny_model_dir, DocumentStore={"path": str(tmp_path / "s")})
    assert query.run(query="Who created Python?")["answers"]  # another store object on the same directory


@pytest.mark.unit
def test_rest_api_yaml_loads_its_three_pipelines(tiny_model_dir, tmp_path):
    for name in ("query", "bm25", "indexing"):
        pipeline = _load("rest_api.yml", tiny_model_dir, name, DocumentStore={"path": str(tmp_path / "s")})
        assert pipeline.get_document_store().path == tmp_path / "s"


@pytest.mark.unit
def test_schema_errors_for_unknown_params_and_types(tiny_model_dir):
    with pytest.raises(PipelineSchemaError):
        _load("phrase_qa.yml", tiny_model_dir, Retriever={"model": str(tiny_model_dir), "no_such_param": 1})
    with pytest.raises(PipelineSchemaError):
        _load("phrase_qa.yml", tiny_model_dir, Retriever={"model": str(tiny_model_dir), "top_k": "ten"})
    with pytest.raises(PipelineSchemaError):
        _load("phrase_qa.yml", tiny_model_dir, Retriever={"model": str(tiny_model_dir), "unit": "sentence"})
    with pytest.raises(PipelineSchemaError):
        _load("hybrid_dpr.yml", tiny_model_dir, Join={"normalization": "zscore"})
    with pytest.raises(PipelineSchemaError):
        _load("phrase_qa.yml", tiny_model_dir, Retriever={"model": str(tiny_model_dir), "filter_threshold": "nope"})
    for threshold in ("model", -1.0, None):
        _load("phrase_qa.yml", tiny_model_dir, Retriever={"model": str(tiny_model_dir), "filter_threshold": threshold})
    with pytest.raises(PipelineSchemaError):
        _load("phrase_qa.yml", tiny_model_dir, Retriever={"model": str(tiny_model_dir), "whole_words": "yes"})
    loaded = _load("phrase_qa.yml", tiny_model_dir, Retriever={"model": str(tiny_model_dir), "whole_words": False})
    assert loaded.get_node("Retriever").whole_words is False
    with pytest.raises(KeyError):
        _load("phrase_qa.yml", tiny_model_dir, NoSuchComponent={"top_k": 1})
    # Optional params accept an explicit null
    assert _load("hybrid_dpr.yml", tiny_model_dir, Join={"top_k_join": None}).get_node("Join").top_k_join is None


@pytest.mark.unit
def test_missing_model_path_in_yaml_names_the_path(tmp_path):
    from dphr_haystack import DEFAULT_MODEL

    missing = tmp_path / "missing-model"
    with pytest.raises(ModelLoadError, match=str(missing)):
        load_pipeline(PIPELINES / "phrase_qa.yml", overrides={"Retriever": {"model": str(missing)}})
    text = (PIPELINES / "phrase_qa.yml").read_text().replace(f"model: {DEFAULT_MODEL}", f"model: {missing}")
    (tmp_path / "p.yml").write_text(text)
    with pytest.raises(PipelineConfigError) as excinfo:  # plain Haystack loading keeps it as the cause
        Pipeline.load_from_yaml(tmp_path / "p.yml")
    assert isinstance(excinfo.value.__cause__, ModelLoadError) and str(missing) in str(excinfo.value.__cause__)


@pytest.mark.unit
def test_env_variable_overrides_the_model(tiny_model_dir, monkeypatch):
    monkeypatch.setenv("RETRIEVER_PARAMS_MODEL", str(tiny_model_dir))
    pipeline = load_pipeline("phrase_qa.yml")  # bare names are found in pipelines/
    assert pipeline.get_node("Retriever").model == str(tiny_model_dir)


@pytest.mark.unit
def test_save_to_yaml_round_trips_the_custom_nodes(tiny_model_dir, tmp_path):
    pipeline = _load("hybrid_dpr.yml", tiny_model_dir)
    pipeline.save_to_yaml(tmp_path / "saved.yml")
    text = (tmp_path / "saved.yml").read_text()
    assert "type: PhraseRetriever" in text and "type: LinearFusionJoin" in text
    again = Pipeline.load_from_yaml(tmp_path / "saved.yml")
    assert isinstance(again.get_node("Retriever"), PhraseRetriever)
    assert isinstance(again.get_node("Join"), LinearFusionJoin) and again.get_node("Join").weights == [1.0, 1.1]


@pytest.mark.unit
def test_fusion_helpers():
    a, b, c = Document("a", id="a", score=10.0), Document("b", id="b", score=5.0), Document("c", id="c", score=0.0)
    assert minmax([3.0, 3.0]) == [1.0, 1.0] and minmax([]) == []
    fused = fuse_linear([[a, b, c], [Document("c", id="c", score=2.0), Document("a", id="a", score=1.0)]], [1.0, 1.1])
    assert {d.id: d.score for d in fused} == pytest.approx({"a": 1.0 / 2.1, "b": 0.5 / 2.1, "c": 1.1 / 2.1})
    assert [d.id for d in fused] == ["c", "a", "b"]
    assert a.score == 10.0  # inputs are not mutated
    rrf = fuse_rrf([[a, b], [a, c]])
    assert rrf[0].id == "a" and rrf[0].score == pytest.approx(1.0)
    assert rrf[1].score == pytest.approx((1 / 62) / (2 / 61)) and math.isclose(rrf[1].score, rrf[2].score)
    with pytest.raises(ValueError):
        fuse_linear([[a], [b]], [1.0])
    dup = [
        Answer("x", score=0.2, document_ids=["a"]),
        Answer("x", score=0.9, document_ids=["a"]),
        Answer("y", score=0.5, document_ids=["b"]),
    ]
    assert [(ans.answer, ans.score) for ans in dedupe_answers(dup)] == [("x", 0.9), ("y", 0.5)]
    assert len(dedupe_answers(dup, top_k=1)) == 1


@pytest.mark.integration
def test_shipped_model_in_the_hybrid_yaml_on_squad_paragraphs(minilm_available, squad_dev_paragraphs):
    """The YAML's default model is the shipped one, and its index keeps the model's filter threshold."""
    from dphr_haystack import DEFAULT_MODEL, PhraseModel

    paragraphs = squad_dev_paragraphs[:8]
    pipeline = load_pipeline(PIPELINES / "hybrid_answers.yml", overrides={"DocumentStore": {"progress_bar": False}})
    docs = [Document(content=p["text"], id=p["id"], meta={"title": p["title"]}) for p in paragraphs]
    store = _fill(pipeline, docs)
    retriever = pipeline.get_node("Retriever")
    shipped = PhraseModel.load(DEFAULT_MODEL)
    assert retriever.model == DEFAULT_MODEL
    assert retriever.phrase_model.phrase_fingerprint() == shipped.phrase_fingerprint()
    assert store.get_phrase_index().filter_threshold == shipped.config.filter_threshold is not None
    question = paragraphs[3]["qas"][0]["question"]
    out = pipeline.run(query=question, debug=True)
    assert out["answers"] and out["documents"]
    inputs = [{d.id for d in out["_debug"][name]["output"]["documents"]} for name in ("BM25", "Retriever")]
    assert {d.id for d in out["documents"]} == inputs[0] | inputs[1]
    for answer in out["answers"]:
        span = answer.offsets_in_document[0]
        assert answer.context[span.start : span.end] == answer.answer


def test_the_package_re_exports_exactly_the_node_names():
    import dphr_haystack
    import dphr_haystack.nodes

    assert set(dphr_haystack._NODES) == set(dphr_haystack.nodes.__all__)
    assert dphr_haystack.PhraseRetriever is dphr_haystack.nodes.PhraseRetriever
