"""benchmarks/haystack/haystack2_parity.py end to end on a tiny corpus: the 1.x build's phrase index, the 2.x
pipelines, the comparison with a 1.x run."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from benchmarks.common import build_phrases, haystack2_phrase_store
from benchmarks.haystack import haystack2_parity as bench
from benchmarks.significance import mcnemar_p, paired, unpaired, within_noise
from dphr_haystack.evaluation import QAExample
from dphr_haystack.haystack2.pipelines import corpus_documents
from dphr_haystack.model.cache import load_phrase_model

pytestmark = pytest.mark.unit

QUESTIONS = [
    QAExample("q1", "Who wrote Hamlet?", ("William Shakespeare",)),
    QAExample("q2", "What is the capital of Germany?", ("Berlin",)),
    QAExample("q3", "Where does the Nile flow into?", ("Mediterranean Sea",)),
    QAExample("q4", "Who created Python?", ("Guido van Rossum",)),
]


@pytest.fixture
def run(tmp_path, tiny_model_dir, one_torch_thread):
    """The benchmark's store and systems over the tiny corpus, its phrase index built by the 1.x benchmark's code."""
    from tests.conftest import tiny_passages

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({**p, "document_id": p["title"]}) + "\n" for p in tiny_passages()))
    docs = corpus_documents([corpus])
    model = load_phrase_model(str(tiny_model_dir))
    passages = [
        {"id": d.id, "text": d.content, "title": d.meta["title"], "document_id": d.meta["document_id"]} for d in docs
    ]
    build_phrases(model, str(tiny_model_dir), passages, tmp_path / "phrases")
    store = haystack2_phrase_store(docs, tmp_path / "phrases", model)
    try:
        rows = bench.evaluate_systems(store, QUESTIONS, str(tiny_model_dir), top_k=20, progress=False)
    finally:
        store.close()
    return rows


def _baseline(rows, eval_dir):
    """A 1.x run as bench_squad_open_small records it, here of the very same outputs."""
    for _, report in rows:
        report.write(eval_dir)
    systems = [{k: row[k] for k in ("system", "questions", "metrics", "latency")} for row, _ in rows]
    return {"systems": systems, "machine": {"date": "then", "cpu": "cpu"}, "questions_sampled": len(QUESTIONS)}


def test_systems_run_on_the_attached_index(run):
    names = [row["system"] for row, _ in run]
    assert names == [name for name, _, _ in bench.SYSTEMS]
    by_name = {row["system"]: row for row, _ in run}
    assert by_name["BM25"]["metrics"]["passage_acc@1"] == 1.0  # BM25 answers every tiny question
    assert "phrase_em@1" in by_name["Phrase answers"]["metrics"] and "phrase_em@1" not in by_name["BM25"]["metrics"]
    assert by_name["Hybrid RRF (BM25 + phrase)"]["metrics"]["passage_acc@20"] == 1.0
    assert all(len(r.passages) == 6 for r in run[-1][1].results)  # the hybrid's joiner returned top-20, not 10
    for row, _ in run:
        assert row["questions"] == 4 and row["latency"]["p50_ms"] > 0


def test_comparison_pairs_questions_and_finds_parity(run, tmp_path):
    baseline = _baseline(run, tmp_path / "eval")
    cmp = bench.compare(run, QUESTIONS, baseline, tmp_path / "eval", top_k=20)
    assert {s["pairing"] for s in cmp["systems"]} == {"paired"} and not cmp["pairing_notes"]
    assert cmp["headline_within_noise"] and cmp["metrics_outside_noise"] == 0
    assert [(h["system"], h["metric"]) for h in cmp["headline"]] == bench.HEADLINE
    for system in cmp["systems"]:
        assert system["identical"]["top_20_passages"] == 1.0
        assert all(m["diff"] == 0 and m["lost"] == m["gained"] == 0 for m in system["metrics"].values() if "lost" in m)

    # one question lost by 2.x: a paired difference of -1/4 whose noise band (from one flip) includes it
    worse = copy.deepcopy(run)
    bm25 = worse[0][1]
    bm25.results[0].passages = [p for p in bm25.results[0].passages if not p["has_answer"]]
    bm25.summary = {}
    bm25.__post_init__()
    worse[0][0]["metrics"] = bm25.summary
    acc = bench.compare(worse, QUESTIONS, baseline, tmp_path / "eval", top_k=20)["systems"][0]["metrics"]
    assert acc["passage_acc@1"]["diff"] == -0.25 and acc["passage_acc@1"]["lost"] == 1
    assert acc["passage_acc@1"]["mcnemar_p"] == 1.0 and acc["passage_acc@1"]["within_noise"]

    # predictions that do not reproduce the recorded 1.x summary are not paired: binomial errors instead
    stale = copy.deepcopy(baseline)
    stale["systems"][0]["metrics"]["passage_acc@1"] = 0.5
    cmp = bench.compare(run, QUESTIONS, stale, tmp_path / "eval", top_k=20)
    assert cmp["systems"][0]["pairing"] == "binomial" and "summary differs" in cmp["pairing_notes"][0]
    assert cmp["systems"][0]["metrics"]["passage_acc@1"]["se"] == pytest.approx(np.sqrt(0.25 / 4))
    assert cmp["systems"][1]["pairing"] == "paired"

    result = {
        "haystack_ai": "3",
        "corpus_passages": 6,
        "questions_sampled": 4,
        "seed": 0,
        "held_out_titles": [],
        "top_k": 20,
        "phrase_model": "tiny",
        "model_id": None,
        "phrase_index": "phrases",
        "phrase_vectors": 100,
        "attach_seconds": 0.1,
        "bm25": {"algorithm": "BM25Okapi", "settings": "haystack1"},
        "pending_check_ms": 0.1,
        "load_average_start": (1.0, 1.0, 1.0),
        "systems": [row for row, _ in run],
        "comparison": cmp,
    }
    text = bench.markdown(result)
    assert "| BM25 | passage_acc@1 | 50.0 | 100.0 | +50.0 |" in text and "Verdict:" in text
    bench.plot(result, tmp_path / "parity.png")
    del result["comparison"]
    result["comparison_skipped"] = "no 1.x run"
    assert "No comparison with Haystack 1.x: no 1.x run." in bench.markdown(result)
    bench.plot(result, tmp_path / "alone.png")
    assert (tmp_path / "parity.png").stat().st_size > 0 and (tmp_path / "alone.png").stat().st_size > 0


def test_statistics():
    assert mcnemar_p(0, 0) == 1.0 and mcnemar_p(5, 0) == pytest.approx(2 / 32)
    assert mcnemar_p(3, 3) == 1.0
    stats = paired(np.array([1.0, 0.0, 1.0, 1.0]), np.array([1.0, 1.0, 1.0, 1.0]))
    assert stats["diff"] == 0.25 and (stats["gained"], stats["lost"]) == (1, 0) and stats["se"] == pytest.approx(0.25)
    assert "gained" not in paired(np.array([0.5, 0.2]), np.array([0.5, 0.4]))  # F1, MRR: no flips
    assert unpaired(0.5, 100, 0.5, 100)["se"] == pytest.approx(np.sqrt(0.005))
    assert within_noise(0.0, 0.0) and not within_noise(0.01, 0.0)
    assert within_noise(0.05, 0.03) and not within_noise(0.07, 0.03)


def test_missing_phrase_index_says_how_to_build_it(tmp_path, tiny_model_dir, one_torch_thread):
    from benchmarks.common import SQUAD_DEV, SQUAD_TRAIN

    if not (SQUAD_DEV.is_file() and SQUAD_TRAIN.is_file()):
        pytest.skip("SQuAD data not found")
    hint = r"not found: build it .*benchmarks\.quality\.squad_open_small --model \S+ --only phrases"
    with pytest.raises(SystemExit, match=hint):
        bench.main(["--model", str(tiny_model_dir), "--cache", str(tmp_path / "cache"), "--threads", "1"])
