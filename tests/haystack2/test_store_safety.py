"""The Haystack 2 store's directory is never lost: two processes on one path, kills during delete and overwrite,
damaged or planted entries in the directory (refused at open, nothing changed on disk), a damaged directory of an
earlier version (refused at conversion)."""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from haystack import Document
from haystack.document_stores.types import DuplicatePolicy

from dphr_haystack.documents.passages import encoded_as
from dphr_haystack.encode.add import add_passages
from dphr_haystack.errors import IndexLoadError, UnsafePathError
from dphr_haystack.haystack2 import PhraseDocumentStore
from dphr_haystack.index.phrase_index import PhraseIndex
from tests.reliability._crash import run_forked

pytestmark = [pytest.mark.unit, pytest.mark.skipif(not hasattr(os, "fork"), reason="forks child processes")]

REPO = Path(__file__).resolve().parents[2]

_WRITER = """
import json, sys
from haystack import Document
from dphr_haystack.haystack2 import PhraseDocumentStore
path, name, count, model_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
model = None
if model_dir:
    import torch
    torch.set_num_threads(1)
    from dphr_haystack import PhraseModel
    model = PhraseModel.load(model_dir)
import os, pathlib, time
store = PhraseDocumentStore(path=path, progress_bar=False)
ready = pathlib.Path(path).parent
(ready / f"ready-{name}").touch()
while len(list(ready.glob("ready-*"))) < 2:  # both writers start together
    time.sleep(0.01)
done = []
for i in range(count):
    doc_id = f"{name}-{i}"
    store.write_documents([Document(id=doc_id, content=f"Writer {name} wrote document {i} about Paris.")])
    if model is not None:
        store.update_phrases(model)
    done.append(doc_id)  # acknowledged
print(json.dumps(done))
"""


def _snapshot(folder: Path) -> dict[str, object]:
    """Every entry under ``folder`` (and its lock file beside it): kind and bytes."""
    out: dict[str, object] = {}
    for entry in sorted([folder, *folder.rglob("*")]):
        if entry.is_symlink():
            out[str(entry)] = ("link", os.readlink(entry))
        elif entry.is_fifo():
            out[str(entry)] = "fifo"
        elif entry.is_dir():
            out[str(entry)] = "dir"
        else:
            out[str(entry)] = entry.read_bytes()
    return out


def _run_writers(path: Path, count: int, model_dir: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), name, str(count), model_dir],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    acknowledged = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        acknowledged += json.loads(out.strip().splitlines()[-1])
    return acknowledged


def test_two_processes_on_one_path_lose_no_acknowledged_write(tmp_path):
    path = tmp_path / "store"
    acknowledged = _run_writers(path, 40, "")
    assert len(acknowledged) == 80
    third = PhraseDocumentStore(path=str(path), progress_bar=False)
    assert sorted(d.id for d in third.filter_documents()) == sorted(acknowledged)


def test_two_processes_encoding_phrases_lose_no_acknowledged_write(tmp_path, tiny_model_dir, tiny_model):
    path = tmp_path / "store"
    acknowledged = _run_writers(path, 40, str(tiny_model_dir))
    third = PhraseDocumentStore(path=str(path), progress_bar=False)
    assert sorted(d.id for d in third.filter_documents()) == sorted(acknowledged)
    assert third.pending_documents() == [] and third.phrase_count() == 80
    hits = third.search_phrases(tiny_model, ["Paris"], unit="passage", top_k=80)[0]
    assert len(hits) == 80


def _store_with_phrases(path: Path, model, docs) -> None:
    store = PhraseDocumentStore(path=str(path), progress_bar=False)
    store.write_documents(docs)
    store.update_phrases(model)
    assert store.phrase_count() == len(docs)
    store.close()


def _closed(path: Path) -> None:
    """The store database of ``path`` with no connection left open (its log folded into the file)."""
    gc.collect()
    raw = sqlite3.connect(path / "store.sqlite3")
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw.close()


@pytest.mark.parametrize("damage", ["fifo", "directory", "symbolic link"])
def test_opening_a_store_whose_database_is_not_a_file_changes_nothing(tmp_path, tiny_model, hs2_docs, damage):
    path = tmp_path / "store"
    _store_with_phrases(path, tiny_model, hs2_docs)
    _closed(path)
    (path / "store.sqlite3").rename(tmp_path / "kept.sqlite3")
    if damage == "fifo":
        os.mkfifo(path / "store.sqlite3")
    elif damage == "directory":
        (path / "store.sqlite3").mkdir()
    else:
        (path / "store.sqlite3").symlink_to(tmp_path / "kept.sqlite3")
    before = _snapshot(tmp_path)
    with pytest.raises(IndexLoadError, match="store.sqlite3"):
        PhraseDocumentStore(path=str(path), progress_bar=False)
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("damage", ["missing", "emptied"])
def test_an_earlier_directory_without_its_documents_beside_phrases_is_refused(tmp_path, tiny_model, hs2_docs, damage):
    """A directory of an earlier version (``documents.jsonl`` + ``phrases/``) whose documents file is gone or empty is
    refused at conversion, not read as a store without documents."""
    path = tmp_path / "store"
    path.mkdir()
    index = PhraseIndex.create(tiny_model, path=path / "phrases", filter_threshold=tiny_model.config.filter_threshold)
    add_passages(index, tiny_model, [{"id": d.id, "text": d.content} for d in hs2_docs], progress=False)
    if damage == "emptied":
        (path / "documents.jsonl").write_bytes(b"")
    before = _snapshot(tmp_path)
    with pytest.raises(IndexLoadError, match="documents.jsonl"):
        PhraseDocumentStore(path=str(path), progress_bar=False)
    after = _snapshot(tmp_path)
    assert {k: v for k, v in after.items() if k != str(path / ".dphr.lock")} == before  # the writer lock aside


