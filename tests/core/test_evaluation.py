"""Evaluation: answer matching, question files, metric aggregation, and a run over a tiny phrase index."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from dphr_haystack.answers import contains_answer, exact_match, f1_score, normalize_answer
from dphr_haystack.encode.add import add_passages
from dphr_haystack.errors import CorpusFormatError, InvalidParameterError
from dphr_haystack.evaluation import (
    EvalReport,
    QAExample,
    QuestionResult,
    SearcherEvaluator,
    accuracy_at,
    evaluate_searcher,
    first_hit,
    hit_results,
    markdown_table,
    mean_metrics,
    passage_ks,
    passage_metrics,
    precision_at,
    question_metrics,
    ranking_metrics,
    read_questions,
    reciprocal_rank_at,
    short_metrics,
    summarize,
    table_columns,
)
from dphr_haystack.index.phrase_index import PhraseIndex
from dphr_haystack.search import PhraseSearcher

pytestmark = pytest.mark.unit
DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def test_squad_normalisation_and_matching():
    assert normalize_answer("The  Louvre, museum!") == "louvre museum"
    assert exact_match("the Louvre", ["Louvre"]) and not exact_match("Louvre museum", ["Louvre"])
    assert f1_score("the cat sat", ["cat sat on the mat"]) == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    assert f1_score("dog", ["cat", "a dog"]) == 1.0 and f1_score("", ["cat"]) == 0.0
    # Whole words only: "art" is not found inside "party"; punctuation and case do not matter.
    assert not contains_answer("a big party", ["art"]) and contains_answer("Modern ART, mostly.", ["modern art"])
    # Haystack's criterion: raw, case-sensitive substring.
    assert contains_answer("a big party", ["art"], answer_match="substring")
    assert not contains_answer("Modern ART", ["modern art"], answer_match="substring")


def test_regex_answers_follow_the_drqa_convention():
    pattern = [r"20\s?,?\s?(32|40)0\s?-?\s?f(ee|oo)t|6,194-meter"]
    assert exact_match("20,320 feet", pattern, regex=True)
    assert not exact_match("about 20,320 feet", pattern, regex=True)  # EM anchors at the start
    assert contains_answer("It is about 20,320 FEET tall.", pattern, regex=True)  # passages: anywhere
    assert f1_score("20,320 feet", pattern, regex=True) == 1.0
    assert not contains_answer("anything", ["(unclosed"], regex=True)  # a broken pattern never matches


def _write(path: Path, text: str) -> Path:
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_question_file_formats(tmp_path):
    squad = {
        "data": [
            {
                "title": "T",
                "paragraphs": [
                    {
                        "context": "c",
                        "qas": [
                            {"id": "q1", "question": "Who?", "answers": [{"text": "Ann", "answer_start": 0}]},
                            {"id": "q2", "question": "Unanswerable?", "answers": []},
                        ],
                    }
                ],
            },
            {
                "title": "U",
                "paragraphs": [
                    {
                        "context": "d",
                        "qas": [{"id": "q3", "question": "What?", "answers": [{"text": "X", "answer_start": 0}]}],
                    }
                ],
            },
        ]
    }
    got = read_questions(_write(tmp_path / "s.json.gz", json.dumps(squad)))
    assert [(e.qid, e.answers, e.title, e.gold_passage_id) for e in got] == [
        ("q1", ("Ann",), "T", "T-0-0"),
        ("q3", ("X",), "U", "U-1-0"),
    ]
    assert [e.qid for e in read_questions(tmp_path / "s.json.gz", exclude_titles=["T"])] == ["q3"]

    flat = {"data": [{"id": "a", "question": "Q1", "answers": ["x"]}, {"id": "b", "question": "Q2", "answers": ["y"]}]}
    assert [e.qid for e in read_questions(_write(tmp_path / "dp.json", json.dumps(flat)))] == ["a", "b"]

    jsonl = '{"question": "q one", "answer": ["A", "B"]}\n\n{"question": "q two", "answer": ["C"]}\n'
    got = read_questions(_write(tmp_path / "nq.jsonl", jsonl))
    assert [(e.question, e.answers, e.regex) for e in got] == [("q one", ("A", "B"), False), ("q two", ("C",), False)]
    assert read_questions(_write(tmp_path / "curatedtrec-test.qa.jsonl", jsonl))[0].regex  # TREC: patterns

    csv_text = "who got the prize\t['Wilhelm Conrad Röntgen']\nwhat is 'x'\t['a', \"b's\"]\n"
    got = read_questions(_write(tmp_path / "nq-test.qa.csv.gz", csv_text))
    assert [(e.question, e.answers) for e in got] == [
        ("who got the prize", ("Wilhelm Conrad Röntgen",)),
        ("what is 'x'", ("a", "b's")),
    ]
    # A list literal is parsed, never executed.
    with pytest.raises(CorpusFormatError, match=":1:"):
        read_questions(_write(tmp_path / "bad.qa.csv", "q\t__import__('os').system('true')\n"))
    with pytest.raises(CorpusFormatError, match="unknown question file type"):
        read_questions(_write(tmp_path / "q.txt", "x"))
    with pytest.raises(FileNotFoundError):
        read_questions(tmp_path / "missing.jsonl")


def test_limit_and_seeded_sample(tmp_path):
    lines = "".join(json.dumps({"question": f"q{i}", "answer": [str(i)]}) + "\n" for i in range(50))
    path = _write(tmp_path / "q.jsonl", lines)
    assert [e.question for e in read_questions(path, limit=3)] == ["q0", "q1", "q2"]
    a, b = read_questions(path, limit=10, seed=1), read_questions(path, limit=10, seed=1)
    assert a == b and a != read_questions(path, limit=10, seed=2) and len(a) == 10


@pytest.mark.skipif(not (DATA / "odqa-dpr").is_dir(), reason="../shared/data is not present")
def test_shared_question_files_read_with_their_documented_counts():
    assert len(read_questions(DATA / "nq-open" / "NQ-open.dev.jsonl.gz")) == 3610
    assert len(read_questions(DATA / "odqa-dpr" / "nq-test.qa.csv.gz")) == 3610
    trec = read_questions(DATA / "odqa-dpr" / "curatedtrec-test.qa.jsonl.gz")
    assert trec and all(e.regex for e in trec)
    assert len(read_questions(DATA / "squad" / "dev-v1.1-public.json.gz")) == 8763


def _result(first_hit: int, n: int = 20, predictions=()) -> QuestionResult:
    passages = [
        {"id": str(i), "score": 0.0, "has_answer": i + 1 == first_hit or (first_hit and i + 1 > first_hit + 3)}
        for i in range(n)
    ]
    return QuestionResult(
        "q", "q?", ["Paris"], [{"text": t, "score": 0.0, "passage_id": None} for t in predictions], passages, 0.01
    )


def test_summary_against_hand_computed_values():
    results = [
        _result(1, predictions=["Paris", "x"]),
        _result(3, predictions=["the city of Paris"]),
        _result(0),
        _result(25, n=30, predictions=["Lyon", "paris"]),
    ]
    s = summarize(results, top_k=20, has_answers=True, has_passages=True)
    assert s["phrase_em@1"] == 0.25 and s["phrase_em@20"] == 0.5
    assert s["phrase_f1@1"] == pytest.approx((1 + 2 * (1 / 3) * 1 / (1 / 3 + 1)) / 4)
    assert (s["passage_acc@1"], s["passage_acc@5"], s["passage_acc@20"]) == (0.25, 0.5, 0.5)
    assert s["mrr@20"] == pytest.approx((1 + 1 / 3) / 4)
    # hits in the top 20: rank 1 and ranks 5..20 (16) → 17; rank 3 and 7..20 (14) → 15; none; none.
    assert s["p@20"] == pytest.approx((17 + 15) / 20 / 4)
    assert s["ms_per_question"] == pytest.approx(10.0)
    only_passages = summarize(results, 20, has_answers=False, has_passages=True)
    assert "phrase_em@1" not in only_passages
    table = markdown_table([EvalReport("sys", results, 20, has_answers=False, has_passages=True)])
    assert table.splitlines()[0] == (
        "| system | questions | passage_acc@1 | passage_acc@5 | passage_acc@20 | mrr@20 | p@20 | ms_per_question |"
    )
    assert "| sys | 4 | 25.0 | 50.0 | 50.0 |" in table


def test_metric_names_follow_the_depth_evaluated():
    """A top-5 evaluation reports @5 (and @1), never @20 under its own numbers, and its table shows every metric."""
    results = [_result(1, n=5, predictions=["x", "Paris"]), _result(4, n=5, predictions=["Paris"]), _result(0, n=5)]
    s = summarize(results, top_k=5, has_answers=True, has_passages=True)
    assert sorted(s) == sorted(
        [
            "questions",
            "phrase_em@1",
            "phrase_f1@1",
            "phrase_em@5",
            "passage_acc@1",
            "passage_acc@5",
            "mrr@5",
            "p@5",
            "ms_per_question",
        ]
    )
    assert (s["phrase_em@1"], s["phrase_em@5"]) == (pytest.approx(1 / 3), pytest.approx(2 / 3))
    assert (s["passage_acc@1"], s["passage_acc@5"]) == (pytest.approx(1 / 3), pytest.approx(2 / 3))
    assert s["mrr@5"] == pytest.approx((1 + 1 / 4) / 3)
    # rank 1 and ranks 5.. (1) → 2 of 5; rank 4 → 1 of 5 (its extra hits start at rank 8, beyond 5); none
    assert s["p@5"] == pytest.approx((2 / 5 + 1 / 5) / 3)
    report = EvalReport("top5", results, 5, has_answers=True, has_passages=True)
    header, _, row = markdown_table([report]).splitlines()
    assert header == (
        "| system | questions | phrase_em@1 | phrase_f1@1 | phrase_em@5 | passage_acc@1 | passage_acc@5 | mrr@5 | p@5 "
        "| ms_per_question |"
    )
    assert row.startswith("| top5 | 3 | 33.3 | 33.3 | 66.7 | 33.3 | 66.7 | 41.7 | 20.0 |")
    # Depths beyond 20 add their own accuracy; MRR and P stay @20. Reports of other depths share one table.
    deep = summarize([_result(25, n=30)], top_k=30, has_answers=False, has_passages=True)
    assert [k for k in deep if k.startswith(("passage", "mrr", "p@"))] == [
        "passage_acc@1",
        "passage_acc@5",
        "passage_acc@20",
        "passage_acc@30",
        "mrr@20",
        "p@20",
    ]
    both = EvalReport("top30", [_result(25, n=30)], 30, has_answers=False, has_passages=True)
    assert table_columns([report, both]) == [
        "phrase_em@1",
        "phrase_f1@1",
        "phrase_em@5",
        "passage_acc@1",
        "passage_acc@5",
        "passage_acc@20",
        "passage_acc@30",
        "mrr@5",
        "mrr@20",
        "p@5",
        "p@20",
        "ms_per_question",
    ]
    assert passage_ks(3) == (1, 3) and passage_ks(1) == (1,) and passage_ks(20) == (1, 5, 20)


def test_searcher_evaluation_is_consistent_with_search(tiny_model):
    from tests.conftest import tiny_passages

    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    searcher = PhraseSearcher(index, tiny_model)
    questions = ["What is the capital of France?", "Who wrote Hamlet?", "Where is the Nile?"]
    top = [hits[0] for hits in searcher.search_batch(questions, unit="phrase", top_k=1)]
    top_passages = [hits[0] for hits in searcher.search_batch(questions, unit="passage", top_k=1)]

    # Gold answers = what the index returns first: EM@1 must then be exactly 1 ...
    oracle = [QAExample(str(i), q, (hit.text,)) for i, (q, hit) in enumerate(zip(questions, top))]
    assert evaluate_searcher(searcher, oracle, top_k=3, progress=False).summary["phrase_em@1"] == 1.0
    # ... and with the first words of the top passage as the answer, passage acc@1 and MRR are exactly 1.
    oracle = [
        QAExample(str(i), q, (" ".join(hit.text.split()[:4]),))
        for i, (q, hit) in enumerate(zip(questions, top_passages))
    ]
    report = evaluate_searcher(searcher, oracle, top_k=3, progress=False)
    assert report.summary["passage_acc@1"] == 1.0 and report.summary["mrr@3"] == 1.0
    # The evaluator that training front ends call reports the same numbers under their short names.
    evaluator = SearcherEvaluator(oracle, ks=(1, 3))
    assert evaluator(searcher) == {
        "em@1": report.summary["phrase_em@1"],
        "f1@1": report.summary["phrase_f1@1"],
        "acc@1": report.summary["passage_acc@1"],
        "acc@3": question_metrics(report.results, 3, True, True, ks=(3,))["passage_acc@3"].mean(),
    }
    assert evaluator.primary_metric == "em@1" and evaluator.greater_is_better
    # An answer that occurs nowhere scores 0 everywhere.
    absent = [QAExample("n", questions[0], ("zzqx unlikely words",))]
    summary = evaluate_searcher(searcher, absent, top_k=3, progress=False).summary
    assert summary["phrase_em@1"] == 0.0 and summary["passage_acc@3"] == 0.0 and "passage_acc@20" not in summary
    with pytest.raises(InvalidParameterError):
        evaluate_searcher(searcher, [], progress=False)
    with pytest.raises(InvalidParameterError, match="answer_match"):
        evaluate_searcher(searcher, oracle, answer_match="fuzzy", progress=False)


def test_report_files(tmp_path):
    results = [_result(2, predictions=["Paris"])]
    out = EvalReport("my system/1", results, 5, {"top_k": 5}, has_answers=True, has_passages=True).write(tmp_path)
    lines = (out / "my_system_1.predictions.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["predictions"][0]["text"] == "Paris"
    summary = json.loads((out / "my_system_1.summary.json").read_text())
    assert summary["metrics"]["passage_acc@1"] == 0.0 and summary["metrics"]["passage_acc@5"] == 1.0


def test_ranking_metrics_against_hand_computed_values():
    flags = [[True, False], [False, False, True], [], [False] * 25 + [True]]
    firsts = [first_hit(f) for f in flags]
    assert firsts == [1, 3, 0, 26]
    assert accuracy_at(firsts, 1).tolist() == [1.0, 0.0, 0.0, 0.0]
    assert accuracy_at(firsts, 5).tolist() == [1.0, 1.0, 0.0, 0.0]
    assert reciprocal_rank_at(firsts, 20).tolist() == pytest.approx([1.0, 1 / 3, 0.0, 0.0])
    assert precision_at(flags, 2).tolist() == [0.5, 0.0, 0.0, 0.0]
    metrics = ranking_metrics(flags, ks=(1, 3))
    assert list(metrics) == ["passage_acc@1", "passage_acc@3", "mrr@20", "p@20"]
    assert metrics["passage_acc@3"].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert metrics["p@20"].tolist() == [1 / 20, 1 / 20, 0.0, 0.0]


def test_passage_metrics_of_given_rankings():
    examples = [QAExample("a", "Capital of France?", ("Paris",)), QAExample("b", "Longest river?", ("the Nile",))]
    rankings = [
        [("x", 2.0, "Lyon is big."), ("y", 1.0, "Paris, the capital."), ("z", 0.5, None)],
        [("u", 3.0, "Nothing here."), ("v", 1.0, "The Amazon.")],
    ]
    per_question = passage_metrics(examples, rankings, top_k=20)
    assert per_question["passage_acc@1"].tolist() == [0.0, 0.0]
    assert per_question["passage_acc@5"].tolist() == [1.0, 0.0]
    assert mean_metrics(per_question) == {
        "passage_acc@1": 0.0,
        "passage_acc@5": 0.5,
        "passage_acc@20": 0.5,
        "mrr@20": 0.25,
        "p@20": 1 / 40,
    }
    # Only the first top_k passages count.
    assert passage_metrics(examples, rankings, top_k=1, ks=(1, 2))["passage_acc@2"].tolist() == [0.0, 0.0]
    # Haystack's criterion: the raw answer string in the content.
    assert passage_metrics(examples, rankings, 20, answer_match="substring")["passage_acc@5"].tolist() == [1.0, 0.0]


def test_hit_results_and_short_metrics():
    from dphr_haystack.search import PhraseHit

    def hit(text: str, passage: str = "p") -> PhraseHit:
        return PhraseHit(text=text, score=1.0, passage_id=passage, document_id=passage, title="", start=0, end=1)

    examples = [QAExample("a", "Capital of France?", ("Paris",)), QAExample("b", "Hamlet's author?", ("Shakespeare",))]
    phrases = [[hit("Paris"), hit("Lyon")], [hit("William Shakespeare")]]
    passages = [[hit("Lyon, France"), hit("Paris is the capital")], [hit("Shakespeare wrote it")]]
    results = hit_results(examples, phrases, passages, seconds=0.5)
    assert [r.first_hit() for r in results] == [2, 1] and results[0].seconds == 0.5
    scores = short_metrics(results, ks=(1, 2))
    assert scores == {"em@1": 0.5, "f1@1": pytest.approx((1 + 2 / 3) / 2), "acc@1": 0.5, "acc@2": 1.0}
    summary = summarize(results, 2, has_answers=True, has_passages=True)
    assert (scores["em@1"], scores["acc@1"]) == (summary["phrase_em@1"], summary["passage_acc@1"])
    # Phrases or passages not searched: only the other half is scored.
    assert short_metrics(hit_results(examples, None, passages), ks=(1,), has_answers=False) == {"acc@1": 0.5}
    assert short_metrics(hit_results(examples, phrases, None), has_passages=False) == {
        "em@1": 0.5,
        "f1@1": pytest.approx((1 + 2 / 3) / 2),
    }
