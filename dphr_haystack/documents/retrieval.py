"""Phrase retrieval over a collection's phrase index: the options a retriever resolves and the search its store
runs (the store scores; the retriever never touches the phrase index)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidParameterError, ModelMismatchError
from ..index.phrase_index import PhraseIndex
from ..model.cache import model_fingerprint
from ..params import check_param, check_query_precision
from ..search import Hit, PhraseSearcher, check_passage_scoring, check_ranking, check_unit


def check_flag(name: str, value: Any) -> bool:
    """``value`` when it is a bool, else InvalidParameterError naming ``name``."""
    if not isinstance(value, bool):
        raise InvalidParameterError(f"{name}={value!r}; valid: true or false")
    return value


def check_truecase(value: Any) -> bool | None:
    """The ``truecase`` option: True, False or None (follow the model's setting)."""
    if value is not None and not isinstance(value, bool):
        raise InvalidParameterError(f"truecase={value!r}; valid: true, false or null (the model's)")
    return value


def resolve_max_answer_length(model: Any, value: int | None) -> int:
    """The longest phrase in subwords: ``value`` (default: the model's), at most the model's passage window."""
    window = model.config.max_passage_length
    return check_param(
        "max_answer_length",
        model.config.max_answer_length if value is None else value,
        high=window,
        why=f"the model's passage window of {window} subwords",
    )


@dataclass(frozen=True)
class PhraseSearchOptions:
    """What a retriever asks its store's phrase search for (every value checked on construction).

    Args:
        unit: ``phrase``, ``passage`` or ``document``.
        top_k: Hits per query.
        max_answer_length: Longest phrase in subwords (None: the model's).
        whole_words: Phrases start and end on word boundaries.
        skip_question_copies: Never answer with a phrase the question contains.
        truecase: Truecase all-lowercase queries (None: the model's setting).
        passage_scoring: ``max`` or ``logsumexp``.
        query_batch_size: Query encoding batch size.
        query_precision: ``int8`` (default: the query side in int8 on the CPU, 2× faster) or ``float32``.
        ranking: ``confidence`` (default: the first results reordered by their answer's calibrated confidence) or
            ``score``.
    """

    unit: str = "passage"
    top_k: int = 10
    max_answer_length: int | None = None
    whole_words: bool = True
    skip_question_copies: bool = True
    truecase: bool | None = None
    passage_scoring: str = "max"
    query_batch_size: int = 32
    query_precision: str = "int8"
    ranking: str = "confidence"

    def __post_init__(self) -> None:
        check_unit(self.unit)
        check_param("top_k", self.top_k)
        if self.max_answer_length is not None:
            check_param("max_answer_length", self.max_answer_length)
        check_flag("whole_words", self.whole_words)
        check_flag("skip_question_copies", self.skip_question_copies)
        check_truecase(self.truecase)
        check_passage_scoring(self.passage_scoring)
        check_param("query_batch_size", self.query_batch_size)
        check_query_precision(self.query_precision)
        check_ranking(self.ranking)


def check_phrase_model(phrase_index: PhraseIndex, model: Any, message: str) -> None:
    """ModelMismatchError(``message``) when ``phrase_index`` was not built with ``model``'s phrase encoder."""
    if phrase_index.model_fingerprint != model_fingerprint(model):
        raise ModelMismatchError(message)


def search_phrase_index(
    phrase_index: PhraseIndex,
    model: Any,
    queries: Sequence[str],
    options: PhraseSearchOptions,
    masks: np.ndarray | None | list[np.ndarray | None] = None,
) -> list[list[Hit]]:
    """Hits per query. ``masks``: one boolean mask over passage rows for all queries (None: every passage), or a
    list of one mask per query."""
    searcher = PhraseSearcher(
        phrase_index,
        model,
        options.max_answer_length,
        query_batch_size=options.query_batch_size,
        whole_words=options.whole_words,
        skip_question_copies=options.skip_question_copies,
        truecase=options.truecase,
        passage_scoring=options.passage_scoring,
        query_precision=options.query_precision,
        ranking=options.ranking,
    )
    if isinstance(masks, list):
        if len(masks) != len(queries):
            raise InvalidParameterError(f"{len(masks)} filters for {len(queries)} queries")
        return [searcher.search(q, options.unit, options.top_k, m) for q, m in zip(queries, masks)]
    return searcher.search_batch(list(queries), options.unit, options.top_k, masks)


__all__ = [
    "PhraseSearchOptions",
    "check_flag",
    "check_phrase_model",
    "check_truecase",
    "resolve_max_answer_length",
    "search_phrase_index",
]
