"""The settings a store gives the phrase indexes it creates, as both Haystack stores name them, and what an index
already built keeps of them.

A store's ``faiss_factory``, ``phrase_dtype`` and ``phrase_key_vectors`` shape the phrase indexes it *creates*; an
index once built keeps its stored dtype and its key vectors (changing them needs a copy: ``dphr reindex --out DIR
--key-vectors B``). A store opened from an index takes that index's settings unless given others, so that an index
it rebuilds later (after every document was deleted) is built as the one it came from; a store whose settings differ
from the index it writes to says so.
"""

from __future__ import annotations

import logging
from typing import Any

from ..index.phrase_index import PhraseIndex

logger = logging.getLogger(__name__)

INDEX_SETTINGS = ("faiss_factory", "phrase_dtype", "phrase_key_vectors")
_KEPT = ("phrase_dtype", "phrase_key_vectors")  # what only a copy of the index changes


def settings_of_index(index: PhraseIndex) -> dict[str, Any]:
    """The store settings under which a store creates an index like ``index``."""
    return {
        "faiss_factory": "auto" if index.auto_structure else index.faiss_factory,
        "phrase_dtype": index.codec.dtype,
        "phrase_key_vectors": index.key_vectors,
    }


def warn_if_index_keeps_others(index: PhraseIndex, asked: dict[str, Any], name: str) -> None:
    """Log a warning for each stored dtype or key-vector count the store asks for (``asked``, by setting name) that
    the phrase index ``name``, already built, keeps otherwise: new phrases are added as the index was built."""
    kept = settings_of_index(index)
    for setting in _KEPT:
        if setting in asked and asked[setting] != kept[setting]:
            logger.warning(
                "phrase index %s keeps %s=%s (the store asks for %s): new phrases are added as it was built; "
                "a copy with other key vectors: dphr reindex --index DIR --out NEW --key-vectors B",
                name,
                setting,
                kept[setting],
                asked[setting],
            )
