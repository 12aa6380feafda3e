"""The Haystack 1.x shared store directory: kills during delete, overwrite and a re-encoding of every document leave
every stored document with its phrases; a symbolic link in place of a phrase folder is refused at open and at write,
its target untouched."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from dphr_haystack.documents.passages import encoded_as
from dphr_haystack.errors import UnsafePathError
from tests.conftest import tiny_documents
from tests.reliability._crash import run_forked

pytestmark = [pytest.mark.unit, pytest.mark.skipif(not hasattr(os, "fork"), reason="forks child processes")]
pytest.importorskip("haystack.schema")


def _snapshot(folder: Path) -> dict[str, object]:
    return {
        str(entry): (os.readlink(entry) if entry.is_symlink() else "dir" if entry.is_dir() else entry.read_bytes())
        for entry in sorted([folder, *folder.rglob("*")])
    }


def _store(path: Path, model_dir: Path, docs=None):
    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

    store = PhraseDocumentStore(path=str(path), progress_bar=False)
    retriever = PhraseRetriever(document_store=store, model=str(model_dir), top_k=5, device="cpu", batch_size=8)
    if docs:
        store.write_documents(docs)
        store.update_embeddings(retriever)
    return store, retriever


def test_a_linked_phrase_folder_is_refused_at_open_and_at_write(tmp_path, model_dir):
    from haystack.schema import Document

    docs = tiny_documents(Document)
    victim = tmp_path / "victim"
    _store(victim, model_dir, docs[:3])
    path = tmp_path / "store"
    store, retriever = _store(path, model_dir, docs[3:])
    before = _snapshot(victim)
    # planted while the store is open: every write refuses
    (path / "phrases-0").rename(tmp_path / "moved")
    (path / "phrases-0").symlink_to(victim / "phrases-0")
    with pytest.raises(UnsafePathError, match="phrases-0"):
        store.delete_documents(ids=["p3"])
    with pytest.raises(UnsafePathError, match="phrases-0"):
        store.write_documents([Document(content="Quokkas live on Rottnest Island.", id="p4")])
    with pytest.raises(UnsafePathError, match="phrases-0"):
        store.update_embeddings(retriever)
    assert _snapshot(victim) == before
    # and at open
    from dphr_haystack.nodes import PhraseDocumentStore

    with pytest.raises(UnsafePathError, match="phrases-0"):
        PhraseDocumentStore(path=str(path), progress_bar=False)
    assert _snapshot(victim) == before


# ----------------------------------------------------------------- kills during delete and overwrite
def _forked(job, path: Path, kill_at: int) -> tuple[int | None, int]:
    """``job`` on the shared 1.x store at ``path`` in a child killed at ``kill_at`` (``_crash.run_forked``)."""

    def open_store():
        from dphr_haystack.nodes import PhraseDocumentStore

        return PhraseDocumentStore(path=str(path), progress_bar=False)

    return run_forked(open_store, job, kill_at)


def _assert_answerable(path: Path, model_dir: Path):
    """Every stored document has its phrases (as stored); no phrase answers for a document not stored."""
    store, retriever = _store(path, model_dir)
    docs = {d.id: d for d in store.get_all_documents()}
    index = store.get_phrase_index()
    for doc in docs.values():
        assert encoded_as(index, doc.id, store._to_passage(doc)), doc.id
    assert sorted(index.live_passage_ids()) == sorted(docs)
    assert {d.id for d in retriever.retrieve("Paris Hamlet river", top_k=20)} <= set(docs)
    return store, retriever


def _delete(store) -> None:
    store.delete_documents(ids=["p0", "p4"])


def _overwrite(store) -> None:
    from haystack.schema import Document

    store.write_documents([Document(content="Quokkas live on Rottnest Island.", id="p1", meta={"title": "Quokka"})])


@pytest.mark.parametrize("operation", ["delete", "overwrite"])
def test_kills_during_delete_and_overwrite_leave_every_document_answerable(tmp_path, model_dir, operation):
    import faiss
    from haystack.schema import Document

    faiss.omp_set_num_threads(1)  # the children are forked from this process
    job = _delete if operation == "delete" else _overwrite
    clean = tmp_path / "clean"
    _store(clean, model_dir, tiny_documents(Document))
    probe = tmp_path / "probe"
    shutil.copytree(clean, probe)
    _, steps = _forked(job, probe, 0)
    assert steps > 0
    outcomes = {"old": 0, "new": 0}
    for kill_at in range(1, steps + 1):
        path = tmp_path / f"killed-at-{kill_at}"
        shutil.copytree(clean, path)
        assert _forked(job, path, kill_at)[0] == signal.SIGKILL
        store, retriever = _store(path, model_dir)
        if operation == "delete":
            new = store.get_document_by_id("p0") is None
        else:
            new = store.get_document_by_id("p1").content.startswith("Quokkas")
        outcomes["new" if new else "old"] += 1
        if new and operation == "overwrite":
            assert store.get_phrase_index().passage_row("p1") is None  # old phrases left out, new ones due
            assert store.update_embeddings(retriever).encoded == 1
        store, retriever = _assert_answerable(path, model_dir)
        store.write_documents([Document(content="A later write about Paris.", id="later")])  # the next write works
        store.update_embeddings(retriever)
        _assert_answerable(path, model_dir)
    print(f"{operation}: {steps} kill points, outcomes {outcomes}")
    assert outcomes["old"] >= 1 and outcomes["new"] >= 1


def test_reencoding_killed_at_every_step_leaves_every_document_its_phrases(tmp_path, model_dir):
    """``update_embeddings(update_existing_embeddings=True)`` replaces each chunk's phrases in one phrase commit: a
    kill at any durability step leaves each document its old phrases or its new ones, never none."""
    import faiss
    from haystack.schema import Document

    faiss.omp_set_num_threads(1)
    clean = tmp_path / "clean"
    _store(clean, model_dir, tiny_documents(Document))

    def job(store) -> None:
        from dphr_haystack.nodes import PhraseRetriever

        retriever = PhraseRetriever(document_store=store, model=str(model_dir), device="cpu", batch_size=8)
        store.update_embeddings(retriever, update_existing_embeddings=True, batch_size=2)

    probe = tmp_path / "probe"
    shutil.copytree(clean, probe)
    _, steps = _forked(job, probe, 0)
    assert steps > 0
    for kill_at in range(1, steps + 1):
        path = tmp_path / f"killed-at-{kill_at}"
        shutil.copytree(clean, path)
        assert _forked(job, path, kill_at)[0] == signal.SIGKILL
        store, _ = _assert_answerable(path, model_dir)
        assert store.get_phrase_document_count() == len(tiny_documents(Document))
    print(f"re-encoding: {steps} kill points, every document kept its phrases")


def test_an_overwrite_committed_after_its_original_survives_a_reopen(tmp_path):
    """The original and the overwrite of one id in two writes: the later one wins after a reopen."""
    from haystack.schema import Document

    from dphr_haystack.nodes import PhraseDocumentStore

    store = PhraseDocumentStore(path=str(tmp_path / "store"), progress_bar=False)
    store.write_documents([Document(content="Berlin is in Germany.", id="p1")])
    store.write_documents([Document(content="Quokkas live on Rottnest Island.", id="p1")])
    reopened = PhraseDocumentStore(path=str(tmp_path / "store"), progress_bar=False)
    assert reopened.get_document_by_id("p1").content == "Quokkas live on Rottnest Island."
