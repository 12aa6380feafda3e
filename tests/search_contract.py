"""Settings given to a front end (init values, then one query's values) and the search options it must send its
store, written out in full: the Haystack 1.x and Haystack 2 suites check their retriever against the same cases, so
the two send identical options for identical settings (and the core suite checks the cases against
``PhraseSearchOptions`` itself)."""

from __future__ import annotations

import inspect

DEFAULTS = {
    "unit": "passage",
    "top_k": 10,
    "max_answer_length": None,
    "whole_words": True,
    "skip_question_copies": True,
    "truecase": None,
    "passage_scoring": "max",
    "ranking": "confidence",
    "query_precision": "int8",
    "batch_size": 32,
    "threads": None,
    "scale_score": True,
    "no_answer": False,
    "no_answer_threshold": None,
    "verify": False,
}

EVERY_OPTION_SET = {
    "unit": "phrase",
    "top_k": 3,
    "max_answer_length": 7,
    "whole_words": False,
    "skip_question_copies": False,
    "truecase": True,
    "passage_scoring": "logsumexp",
    "ranking": "score",
    "query_precision": "float32",
    "batch_size": 8,
    "threads": 2,
    "scale_score": False,
    "no_answer": True,
    "no_answer_threshold": 0.3,
    "verify": True,
}

# (name, init values, one query's values, the options sent to the store)
CASES = [
    ("defaults", {}, {}, DEFAULTS),
    ("every option at init", EVERY_OPTION_SET, {}, EVERY_OPTION_SET),
    (
        "a query overrides",
        {"top_k": 3, "unit": "phrase", "ranking": "score"},
        {
            "top_k": 5,
            "unit": "document",
            "scale_score": False,
            "no_answer": True,
            "no_answer_threshold": 0.9,
            "verify": True,
        },
        {
            **DEFAULTS,
            "top_k": 5,
            "unit": "document",
            "ranking": "score",
            "scale_score": False,
            "no_answer": True,
            "no_answer_threshold": 0.9,
            "verify": True,
        },
    ),
    (
        "a query turns off what init turned on",
        {"no_answer": True, "no_answer_threshold": 0.6, "scale_score": False, "verify": True},
        {"no_answer": False, "scale_score": True, "verify": False},
        {**DEFAULTS, "no_answer": False, "no_answer_threshold": 0.6},
    ),
    (
        "None keeps the init value",
        {"top_k": 4},
        {"top_k": None, "unit": None, "no_answer": None},
        {**DEFAULTS, "top_k": 4},
    ),
]

# The values a query may set in both retrievers' ``run``
PER_QUERY = ("top_k", "unit", "scale_score", "no_answer", "no_answer_threshold", "verify")


def assert_signature_follows_the_contract(retriever: type) -> None:
    """``retriever``'s init names every search option with the contract's default, and its ``run`` takes each
    per-query value with None (the init value) as default."""
    from dphr_haystack.search_options import DEFAULT_SEARCH_OPTIONS, SEARCH_OPTION_NAMES

    parameters = inspect.signature(retriever.__init__).parameters
    for name in SEARCH_OPTION_NAMES:
        assert parameters[name].default == getattr(DEFAULT_SEARCH_OPTIONS, name), name
    run = inspect.signature(retriever.run).parameters
    assert all(run[name].default is None for name in PER_QUERY)
