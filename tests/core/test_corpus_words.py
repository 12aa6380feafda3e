"""Corpus words: whether the corpus searched writes a question's names, followed exactly through adds, deletes and
masks, and read by the answerability as ``all_names_in_corpus``."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest

from dphr_haystack import PhraseIndex, PhraseSearcher
from dphr_haystack import corpus_words as corpus_words_module
from dphr_haystack.confidence import QUERY_FEATURES, Answerability, query_features, question_words
from dphr_haystack.corpus_words import CorpusWords, corpus_words, names_written
from dphr_haystack.encode.add import add_passages
from dphr_haystack.question_words import name_key, question_name_spellings, question_names
from tests.conftest import tiny_passages
from tests.core.test_answers_every_unit import CALIBRATION
from tests.core.test_confidence import CANDIDATES, PASSAGES, _ranked_calibration

pytestmark = pytest.mark.unit

TOWN = [
    {"id": "t1", "title": "Velmora", "text": "Velmora's first mayor was Aldo Ferrin, elected in 1821."},
    {"id": "t2", "title": "Lake_Ostrel", "text": "The Normans never reached the lake; its steamer is the Liese."},
]


def counted_passages(index) -> int:
    """How many passages of ``index`` its corpus words have counted so far (counting none)."""
    words = corpus_words_module._CORPORA.get(index.table)
    return 0 if words is None else int(words.counted.sum())


def save_reading_corpus(model, path):
    """A model directory of ``model`` (a per-test copy) whose calibration's holds-answer weighs whether the corpus
    writes the question's names."""
    holds = Answerability((4.0,), -2.0, (0.0,), (1.0,), ("all_names_in_corpus",))
    stored = dataclasses.replace(CALIBRATION, holds_answer=holds)
    model.config = dataclasses.replace(model.config, calibration=stored.to_dict())
    model.save(path)
    return path


def test_counts_follow_the_live_rows_and_names_match_whole_words_plurals_and_possessives():
    words = CorpusWords()
    words.sync(TOWN, np.array([True, True]))
    assert words.all_written(("velmora", "1821", "ostrel", "norman", "liese"))  # title, digits, plural → singular
    assert not words.all_written(("velmora", "calder")) and not words.all_written(("velmor",))
    assert words.all_written(())  # a question without names names nothing absent
    words.sync(TOWN, np.array([True, False]))  # the second passage deleted
    assert not words.all_written(("ostrel",)) and words.all_written(("ferrin",))
    words.sync([*TOWN, {"id": "t3", "text": "Port Calder's twin town."}], np.array([True, False, True]))
    assert words.all_written(("port", "calder")) and words.counts["ostrel"] == 0
    assert not words.all_written(("calder",), left_out=[{"text": "Port Calder's twin town."}])
    words.sync(TOWN[:1], np.array([True]))  # a shorter table is another one: counted afresh
    assert not words.all_written(("calder",)) and words.all_written(("aldo",))


def test_a_name_typed_without_its_accents_or_with_a_hyphen_for_a_dash_is_written():
    passages = [
        {"id": "p1", "title": "Tesla", "text": "Tesla returned to Gospić in 1879."},
        {"id": "p2", "title": "Gold", "text": "Gold in 1851–1860; Maria Skłodowska–Curie, Bolesław II."},
        {"id": "p3", "title": "Census", "text": "The census of 2010 counted 22,680,010 people—more than before."},
    ]
    words = CorpusWords()
    words.sync(passages, np.ones(3, dtype=bool))
    for asked in (
        "Why was Tesla returned to Gospic?",
        "How much gold was mined in 1851-1860?",
        "Who was Boleslaw II?",
        "What did Sklodowska-Curie find?",
        "Which census counted 22,680,010 people?",
    ):
        names = question_names(asked)
        assert words.all_written(names), (asked, words.unwritten(names))
    assert words.unwritten(question_names("Who ruled Gospicia in 1851-1861?")) == ("gospicia", "18511861")
    assert name_key("Skłodowska–Curie — Ærø") == "sklodowskacurie aero" and name_key("The Gospić") == "gospic"
    assert question_name_spellings("Who was Bolesław?") == {"boleslaw": "Bolesław"}  # as the question writes it


def test_the_index_words_are_exact_after_adds_and_deletes_and_under_small_masks(tiny_model, monkeypatch):
    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, TOWN, progress=False)
    everything = ~index.deleted
    assert not names_written(index, everything)(question_names("Who was the first mayor of Port Calder?"))
    add_passages(index, tiny_model, [{"id": "t3", "title": "Port Calder", "text": "A harbour town."}], progress=False)
    assert corpus_words(index) is corpus_words(index)  # one per index, synced at each use
    asked = question_names("Who was the first mayor of Port Calder?")
    assert names_written(index, ~index.deleted)(asked)
    mask = ~index.deleted
    mask[index.passage_row("t3")] = False  # a search masked to the first two passages
    masked = names_written(index, mask)
    read = []
    monkeypatch.setattr(corpus_words_module, "words_of", lambda records: read.append(1) or Counter())
    monkeypatch.setattr(masked, "_left_out", None)
    assert masked.unwritten(asked) == masked.unwritten(asked) and len(read) == 1  # the left-out words read once
    monkeypatch.undo()
    assert not names_written(index, mask)(asked) and names_written(index, mask).unwritten(asked) == ("port", "calder")
    monkeypatch.setattr("dphr_haystack.corpus_words.EXACT_EXCLUSIONS", 0)  # a wide mask: the whole live corpus
    assert names_written(index, mask)(asked)
    index.delete_passages(["t3"])
    assert not names_written(index, ~index.deleted)(asked)


