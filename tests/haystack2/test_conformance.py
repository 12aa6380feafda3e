"""Haystack's own DocumentStore test suites (haystack.testing.document_store) on PhraseDocumentStore."""

from __future__ import annotations

import pytest
from haystack import Document
from haystack.document_stores.errors import DuplicateDocumentError
from haystack.testing.document_store import (
    CountDocumentsByFilterTest,
    CountUniqueMetadataByFilterTest,
    DocumentStoreBaseExtendedTests,
    DocumentStoreBaseTests,
    GetMetadataFieldMinMaxTest,
    GetMetadataFieldsInfoTest,
    GetMetadataFieldUniqueValuesTest,
)

from dphr_haystack.haystack2 import PhraseDocumentStore


def check_default_write(document_store: PhraseDocumentStore) -> None:
    """The default policy (NONE) means FAIL, as in InMemoryDocumentStore (the suite leaves this test to stores)."""
    doc = Document(content="test doc")
    assert document_store.write_documents([doc]) == 1
    assert document_store.filter_documents() == [doc]
    with pytest.raises(DuplicateDocumentError):
        document_store.write_documents([doc])


class TestPhraseDocumentStoreConformance(
    DocumentStoreBaseExtendedTests,
    CountDocumentsByFilterTest,
    CountUniqueMetadataByFilterTest,
    GetMetadataFieldsInfoTest,
    GetMetadataFieldMinMaxTest,
    GetMetadataFieldUniqueValuesTest,
):
    """Every suite InMemoryDocumentStore runs, on an in-memory PhraseDocumentStore()."""

    @pytest.fixture
    def document_store(self) -> PhraseDocumentStore:
        return PhraseDocumentStore()

    def test_write_documents(self, document_store: PhraseDocumentStore) -> None:
        check_default_write(document_store)


class TestPersistentPhraseDocumentStoreConformance(DocumentStoreBaseTests):
    """The base protocol suite on a store kept in a directory (every change saved)."""

    @pytest.fixture
    def document_store(self, tmp_path) -> PhraseDocumentStore:
        return PhraseDocumentStore(path=str(tmp_path / "store"))

    def test_write_documents(self, document_store: PhraseDocumentStore) -> None:
        check_default_write(document_store)
