"""A searcher over a phrase index saved on disk, with the model it was built with."""

from __future__ import annotations

from typing import Any

from .errors import ModelLoadError, ModelMismatchError
from .index.phrase_index import PhraseIndex
from .model.loading import load_model
from .model.registry import DEFAULT_MODEL
from .search import PhraseSearcher
from .search_options import DEFAULT_SEARCH_OPTIONS, PhraseSearchOptions


def open_searcher(
    index_dir, model_dir=None, options: PhraseSearchOptions = DEFAULT_SEARCH_OPTIONS, **kwargs: Any
) -> PhraseSearcher:
    """A searcher over a saved index, with ``model_dir`` or else the model the index records it was built with, and
    ``options`` (``kwargs``: :class:`~dphr_haystack.search.PhraseSearcher`'s, options by name among them).

    Raises:
        ModelLoadError: No model given and none recorded in the index.
        ModelMismatchError: The model's phrase encoder is not the one the index was built with.
    """
    index = PhraseIndex.load(index_dir)
    recorded = model_dir is None
    model_dir = model_dir or index.manifest.get("model_path")
    if not model_dir:
        raise ModelLoadError(
            f"{index_dir}: the index does not record its model (built with a model made in memory, phrase "
            f"fingerprint {index.model_fingerprint[:12]}…); pass the model it was built with: dphr search --model "
            f"DIR (a directory written by PhraseModel.save, or a shipped name such as {DEFAULT_MODEL}), or "
            "open_searcher(index_dir, model_dir)"
        )
    model = load_model(model_dir)
    if model.phrase_fingerprint() != index.model_fingerprint:
        hint = " (the model the index records; pass the one it was built with: --model DIR)" if recorded else ""
        raise ModelMismatchError(f"{model_dir}: phrase encoder differs from the one {index_dir} was built with{hint}")
    return PhraseSearcher(index, model, options, **kwargs)
