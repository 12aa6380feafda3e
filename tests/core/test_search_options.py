"""The one search contract: ``PhraseSearchOptions`` checks every value, fills a query's values over the init ones,
serialises to what it reads back, and the core front ends (``PhraseSearcher``, ``dphr search``) take exactly its
names and defaults."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from dataclasses import replace

import pytest

from dphr_haystack import PhraseIndex
from dphr_haystack.cli.search import add_search_parser, search_options
from dphr_haystack.encode.add import add_passages
from dphr_haystack.errors import InvalidParameterError
from dphr_haystack.model.calibration import Calibration, Verification
from dphr_haystack.search import PhraseSearcher
from dphr_haystack.search_options import (
    DEFAULT_SEARCH_OPTIONS,
    NO_ANSWER_THRESHOLD,
    SEARCH_OPTION_NAMES,
    PhraseSearchOptions,
    SearchOptionAttributes,
    no_answer_threshold,
)
from tests.conftest import tiny_passages
from tests.search_contract import CASES, DEFAULTS, EVERY_OPTION_SET, PER_QUERY

pytestmark = pytest.mark.unit

BAD_VALUES = {
    "unit": ["sentence", None],
    "top_k": [0, -1, 1.5, "3", True],
    "max_answer_length": [0, 513, "7"],
    "whole_words": ["yes", 1, None],
    "skip_question_copies": ["no", 0],
    "truecase": ["auto", 1],
    "passage_scoring": ["sum", None],
    "ranking": ["relevance", None],
    "query_precision": ["int4", None],
    "batch_size": [0, -3, None],
    "threads": [0, "2"],
    "scale_score": ["true", None],
    "no_answer": ["on", 1, None],
    "no_answer_threshold": [-0.1, 1.5, "0.3", True],
    "verify": ["yes", 1, None],
}


def test_the_cases_cover_every_option_and_the_written_defaults_are_the_contract():
    assert set(BAD_VALUES) == set(SEARCH_OPTION_NAMES) == set(DEFAULTS) == set(EVERY_OPTION_SET)
    assert DEFAULT_SEARCH_OPTIONS.to_params() == DEFAULTS
    assert DEFAULTS["no_answer_threshold"] is None  # the model's: test_the_threshold_is_the_searchs_else_the_models
    assert all(EVERY_OPTION_SET[name] != DEFAULTS[name] for name in SEARCH_OPTION_NAMES)


@pytest.mark.parametrize(("name", "bad"), [(n, v) for n, values in BAD_VALUES.items() for v in values])
def test_every_bad_value_is_refused_by_name(name, bad):
    with pytest.raises(InvalidParameterError, match=name):
        PhraseSearchOptions(**{name: bad})
    with pytest.raises(InvalidParameterError, match=name):
        DEFAULT_SEARCH_OPTIONS.replaced(**{name: bad})


@pytest.mark.parametrize(("case", "init", "query", "sent"), CASES, ids=[c[0] for c in CASES])
def test_a_query_fills_its_values_over_the_init_ones(case, init, query, sent):
    assert set(query) <= set(PER_QUERY)
    options = PhraseSearchOptions.from_params(init).updated(**query)
    assert options.to_params() == sent
    assert PhraseSearchOptions.from_params(options.to_params()) == options


def test_unknown_names_are_refused_and_other_params_are_not_options():
    with pytest.raises(InvalidParameterError, match="not a search option: topk"):
        DEFAULT_SEARCH_OPTIONS.updated(topk=3)
    assert PhraseSearchOptions.from_params({"top_k": 3, "model": "x", "self": object()}).top_k == 3
    assert DEFAULT_SEARCH_OPTIONS.updated(top_k=None) is DEFAULT_SEARCH_OPTIONS
    assert PhraseSearchOptions(no_answer_threshold=1).no_answer_threshold == 1.0
    assert isinstance(PhraseSearchOptions(no_answer_threshold=1).no_answer_threshold, float)


def test_the_threshold_is_the_searchs_else_the_models():
    plain, verified = PhraseSearchOptions(), PhraseSearchOptions(verify=True)
    calibration = Calibration((1.0,) * 4, 0.0, (0.0,) * 4, (1.0,) * 4)
    verification = Verification("reader", (1.0,) * 5, 0.0, (0.0,) * 5, (1.0,) * 5)
    assert no_answer_threshold(plain, None) == no_answer_threshold(verified, calibration) == NO_ANSWER_THRESHOLD
    documented = replace(calibration, no_answer_threshold=0.35)
    assert no_answer_threshold(plain, documented) == no_answer_threshold(verified, documented) == 0.35
    both = replace(documented, verification=replace(verification, no_answer_threshold=0.65))
    assert no_answer_threshold(plain, both) == 0.35 and no_answer_threshold(verified, both) == 0.65
    assert no_answer_threshold(verified.replaced(no_answer_threshold=0.2), both) == 0.2
    assert Calibration.from_dict(both.to_dict()) == both
    assert "no_answer_threshold" not in Calibration.from_dict(calibration.to_dict()).to_dict()
    for bad in (1.5, -0.1, "0.5", True):
        with pytest.raises(InvalidParameterError, match="calibration no_answer_threshold"):
            Calibration.from_dict({**calibration.to_dict(), "no_answer_threshold": bad})
        with pytest.raises(InvalidParameterError, match="verification no_answer_threshold"):
            replace(verification, no_answer_threshold=bad)


def test_front_end_attributes_read_and_write_the_options():
    class FrontEnd(SearchOptionAttributes):
        def __init__(self, **values):
            self.search_options = PhraseSearchOptions(**values)
            self.name = "front end"

    front = FrontEnd(top_k=3)
    assert front.top_k == 3 and front.unit == "passage" and front.name == "front end"
    front.top_k = 5
    assert front.search_options.top_k == 5 and "top_k" not in vars(front)
    with pytest.raises(InvalidParameterError, match="retrieval unit"):
        front.unit = "sentence"
    assert front.search_options.unit == "passage"
    with pytest.raises(AttributeError, match="nothing"):
        front.nothing  # noqa: B018


def test_the_searcher_takes_the_options_and_their_names(tiny_model):
    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    searcher = PhraseSearcher(index, tiny_model)
    resolved = DEFAULT_SEARCH_OPTIONS.replaced(max_answer_length=tiny_model.config.max_answer_length)
    assert searcher.search_options == resolved
    given = PhraseSearchOptions(unit="phrase", top_k=2, ranking="score")
    assert PhraseSearcher(index, tiny_model, given).search_options == given.replaced(
        max_answer_length=tiny_model.config.max_answer_length
    )
    named = PhraseSearcher(index, tiny_model, unit="phrase", top_k=2, ranking="score", max_answer_length=5)
    assert named.search_options == given.replaced(max_answer_length=5)
    # search's unit and top_k default to the options'
    assert [type(h).__name__ for h in named.search("capital")] == ["PhraseHit"] * 2
    assert named.search("capital") == named.search("capital", unit="phrase", top_k=2)
    assert len(searcher.search("capital")) == min(10, len(tiny_passages()))
    with pytest.raises(InvalidParameterError, match="not a search option: query_batch_size"):
        PhraseSearcher(index, tiny_model, query_batch_size=8)
    with pytest.raises(InvalidParameterError, match="options must be PhraseSearchOptions"):
        PhraseSearcher(index, tiny_model, {"top_k": 3})


def _search_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_search_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["search", "--index", "somewhere", *argv, "a question"])


def test_dphr_search_flags_are_the_options_with_their_defaults():
    assert search_options(_search_args()) == DEFAULT_SEARCH_OPTIONS
    args = _search_args(
        "--unit=phrase",
        "--top-k=3",
        "--max-answer-length=7",
        "--partial-words",
        "--keep-question-copies",
        "--truecase",
        "--passage-scoring=logsumexp",
        "--ranking=score",
        "--query-precision=float32",
        "--batch-size=8",
        "--no-answer",
        "--no-answer-threshold=0.3",
        "--verify",
    )
    # the command line's own conventions: raw scores are a display flag (--raw-scores), threads a process setting
    expected = {**EVERY_OPTION_SET, "threads": None, "scale_score": True}
    assert search_options(args).to_params() == expected


def test_no_front_end_re_types_a_default():
    """The searcher takes options by name only, with no defaults of its own to drift."""
    parameters = inspect.signature(PhraseSearcher.__init__).parameters
    assert not set(parameters) & set(SEARCH_OPTION_NAMES)
    assert parameters["options"].default is DEFAULT_SEARCH_OPTIONS
    assert [f.default for f in dataclasses.fields(PhraseSearchOptions)] == list(DEFAULTS.values())
