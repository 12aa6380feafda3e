"""The Haystack 2.x store never writes its documents file through a symbolic link planted in its directory, and refuses
a damaged documents file untouched."""

from __future__ import annotations

import pytest
from haystack import Document

from dphr_haystack.errors import IndexLoadError, UnsafePathError
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


DAMAGED_DOCUMENTS = {
    "not JSON": b"{not json\n",
    "truncated": b'{"id": "a", "content": "hel',
    "not UTF-8": b'{"id": "a", "content": "\xff\xfe"}\n',
    "not an object": b"[1, 2]\n",
    "nested too deeply": b"[" * 100_000 + b"]" * 100_000 + b"\n",
    "fields of the wrong type": b'{"id": 5, "content": ["x"], "meta": "m"}\n',
    "no id": b'{"content": "x"}\n',
    "a NaN in meta": b'{"id": "a", "content": "x", "meta": {"x": NaN}}\n',
}


@pytest.mark.parametrize("case", list(DAMAGED_DOCUMENTS))
def test_a_damaged_documents_file_is_an_index_load_error(tmp_path, case):
    folder = tmp_path / "store"
    PhraseDocumentStore(path=str(folder)).write_documents([Document(id="ok", content="fine")])
    (folder / "documents.jsonl").write_bytes(DAMAGED_DOCUMENTS[case])
    with pytest.raises(IndexLoadError, match="documents.jsonl"):
        PhraseDocumentStore(path=str(folder))
    assert (folder / "documents.jsonl").read_bytes() == DAMAGED_DOCUMENTS[case]  # refused, not rewritten