def test_the_feature_is_read_only_when_a_model_weighs_it():
    asked = question_words("Who was the first mayor of Port Calder?")
    calls = []

    def written(names):
        calls.append(tuple(names))
        return False

    values = query_features(QUERY_FEATURES, CANDIDATES, 0, 0.8, asked, PASSAGES, 3, written=written)
    assert values[QUERY_FEATURES.index("all_names_in_corpus")] == 0.0 and calls == [("port", "calder")]
    unknown = query_features(QUERY_FEATURES, CANDIDATES, 0, 0.8, asked, PASSAGES, 3)
    assert np.isnan(unknown[QUERY_FEATURES.index("all_names_in_corpus")])
    unnamed = question_words("who was the first mayor?")
    values = query_features(QUERY_FEATURES, CANDIDATES, 0, 0.8, unnamed, PASSAGES, 3, written=written)
    assert values[QUERY_FEATURES.index("all_names_in_corpus")] == 1.0 and len(calls) == 1  # no name to miss
    unread = query_features(QUERY_FEATURES, CANDIDATES, 0, 0.8, unnamed, PASSAGES, 3)
    assert np.isnan(unread[QUERY_FEATURES.index("all_names_in_corpus")])
    query_features(("top_logit", "has_names"), CANDIDATES, 0, 0.8, asked, PASSAGES, 3, written=written)
    assert len(calls) == 1  # not asked for: the corpus is not read


def _reading_searcher(tiny_model, top_k: int) -> PhraseSearcher:
    """A searcher of phrases over the six tiny passages whose holds-answer weighs ``all_names_in_corpus`` alone."""
    holds = Answerability((4.0,), -2.0, (0.0,), (1.0,), ("all_names_in_corpus",))
    calibration = dataclasses.replace(_ranked_calibration(), holds_answer=holds)
    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    return PhraseSearcher(index, tiny_model, calibration=calibration, unit="phrase", top_k=top_k)


def test_a_searcher_says_no_answer_for_a_name_the_corpus_never_writes_until_a_passage_writes_it(tiny_model):
    searcher = _reading_searcher(tiny_model, 1)
    index = searcher.index
    question = "Who founded the Quillfern company?"
    (before,) = searcher.search(question)
    assert before.holds_answer == pytest.approx(1 / (1 + np.exp(2.0)))  # the name is written nowhere
    assert before.unwritten_names == ("Quillfern",)  # as the question writes it
    add_passages(index, tiny_model, [{"id": "q", "title": "Quillfern", "text": "A software firm."}], progress=False)
    (after,) = searcher.search(question)
    assert after.holds_answer == pytest.approx(1 / (1 + np.exp(-2.0))) and after.unwritten_names == ()
    (masked,) = searcher.search(question, allowed_passages=np.ones(index.num_passages, dtype=bool))
    index.delete_passages(["q"])
    (deleted,) = searcher.search(question)
    assert masked.holds_answer == after.holds_answer and deleted.holds_answer == before.holds_answer


def test_warming_a_searcher_counts_the_words_only_for_a_calibration_that_weighs_them(tiny_model):
    from dphr_haystack.model.truecase import _CORPUS_CASERS

    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, TOWN, progress=False)
    PhraseSearcher(index, tiny_model, calibration=_ranked_calibration(), truecase=False).warm_up()
    PhraseSearcher(index, tiny_model, calibration=None, truecase=False).warm_up()
    assert counted_passages(index) == 0 and index not in _CORPUS_CASERS
    PhraseSearcher(index, tiny_model, calibration=None, truecase=True).warm_up()  # lower-case queries truecased
    assert counted_passages(index) == 0 and index in _CORPUS_CASERS
    holds = Answerability((4.0,), -2.0, (0.0,), (1.0,), ("all_names_in_corpus",))
    reading = dataclasses.replace(_ranked_calibration(), holds_answer=holds)
    PhraseSearcher(index, tiny_model, calibration=reading).warm_up()
    assert counted_passages(index) == 2


def test_the_answers_meta_and_no_answer_name_what_no_passage_writes(tiny_model):
    from dphr_haystack.documents.results import retrieved_answer, with_no_answer

    searcher = _reading_searcher(tiny_model, 2)
    missing = [retrieved_answer(hit, None, True) for hit in searcher.search("Did Quillfern open in Paris in 2031?")]
    assert all(answer.meta["unwritten_names"] == ["Quillfern", "2031"] for answer in missing)
    marker = with_no_answer(missing)[0]
    assert marker.unwritten_names == ("Quillfern", "2031") and marker.meta()["unwritten_names"] == [
        "Quillfern",
        "2031",
    ]
    written = [retrieved_answer(hit, None, True) for hit in searcher.search("Who created Python?")]
    assert not any("unwritten_names" in answer.meta for answer in written)
    assert "unwritten_names" not in with_no_answer(written, threshold=1.0)[0].meta()  # "no answer" first
