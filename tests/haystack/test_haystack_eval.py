"""Pipeline evaluation: agreement with Haystack's own eval, ``dphr eval``, and pipelines sharing one store."""

from __future__ import annotations

import json

import pytest

from dphr_haystack.cli import main as dphr
from dphr_haystack.evaluation import QAExample, evaluate_pipeline, pipeline_top_k_params, read_questions
from dphr_haystack.nodes import PhraseDocumentStore, corpus_documents, index_corpus, load_pipeline
from tests.conftest import SQUAD_DEV, tiny_passages

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def squad_slice():
    """30 SQuAD dev paragraphs as Haystack documents and one question per distinct text asked about them."""
    if not SQUAD_DEV.is_file():
        pytest.skip("../shared/data/squad is not present")
    from itertools import islice

    from dphr_haystack.corpus import read_corpus

    assert corpus_documents([]) == []
    passages = list(islice(read_corpus(SQUAD_DEV), 30))
    docs = [d for d in corpus_documents([SQUAD_DEV]) if d.id in {p.id for p in passages}]
    ids = {d.id for d in docs}
    by_text = {e.question: e for e in read_questions(SQUAD_DEV) if e.gold_passage_id in ids}
    return docs, list(by_text.values())[:30]


def _haystack_metrics(pipeline, examples, docs, top_k):
    from haystack.schema import Answer, Label, MultiLabel

    by_id = {d.id: d for d in docs}
    labels = [
        MultiLabel(
            labels=[
                Label(
                    query=ex.question,
                    answer=Answer(answer=a),
                    document=by_id[ex.gold_passage_id],
                    is_correct_answer=True,
                    is_correct_document=True,
                    origin="gold-label",
                )
                for a in ex.answers
            ]
        )
        for ex in examples
    ]
    result = pipeline.eval(labels=labels, params=pipeline_top_k_params(pipeline, top_k))
    return result.calculate_metrics(document_scope="answer", answer_scope="any", simulated_top_k_reader=1)


@pytest.mark.parametrize("yml", ["bm25.yml", "phrase_qa.yml"])
def test_metrics_agree_with_haystack_eval(yml, squad_slice, tiny_model_dir):
    docs, examples = squad_slice
    overrides = {"Retriever": {"model": str(tiny_model_dir)}} if yml.startswith("phrase") else None
    pipeline = load_pipeline(yml, overrides=overrides)
    index_corpus(pipeline, docs)
    first = evaluate_pipeline(pipeline, examples, top_k=20, answer_match="substring", progress=False)
    if first.has_answers:
        # Make phrase EM non-trivial for the random model: every other question's gold answer is its top answer.
        examples = [
            QAExample(
                ex.qid,
                ex.question,
                (r.predictions[0]["text"],) if i % 2 and r.predictions else ex.answers,
                title=ex.title,
                gold_passage_id=ex.gold_passage_id,
            )
            for i, (ex, r) in enumerate(zip(examples, first.results))
        ]
    report = evaluate_pipeline(pipeline, examples, top_k=20, answer_match="substring", progress=False)
    ours = report.summary
    theirs = _haystack_metrics(pipeline, examples, docs, top_k=20)
    node = "BM25" if yml == "bm25.yml" else "Retriever"
    assert ours["passage_acc@20"] == pytest.approx(theirs[node]["recall_single_hit"])
    assert ours["mrr@20"] == pytest.approx(theirs[node]["mrr"])
    # Haystack divides by the documents returned (phrase_qa can return fewer than 20 distinct ones); p@20 by 20.
    precision = sum(sum(p["has_answer"] for p in r.passages) / len(r.passages) for r in report.results) / len(examples)
    assert precision == pytest.approx(theirs[node]["precision"])
    assert 0 < ours["mrr@20"] < 1  # neither trivial case
    if first.has_answers:
        assert ours["phrase_em@1"] == pytest.approx(theirs[node]["exact_match"]) and ours["phrase_em@1"] >= 0.4
        assert ours["phrase_f1@1"] == pytest.approx(theirs[node]["f1"])


def test_top_k_params_reach_retrievers_and_joins(tiny_model_dir):
    pipeline = load_pipeline("hybrid_rrf.yml", overrides={"Retriever": {"model": str(tiny_model_dir)}})
    params = pipeline_top_k_params(pipeline, 7)
    assert params["BM25"] == {"top_k": 7} and params["Retriever"] == {"top_k": 7}
    join = [name for name in params if name not in ("BM25", "Retriever")]
    assert join and all("top_k_join" in params[n] or "top_k" in params[n] for n in join)


def test_pipelines_share_one_store(tiny_model_dir, haystack_docs):
    store = PhraseDocumentStore(progress_bar=False, embedding_dim=384, similarity="cosine")
    qa = load_pipeline(
        "phrase_qa.yml", overrides={"Retriever": {"model": str(tiny_model_dir)}}, components={"DocumentStore": store}
    )
    bm25 = load_pipeline("bm25.yml", components={"DocumentStore": store})
    assert qa.get_document_store() is store and bm25.get_document_store() is store
    index_corpus(qa, haystack_docs)
    assert store.get_phrase_document_count() > 0 and bm25.run(query="capital of France")["documents"]
    with pytest.raises(KeyError, match="NoSuchNode"):
        load_pipeline("bm25.yml", components={"NoSuchNode": store})


def test_dphr_eval_on_a_pipeline_and_on_an_index(tmp_path, tiny_model_dir, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in tiny_passages()))
    questions = tmp_path / "q.jsonl"
    questions.write_text(
        json.dumps({"question": "What is the capital of France?", "answer": ["Paris"]})
        + "\n"
        + json.dumps({"question": "Who wrote Hamlet?", "answer": ["Shakespeare"]})
        + "\n"
    )
    out = tmp_path / "eval-bm25"
    assert (
        dphr(
            [
                "eval",
                "--pipeline",
                "bm25.yml",
                "--corpus",
                str(corpus),
                "--questions",
                str(questions),
                "--top-k",
                "3",
                "--out",
                str(out),
                "--save-store",
                str(tmp_path / "store"),
                "--no-progress",
            ]
        )
        == 0
    )
    summary = json.loads((out / "bm25.summary.json").read_text())
    assert summary["questions"] == 2 and summary["metrics"]["passage_acc@5"] == 1.0  # BM25 finds both
    assert "| bm25 | 2 |" in (out / "table.md").read_text()

    out = tmp_path / "eval-phrase"
    assert (
        dphr(
            [
                "eval",
                "--pipeline",
                "phrase_qa.yml",
                "--store",
                str(tmp_path / "store"),
                "--set",
                f"Retriever.model={tiny_model_dir}",
                "--questions",
                str(questions),
                "--top-k",
                "3",
                "--name",
                "phrase",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    lines = (out / "phrase.predictions.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["predictions"]  # phrase answers recorded per question

    assert (
        dphr(
            [
                "index",
                "--model",
                str(tiny_model_dir),
                "--corpus",
                str(corpus),
                "--out",
                str(tmp_path / "ix"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert (
        dphr(
            [
                "eval",
                "--index",
                str(tmp_path / "ix"),
                "--questions",
                str(questions),
                "--out",
                str(tmp_path / "eval-ix"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "eval-ix" / "ix.summary.json").read_text())["metrics"]["questions"] == 2
    capsys.readouterr()
    assert dphr(["eval", "--pipeline", "bm25.yml", "--questions", str(questions), "--out", str(tmp_path / "e")]) == 2
    assert "document store is empty" in capsys.readouterr().err
    assert dphr(["eval", "--pipeline", "bm25.yml", "--set", "oops", "--questions", str(questions)]) == 2
