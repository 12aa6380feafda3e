"""Scores a user can read: documents score their answers' confidences in [0, 1], ranked as before; the CLI shows
confidences; answers carry their passage's title."""

from __future__ import annotations

import json

import pytest

from dphr_haystack import PhraseIndex, PhraseSearcher
from dphr_haystack.cli import main as dphr
from dphr_haystack.confidence import ranked_confidences
from dphr_haystack.documents.results import best_phrase, document_scores, expit, retrieved
from dphr_haystack.encode.add import add_passages
from dphr_haystack.search import PassageHit, PhraseHit
from tests.conftest import tiny_passages
from tests.core.test_answers_every_unit import QUESTION, calibrated, save_calibrated

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("confidences", "expected"),
    [
        ([0.6, 0.7, None, 0.2, 0.4], [0.6, 0.6, 0.6, 0.2, 0.2]),
        ([0.9, 0.5, 0.1], [0.9, 0.5, 0.1]),  # already falling: each its own confidence
        ([None, None, 0.3, 0.8], [0.3, 0.3, 0.3, 0.3]),  # no answer above the first one that has one
        ([None, None], [0.0, 0.0]),  # nothing answers
        ([], []),
    ],
)
def test_ranked_confidences(confidences, expected):
    assert ranked_confidences(confidences) == pytest.approx(expected)


@pytest.fixture
def index(tiny_model):
    idx = PhraseIndex.create(tiny_model)
    add_passages(idx, tiny_model, tiny_passages(), progress=False)
    return idx


def _documents(hits, scale=True):
    stored = {p["id"]: p for p in tiny_passages()}
    pairs = [(h, stored[best_phrase(h).passage_id]) for h in hits]
    return retrieved(pairs, lambda doc: {"title": doc["title"]}, scale)


@pytest.mark.parametrize("unit", ["phrase", "passage", "document"])
@pytest.mark.parametrize("scoring", ["max", "logsumexp"])
def test_document_scores_are_monotone_confidences_and_keep_the_ranking(tiny_model, index, unit, scoring):
    model = calibrated(tiny_model)
    hits = PhraseSearcher(index, model, passage_scoring=scoring).search(QUESTION, unit=unit, top_k=6)
    documents, answers = _documents(hits)
    assert documents and answers
    firsts = list(dict.fromkeys(best_phrase(h).passage_id for h in hits))  # the hits' order, each passage once
    assert [d.document["id"] for d in documents] == firsts  # the ranking is the search's
    scores = [d.score for d in documents]
    assert all(0.0 <= s <= 1.0 for s in scores) and scores == sorted(scores, reverse=True)
    for document in documents:
        phrase_score = document.meta["phrase_score"]
        assert phrase_score > 1.0  # the raw score stays in meta
        confidence = document.meta.get("best_phrase_confidence")
        if confidence is not None:
            assert document.score <= confidence + 1e-12  # capped by the answers above, never raised
    first = best_phrase(hits[0])
    if not first.copies_question:
        assert documents[0].score == pytest.approx(first.confidence)


def test_document_scores_without_a_calibration_or_unscaled(tiny_model, index):
    hits = PhraseSearcher(index, tiny_model).search(QUESTION, unit="passage", top_k=6)
    assert document_scores(hits, scale=True) == pytest.approx([expit(h.score / 100) for h in hits])
    assert document_scores(hits, scale=False) == [h.score for h in hits]
    documents, _ = _documents(PhraseSearcher(index, calibrated(tiny_model)).search(QUESTION, "passage", 6), False)
    assert [d.score for d in documents] == [d.meta["phrase_score"] for d in documents]  # raw, for linear fusion


def _passage(pid: str, score: float, confidence: float | None, copies: bool = False) -> PassageHit:
    phrase = PhraseHit("x", score, pid, pid, "", 0, 1, confidence=confidence, copies_question=copies)
    return PassageHit(pid, pid, "", "x", score, phrase)


def test_a_passage_without_an_answer_keeps_the_score_above_it():
    hits = [_passage("a", 30, 0.7), _passage("b", 29, 0.0, copies=True), _passage("c", 28, 0.4)]
    assert document_scores(hits, scale=True) == pytest.approx([0.7, 0.7, 0.4])
    only_copies = [_passage("a", 30, 0.0, copies=True), _passage("b", 29, 0.0, copies=True)]
    assert document_scores(only_copies, scale=True) == [0.0, 0.0]  # a calibrated model, and nothing answers


