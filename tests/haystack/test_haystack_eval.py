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
    assert summary["questions"] == 2 and summary["metrics"]["passage_acc@3"] == 1.0  # BM25 finds both
    assert "| bm25 | 2 |" in (out / "table.md").read_text()
    assert "passage_acc@5" not in summary["metrics"]  # only 3 passages were retrieved

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


def _write_inputs(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in tiny_passages()))
    questions = tmp_path / "q.jsonl"
    asked = [("What is the capital of France?", "Paris"), ("Who wrote Hamlet?", "Shakespeare")]
    questions.write_text("".join(json.dumps({"question": q, "answer": [a]}) + "\n" for q, a in asked))
    return corpus, questions


def _eval(tmp_path, model_dir, questions, out, *extra) -> int:
    return dphr(
        [
            "eval",
            "--pipeline",
            "phrase_qa.yml",
            "--set",
            f"Retriever.model={model_dir}",
            "--questions",
            str(questions),
            "--top-k",
            "5",
            "--name",
            "phrase",
            "--out",
            str(tmp_path / out),
            "--no-progress",
            *extra,
        ]
    )


def _predictions(tmp_path, out) -> list:
    lines = (tmp_path / out / "phrase.predictions.jsonl").read_text().splitlines()
    return [[(p["text"], p["passage_id"]) for p in json.loads(line)["predictions"]] for line in lines]


def test_dphr_eval_reuses_its_store_and_an_index_built_by_dphr_index(
    tmp_path, tiny_model_dir, tiny_base_dir, capsys, monkeypatch
):
    from dphr_haystack.model.phrase_model import PhraseModel

    corpus, questions = _write_inputs(tmp_path)
    encodings = {"n": 0}
    real = PhraseModel.iter_encoded_pieces

    def counted(model, *args, **kwargs):
        encodings["n"] += 1
        return real(model, *args, **kwargs)

    monkeypatch.setattr(PhraseModel, "iter_encoded_pieces", counted)
    store = tmp_path / "store"
    assert _eval(tmp_path, tiny_model_dir, questions, "first", "--corpus", str(corpus), "--store", str(store)) == 0
    assert encodings["n"] > 0 and (store / "store.sqlite3").is_file()
    # The second run opens the store: no phrase is encoded again, and the answers are the same.
    encodings["n"] = 0
    assert _eval(tmp_path, tiny_model_dir, questions, "second", "--corpus", str(corpus), "--store", str(store)) == 0
    assert encodings["n"] == 0 and "store " in capsys.readouterr().out
    assert _eval(tmp_path, tiny_model_dir, questions, "third", "--store", str(store)) == 0 and encodings["n"] == 0
    assert _predictions(tmp_path, "second") == _predictions(tmp_path, "first") == _predictions(tmp_path, "third")
    # table.md labels the depths evaluated (top 5) and shows every metric.
    header = (tmp_path / "first" / "table.md").read_text().splitlines()[0]
    for name in ("phrase_em@1", "phrase_f1@1", "phrase_em@5", "passage_acc@1", "passage_acc@5", "mrr@5", "p@5"):
        assert f"| {name} |" in header, name
    assert "@20" not in header

    # An index built by `dphr index` is the store: its passages are the documents, its phrases are not re-encoded,
    # and the directory is not written.
    index_dir = tmp_path / "ix"
    args = ["index", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(index_dir), "--no-progress"]
    assert dphr(args) == 0
    before = {f.name: f.read_bytes() for f in index_dir.iterdir() if f.is_file() and f.name != ".dphr.lock"}
    encodings["n"] = 0
    assert _eval(tmp_path, tiny_model_dir, questions, "from-index", "--store", str(index_dir)) == 0
    assert encodings["n"] == 0 and _predictions(tmp_path, "from-index") == _predictions(tmp_path, "first")
    assert {f.name: f.read_bytes() for f in index_dir.iterdir() if f.is_file() and f.name != ".dphr.lock"} == before

    # What cannot be reused says why, and leaves nothing behind.
    capsys.readouterr()
    assert _eval(tmp_path, tiny_model_dir, questions, "e1", "--store", str(tmp_path / "new")) == 2
    assert "give --corpus" in capsys.readouterr().err and not (tmp_path / "new").exists()
    (tmp_path / "other-dir").mkdir()
    (tmp_path / "other-dir" / "notes.txt").write_text("mine")
    assert (
        _eval(
            tmp_path, tiny_model_dir, questions, "e2", "--corpus", str(corpus), "--store", str(tmp_path / "other-dir")
        )
        == 2
    )
    assert "neither a store directory" in capsys.readouterr().err
    other_model = tmp_path / "other-model"
    PhraseModel.from_base(tiny_base_dir, seed=1).save(other_model)
    assert _eval(tmp_path, other_model, questions, "e3", "--store", str(store)) == 2
    assert "holds phrases encoded by" in capsys.readouterr().err
