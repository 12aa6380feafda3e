"""Dense phrase retrieval for Haystack 2.x/3.x (``haystack-ai``): a document store, a retriever and an indexer.

Install with ``pip install "dphr-haystack[haystack2]"`` (never beside the ``haystack`` extra, which is Haystack 1.x).
Pipelines saved with these components load with ``Pipeline.loads(text, allowed_modules=ALLOWED_MODULES)`` (Haystack
3.4 only imports component classes from trusted modules) or with :func:`load_pipeline`.
"""

from __future__ import annotations

import os

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

from pathlib import Path

from haystack import Pipeline

from .document_store import PhraseDocumentStore
from .indexer import PhraseIndexer
from .retriever import PhraseRetriever

ALLOWED_MODULES = ["dphr_haystack.haystack2"]


def load_pipeline(path: str | Path) -> Pipeline:
    """A Haystack 2 pipeline from a YAML file, trusting this package's components (and Haystack's own) only."""
    return Pipeline.loads(Path(path).read_text(encoding="utf-8"), allowed_modules=ALLOWED_MODULES)


__all__ = ["ALLOWED_MODULES", "PhraseDocumentStore", "PhraseIndexer", "PhraseRetriever", "load_pipeline"]
