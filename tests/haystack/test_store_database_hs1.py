"""The Haystack 1.x store directory in its database: every acknowledged write survives saves, other writers, a
re-created directory, a stopped re-encoding and read-only mounts; a user's own files beside it are never touched;
directories of the earlier journal format open unchanged."""

from __future__ import annotations

import gc
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from haystack.schema import Document, Label

from dphr_haystack.documents.passages import encoded_as
from dphr_haystack.errors import IndexLoadError
from dphr_haystack.index.phrase_index import PhraseIndex
from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever
from tests.conftest import tiny_documents

FIXTURES = Path(__file__).parent / "fixtures"
QUERIES = ["What is the capital of France?", "Who wrote Hamlet?", "Which river flows north?"]


def _docs(prefix: str, count: int) -> list[Document]:
    return [
        Document(content=f"Document {i} of {prefix} mentions Paris and the river Seine.", id=f"{prefix}{i}")
        for i in range(count)
    ]


def _ids(store, **kwargs) -> set[str]:
    return {doc.id for doc in store.get_all_documents(**kwargs)}


def _retriever(store, model_dir: Path) -> PhraseRetriever:
    return PhraseRetriever(document_store=store, model=str(model_dir), top_k=3, device="cpu")


def _all_encoded(store) -> None:
    """Every stored document has its phrases, encoded from its text."""
    phrase_index = store.get_phrase_index()
    for doc in store.get_all_documents():
        assert encoded_as(phrase_index, doc.id, store._to_passage(doc)), f"{doc.id} lost its phrases"


def _files(folder: Path) -> dict[str, bytes]:
    return {str(f.relative_to(folder)): f.read_bytes() for f in sorted(folder.rglob("*")) if f.is_file()}


# ----------------------------------------------------------------- 1. a saved snapshot reopened as a shared store
def test_a_saved_snapshot_reopened_with_path_keeps_every_document(tmp_path):
    snapshot = tmp_path / "snapshot"
    memory = PhraseDocumentStore(progress_bar=False)
    memory.write_documents(_docs("s", 20))
    memory.save(snapshot)
    shared = PhraseDocumentStore(path=str(snapshot), progress_bar=False)
    shared.write_documents(_docs("extra", 1))
    assert len(_ids(PhraseDocumentStore(path=str(snapshot)))) == 21


def test_a_shared_store_saved_to_its_own_path_keeps_writing(tmp_path):
    path = tmp_path / "shared"
    store = PhraseDocumentStore(path=str(path), progress_bar=False)
    store.write_documents(_docs("a", 5))
    store.save(path)
    store.write_documents(_docs("b", 2))
    assert _ids(PhraseDocumentStore(path=str(path))) == {f"a{i}" for i in range(5)} | {"b0", "b1"}


# ----------------------------------------------------------------- 2. save() to a path other writers share
def test_saving_to_the_shared_path_keeps_the_other_writers_documents(tmp_path):
    path = tmp_path / "shared"
    first = PhraseDocumentStore(path=str(path), progress_bar=False)
    second = PhraseDocumentStore(path=str(path), progress_bar=False)
    reader = PhraseDocumentStore(path=str(path), progress_bar=False)
    assert _ids(reader) == set()
    first.write_documents(_docs("a", 4))
    first.delete_documents(ids=["a3"])
    second.write_documents(_docs("b", 3))
    first.save(path)
    want = {"a0", "a1", "a2", "b0", "b1", "b2"}
    assert _ids(PhraseDocumentStore(path=str(path))) == want
    assert _ids(reader) == want and reader.get_document_by_id("a3") is None


# ----------------------------------------------------------------- 3. a user's files beside the store
def test_the_users_own_files_in_the_folder_are_never_touched(tmp_path, tiny_model_dir):
    path = tmp_path / "mine"
    (path / "phrases-notes").mkdir(parents=True)
    (path / "phrases-0").mkdir()
    (path / "documents-2023.jsonl").write_text('{"my": "own journal"}\n')
    (path / "phrases-notes" / "todo.txt").write_text("buy milk\n")
    (path / "phrases-0" / "draft.txt").write_text("not a phrase index\n")
    before = _files(path)
    store = PhraseDocumentStore(path=str(path), progress_bar=False)
    retriever = _retriever(store, tiny_model_dir)
    store.index_documents(tiny_documents(Document), retriever)
    store.delete_documents()
    store.index_documents(tiny_documents(Document)[:3], retriever)
    store.update_embeddings(retriever, update_existing_embeddings=True)
    after = _files(path)
    assert {name: after.get(name) for name in before} == before
    assert store.get_phrase_document_count() == 3


