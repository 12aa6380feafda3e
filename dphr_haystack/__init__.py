"""dphr_haystack: dense phrase retrieval (DensePhrases) for Haystack 1.x.

The core (model, phrase dump, phrase index, search) needs no Haystack. When farm-haystack is installed,
importing this package also registers the Haystack nodes (``PhraseRetriever``, ``PhraseDocumentStore``, …)
so that ``Pipeline.load_from_yaml`` finds them; set ``DPHR_HAYSTACK_NODES=0`` to skip that. The Haystack 2.x/3.x
(``haystack-ai``) components live in ``dphr_haystack.haystack2`` and are never imported here.
"""

from __future__ import annotations

import importlib.metadata
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


# Haystack 1.x (farm-haystack) only: haystack-ai 2.x/3.x provides a module of the same name, ``haystack``, whose
# API the 1.x nodes cannot use (its layer is ``dphr_haystack.haystack2``, imported explicitly). The installed
# distribution decides, not the module name: a bare ``haystack`` directory on sys.path does not count either.
def _farm_haystack_installed() -> bool:
    try:
        importlib.metadata.distribution("farm-haystack")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


if os.environ.get("DPHR_HAYSTACK_NODES", "1") != "0" and _farm_haystack_installed():
    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
    from . import nodes as nodes  # noqa: F401  (registers the Haystack node classes for YAML)
    from .nodes import *  # noqa: F401,F403
    from .nodes import __all__ as _node_names

    __all__ += list(_node_names)
