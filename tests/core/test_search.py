"""Span search against a brute-force reference, result typing, ordering, units and the over-fetch loop."""

from __future__ import annotations

import numpy as np
import pytest

from dphr_haystack import (
    DocumentHit,
    InvalidParameterError,
    InvalidQueryError,
    PassageHit,
    PhraseHit,
    PhraseIndex,
    PhraseSearcher,
)
from dphr_haystack.encode.add import add_passages
from tests.conftest import tiny_passages

pytestmark = pytest.mark.unit

QUERIES = ["capital of france", "who wrote hamlet", "highest mountain", "river in africa", "python language"]


@pytest.fixture
def index(tiny_model):
    idx = PhraseIndex.create(tiny_model)
    passages = tiny_passages()
    passages[1]["document_id"] = "shared-doc"
    passages[2]["document_id"] = "shared-doc"
    add_passages(idx, tiny_model, passages, progress=False)
    return idx


def brute_force_spans(index: PhraseIndex, qs: np.ndarray, qe: np.ndarray, L: int) -> dict[tuple[int, int], float]:
    """Every span (i, j) of every live passage with 0 <= pos(j) - pos(i) < L, scored directly."""
    vectors = index.vectors()
    tokens = index.tokens
    spans = {}
    for row in np.nonzero(~index.deleted)[0]:
        first, n = index.first_token[row], index.num_tokens[row]
        for i in range(first, first + n):
            for j in range(i, first + n):
                if 0 <= tokens["position"][j] - tokens["position"][i] < L:
                    spans[(i, j)] = float(vectors[i] @ qs + vectors[j] @ qe)
    return spans


def dp_reference(spans: dict[tuple[int, int], float]) -> dict[tuple[int, int], float]:
    """What exhaustive DensePhrases search returns: each start's best end and each end's best start."""
    best_for_start: dict[int, tuple[float, int, int]] = {}
    best_for_end: dict[int, tuple[float, int, int]] = {}
    for (i, j), score in spans.items():
        if i not in best_for_start or score > best_for_start[i][0]:
            best_for_start[i] = (score, i, j)
        if j not in best_for_end or score > best_for_end[j][0]:
            best_for_end[j] = (score, i, j)
    return {(i, j): s for s, i, j in list(best_for_start.values()) + list(best_for_end.values())}


def _row_of(index, hit: PhraseHit) -> tuple[int, int]:
    tokens = index.tokens
    first = index.first_token[hit.passage_row]
    rows = range(first, first + index.num_tokens[hit.passage_row])
    s = next(r for r in rows if tokens["position"][r] == hit.start_token)
    e = next(r for r in rows if tokens["position"][r] == hit.end_token)
    return s, e


@pytest.mark.parametrize("L", [1, 3, 10])
def test_exhaustive_search_equals_brute_force(index, tiny_model, L):
    # the raw spans of the search (tidy answers trim and fold them: tests/core/test_answer_text.py)
    searcher = PhraseSearcher(index, tiny_model, max_answer_length=L, tidy_answers=False)
    qs, qe = tiny_model.encode_queries(QUERIES)
    results = searcher.search_vectors(qs, qe, "phrase", top_k=len(index) * 2, candidates=len(index))
    for q in range(len(QUERIES)):
        spans = brute_force_spans(index, qs[q], qe[q], L)
        reference = dp_reference(spans)
        got = {_row_of(index, h): h.score for h in results[q]}
        assert set(got) == set(reference)
        for key, score in got.items():
            assert score == pytest.approx(reference[key], rel=1e-5, abs=1e-4)
        assert results[q][0].score == pytest.approx(max(spans.values()), rel=1e-5, abs=1e-4)
        assert all(h.end_token - h.start_token < L for h in results[q])