# ----------------------------------------------------------------- 4. ABA: the store emptied or made anew elsewhere
@pytest.mark.parametrize("how", ["delete_documents", "directory_made_anew"])
def test_a_long_lived_store_serves_exactly_the_new_documents(tmp_path, tiny_model_dir, how):
    path = tmp_path / "shared"
    long_lived = PhraseDocumentStore(path=str(path), progress_bar=False)
    retriever = _retriever(long_lived, tiny_model_dir)
    long_lived.index_documents(tiny_documents(Document), retriever)
    assert long_lived.get_phrase_document_count() == 6
    if how == "directory_made_anew":
        shutil.rmtree(path)
    other = PhraseDocumentStore(path=str(path), progress_bar=False)
    if how == "delete_documents":
        other.delete_documents()
    new = [
        Document(content=f"{d.content} Seen anew.", id=f"new-{d.id}", meta=d.meta) for d in tiny_documents(Document)
    ]
    other.index_documents(new[:4], _retriever(other, tiny_model_dir))
    want = {d.id for d in new[:4]}
    assert _ids(long_lived) == want
    assert long_lived.get_phrase_document_count() == 4
    assert {d.id for q in QUERIES for d in retriever.retrieve(q, top_k=10)} <= want
    stats = long_lived.update_embeddings(retriever)
    assert stats.encoded == 0 and stats.skipped_existing == 4
    fresh = PhraseDocumentStore(path=str(path), progress_bar=False)
    assert _ids(fresh) == want and fresh.get_phrase_document_count() == 4
    _all_encoded(fresh)


# ----------------------------------------------------------------- 6. whole-store reads follow other writers
def test_get_all_documents_sees_another_writers_documents(tmp_path):
    path = tmp_path / "shared"
    reader = PhraseDocumentStore(path=str(path), progress_bar=False)
    writer = PhraseDocumentStore(path=str(path), progress_bar=False)
    writer.write_documents(_docs("w", 3))
    assert {d.id for d in reader.get_all_documents_generator()} == {"w0", "w1", "w2"}
    writer.write_documents(_docs("v", 2))
    assert _ids(reader) == {"w0", "w1", "w2", "v0", "v1"}


# ----------------------------------------------------------------- 7. a re-encoding stopped part-way
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_a_reencoding_stopped_part_way_leaves_every_document_its_phrases(
    tmp_path, tiny_model_dir, monkeypatch, shared, fail_at
):
    path = tmp_path / "shared"
    store = PhraseDocumentStore(path=str(path), progress_bar=False) if shared else PhraseDocumentStore()
    retriever = _retriever(store, tiny_model_dir)
    store.index_documents(tiny_documents(Document), retriever)
    commits = {"n": 0}
    commit = PhraseIndex.commit

    def failing(self):
        commits["n"] += 1
        if commits["n"] == fail_at:
            raise RuntimeError("stopped part-way")
        return commit(self)

    monkeypatch.setattr(PhraseIndex, "commit", failing)
    with pytest.raises(RuntimeError, match="part-way"):
        store.update_embeddings(retriever, update_existing_embeddings=True, batch_size=2)
    monkeypatch.setattr(PhraseIndex, "commit", commit)
    assert store.get_phrase_document_count() == 6
    _all_encoded(store)
    if shared:
        fresh = PhraseDocumentStore(path=str(path), progress_bar=False)
        assert fresh.get_phrase_document_count() == 6
        _all_encoded(fresh)


# ----------------------------------------------------------------- 8. read-only directories
def _read_only_checks(path: Path, model_dir: Path, want: set[str]) -> None:
    from dphr_haystack.errors import ReadOnlyStoreError

    store = PhraseDocumentStore(path=str(path), progress_bar=False)
    retriever = _retriever(store, model_dir)
    assert _ids(store) == want and store.get_phrase_document_count() == len(want)
    assert {d.id for d in retriever.retrieve("capital of France?")} <= want
    assert store.get_all_labels() == [] and store.query("Paris", top_k=2)
    for write in (
        lambda: store.write_documents(_docs("x", 1)),
        lambda: store.delete_documents(ids=["p0"]),
        lambda: store.delete_documents(),
        lambda: store.update_document_meta("p0", {"seen": True}),
        lambda: store.update_embeddings(retriever, update_existing_embeddings=True),
        lambda: store.write_labels([_label()]),
    ):
        with pytest.raises(ReadOnlyStoreError):
            write()
    assert _ids(store) == want and store.get_phrase_document_count() == len(want)


