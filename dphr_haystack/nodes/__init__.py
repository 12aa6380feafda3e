"""Haystack 1.x nodes: PhraseDocumentStore, PhraseRetriever, hybrid joins and YAML loading.

Importing this package (``import dphr_haystack.nodes``, or using a node name from ``dphr_haystack``) registers the
node classes, so that Haystack's ``Pipeline.load_from_yaml`` finds them by name; :func:`load_pipeline` does the
import for you. ``import dphr_haystack`` alone imports no Haystack.
"""

from __future__ import annotations

import os

from .._util.lazy import require_haystack1

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
require_haystack1()  # beside haystack-ai, say where the Haystack 2 components are instead of failing inside Haystack

from ..model.cache import cached_models, clear_model_cache, load_phrase_model
from .dense import MiniLMEmbeddingRetriever
from .document_store import PhraseDocumentStore, PhraseIndexingStats
from .joins import LinearFusionJoin, PhraseHybridJoin
from .pipeline import PIPELINES_DIR, corpus_documents, index_corpus, load_pipeline
from .retriever import PhraseRetriever

__all__ = [
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
]
