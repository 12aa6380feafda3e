"""Warming up the 2.x retriever also has its store read what the first search would otherwise wait for (the
passages' words, when the model's calibration weighs them), once."""

from __future__ import annotations

import copy

import pytest

from dphr_haystack.haystack2 import PhraseRetriever
from tests.core.test_corpus_words import counted_passages, save_reading_corpus
from tests.haystack2.test_no_answer import filled_store

pytestmark = pytest.mark.unit


def test_a_warmed_retriever_has_its_store_count_the_corpus_words(tmp_path, _tiny_model_session, tiny_model_dir):
    reading = save_reading_corpus(copy.deepcopy(_tiny_model_session), tmp_path / "reading")
    store = filled_store(reading)
    index = store._sync.index
    PhraseRetriever(document_store=store, model=str(tiny_model_dir), device="cpu").warm_up()
    assert counted_passages(index) == 0  # a calibration that does not weigh them: nothing read
    PhraseRetriever(document_store=store, model=str(reading), device="cpu").warm_up()
    assert counted_passages(index) == index.num_live_passages == 6