def _label() -> Label:
    return Label(
        query="q",
        document=Document(content="x", id="x"),
        answer=None,
        is_correct_answer=True,
        is_correct_document=True,
        origin="gold-label",
    )


def test_a_read_only_directory_reads_and_refuses_writes(tmp_path, tiny_model_dir, monkeypatch):
    path = tmp_path / "store"
    writer = PhraseDocumentStore(path=str(path), progress_bar=False)
    writer.index_documents(tiny_documents(Document), _retriever(writer, tiny_model_dir))
    del writer
    gc.collect()
    before = _files(path)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if mode & os.W_OK else real_access(p, mode, **k))
    _read_only_checks(path, tiny_model_dir, {f"p{i}" for i in range(6)})
    assert _files(path) == before


def test_a_read_only_mount_reads_and_refuses_writes(tmp_path, tiny_model_dir):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "mnt"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        writer = PhraseDocumentStore(path=str(mount / "store"), progress_bar=False)
        writer.index_documents(tiny_documents(Document), _retriever(writer, tiny_model_dir))
        del writer
        gc.collect()
        remount = subprocess.run(["mount", "-o", "remount,ro", str(mount)], capture_output=True)
        if remount.returncode:
            pytest.skip(f"cannot remount read-only: {remount.stderr.decode(errors='replace').strip()}")
        _read_only_checks(mount / "store", tiny_model_dir, {f"p{i}" for i in range(6)})
        from dphr_haystack._util.lock import WriterLock
        from dphr_haystack.errors import ReadOnlyStoreError

        with pytest.raises(ReadOnlyStoreError), WriterLock(mount / "store").hold():
            pass
        with pytest.raises(ReadOnlyStoreError):
            PhraseDocumentStore(progress_bar=False).save(mount / "elsewhere")
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_the_rest_api_answers_a_read_only_store_with_403():
    from dphr_haystack.errors import ReadOnlyStoreError
    from dphr_haystack.nodes.rest.guards import error_status

    assert error_status(Exception("wrapped")) == 500
    wrapped = Exception("pipeline failed")
    wrapped.__cause__ = ReadOnlyStoreError("/srv/store is read-only")
    assert error_status(wrapped) == 403


# ----------------------------------------------------------------- directories of the earlier journal format
@pytest.mark.parametrize("name", ["hs1-shared", "hs1-saved"])
def test_a_journal_directory_opens_and_answers_the_same(tmp_path, tiny_model_dir, name):
    path = shutil.copytree(FIXTURES / name, tmp_path / name)
    expected = json.loads((FIXTURES / f"{name}.expected.json").read_text())
    before = _files(path)
    for store in (PhraseDocumentStore(path=str(path)), PhraseDocumentStore.load(path)):
        for index, docs in expected["documents"].items():
            got = sorted([d.id, d.content, d.meta] for d in store.get_all_documents(index=index))
            assert got == docs
        assert sorted(label.id for label in store.get_all_labels()) == expected["labels"]
        assert store.get_phrase_document_count() == expected["phrase_documents"]
        retriever = _retriever(store, tiny_model_dir)
        for query, answers in expected["answers"].items():
            got = [[d.id, round(float(d.score), 4), d.meta.get("best_phrase")] for d in retriever.retrieve(query)]
            assert got == answers, query
    after = _files(path)
    assert {k: after[k] for k in before} == before  # the old files are left as they were
    assert (path / "store.sqlite3").is_file()


def test_a_flipped_byte_in_a_stored_document_is_refused(tmp_path):
    path = tmp_path / "store"
    store = PhraseDocumentStore(path=str(path), progress_bar=False)
    store.write_documents([Document(content="The Eiffel Tower stands in Paris.", id="tower")])
    del store
    gc.collect()  # its connection closed: the database file holds every commit
    data = (path / "store.sqlite3").read_bytes()
    at = data.index(b"Eiffel")
    (path / "store.sqlite3").write_bytes(data[:at] + b"e" + data[at + 1 :])
    with pytest.raises(IndexLoadError, match="damaged"):
        PhraseDocumentStore(path=str(path), progress_bar=False).get_all_documents()
    raw = sqlite3.connect(path / "store.sqlite3")
    assert "eiffel" in raw.execute("SELECT body FROM documents").fetchone()[0]  # the flip is in the row
    raw.close()
