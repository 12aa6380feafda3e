"""dphr_haystack: dense phrase retrieval (DensePhrases) for Haystack.

The core (model, phrase dump, phrase index, search) needs no Haystack, and importing this package imports none of
it: every name below loads its module (torch, FAISS, transformers) on first use, so ``dphr --help`` starts at once.
The Haystack 1.x nodes live in :mod:`dphr_haystack.nodes`: ``import dphr_haystack.nodes`` (or using any node name,
e.g. ``from dphr_haystack import PhraseRetriever``) registers them, after which Haystack's own
``Pipeline.load_from_yaml`` finds them by name; ``dphr_haystack.nodes.load_pipeline`` does that import for you.
The Haystack 2.x/3.x (``haystack-ai``) components live in :mod:`dphr_haystack.haystack2`.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import (
    CorpusFormatError,
    DirectoryLockedError,
    DphrError,
    EmptyCorpusError,
    IndexLoadError,
    InvalidParameterError,
    InvalidQueryError,
    ModelLoadError,
    ModelMismatchError,
    QueryOnlyCheckpointError,
    RemoteCodeError,
    SettingsConflictError,
    UnsafePathError,
    UnsafeYamlError,
)

__version__ = "0.1.0"

# name → module that defines it, imported on first access (PEP 562)
_LAZY = {
    "CorpusStats": ".corpus",
    "Passage": ".corpus",
    "read_corpus": ".corpus",
    "PhraseShard": ".index.shards",
    "add_passages": ".encode.add",
    "dump_phrases": ".encode.dump",
    "encode_shard": ".encode.dump",
    "list_shards": ".index.shards",
    "VectorCodec": ".index.codec",
    "PhraseIndex": ".index.phrase_index",
    "merge_dump": ".index.merge",
    "PhraseModelConfig": ".model.config",
    "PhraseModel": ".model.phrase_model",
    "DEFAULT_MODEL": ".model.registry",
    "resolve_base": ".model.registry",
    "shipped_model_names": ".model.registry",
    "DocumentHit": ".search",
    "PassageHit": ".search",
    "PhraseHit": ".search",
    "PhraseSearcher": ".search",
    "PhraseSearchOptions": ".search_options",
}
# The Haystack 1.x nodes, re-exported here for convenience: using one imports (and registers) them all.
_NODES = (
    "LinearFusionJoin",
    "MiniLMEmbeddingRetriever",
    "PIPELINES_DIR",
    "PhraseDocumentStore",
    "PhraseHybridJoin",
    "PhraseIndexingStats",
    "PhraseRetriever",
    "cached_models",
    "clear_model_cache",
    "corpus_documents",
    "index_corpus",
    "load_phrase_model",
    "load_pipeline",
)

__all__ = [
    "CorpusFormatError",
    "DirectoryLockedError",
    "DphrError",
    "EmptyCorpusError",
    "IndexLoadError",
    "InvalidParameterError",
    "InvalidQueryError",
    "ModelLoadError",
    "ModelMismatchError",
    "QueryOnlyCheckpointError",
    "RemoteCodeError",
    "SettingsConflictError",
    "UnsafePathError",
    "UnsafeYamlError",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    elif name in _NODES:
        value = getattr(_nodes(), name)
    elif name == "nodes":
        value = _nodes()
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip this function
    return value


def _nodes() -> Any:
    """The Haystack 1.x nodes; beside haystack-ai, an ImportError naming ``dphr_haystack.haystack2`` instead."""
    from ._util.lazy import require_haystack1

    require_haystack1()
    return importlib.import_module(".nodes", __name__)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_NODES})
