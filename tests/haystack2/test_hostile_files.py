"""The Haystack 2.x store never writes its documents file through a symbolic link planted in its directory."""

from __future__ import annotations

import pytest
from haystack import Document

from dphr_haystack.errors import UnsafePathError
from dphr_haystack.haystack2 import PhraseDocumentStore


def test_a_linked_documents_file_is_refused(tmp_path):
    folder = tmp_path / "store"
    folder.mkdir()
    target = tmp_path / "outside.jsonl"
    target.write_bytes(b"")
    (folder / "documents.jsonl").symlink_to(target)
    store = PhraseDocumentStore(path=str(folder))
    with pytest.raises(UnsafePathError, match="documents.jsonl"):
        store.write_documents([Document(content="Paris is in France.", id="p")])
    assert target.read_bytes() == b""
    (folder / "documents.jsonl").unlink()
    store.write_documents([Document(content="The Nile flows north.", id="n")])
    assert (folder / "documents.jsonl").is_file() and not (folder / "documents.jsonl").is_symlink()
