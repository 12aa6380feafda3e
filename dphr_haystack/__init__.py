"""dphr_haystack: dense phrase retrieval (DensePhrases) for Haystack 1.x.

The core (model, phrase dump, phrase index, search) needs no Haystack. When farm-haystack is installed,
importing this package also registers the Haystack nodes (``PhraseRetriever``, ``PhraseDocumentStore``, …)
so that ``Pipeline.load_from_yaml`` finds them; set ``DPHR_HAYSTACK_NODES=0`` to skip that.
"""

from __future__ import annotations

import importlib.util
import os

from .build.corpus import CorpusStats, Passage, read_corpus
from .build.dump import PhraseShard, dump_phrases, encode_shard, list_shards
from .errors import (
    CorpusFormatError,
    DphrError,
    EmptyCorpusError,
    IndexLoadError,
    InvalidParameterError,
    InvalidQueryError,
    ModelLoadError,
    ModelMismatchError,
)
from .index.codec import VectorCodec
from .index.phrase_index import PhraseIndex
from .model.config import PhraseModelConfig
from .model.phrase_model import PhraseModel
from .model.registry import DEFAULT_MODEL, resolve_base, shipped_model_names
from .search import DocumentHit, PassageHit, PhraseHit, PhraseSearcher

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MODEL",
    "CorpusFormatError",
    "CorpusStats",
    "DocumentHit",
    "DphrError",
    "EmptyCorpusError",
    "IndexLoadError",
    "InvalidParameterError",
    "InvalidQueryError",
    "ModelLoadError",
    "ModelMismatchError",
    "Passage",
    "PassageHit",
    "PhraseHit",
    "PhraseIndex",
    "PhraseModel",
    "PhraseModelConfig",
    "PhraseSearcher",
    "PhraseShard",
    "VectorCodec",
    "dump_phrases",
    "encode_shard",
    "list_shards",
    "read_corpus",
    "resolve_base",
    "shipped_model_names",
]

# A real Haystack install only: a bare ``haystack`` directory on sys.path (e.g. tests/haystack, which pytest puts
# there where farm-haystack is absent) is a namespace package without an origin.
_HAYSTACK = importlib.util.find_spec("haystack")
if os.environ.get("DPHR_HAYSTACK_NODES", "1") != "0" and _HAYSTACK is not None and _HAYSTACK.origin is not None:
    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
    from . import nodes as nodes  # noqa: F401  (registers the Haystack node classes for YAML)
    from .nodes import *  # noqa: F401,F403
    from .nodes import __all__ as _node_names

    __all__ += list(_node_names)