def test_small_candidate_search_returns_exact_scores_and_top1(index, tiny_model):
    """With few MIPS candidates every returned score is still exact, and top-1 is the global best here."""
    searcher = PhraseSearcher(index, tiny_model)
    qs, qe = tiny_model.encode_queries(QUERIES)
    results = searcher.search_vectors(qs, qe, "phrase", top_k=5)
    for q in range(len(QUERIES)):
        spans = brute_force_spans(index, qs[q], qe[q], tiny_model.config.max_answer_length)
        for hit in results[q]:
            assert hit.score == pytest.approx(spans[_row_of(index, hit)], rel=1e-5, abs=1e-4)
        assert results[q][0].score == pytest.approx(max(spans.values()), rel=1e-5, abs=1e-4)


@pytest.mark.parametrize("unit", ["phrase", "passage", "document"])
def test_answer_text_is_the_passage_slice(index, tiny_model, unit):
    searcher = PhraseSearcher(index, tiny_model)
    by_id = {p["id"]: p for p in index.passages}
    for hits in searcher.search_batch(QUERIES, unit=unit, top_k=4):
        for hit in hits:
            phrase = (
                hit
                if isinstance(hit, PhraseHit)
                else (hit.best_phrase if isinstance(hit, PassageHit) else hit.best_passage.best_phrase)
            )
            assert phrase.text == by_id[phrase.passage_id]["text"][phrase.start : phrase.end]
            assert phrase.text


def test_units_aggregate_by_max(index, tiny_model):
    searcher = PhraseSearcher(index, tiny_model, tidy_answers=False)  # every phrase, none folded
    qs, qe = tiny_model.encode_queries(["capital of germany"])
    phrases = searcher.search_vectors(qs, qe, "phrase", top_k=1000, candidates=len(index))[0]
    passages = searcher.search_vectors(qs, qe, "passage", top_k=10, candidates=len(index))[0]
    documents = searcher.search_vectors(qs, qe, "document", top_k=10, candidates=len(index))[0]
    best_per_passage = {}
    for p in phrases:
        best_per_passage[p.passage_id] = max(best_per_passage.get(p.passage_id, -np.inf), p.score)
    expected = sorted(best_per_passage.values(), reverse=True)[:10]
    assert [h.score for h in passages] == pytest.approx(expected)
    assert {h.passage_id for h in passages} == set(best_per_passage)
    for hit in passages:
        assert hit.score == pytest.approx(best_per_passage[hit.passage_id])
    assert all(isinstance(d, DocumentHit) for d in documents)
    assert len({d.document_id for d in documents}) == len(documents) == 5  # six passages, two share a document
    shared = next(d for d in documents if d.document_id == "shared-doc")
    assert shared.score == pytest.approx(max(best_per_passage["p1"], best_per_passage["p2"]))


def test_logsumexp_scoring_sums_every_retrieved_phrase(index, tiny_model):
    searcher = PhraseSearcher(
        index, tiny_model, skip_question_copies=False, passage_scoring="logsumexp", tidy_answers=False
    )
    qs, qe = tiny_model.encode_queries(["capital of germany"])
    phrases = searcher.search_vectors(qs, qe, "phrase", top_k=1000, candidates=len(index))[0]
    by_passage: dict[str, list[PhraseHit]] = {}
    for p in phrases:
        by_passage.setdefault(p.passage_id, []).append(p)
    expected = {pid: float(np.logaddexp.reduce([p.score for p in hits])) for pid, hits in by_passage.items()}
    passages = searcher.search_vectors(qs, qe, "passage", top_k=10, candidates=len(index))[0]
    assert [h.passage_id for h in passages] == sorted(expected, key=lambda pid: -expected[pid])
    for hit in passages:
        assert hit.score == pytest.approx(expected[hit.passage_id])
        assert hit.best_phrase == max(by_passage[hit.passage_id], key=lambda p: p.score)
        assert hit.score >= hit.best_phrase.score  # a sum of exps is at least its largest term
    documents = searcher.search_vectors(qs, qe, "document", top_k=10, candidates=len(index))[0]
    shared = next(d for d in documents if d.document_id == "shared-doc")
    assert shared.score == pytest.approx(float(np.logaddexp(expected["p1"], expected["p2"])))
    with pytest.raises(InvalidParameterError, match="max, logsumexp"):
        PhraseSearcher(index, tiny_model, passage_scoring="sum")


