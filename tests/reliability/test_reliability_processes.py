"""Processes sharing one index or one store directory: one writer at a time (an inter-process lock naming its
holder), writers that catch up with each other, readers that see committed writes and never write."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dphr_haystack import DirectoryLockedError, PhraseIndex
from dphr_haystack.encode.add import add_passages
from tests.conftest import tiny_passages

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def _tree_digest(path: Path) -> dict[str, str]:
    """Every file under ``path`` (lock files aside) and the SHA-256 of its bytes."""
    return {
        str(f.relative_to(path)): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(path.rglob("*"))
        if f.is_file() and not f.name.endswith(".lock")
    }


def _spawn(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.reliability._workers", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _results(procs: list[subprocess.Popen], timeout: float = 600) -> list[dict]:
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{err[-3000:]}"
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


@pytest.fixture
def index_dir(tmp_path, tiny_model) -> Path:
    path = tmp_path / "idx"
    index = PhraseIndex.create(tiny_model, path=path)
    add_passages(index, tiny_model, tiny_passages()[:3], progress=False)
    return path


# ----------------------------------------------------------------- the lock
def test_a_second_writer_waits_then_fails_naming_the_holder(index_dir):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from dphr_haystack._util.lock import WriterLock\n"
            f"with WriterLock(Path({str(index_dir)!r})).hold():\n"
            "    print('held', flush=True); time.sleep(30)",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        index = PhraseIndex.load(index_dir, lock_timeout=0.3)
        started = time.monotonic()
        with pytest.raises(DirectoryLockedError, match=rf"pid {holder.pid} .*waited 0.3 s"):
            index.delete_passages(["p0"])
        assert 0.3 <= time.monotonic() - started < 5
        assert PhraseIndex.load(index_dir).passage_row("p0") is not None  # nothing was written
    finally:
        holder.kill()
        holder.wait()
    assert PhraseIndex.load(index_dir, lock_timeout=5).delete_passages(["p0"]) == 1  # a dead holder lets go


def test_a_writer_through_a_symbolic_link_takes_the_same_lock(index_dir, tmp_path):
    """A link to an index directory must not give its writers a lock of their own beside the link."""
    link = tmp_path / "linked-idx"
    link.symlink_to(index_dir, target_is_directory=True)
    via_link, via_path = PhraseIndex.load(link, lock_timeout=0.2), PhraseIndex.load(index_dir, lock_timeout=0.2)
    with via_link.writing():
        with pytest.raises(DirectoryLockedError):
            via_path.delete_passages(["p0"])
    assert via_path.delete_passages(["p0"]) == 1


def test_a_stale_writer_catches_up_before_it_writes(index_dir, tiny_model):
    first, second = PhraseIndex.load(index_dir), PhraseIndex.load(index_dir)
    add_passages(first, tiny_model, tiny_passages()[3:4], progress=False)
    add_passages(second, tiny_model, tiny_passages()[4:5], progress=False)  # would overwrite p3 without catching up
    second.delete_passages(["p0"])
    reloaded = PhraseIndex.load(index_dir)
    assert sorted(reloaded.live_passage_ids()) == ["p1", "p2", "p3", "p4"]
    assert reloaded.faiss_index.ntotal == len(reloaded)


def test_refresh_reads_appends_and_deletions_incrementally_and_a_reindex_whole(index_dir, tiny_model):
    writer, reader = PhraseIndex.load(index_dir), PhraseIndex.load(index_dir)
    assert reader.refresh() is False
    add_passages(writer, tiny_model, tiny_passages()[3:], progress=False)
    writer.delete_passages(["p1"])
    assert reader.refresh() is True
    assert sorted(reader.live_passage_ids()) == sorted(writer.live_passage_ids())
    assert reader.faiss_index.ntotal == len(writer)
    vectors = reader.vectors(slice(len(reader) - 2, len(reader)))
    scores, rows = reader.search_tokens(vectors, 1)
    np.testing.assert_allclose(scores[:, 0], (vectors @ reader.vectors().T).max(axis=1), rtol=1e-5)
    writer.reindex("HNSW8,Flat", progress=False)
    assert reader.refresh() is True
    assert reader.faiss_factory == "HNSW8,Flat" and reader.num_live_passages == writer.num_live_passages


def test_loading_never_writes(index_dir, tmp_path, tiny_model_dir):
    from haystack.schema import Document

    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

    before = _tree_digest(index_dir)
    PhraseIndex.load(index_dir)
    assert _tree_digest(index_dir) == before

    # A store whose phrase index holds phrases of a document the saved documents lack (a run killed between a
    # phrase commit and its save): loading leaves them out of results and writes nothing.
    store = PhraseDocumentStore(progress_bar=False)
    retriever = PhraseRetriever(document_store=store, model=str(tiny_model_dir), device="cpu")
    store.index_documents([Document(content=p["text"], id=p["id"]) for p in tiny_passages()[:3]], retriever)
    saved = tmp_path / "store"
    store.save(saved)
    loaded = PhraseDocumentStore.load(saved)
    loaded.write_documents([Document(content=tiny_passages()[3]["text"], id="p3")])
    loaded.update_embeddings(PhraseRetriever(document_store=loaded, model=str(tiny_model_dir), device="cpu"))
    before = _tree_digest(saved)  # phrases of p3 committed in place; p3 itself never saved
    again = PhraseDocumentStore.load(saved)
    assert _tree_digest(saved) == before
    assert again.get_phrase_document_count() == 3 and again.get_document_count() == 3


# ----------------------------------------------------------------- one store directory, many store objects
def test_store_objects_on_one_path_see_each_others_writes(tmp_path, tiny_model_dir):
    from haystack.schema import Document, Label

    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

    path = tmp_path / "shared"
    indexing = PhraseDocumentStore(path=str(path), progress_bar=False, embedding_dim=384)
    querying = PhraseDocumentStore(path=str(path), progress_bar=False)
    assert querying.embedding_dim == 384  # the directory's settings fill in what is not given
    retriever = PhraseRetriever(document_store=querying, model=str(tiny_model_dir), top_k=3, device="cpu")
    docs = [Document(content=p["text"], id=p["id"], meta={"title": p["title"]}) for p in tiny_passages()]
    indexing.write_documents(docs)
    assert querying.get_document_count() == len(docs)
    indexing.update_embeddings(PhraseRetriever(document_store=indexing, model=str(tiny_model_dir), device="cpu"))
    assert querying.get_phrase_document_count() == len(docs)
    assert retriever.retrieve("capital of France?", top_k=3)

    querying.delete_documents(filters={"title": [tiny_passages()[0]["title"]]})
    querying.update_document_meta("p5", {"reviewed": True})
    assert indexing.get_document_count() == len(docs) - 1 and indexing.get_phrase_document_count() == len(docs) - 1
    assert indexing.get_document_by_id("p5").meta["reviewed"] is True
    indexing.write_labels(
        [
            Label(
                query="q",
                document=docs[1],
                answer=None,
                is_correct_answer=True,
                is_correct_document=True,
                origin="gold-label",
            )
        ]
    )
    assert querying.get_label_count() == 1

    fresh = PhraseDocumentStore(path=str(path))
    assert fresh.get_document_count() == len(docs) - 1 and fresh.get_phrase_document_count() == len(docs) - 1
    assert fresh.get_label_count() == 1
    indexing.delete_documents()
    assert querying.get_document_count() == 0 and querying.get_phrase_document_count() == 0
    assert not [p for p in path.iterdir() if p.name.startswith("phrases-")]


def test_load_path_restores_the_saved_settings(tmp_path):
    from dphr_haystack.nodes import PhraseDocumentStore

    PhraseDocumentStore(embedding_dim=384, similarity="cosine", title_field="heading").save(tmp_path / "s")
    loaded = PhraseDocumentStore(load_path=str(tmp_path / "s"))
    assert (loaded.embedding_dim, loaded.similarity, loaded.title_field) == (384, "cosine", "heading")
    overridden = PhraseDocumentStore(load_path=str(tmp_path / "s"), embedding_dim=768)
    assert overridden.embedding_dim == 768


# ----------------------------------------------------------------- processes
def _run_index_processes(index_dir: Path, model_dir: Path, writers: int, readers: int, rounds: int) -> None:
    procs = [_spawn("index-writer", str(index_dir), str(model_dir), str(w), str(rounds), "2") for w in range(writers)]
    watchers = [_spawn("index-reader", str(index_dir), "8") for _ in range(readers)]
    written = _results(procs)
    assert all(r["reads"] > 0 for r in _results(watchers))
    index = PhraseIndex.load(index_dir)
    expected = {"p0", "p1", "p2"} | {i for r in written for i in r["added"]}
    expected -= {i for r in written for i in r["deleted"]}
    assert set(index.live_passage_ids()) == expected
    assert index.faiss_index.ntotal == len(index)
    rows = [index.first_token[index.passage_row(pid)] for pid in sorted(expected)]
    scores, _ = index.search_tokens(index.vectors(np.asarray(rows)), 1)
    assert np.all(scores[:, 0] >= (index.vectors(np.asarray(rows)) ** 2).sum(axis=1) - 1e-3)  # every one searchable


def _run_store_processes(store_dir: Path, model_dir: Path, writers: int, readers: int, rounds: int) -> None:
    from dphr_haystack.nodes import PhraseDocumentStore

    PhraseDocumentStore(path=str(store_dir))  # created once, before the race
    procs = [_spawn("store-writer", str(store_dir), str(model_dir), str(w), str(rounds), "2") for w in range(writers)]
    watchers = [_spawn("store-reader", str(store_dir), str(model_dir), "10") for _ in range(readers)]
    written = _results(procs)
    assert all(r["reads"] > 0 for r in _results(watchers))
    store = PhraseDocumentStore(path=str(store_dir))
    expected = {i for r in written for i in r["added"]} - {i for r in written for i in r["deleted"]}
    assert {d.id for d in store.get_all_documents()} == expected
    phrase_index = store.get_phrase_index()
    assert set(phrase_index.live_passage_ids()) == expected
    assert phrase_index.faiss_index.ntotal == len(phrase_index)


def test_processes_share_one_index(index_dir, model_dir):
    _run_index_processes(index_dir, model_dir, writers=2, readers=1, rounds=4)


def test_processes_share_one_store(tmp_path, model_dir):
    _run_store_processes(tmp_path / "store", model_dir, writers=2, readers=1, rounds=3)


@pytest.mark.slow
@pytest.mark.parametrize("run", range(3))
def test_many_processes_share_one_index_and_one_store(tmp_path, tiny_model, model_dir, run):
    index = PhraseIndex.create(tiny_model, path=tmp_path / "idx")
    add_passages(index, tiny_model, tiny_passages()[:3], progress=False)
    _run_index_processes(tmp_path / "idx", model_dir, writers=4, readers=2, rounds=12)
    _run_store_processes(tmp_path / "store", model_dir, writers=4, readers=2, rounds=8)


def _store_digest(path: Path) -> dict[str, str]:
    """A store directory's files (the database files aside) and the database's committed content."""
    import sqlite3

    digest = {k: v for k, v in _tree_digest(path).items() if not k.startswith("store.sqlite3")}
    raw = sqlite3.connect(f"file:{path / 'store.sqlite3'}?mode=ro", uri=True)
    try:
        digest["store.sqlite3"] = hashlib.sha256("\n".join(raw.iterdump()).encode()).hexdigest()
    finally:
        raw.close()
    return digest


KILLED_MID_WRITE = """
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
db.execute("INSERT INTO documents VALUES ('document', 'ghost', '{}', 0)")
db.execute("INSERT INTO changes (kind, collection, id) VALUES ('document', 'document', 'ghost')")
os.kill(os.getpid(), 9)
"""


def test_a_crashed_writers_leftovers_are_ignored_then_cleaned(tmp_path, tiny_model_dir, tiny_model):
    from haystack.schema import Document

    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

    path = tmp_path / "shared"
    store = PhraseDocumentStore(path=str(path), progress_bar=False)
    retriever = PhraseRetriever(document_store=store, model=str(tiny_model_dir), device="cpu")
    store.index_documents([Document(content=p["text"], id=p["id"]) for p in tiny_passages()[:3]], retriever)
    # A writer killed mid-write: a database transaction never committed, phrases of a document never committed.
    killed = subprocess.run([sys.executable, "-c", KILLED_MID_WRITE, str(path / "store.sqlite3")], cwd=ROOT)
    assert killed.returncode == -9
    orphan = PhraseIndex.load(store.get_phrase_index().path)
    add_passages(orphan, tiny_model, tiny_passages()[3:4], progress=False)

    before = _store_digest(path)
    reader = PhraseDocumentStore(path=str(path))
    assert reader.get_document_count() == 3 and reader.get_phrase_document_count() == 3  # the orphan is hidden
    assert reader.get_document_by_id("ghost") is None
    assert _store_digest(path) == before  # opening and reading wrote nothing
    reader.write_documents([Document(content=tiny_passages()[4]["text"], id="p4")])  # the next write cleans up
    assert PhraseIndex.load(store.get_phrase_index().path).passage_row("p3") is None
    fresh = PhraseDocumentStore(path=str(path))
    assert fresh.get_document_count() == 4 and fresh.get_document_by_id("ghost") is None
