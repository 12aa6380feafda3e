"""Disk full under the document stores: ENOSPC at every write step of a write, a phrase update, a delete, an
overwrite and a save, for the Haystack 1.x ``PhraseDocumentStore(path=...)`` (the Haystack 2 store's walk:
tests/haystack2/test_store_disk_full.py).

Every write step of one operation (counted by :class:`~tests.reliability._disk_full.DiskFull`, the store database's
statements and commits included) is made to fail in turn. After each failure: a typed error that says
the disk is full; the same store object and a freshly opened store hold exactly the last acknowledged state (the
documents, the documents with phrases, the phrase search results; no phrase of a document the store does not hold
as encoded); the next write succeeds and is what a store that never failed holds. Skipped where farm-haystack is not
installed.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from tests.reliability._disk_full import (
    DiskFull,
    assert_disk_full_error,
    assert_store_state,
    copy_store,
    walk_failure_points,
)


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


HS1 = pytest.mark.skipif(not _installed("farm-haystack"), reason="Haystack 1.x (farm-haystack) is not installed")
QUERIES = ["Who founded the city?", "When was it built?", "What is the capital?"]


# ----------------------------------------------------------------- Haystack 1.x
@pytest.fixture
def hs1(monkeypatch, model_dir, squad_passages):
    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

    disk = DiskFull(monkeypatch, database=True)

    def open_store(path: Path) -> PhraseDocumentStore:
        return PhraseDocumentStore(path=str(path), progress_bar=False)

    def retriever(store) -> PhraseRetriever:
        return PhraseRetriever(document_store=store, model=str(model_dir), top_k=20, device="cpu")

    def state(store) -> dict:
        docs = {d.id: (d.content, d.meta.get("title")) for d in store.get_all_documents()}
        phrase_index = store.get_phrase_index()
        phrases = []
        if phrase_index is not None:
            hidden = set(phrase_index.hidden_passage_ids())
            phrases = sorted(set(phrase_index.live_passage_ids()) - hidden)
            for pid in phrases:
                record = phrase_index.passages[phrase_index.passage_row(pid)]
                assert pid in docs and record["text"] == docs[pid][0], f"phrases of {pid!r} do not match its text"
        found = [sorted(d.id for d in retriever(store).retrieve(q, top_k=20)) for q in QUERIES]
        return {"documents": docs, "phrases": phrases, "found": found}

    def documents(first: int, count: int, suffix: str = ""):
        from haystack.schema import Document

        return [
            Document(id=p["id"], content=p["text"] + suffix, meta={"title": p["title"]})
            for p in squad_passages[first : first + count]
        ]

    return disk, open_store, retriever, state, documents


def _hs1_base(tmp_path: Path, hs1, encoded: int = 6, unencoded: int = 0) -> Path:
    _, open_store, retriever, _, documents = hs1
    store = open_store(tmp_path / "base")
    store.write_documents(documents(0, encoded))
    store.update_embeddings(retriever(store))
    if unencoded:
        store.write_documents(documents(10, unencoded))
    return tmp_path / "base"


@HS1
def test_hs1_write_documents_disk_full(hs1, tmp_path):
    disk, open_store, retriever, state, documents = hs1

    def next_write(store):
        store.write_documents(documents(20, 2))
        store.update_embeddings(retriever(store))

    walk_failure_points(
        disk, tmp_path, _hs1_base(tmp_path, hs1), open_store, state,
        lambda store: store.write_documents(documents(10, 3)), next_write, "1.x write_documents",
    )  # fmt: skip


@HS1
def test_hs1_update_embeddings_disk_full(hs1, tmp_path):
    disk, open_store, retriever, state, documents = hs1

    def next_write(store):
        store.write_documents(documents(20, 2))
        store.update_embeddings(retriever(store))

    walk_failure_points(
        disk, tmp_path, _hs1_base(tmp_path, hs1, unencoded=3), open_store, state,
        lambda store: store.update_embeddings(retriever(store)), next_write, "1.x update_embeddings",
    )  # fmt: skip


@HS1
def test_hs1_first_update_embeddings_disk_full(hs1, tmp_path):
    """The first phrases of a store: the phrase index folder is created by the failing write."""
    disk, open_store, retriever, state, documents = hs1
    store = open_store(tmp_path / "base")
    store.write_documents(documents(0, 4))

    def next_write(store):
        store.update_embeddings(retriever(store))

    walk_failure_points(
        disk, tmp_path, tmp_path / "base", open_store, state,
        lambda store: store.update_embeddings(retriever(store)), next_write, "1.x first update_embeddings",
    )  # fmt: skip


@HS1
def test_hs1_delete_disk_full(hs1, tmp_path):
    disk, open_store, retriever, state, documents = hs1
    ids = [d.id for d in documents(0, 6)]

    def next_write(store):
        store.delete_documents(ids=[ids[4]])

    walk_failure_points(
        disk, tmp_path, _hs1_base(tmp_path, hs1), open_store, state,
        lambda store: store.delete_documents(ids=[ids[1], ids[3]]), next_write, "1.x delete_documents",
    )  # fmt: skip


@HS1
def test_hs1_overwrite_disk_full(hs1, tmp_path):
    """An overwrite with a new text: the documents and their old phrases stay until the write commits."""
    disk, open_store, retriever, state, documents = hs1

    def next_write(store):
        store.write_documents(documents(20, 1))
        store.update_embeddings(retriever(store))

    walk_failure_points(
        disk, tmp_path, _hs1_base(tmp_path, hs1), open_store, state,
        lambda store: store.write_documents(documents(0, 2, " Rewritten.") + documents(10, 1)), next_write,
        "1.x overwrite",
    )  # fmt: skip


@HS1
def test_hs1_save_disk_full(hs1, tmp_path):
    """``save`` to another directory: a typed error, the source store and the target's previous copy unchanged, no
    half-written folder left in the target."""
    disk, open_store, retriever, state, documents = hs1
    from dphr_haystack.nodes import PhraseDocumentStore

    base = _hs1_base(tmp_path, hs1)
    source = open_store(base)
    want = state(source)
    previous = open_store(tmp_path / "previous")
    previous.write_documents(documents(30, 2))
    previous.update_embeddings(retriever(previous))
    target = tmp_path / "target"
    with disk.armed():
        source.save(target)
    steps, names = disk.steps, list(disk.log)
    failures = []
    for k in range(1, steps + 1):
        copy_store(tmp_path / "previous", target)
        previous_state = state(PhraseDocumentStore.load(target))
        previous_entries = _entries(target)
        try:
            error = None
            try:
                with disk.armed(k):
                    source.save(target)
            except Exception as exc:
                error = exc
            assert_store_state(state(source), want, "source store")
            assert_store_state(state(open_store(base)), want, "source reopened")
            if error is None:  # failed after the commit (removing the old folders): the copy is saved
                assert_store_state(state(PhraseDocumentStore.load(target)), want, "saved copy, rolled forward")
            else:
                assert state(PhraseDocumentStore.load(target)) == previous_state, "the target lost its previous copy"
                assert_disk_full_error(error)
                leftovers = sorted(_entries(target) - previous_entries)
                assert not leftovers, f"folders of the failed save left behind: {leftovers}"
            source.save(target)
            assert_store_state(state(PhraseDocumentStore.load(target)), want, "saved copy")
        except Exception as exc:
            failures.append(f"ENOSPC at step {k}/{steps} ({names[k - 1]}): {type(exc).__name__}: {str(exc)[:300]}")
    print(f"1.x save: {steps} write steps {names}; {steps - len(failures)} of {steps} passed")
    assert not failures, "\n".join(failures)


def _entries(folder: Path) -> set[str]:
    """What a store directory holds, its database files and lock aside."""
    return {p.name for p in folder.iterdir() if not p.name.startswith(("store.sqlite3", ".dphr"))}
