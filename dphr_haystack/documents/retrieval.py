"""Phrase retrieval over a collection's phrase index: the search a store runs with the options its retriever
resolved (:class:`~dphr_haystack.search_options.PhraseSearchOptions`; the store scores, the retriever never touches
the phrase index)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InvalidParameterError, ModelMismatchError
from ..index.phrase_index import PhraseIndex
from ..model.cache import model_fingerprint
from ..params import check_param
from ..search import Hit, PhraseSearcher
from ..search_options import PhraseSearchOptions


def resolve_max_answer_length(model: Any, value: int | None) -> int:
    """The longest phrase in subwords: ``value`` (default: the model's), at most the model's passage window."""
    window = model.config.max_passage_length
    return check_param(
        "max_answer_length",
        model.config.max_answer_length if value is None else value,
        high=window,
        why=f"the model's passage window of {window} subwords",
    )


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
    searcher = PhraseSearcher(phrase_index, model, options)
    if isinstance(masks, list):
        if len(masks) != len(queries):
            raise InvalidParameterError(f"{len(masks)} filters for {len(queries)} queries")
        return [searcher.search(q, allowed_passages=m) for q, m in zip(queries, masks)]
    return searcher.search_batch(list(queries), allowed_passages=masks)


def warm_phrase_index(phrase_index: PhraseIndex, model: Any, options: PhraseSearchOptions) -> None:
    """Read what the first search of ``phrase_index`` would otherwise wait for (:meth:`PhraseSearcher.warm_up`);
    nothing for an index of another phrase encoder (its searches are refused)."""
    if phrase_index.model_fingerprint == model_fingerprint(model):
        PhraseSearcher(phrase_index, model, options).warm_up()


__all__ = [
    "check_phrase_model",
    "resolve_max_answer_length",
    "search_phrase_index",
    "warm_phrase_index",
]