def test_copies_only_passages_get_confidence_zero_with_a_calibration(tiny_model):
    model = calibrated(tiny_model)
    index = PhraseIndex.create(model)
    question = "What is the capital France?"
    passages = tiny_passages() + [{"id": "copy", "title": "", "text": "Capital France."}]  # all it says copies it
    add_passages(index, model, passages, progress=False)
    q_start, q_end = model.encode_queries([question])
    searcher = PhraseSearcher(index, model)
    hits = searcher.search_vectors(q_start, q_end, "passage", 7, candidates=len(index), questions=[question])[0]
    copy = [h for h in hits if h.passage_id == "copy"]
    assert copy and copy[0].best_phrase.copies_question and copy[0].best_phrase.confidence == 0.0
    assert all(h.best_phrase.confidence is not None for h in hits)
    scores = document_scores(hits, scale=True)
    at = hits.index(copy[0])
    assert scores[at] == (scores[at - 1] if at else scores[at + 1])  # it has no answer: it takes its neighbour's


def test_answers_carry_the_passage_title_or_none(tiny_model):
    index = PhraseIndex.create(tiny_model)
    passages = tiny_passages()
    passages[1]["title"] = ""
    add_passages(index, tiny_model, passages, progress=False)
    hits = PhraseSearcher(index, tiny_model).search("capital", unit="passage", top_k=6)
    stored = {p["id"]: p for p in passages}
    _, answers = retrieved([(h, stored[h.passage_id]) for h in hits], lambda doc: {}, True)
    titles = {a.phrase.passage_id: a.meta.get("title") for a in answers}
    assert "p1" in titles and titles["p1"] is None  # no title: the key is left out
    assert all(titles[pid] == stored[pid]["title"] for pid in titles if pid != "p1")
    _, answers = retrieved([(h, stored[h.passage_id]) for h in hits], lambda doc: {"title": "From meta"}, True)
    assert {a.meta["title"] for a in answers if a.phrase.passage_id == "p1"} == {"From meta"}


@pytest.fixture
def saved(tiny_model, tmp_path):
    """An index of the tiny passages saved to disk, with a calibrated and an uncalibrated model directory."""
    plain = tmp_path / "plain"
    tiny_model.save(plain)
    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    index.save(tmp_path / "index")
    return tmp_path / "index", save_calibrated(tiny_model, tmp_path / "calibrated"), plain


def _search(capsys, index, model, *args) -> str:
    capsys.readouterr()
    assert dphr(["search", "--index", str(index), "--model", str(model), *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("unit", ["phrase", "passage", "document"])
def test_cli_prints_confidences_and_raw_scores_on_request(saved, capsys, unit):
    index_dir, model_dir, _ = saved
    record = json.loads(_search(capsys, index_dir, model_dir, "--unit", unit, "--top-k", "4", "--json", QUESTION))
    confidences = [r["confidence"] for r in record["results"]]
    raw = [r["score"] for r in record["results"]]
    assert len(confidences) == 4 and all(0.0 <= c <= 1.0 for c in confidences) and all(s > 1.0 for s in raw)
    text = _search(capsys, index_dir, model_dir, "--unit", unit, "--top-k", "4", QUESTION)
    lines = [line.strip() for line in text.splitlines()[1:]]
    assert [line.split()[1] for line in lines] == [f"{c:.2f}" for c in confidences]
    assert "raw" not in text and not any(f"{s:.2f}" in text for s in raw)
    flagged = _search(capsys, index_dir, model_dir, "--unit", unit, "--top-k", "4", "--raw-scores", QUESTION)
    assert all(f"[raw {s:.2f}]" in flagged for s in raw)


def test_cli_without_a_calibration_says_so_and_shows_raw_scores(saved, capsys):
    index_dir, _, plain = saved
    text = _search(capsys, index_dir, plain, "--unit", "passage", "--top-k", "3", QUESTION)
    assert "no calibration" in text and text.count("[raw ") == 3
