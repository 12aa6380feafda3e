"""Haystack's own document-store conformance suite, run on PhraseDocumentStore."""

from __future__ import annotations

import pytest
from haystack.testing import DocumentStoreBaseTestAbstract

from dphr_haystack.nodes import PhraseDocumentStore


class TestPhraseDocumentStoreConformance(DocumentStoreBaseTestAbstract):
    """Every inherited test runs unmodified (none overridden or skipped beyond Haystack's own skips)."""

    @pytest.fixture
    def ds(self):
        return PhraseDocumentStore(return_embedding=True, progress_bar=False)
