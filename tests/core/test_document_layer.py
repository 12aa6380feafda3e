"""The Haystack-free document layer both Haystack front ends adapt: the document → passage rule, score scaling and
the checks of the phrase search options."""

from __future__ import annotations

import pytest

from dphr_haystack.documents.passages import PassageRule
from dphr_haystack.documents.results import scaled_score
from dphr_haystack.errors import InvalidParameterError
from dphr_haystack.search_options import PhraseSearchOptions

pytestmark = pytest.mark.unit


def test_a_document_becomes_one_passage_by_one_rule():
    rule = PassageRule()
    assert rule.passage("p1", "Paris is in France.", {"title": 2024, "document_id": 7}) == {
        "id": "p1",
        "text": "Paris is in France.",
        "title": "2024",
        "document_id": "7",
    }
    assert rule.passage("p1", "Text.", {"title": "", "document_id": ""}) == {
        "id": "p1",
        "text": "Text.",
        "title": "",
        "document_id": "p1",
    }
    assert rule.passage("p1", "Text.", None)["title"] == ""
    assert PassageRule("heading", "group").passage("p1", "Text.", {"heading": "H", "group": "g"})["title"] == "H"
    for no_text in (None, "", "  \n", 3, "lone \ud800 surrogate"):
        assert rule.passage("p1", no_text, {}) is None


def test_scores_scale_as_haystack_scales_dot_products():
    assert scaled_score(0.0, True) == 0.5
    assert 0.9 < scaled_score(250.0, True) < 1.0 and scaled_score(-1e6, True) == 0.0
    assert scaled_score(250, False) == 250.0


@pytest.mark.parametrize(
    "bad",
    [
        {"unit": "sentence"},
        {"top_k": 0},
        {"whole_words": "yes"},
        {"truecase": "auto"},
        {"passage_scoring": "sum"},
        {"batch_size": 0},
        {"max_answer_length": 0},
    ],
)
def test_search_options_are_checked(bad):
    with pytest.raises(InvalidParameterError):
        PhraseSearchOptions(**bad)
