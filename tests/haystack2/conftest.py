"""Fixtures for the Haystack 2.x/3.x layer; the whole folder is skipped where haystack-ai is not installed.

The installed distribution decides (not the module name ``haystack``, which farm-haystack 1.x provides too), so the
Haystack 1.x environment's test run skips this folder without importing anything from it.
"""

from __future__ import annotations

import importlib.metadata
import os

import pytest

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

try:
    importlib.metadata.distribution("haystack-ai")
    HAYSTACK2 = True
except importlib.metadata.PackageNotFoundError:
    HAYSTACK2 = False

collect_ignore_glob = [] if HAYSTACK2 else ["test_*.py"]


@pytest.fixture
def hs2_docs():
    """The six tiny passages as Haystack 2 Documents with a title and a 'topic' meta field."""
    from haystack import Document

    from tests.conftest import tiny_documents

    return tiny_documents(Document)
