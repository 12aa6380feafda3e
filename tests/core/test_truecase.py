"""The rule-based truecaser: corpus case statistics, neighbours of ambiguous words, the vocabulary fallback."""

from __future__ import annotations

import pytest

from dphr_haystack.model.truecase import TrueCaser, corpus_cased, corpus_truecaser, is_all_lowercase

pytestmark = pytest.mark.unit

CORPUS = [
    "Hamlet is a tragedy written by William Shakespeare. The play is set in Denmark.",
    "In May, parliament may sit. The court may rule in May. Judges may leave in May or in June. A king may go.",
    "The U.S. Army fought in the war. Many soldiers of the U.S. Army didn't return home.",
    "The New York Times reported that the new bridge opened in New York, with a new road.",
]


def test_words_take_their_corpus_case_and_the_first_word_is_capitalised():
    caser = TrueCaser.from_texts(CORPUS)
    assert caser.truecase("who wrote hamlet") == "Who wrote Hamlet"
    assert caser.truecase("is hamlet set in denmark, by william shakespeare?") == (
        "Is Hamlet set in Denmark, by William Shakespeare?"
    )


def test_sentence_initial_capitals_are_not_evidence():
    caser = TrueCaser.from_texts(CORPUS)
    assert caser.truecase("what is the play about") == "What is the play about"  # "The" only starts sentences


def test_ambiguous_words_follow_their_neighbours():
    caser = TrueCaser.from_texts(CORPUS)
    assert caser.truecase("when may the court sit in may") == "When may the court sit in May"
    assert caser.truecase("what did the new york times say of the new bridge") == (
        "What did the New York Times say of the new bridge"
    )


def test_abbreviations_clitics_digits_and_spacing_are_kept():
    caser = TrueCaser.from_texts(CORPUS)
    assert caser.truecase("why didn't the u.s. army  return in 1945 ?") == "Why didn't the U.S. Army  return in 1945 ?"


def test_vocabulary_fallback_and_unknown_words():
    caser = TrueCaser.from_vocab(["[CLS]", "##s", "NASA", "Denver", "DENVER", "launched", "from", "rocket", "Rocket"])
    assert caser.truecase("nasa launched from denver") == "NASA launched from Denver"
    assert caser.truecase("a rocket from zyx") == "A rocket from zyx"  # "rocket" is an entry: it stays lower case
    assert TrueCaser.from_vocab(["from"], unknown="title").truecase("from zyx") == "From Zyx"
    with pytest.raises(ValueError, match="unknown"):
        TrueCaser(unknown="upper")


def test_corpus_counts_win_over_the_vocabulary():
    caser = TrueCaser.from_texts(["He said that apple trees grow."]).add_vocab(["Apple"])
    assert caser.truecase("do apple trees grow") == "Do apple trees grow"


def test_only_all_lowercase_queries_are_truecased():
    caser = TrueCaser.from_texts(CORPUS)
    assert caser.truecase_query("Who wrote hamlet") == "Who wrote hamlet"
    assert caser.truecase_query("who wrote hamlet") == "Who wrote Hamlet"
    assert is_all_lowercase("who wrote hamlet") and not is_all_lowercase("1945") and not is_all_lowercase("Who")


def test_corpus_truecaser_is_cached_per_index_and_rebuilt_when_it_grows():
    class Index:
        def __init__(self, texts):
            self.passages = [{"text": t} for t in texts]

    index = Index(CORPUS)
    first = corpus_truecaser(index)
    assert corpus_truecaser(index) is first
    index.passages.extend({"text": "Ophelia loves Hamlet."} for _ in range(4))
    again = corpus_truecaser(index)
    assert again is not first and again.truecase("who is ophelia") == "Who is Ophelia"
    sampled = corpus_truecaser(Index(CORPUS * 3), max_passages=2)
    # 2 of 12 passages read, evenly spread: rows 0 and 6 (copies of the first and third texts)
    assert sum(sampled.forms["denmark"].values()) == 1 and sum(sampled.forms["army"].values()) == 2
    assert "may" not in sampled.forms
    calls = []

    def vocab():  # a tokenizer's get_vocab: asked for only when a truecaser is built
        calls.append(1)
        return ["Fjord"]

    fresh = Index(CORPUS)
    assert corpus_truecaser(fresh, vocab).truecase("a fjord") == "A Fjord"
    assert corpus_truecaser(fresh, vocab) is corpus_truecaser(fresh, vocab) and len(calls) == 1
    assert corpus_cased(fresh, ["Who wrote hamlet", "who wrote hamlet"]) == [None, "Who wrote Hamlet"]
    assert corpus_cased(Index(CORPUS), ["Cased only"], vocab) == [None] and len(calls) == 1  # nothing built
    assert corpus_cased(fresh, ["who is zorblax"]) == ["Who is zorblax"]  # a word nothing knows stays as it is


def test_the_truecaser_counts_sentence_starts_apart():
    texts = [
        "Apple fell. Apple pie is good. He ate an Apple! An apple? apple.",
        "We saw an Apple and an apple.",
        "",
        ".",
    ]
    caser = TrueCaser.from_texts(texts)
    # the sentence-start "Apple"s are set apart; a lower-case sentence start counts
    assert list(caser.forms["apple"].items()) == [("Apple", 2), ("apple", 3)]
    assert caser.initial == {"he": "He", "we": "We"}  # seen only at sentence starts ("An" is written "an" too)
    assert list(caser.left[("an", "apple")].items()) == [("Apple", 2), ("apple", 2)]  # an ambiguous word's neighbours
    assert caser.right[("apple", "and")] == {"Apple": 1} and caser.left[("apple", "apple")] == {"apple": 1}
