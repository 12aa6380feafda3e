"""The Haystack 2.x store never writes through a symbolic link planted in its directory, and refuses a damaged store
database or a damaged documents file of an earlier version untouched."""

from __future__ import annotations

import gc

import pytest
from haystack import Document

from dphr_haystack.errors import IndexLoadError
from dphr_haystack.haystack2 import PhraseDocumentStore


def test_a_linked_store_database_is_refused(tmp_path):
    folder = tmp_path / "store"
    folder.mkdir()
    target = tmp_path / "outside.sqlite3"
    target.write_bytes(b"")
    (folder / "store.sqlite3").symlink_to(target)
    with pytest.raises(IndexLoadError, match="store.sqlite3"):
        PhraseDocumentStore(path=str(folder))
    assert target.read_bytes() == b""
    (folder / "store.sqlite3").unlink()
    store = PhraseDocumentStore(path=str(folder))
    store.write_documents([Document(content="The Nile flows north.", id="n")])
    assert (folder / "store.sqlite3").is_file() and not (folder / "store.sqlite3").is_symlink()


@pytest.mark.parametrize("content", [b"my own notes\n", b"SQLite format 3\x00" + b"\x01" * 200])
def test_a_damaged_store_database_is_refused_untouched(tmp_path, content):
    folder = tmp_path / "store"
    PhraseDocumentStore(path=str(folder)).write_documents([Document(id="ok", content="fine")])
    gc.collect()  # the store's connection closed (a live one would checkpoint over the damage)
    for leftover in folder.glob("store.sqlite3-*"):
        leftover.unlink()
    (folder / "store.sqlite3").write_bytes(content)
    with pytest.raises(IndexLoadError, match="store.sqlite3"):
        PhraseDocumentStore(path=str(folder))
    assert (folder / "store.sqlite3").read_bytes() == content  # refused, not replaced


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
def test_a_damaged_documents_file_of_an_earlier_version_is_refused_untouched(tmp_path, case):
    folder = tmp_path / "store"
    folder.mkdir()
    (folder / "documents.jsonl").write_bytes(DAMAGED_DOCUMENTS[case])
    with pytest.raises(IndexLoadError, match="documents.jsonl"):
        PhraseDocumentStore(path=str(folder))
    assert (folder / "documents.jsonl").read_bytes() == DAMAGED_DOCUMENTS[case]  # refused, not converted
    assert not (folder / "store.sqlite3").exists()