def test_results_are_deterministic_and_sorted(index, tiny_model):
    searcher = PhraseSearcher(index, tiny_model)
    first = searcher.search_batch(QUERIES, unit="passage", top_k=5)
    again = searcher.search_batch(QUERIES, unit="passage", top_k=5)
    assert first == again
    singles = [searcher.search(q, unit="passage", top_k=5) for q in QUERIES]
    assert singles == first
    for hits in first:
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_overfetch_finds_k_unique_passages(index, tiny_model):
    searcher = PhraseSearcher(index, tiny_model)
    hits = searcher.search("capital", unit="passage", top_k=6)
    assert len(hits) == 6 and len({h.passage_id for h in hits}) == 6


def test_allowed_passages_mask_filters_results(index, tiny_model):
    searcher = PhraseSearcher(index, tiny_model)
    allowed = np.zeros(index.num_passages, dtype=bool)
    allowed[[index.passage_row("p3"), index.passage_row("p5")]] = True
    for unit in ("phrase", "passage"):
        hits = searcher.search("capital of france", unit=unit, top_k=3, allowed_passages=allowed)
        assert {h.passage_id for h in hits} <= {"p3", "p5"} and hits
    hits = searcher.search("capital", unit="passage", top_k=5, allowed_passages=allowed)
    assert len(hits) == 2


def test_empty_index_and_bad_parameters(tiny_model, index):
    empty = PhraseSearcher(PhraseIndex.create(tiny_model), tiny_model)
    assert empty.search("capital", unit="passage") == []
    searcher = PhraseSearcher(index, tiny_model)
    with pytest.raises(InvalidParameterError, match="phrase, passage, document"):
        searcher.search("capital", unit="sentence")
    with pytest.raises(InvalidParameterError):
        searcher.search("capital", top_k=0)
    with pytest.raises(InvalidQueryError):
        searcher.search("   ")
    with pytest.raises(InvalidQueryError):
        searcher.search_batch("a string, not a list")


@pytest.mark.parametrize("whole_words", [True, False])
def test_whole_words_never_pairs_a_split_word(tiny_model, whole_words):
    # 'zxqvb' and 'qwzz' are not in the tiny vocab: WordPiece splits them into 'z ##x ##q ##v ##b'.
    text = "The zxqvb code of paris was qwzz found in 1990s."
    idx = PhraseIndex.create(tiny_model)
    add_passages(idx, tiny_model, [{"id": "w", "title": "words", "text": text}], progress=False)
    encoded = tiny_model.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    pieces = tiny_model.tokenizer.convert_ids_to_tokens(encoded["input_ids"])
    continues = {start: piece.startswith("##") for piece, (start, _) in zip(pieces, encoded["offset_mapping"])}
    assert sum(continues.values()) >= 6
    tokens = idx.tokens
    char_start = {row: int(tokens["char_start"][row]) for row in range(len(idx))}
    next_continues = {row: continues.get(int(tokens["char_end"][row]), False) for row in range(len(idx))}
    L = 4
    searcher = PhraseSearcher(idx, tiny_model, max_answer_length=L, whole_words=whole_words, tidy_answers=False)
    qs, qe = tiny_model.encode_queries(QUERIES)
    results = searcher.search_vectors(qs, qe, "phrase", top_k=len(idx) * 2, candidates=len(idx))
    for q in range(len(QUERIES)):
        spans = brute_force_spans(idx, qs[q], qe[q], L)
        whole = {(i, j): s for (i, j), s in spans.items() if not continues[char_start[i]] and not next_continues[j]}
        reference = dp_reference(whole if whole_words else spans)
        if not whole_words:  # the split words do change what exhaustive search returns
            assert set(reference) != set(dp_reference(whole))
        got = {_row_of(idx, h): h.score for h in results[q]}
        assert set(got) == set(reference)
        if whole_words:
            for hit in results[q]:
                assert (
                    not text[hit.start - 1 : hit.start + 1].isalnum() and not text[hit.end - 1 : hit.end + 1].isalnum()
                )
