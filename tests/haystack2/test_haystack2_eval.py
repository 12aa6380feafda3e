"""Haystack 2 pipelines scored like 1.x ones: corpus documents, YAML overrides, evaluate_pipeline."""

from __future__ import annotations

import json

import pytest
from haystack import Pipeline
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever

from dphr_haystack import CorpusFormatError, InvalidParameterError
from dphr_haystack.answers import contains_answer
from dphr_haystack.evaluation import QAExample, read_results, report_stem
from dphr_haystack.haystack2 import PIPELINES_DIR, PhraseDocumentStore, load_pipeline
from dphr_haystack.haystack2.evaluation import evaluate_pipeline, pipeline_inputs
from dphr_haystack.haystack2.pipelines import STORE_INDEX, corpus_documents

pytestmark = pytest.mark.unit

QUESTIONS = [
    QAExample("q1", "Who wrote Hamlet?", ("William Shakespeare",)),
    QAExample("q2", "What is the capital of Germany?", ("Berlin",)),
    QAExample("q3", "Where does the Nile flow into?", ("Mediterranean Sea",)),
]


@pytest.fixture
def corpus_file(tmp_path):
    from tests.conftest import tiny_passages

    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({**p, "document_id": f"doc-{p['title']}"}) + "\n" for p in tiny_passages()))
    return path


@pytest.fixture
def store(corpus_file, tiny_model, one_torch_thread):
    """The store the shipped pipelines name, holding the tiny corpus with its phrases."""
    store = PhraseDocumentStore(index=STORE_INDEX, progress_bar=False)
    store.write_documents(corpus_documents([corpus_file]))
    store.update_phrases(tiny_model)
    yield store
    store.close()


def test_corpus_documents_keep_the_corpus_ids_titles_and_groups(corpus_file):
    docs = corpus_documents([corpus_file])
    assert [d.id for d in docs] == [f"p{i}" for i in range(6)]
    assert docs[3].meta == {"title": "Hamlet", "document_id": "doc-Hamlet"} and docs[3].content.startswith("Hamlet")
    with pytest.raises(CorpusFormatError, match="6 passage ids occur more than once"):
        corpus_documents([corpus_file, corpus_file])


def test_load_pipeline_finds_shipped_names_and_applies_overrides(tiny_model_dir):
    assert (PIPELINES_DIR / "hybrid_rrf.yml").is_file()
    pipeline = load_pipeline("hybrid_rrf.yml", overrides={"phrase": {"model": str(tiny_model_dir), "top_k": 7}})
    phrase = pipeline.get_component("phrase")
    assert phrase.model == str(tiny_model_dir) and phrase.top_k == 7
    assert load_pipeline("hybrid_rrf.yml").get_component("phrase").model != str(tiny_model_dir)  # file unchanged
    with pytest.raises(KeyError, match="no component named 'retriever'"):
        load_pipeline("hybrid_rrf.yml", overrides={"retriever": {"top_k": 3}})


def test_evaluate_pipeline_scores_what_the_pipeline_returns(store, tiny_model_dir, tmp_path):
    pipeline = load_pipeline("phrase_qa.yml", overrides={"retriever": {"model": str(tiny_model_dir)}})
    assert pipeline.get_component("retriever").document_store is store
    assert pipeline_inputs(pipeline, "Who?", 3) == {"retriever": {"query": "Who?", "top_k": 3}}
    report = evaluate_pipeline(pipeline, QUESTIONS, top_k=3, system="Phrase answers", progress=False)
    assert report.has_answers and report.has_passages and len(report.results) == 3
    for ex, result in zip(QUESTIONS, report.results, strict=True):
        out = pipeline.run({"retriever": {"query": ex.question, "top_k": 3}})["retriever"]
        assert [p["id"] for p in result.passages] == [d.id for d in out["documents"]]
        assert [p["text"] for p in result.predictions] == [a.data for a in out["answers"]]
        assert [p["has_answer"] for p in result.passages] == [
            contains_answer(d.content, ex.answers) for d in out["documents"]
        ]
    assert 0.0 <= report.summary["phrase_em@1"] <= 1.0 and "passage_acc@3" in report.summary
    assert "passage_acc@20" not in report.summary  # only the top 3 were retrieved
    report.write(tmp_path)  # the 1.x layer's result files, read back the same
    assert read_results(tmp_path / f"{report_stem('Phrase answers')}.predictions.jsonl") == report.results

    # the hybrid: the joiner is asked for top_k too, its documents are scored, the phrase answers as well
    hybrid = load_pipeline("hybrid_rrf.yml", overrides={"phrase": {"model": str(tiny_model_dir)}})
    assert set(pipeline_inputs(hybrid, "Who?", 20)) == {"bm25", "phrase", "joiner"}
    report = evaluate_pipeline(hybrid, QUESTIONS, top_k=20, progress=False)
    assert report.has_answers and all(len(r.passages) == 6 for r in report.results)  # not capped at the joiner's 10
    assert report.results[0].passages[0]["id"] == "p3" and report.summary["passage_acc@1"] > 0  # BM25 finds Hamlet

    bm25 = evaluate_pipeline(load_pipeline("bm25.yml"), QUESTIONS, top_k=2, progress=False)
    assert not bm25.has_answers and "phrase_em@1" not in bm25.summary and bm25.summary["passage_acc@1"] == 1.0


def test_evaluate_pipeline_needs_one_output_to_score(store):
    pipeline = Pipeline()
    pipeline.add_component("a", InMemoryBM25Retriever(document_store=store))
    pipeline.add_component("b", InMemoryBM25Retriever(document_store=store))
    with pytest.raises(InvalidParameterError, match=r"several components return 'documents' \(\['a', 'b'\]\)"):
        evaluate_pipeline(pipeline, QUESTIONS, progress=False)
    report = evaluate_pipeline(pipeline, QUESTIONS, top_k=1, documents_from="b", progress=False)
    assert report.summary["passage_acc@1"] == 1.0
    with pytest.raises(InvalidParameterError, match="no questions"):
        evaluate_pipeline(pipeline, [], documents_from="a", progress=False)