def test_a_linked_phrase_folder_is_refused_at_open_and_never_written_through(tmp_path, tiny_model, hs2_docs):
    victim = tmp_path / "victim"
    _store_with_phrases(victim, tiny_model, hs2_docs[:3])
    path = tmp_path / "store"
    _store_with_phrases(path, tiny_model, hs2_docs[3:])
    shutil.rmtree(path / "phrases-0")
    (path / "phrases-0").symlink_to(victim / "phrases-0")
    before = _snapshot(victim / "phrases-0")
    with pytest.raises(UnsafePathError, match="phrases-0"):
        PhraseDocumentStore(path=str(path), progress_bar=False)
    # planted where a store without phrases would make its folder: it makes another one
    fresh = tmp_path / "fresh"
    store = PhraseDocumentStore(path=str(fresh), progress_bar=False)
    store.write_documents(hs2_docs[3:])
    (fresh / "phrases-0").symlink_to(victim / "phrases-0")
    assert store.update_phrases(tiny_model) == 3 and store.phrase_index.path.name == "phrases-1"
    # planted in place of an open store's phrase folder: every write refuses
    (fresh / "phrases-1").rename(tmp_path / "moved")
    (fresh / "phrases-1").symlink_to(victim / "phrases-0")
    with pytest.raises(UnsafePathError, match="phrases-1"):
        store.delete_documents(["p3"])
    with pytest.raises(UnsafePathError, match="phrases-1"):
        store.write_documents([Document(id="x", content="Another document.")])
    assert _snapshot(victim / "phrases-0") == before


# ----------------------------------------------------------------- kills during delete and overwrite
def _assert_answerable(path: Path, model) -> PhraseDocumentStore:
    """Every stored document has its phrases (as stored), and no phrase answers for a document not stored."""
    store = PhraseDocumentStore(path=str(path), progress_bar=False)
    docs = {d.id: d for d in store.filter_documents()}
    index = store.phrase_index
    for doc in docs.values():
        assert encoded_as(index, doc.id, store.passage_rule.passage(doc.id, doc.content, doc.meta)), doc.id
    assert sorted(index.live_passage_ids()) == sorted(docs)
    hits = store.search_phrases(model, ["Paris Hamlet river"], unit="passage", top_k=20)[0]
    assert {doc.id for _, doc in hits} <= set(docs)
    return store


JOBS = {
    "delete": lambda store: store.delete_documents(["p0", "p4"]),
    "overwrite": lambda store: store.write_documents(
        [Document(id="p1", content="Quokkas live on Rottnest Island.", meta={"title": "Quokka"})],
        DuplicatePolicy.OVERWRITE,
    ),
}


def _forked(job, path: Path, kill_at: int) -> tuple[int | None, int]:
    return run_forked(lambda: PhraseDocumentStore(path=str(path), progress_bar=False), job, kill_at)


@pytest.mark.parametrize("operation", ["delete", "overwrite"])
def test_kills_during_delete_and_overwrite_leave_every_document_answerable(
    tmp_path, tiny_model, hs2_docs, operation, one_torch_thread
):
    import faiss

    faiss.omp_set_num_threads(1)  # the children are forked from this process
    clean = tmp_path / "clean"
    _store_with_phrases(clean, tiny_model, hs2_docs)
    probe = tmp_path / "probe"
    shutil.copytree(clean, probe)
    _, steps = _forked(JOBS[operation], probe, 0)
    assert steps > 0
    outcomes = {"old": 0, "new": 0}
    for kill_at in range(1, steps + 1):
        path = tmp_path / f"killed-at-{kill_at}"
        shutil.copytree(clean, path)
        assert _forked(JOBS[operation], path, kill_at)[0] == signal.SIGKILL
        store = PhraseDocumentStore(path=str(path), progress_bar=False)
        docs = {d.id: d for d in store.filter_documents()}
        new = "p0" not in docs if operation == "delete" else docs["p1"].content.startswith("Quokkas")
        outcomes["new" if new else "old"] += 1
        if new and operation == "overwrite":
            assert [d.id for d in store.pending_documents()] == ["p1"]  # its old phrases gone, new ones due
            assert store.update_phrases(tiny_model) == 1
        store.close()
        store = _assert_answerable(path, tiny_model)
        store.write_documents([Document(id="later", content="A later write about Paris.")])  # the next write works
        store.update_phrases(tiny_model)
        store.close()
        _assert_answerable(path, tiny_model).close()
    print(f"{operation}: {steps} kill points, outcomes {outcomes}")
    assert outcomes["old"] >= 1 and outcomes["new"] >= 1


def test_a_database_removed_under_an_open_store_is_refused_not_emptied(tmp_path, hs2_docs):
    path = tmp_path / "store"
    store = PhraseDocumentStore(path=str(path), progress_bar=False)
    store.write_documents(hs2_docs)
    (path / "store.sqlite3").rename(tmp_path / "moved.sqlite3")
    with pytest.raises(IndexLoadError, match="store.sqlite3"):
        store.write_documents([Document(id="x", content="A new document.")])
    assert not (path / "store.sqlite3").exists()
    (tmp_path / "moved.sqlite3").rename(path / "store.sqlite3")
    store.write_documents([Document(id="x", content="A new document.")])
    assert store.count_documents() == 7
