"""Fixtures for the Haystack layer: a saved tiny phrase model, stores filled with the tiny passages."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

try:  # by the installed distribution: haystack-ai (Haystack 2.x/3.x) installs a module named haystack too
    importlib.metadata.distribution("farm-haystack")
    FARM_HAYSTACK = True
except importlib.metadata.PackageNotFoundError:
    FARM_HAYSTACK = False
# Without farm-haystack (pip install 'dphr-haystack[haystack]') these tests are not collected.
collect_ignore_glob = [] if FARM_HAYSTACK else ["test_*.py"]

REPO = Path(__file__).resolve().parents[2]
PIPELINES = REPO / "pipelines"


def pytest_configure(config) -> None:
    # Haystack's conformance class carries this marker; register it so --strict-markers accepts it.
    config.addinivalue_line("markers", "document_store: Haystack's DocumentStoreBaseTestAbstract suite")


@pytest.fixture
def haystack_docs():
    """The six tiny passages as Haystack Documents, with a title, a document id and a 'topic' meta field."""
    from haystack.schema import Document

    from tests.conftest import tiny_documents

    return tiny_documents(Document)


@pytest.fixture
def tiny_retriever(tiny_model_dir):
    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

    store = PhraseDocumentStore(progress_bar=False)
    return PhraseRetriever(document_store=store, model=str(tiny_model_dir), top_k=3, device="cpu")


@pytest.fixture
def indexed_retriever(tiny_retriever, haystack_docs):
    tiny_retriever.document_store.index_documents(haystack_docs, tiny_retriever)
    return tiny_retriever
