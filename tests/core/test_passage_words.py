"""A passage's words as the answer features read them, and the index's cache of them by passage row."""

from __future__ import annotations

import re

import numpy as np
import pytest

from dphr_haystack import PhraseIndex, PhraseSearcher
from dphr_haystack.answers import normalize_answer
from dphr_haystack.confidence import KNOWN_FEATURES, answer_features, fit_calibration, question_words
from dphr_haystack.encode.add import add_passages
from dphr_haystack.index.passages import PassageTable
from dphr_haystack.passage_words import SENTENCE_END, STEM, PassageWords, cached_words
from tests.conftest import tiny_passages

pytestmark = pytest.mark.unit

TEXT = "The Eiffel Tower, built in 1889, is (in Paris) an iron tower! Gustave Eiffel's company built it. Who knew?"


def test_words_are_normalised_word_by_word_with_their_character_spans():
    words = PassageWords(TEXT, title="The Eiffel Tower")
    # articles and punctuation-only words are left out; each word is its first STEM letters
    expected = [w[:STEM] for w in normalize_answer(TEXT).split()]
    assert list(words.stems) == expected
    for start, end, stem in zip(words.starts, words.ends, words.stems, strict=True):
        assert normalize_answer(TEXT[start:end]).replace(" ", "")[:STEM] == stem
    assert words.title_stems == ("eiffe", "tower")
    assert len(words) == len(expected)


def test_a_letter_whose_lower_case_is_longer_keeps_the_offsets():
    text = "İstanbul, the city: Constantinople."  # "İ".lower() is two characters
    words = PassageWords(text)
    assert list(words.stems) == [normalize_answer("İstanbul")[:STEM], "city", "const"]
    assert [text[s:e] for s, e in zip(words.starts, words.ends, strict=True)] == [
        "İstanbul,",
        "city:",
        "Constantinople.",
    ]


@pytest.mark.parametrize("phrase", ["1889", "Paris", "Gustave Eiffel's", "knew", "The Eiffel"])
def test_sentence_bounds_are_those_of_the_sentence_end_pattern(phrase):
    start = TEXT.index(phrase)
    end = start + len(phrase)
    ends_before = [m.end() for m in SENTENCE_END.finditer(TEXT, 0, start)]
    after = SENTENCE_END.search(TEXT, end)
    expected = (ends_before[-1] if ends_before else 0, after.start() + 1 if after else None)
    assert PassageWords(TEXT).sentence_bounds(start, end) == expected


def test_words_before_and_after_a_span():
    words = PassageWords(TEXT)
    start = TEXT.index("1889")
    assert words.stems[: words.ending_by(start)] == ("eiffe", "tower", "built", "in")
    assert words.stems[words.starting_from(start + 4)][:2] == "is"


def test_the_row_cache_computes_a_row_once_and_again_when_the_row_holds_another_record():
    table = PassageTable()
    table.register([{"id": "a", "text": "Alpha one."}], np.array([0]), 0)
    calls = []
    cache = table.cache("lengths", lambda record: calls.append(record["id"]) or len(record["text"]))
    assert table.cache("lengths", len) is cache  # one cache per name
    assert cache.get(0, table.passages[0]) == 10 and cache.get(0, table.passages[0]) == 10
    assert calls == ["a"]
    mark = table.mark()
    table.register([{"id": "b", "text": "Beta."}], np.array([0]), 0)
    assert cache.get(1, table.passages[1]) == 5
    table.roll_back(mark)  # a write that failed: row 1 is forgotten ...
    assert len(cache) == 1
    table.register([{"id": "c", "text": "Gamma, written anew."}], np.array([0]), 0)
    assert cache.get(1, table.passages[1]) == 20  # ... and a new record at that row computes afresh
    stale = {"id": "b", "text": "Beta."}
    assert cache.get(1, stale) == 5 and calls == ["a", "b", "c", "b"]  # a different record object: recomputed


def test_features_read_from_the_index_cache_equal_those_tokenised_anew(tiny_model):
    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    searcher = PhraseSearcher(index, tiny_model, tidy_answers=False, skip_question_copies=False, calibration=None)
    words = cached_words(index)
    for question in ("What is the capital of France?", "Who wrote the play in 1603?", "How tall is the tower?"):
        hits = searcher.search(question, unit="phrase", top_k=60)
        asked = question_words(question)
        fresh = answer_features(KNOWN_FEATURES, hits, None, asked, index.passages, depth=40)
        cached = answer_features(KNOWN_FEATURES, hits, None, asked, index.passages, depth=40, words=words)
        assert np.array_equal(fresh, cached, equal_nan=True)
    rows = {h.passage_row for h in hits}
    assert len(index.passage_cache("answer_words", PassageWords.of)) >= len(rows)
    assert all(re.fullmatch(r"[a-z0-9]+", stem) for row in rows for stem in words(row).stems)


def test_searches_tokenise_each_passage_once(tiny_model):
    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, len(KNOWN_FEATURES)))
    calibration = fit_calibration(x, x[:, KNOWN_FEATURES.index("window_support")] > 0, names=KNOWN_FEATURES)
    read = []
    index.passage_cache("answer_words", lambda record: read.append(record["id"]) or PassageWords.of(record))
    searcher = PhraseSearcher(index, tiny_model, calibration=calibration)
    first = searcher.search("What is the capital of France?", unit="phrase", top_k=5)
    assert read and len(read) == len(set(read))  # each passage the answers read, once
    again = searcher.search("What is the capital of France?", unit="phrase", top_k=5)
    assert [h.confidence for h in again] == [h.confidence for h in first]
    assert len(read) == len(set(read))  # the second search read them from the cache


def test_a_passage_cache_keeps_the_most_recently_read_rows_up_to_its_bound():
    from dphr_haystack.index.passages import RowCache

    derived = []
    cache = RowCache(lambda record: derived.append(record["id"]) or record["id"].upper(), max_rows=3)
    records = [{"id": f"p{i}"} for i in range(5)]
    for row in (0, 1, 2, 0, 3, 4):  # row 0 read again before 3 and 4 arrive: row 1, then 2, are dropped
        assert cache.get(row, records[row]) == f"P{row}"
    assert len(cache) == 3 and derived == ["p0", "p1", "p2", "p3", "p4"]
    cache.get(0, records[0])
    cache.get(1, records[1])
    assert derived[-1] == "p1" and derived.count("p0") == 1  # row 0 stayed, row 1 is computed again
    cache.get(0, {"id": "p0"})  # another record object at row 0 (rolled back, written anew): computed afresh
    assert derived.count("p0") == 2
    cache.forget_from(1)
    assert len(cache) == 1
    with pytest.raises(ValueError, match="max_rows"):
        RowCache(str, max_rows=0)
