"""What a store needs from the component that encodes its documents' phrases."""

from __future__ import annotations

from typing import Any


class PhraseEncoding:
    """A component that encodes phrases (a Haystack layer's phrase retriever): stores recognise it by this type.

    Attributes:
        phrase_model: The loaded phrase model.
        model: The model reference it was loaded from (named in messages and recorded in new phrase indexes).
        filter_threshold: Token-filter threshold of phrase indexes it creates (None: keep every token).
        batch_size: Passage encoding batch size.
    """

    phrase_model: Any
    model: str
    filter_threshold: float | None
    batch_size: int


__all__ = ["PhraseEncoding"]
