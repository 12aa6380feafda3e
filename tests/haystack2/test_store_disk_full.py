"""Disk full under the Haystack 2 ``PhraseDocumentStore(path=...)``: ENOSPC at every write step (phrase files and
store database) of a write, a phrase update, a delete and an overwrite (the walk and its assertions:
tests/reliability/_disk_full.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import squad_passage_records
from tests.reliability._disk_full import DiskFull, walk_failure_points

pytestmark = pytest.mark.unit
QUERIES = ["Who founded the city?", "When was it built?", "What is the capital?"]


@pytest.fixture(scope="module")
def squad_passages() -> list[dict]:
    return squad_passage_records(40)


@pytest.fixture
def hs2(monkeypatch, tiny_model, squad_passages):
    from dphr_haystack.haystack2 import PhraseDocumentStore

    disk = DiskFull(monkeypatch, database=True)
    opened: list = []

    def open_store(path: Path):
        for store in opened:  # one registered store per path and process: a fresh open forgets the others
            store.close()
        store = PhraseDocumentStore(path=str(path), progress_bar=False)
        opened.append(store)
        return store

    def state(store) -> dict:
        docs = {d.id: (d.content, d.meta.get("title")) for d in store.filter_documents()}
        phrase_index = store.phrase_index
        phrases = []
        if phrase_index is not None:
            hidden = set(phrase_index.hidden_passage_ids())
            phrases = sorted(set(phrase_index.live_passage_ids()) - hidden)
        found = []
        for hits in store.search_phrases(tiny_model, QUERIES, unit="document", top_k=20):
            found.append(sorted(doc.id for _, doc in hits))
        return {"documents": docs, "phrases": phrases, "found": found}

    def documents(first: int, count: int, suffix: str = ""):
        from haystack import Document

        return [
            Document(id=p["id"], content=p["text"] + suffix, meta={"title": p["title"]})
            for p in squad_passages[first : first + count]
        ]

    yield disk, open_store, state, documents
    for store in opened:
        store.close()


def _hs2_base(tmp_path: Path, hs2, tiny_model, encoded: int = 6, unencoded: int = 0) -> Path:
    from haystack.document_stores.types import DuplicatePolicy

    _, open_store, _, documents = hs2
    store = open_store(tmp_path / "base")
    store.write_documents(documents(0, encoded))
    store.update_phrases(tiny_model)
    if unencoded:
        store.write_documents(documents(10, unencoded), policy=DuplicatePolicy.OVERWRITE)
    store.close()
    return tmp_path / "base"


@pytest.mark.parametrize("operation", ["write_documents", "update_phrases", "delete", "overwrite"])
def test_hs2_disk_full(hs2, tmp_path, tiny_model, operation):
    from haystack.document_stores.types import DuplicatePolicy

    disk, open_store, state, documents = hs2
    base = _hs2_base(tmp_path, hs2, tiny_model, unencoded=3 if operation == "update_phrases" else 0)
    ids = [d.id for d in documents(0, 6)]
    operations = {
        "write_documents": lambda store: store.write_documents(documents(10, 3)),
        "update_phrases": lambda store: store.update_phrases(tiny_model),
        "delete": lambda store: store.delete_documents([ids[1], ids[3]]),
        "overwrite": lambda store: store.write_documents(
            documents(0, 2, " Rewritten.") + documents(10, 1), policy=DuplicatePolicy.OVERWRITE
        ),
    }

    def next_write(store):
        store.write_documents(documents(20, 2))
        store.update_phrases(tiny_model)

    walk_failure_points(disk, tmp_path, base, open_store, state, operations[operation], next_write, f"2.x {operation}")
