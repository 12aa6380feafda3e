"""The Haystack 2 store's directory is one store database (the format the Haystack 1.x store keeps): earlier
directories convert untouched, damage is refused, long-lived stores follow a replaced store, writes commit only what
they changed, phrases are encoded outside the writer lock, and a 1.x store serves the same directory."""

from __future__ import annotations

import gc
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from haystack import Document

from dphr_haystack.documents.passages import PassageRule
from dphr_haystack.encode.add import add_passages
from dphr_haystack.errors import IndexLoadError, InvalidParameterError, ReadOnlyStoreError
from dphr_haystack.haystack2 import PhraseDocumentStore, PhraseRetriever
from dphr_haystack.index.phrase_index import PhraseIndex

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
HS1_PYTHON = REPO / ".venv" / "bin" / "python"
QUERIES = ["What is the capital of France?", "who wrote hamlet", "Which river flows into the Mediterranean?"]
DATABASE = "store.sqlite3"


def _legacy_directory(path: Path, model, docs: list[Document]) -> dict[str, bytes]:
    """A store directory as earlier versions wrote it (``documents.jsonl`` + ``phrases/``); returns its files."""
    path.mkdir(parents=True)
    text = "".join(json.dumps(doc.to_dict(flatten=False)) + "\n" for doc in docs)
    (path / "documents.jsonl").write_text(text, encoding="utf-8")
    rule = PassageRule()
    index = PhraseIndex.create(model, path=path / "phrases", filter_threshold=model.config.filter_threshold)
    records = [rule.passage(doc.id, doc.content, doc.meta) for doc in docs]
    add_passages(index, model, records, batch_size=4, duplicates="overwrite", progress=False)
    return _files(path)


def _files(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` but the store database and lock files, by relative name."""
    return {
        str(file.relative_to(path)): file.read_bytes()
        for file in sorted(path.rglob("*"))
        if file.is_file() and not file.name.startswith(DATABASE) and file.name != ".dphr.lock"
    }


def _answers(store: PhraseDocumentStore, model) -> list:
    results = store.search_phrases(model, QUERIES, unit="phrase", top_k=5)
    return [[(hit.text, round(hit.score, 4), doc.id) for hit, doc in hits] for hits in results]


def _documents(store: PhraseDocumentStore) -> dict[str, tuple]:
    return {doc.id: (doc.content, doc.meta) for doc in store.filter_documents()}


@pytest.mark.parametrize("damage", ["emptied", "cut at a line end"])
def test_a_legacy_documents_file_emptied_or_cut_beside_phrases_is_refused(
    tmp_path, tiny_model, hs2_docs, one_torch_thread, damage
):
    path = tmp_path / "store"
    _legacy_directory(path, tiny_model, hs2_docs)
    lines = (path / "documents.jsonl").read_bytes().splitlines(keepends=True)
    (path / "documents.jsonl").write_bytes(b"" if damage == "emptied" else b"".join(lines[:3]))
    before = _files(path)
    with pytest.raises(IndexLoadError, match="documents.jsonl"):
        PhraseDocumentStore(path=str(path), progress_bar=False)  # not read as fewer documents
    assert _files(path) == before and not (path / DATABASE).exists()


def test_a_legacy_directory_converts_answers_the_same_and_keeps_its_files(
    tmp_path, tiny_model, hs2_docs, one_torch_thread
):
    path = tmp_path / "store"
    before = _legacy_directory(path, tiny_model, hs2_docs)
    reference = PhraseDocumentStore(progress_bar=False)
    reference.write_documents(hs2_docs)
    reference.update_phrases(tiny_model)
    store = PhraseDocumentStore(path=str(path), progress_bar=False)
    assert (path / DATABASE).is_file() and _files(path) == before  # converted, nothing of it changed
    assert _documents(store) == _documents(reference) and store.pending_documents() == []
    assert _answers(store, tiny_model) == _answers(reference, tiny_model)
    store.write_documents([Document(id="new", content="Quokkas live on Rottnest Island.")])
    store.delete_documents(["p5"])
    store.close()
    reopened = PhraseDocumentStore(path=str(path), progress_bar=False)
    assert set(_documents(reopened)) == {"p0", "p1", "p2", "p3", "p4", "new"}
    after = _files(path)  # the phrase index lives on in place; the documents file is never written again
    assert after["documents.jsonl"] == before["documents.jsonl"] and before.keys() <= after.keys()


@pytest.mark.parametrize("replaced", ["emptied and rewritten", "directory removed and made again"])
def test_a_long_lived_store_serves_exactly_what_replaced_its_store(
    tmp_path, tiny_model, hs2_docs, one_torch_thread, replaced
):
    path = tmp_path / "store"
    old = PhraseDocumentStore(path=str(path), progress_bar=False)
    old.write_documents(hs2_docs[:2])  # fewer than what replaces them: the new phrase index "extends" the old
    old.update_phrases(tiny_model)
    assert old.count_documents() == 2 and old.phrase_count() == 2
    old.close()  # another object may open the path now; this one stays in use
    if replaced == "directory removed and made again":
        shutil.rmtree(path)
    other = PhraseDocumentStore(path=str(path), progress_bar=False)
    other.delete_all_documents()
    new = [
        Document(id=f"p{i}", content=f"Quokka {i} lives on Rottnest Island.", meta={"title": "Q"}) for i in range(5)
    ]
    other.write_documents(new)
    other.update_phrases(tiny_model)
    other.close()
    assert _documents(old) == {doc.id: (doc.content, doc.meta) for doc in new}
    assert old.pending_documents() == [] and old.phrase_count() == 5
    hits = old.search_phrases(tiny_model, ["Paris Hamlet Quokka river"], unit="passage", top_k=10)[0]
    assert sorted(doc.id for _, doc in hits) == ["p0", "p1", "p2", "p3", "p4"]
    assert all(doc.content.startswith("Quokka") for _, doc in hits)
    old.write_documents([Document(id="later", content="A later write.")])  # its writes start from the new store
    assert set(_documents(PhraseDocumentStore(path=str(path), progress_bar=False))) == {
        "p0",
        "p1",
        "p2",
        "p3",
        "p4",
        "later",
    }


def test_update_phrases_lets_other_writers_in_while_it_encodes(
    tmp_path, tiny_model, hs2_docs, one_torch_thread, monkeypatch
):
    path = tmp_path / "store"
    encoder = PhraseDocumentStore(path=str(path), progress_bar=False)
    encoder.write_documents(hs2_docs)
    encoder.close()
    writer = PhraseDocumentStore(path=str(path), progress_bar=False, lock_timeout=2)
    tokenize = type(tiny_model).tokenize_passages
    during = []

    def tokenize_while_another_writes(self, *args, **kwargs):
        if not during:  # while the first chunk (p0, p1) is encoded
            writer.write_documents([Document(id="meanwhile", content="Written while phrases were encoded.")])
            writer.delete_documents(["p0"])
            during.append(writer.count_documents())
        return tokenize(self, *args, **kwargs)

    monkeypatch.setattr(type(tiny_model), "tokenize_passages", tokenize_while_another_writes)
    assert encoder.update_phrases(tiny_model, chunk_size=2) == 5  # p0 was deleted while encoded: not committed
    assert during == [6]
    assert [doc.id for doc in encoder.pending_documents()] == ["meanwhile"] and encoder.phrase_count() == 5
    assert "p0" not in encoder.phrase_index.live_passage_ids()


def test_lock_timeout_is_a_setting_and_filters_none_is_refused(tmp_path, hs2_docs):
    store = PhraseDocumentStore(path=str(tmp_path / "store"), lock_timeout=5, progress_bar=False)
    assert store.to_dict()["init_parameters"]["lock_timeout"] == 5
    with pytest.raises(InvalidParameterError, match="lock_timeout"):
        PhraseDocumentStore(lock_timeout=-1)
    store.write_documents(hs2_docs)
    with pytest.raises(InvalidParameterError, match="delete_all_documents"):
        store.delete_by_filter(None)
    with pytest.raises(InvalidParameterError, match="filters"):
        store.update_by_filter(None, {"rating": 5})
    assert store.count_documents() == 6


def test_a_flipped_byte_in_a_stored_document_is_refused_never_served(tmp_path, hs2_docs):
    path = tmp_path / "store"
    store = PhraseDocumentStore(path=str(path), progress_bar=False)
    store.write_documents(hs2_docs)
    store.close()
    del store
    gc.collect()
    raw = sqlite3.connect(path / DATABASE)
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw.close()
    needle = hs2_docs[1].content.encode()
    data = (path / DATABASE).read_bytes()
    assert data.count(needle) == 1
    (path / DATABASE).write_bytes(data.replace(needle, needle[:5] + bytes([needle[5] ^ 1]) + needle[6:]))
    with pytest.raises(IndexLoadError, match="damaged"):
        PhraseDocumentStore(path=str(path), progress_bar=False)


def test_writing_in_batches_commits_each_batch_only(tmp_path):
    """Ingestion stays linear: a write commits its own documents, never the ones stored before."""
    path = tmp_path / "store"
    store = PhraseDocumentStore(path=str(path), progress_bar=False)
    for batch in range(5):
        docs = [Document(id=f"b{batch}-{i}", content=f"Document {i} of batch {batch}.") for i in range(10)]
        store.write_documents(docs)
        raw = sqlite3.connect(path / DATABASE)
        logged = raw.execute("SELECT count(*) FROM changes WHERE kind = 'document'").fetchone()[0]
        raw.close()
        assert logged == 10 * (batch + 1)
    assert store.count_documents() == 50


def test_a_read_only_directory_opens_answers_and_refuses_writes(tmp_path, hs2_docs, monkeypatch):
    from dphr_haystack.documents import database

    path = tmp_path / "store"
    PhraseDocumentStore(path=str(path), progress_bar=False).write_documents(hs2_docs)
    gc.collect()
    monkeypatch.setattr(database.os, "access", lambda file, mode: False)  # as on a read-only mount
    store = PhraseDocumentStore(path=str(path), progress_bar=False)
    assert store.count_documents() == 6 and len(store.filter_documents()) == 6
    with pytest.raises(ReadOnlyStoreError):
        store.write_documents([Document(id="x", content="No.")])
    with pytest.raises(ReadOnlyStoreError):
        store.delete_documents(["p0"])
    assert store.count_documents() == 6


# ----------------------------------------------------------------- one directory format for both layers
def _has_farm_haystack() -> bool:
    if not HS1_PYTHON.is_file():
        return False
    probe = "import importlib.metadata as m; m.distribution('farm-haystack')"
    return subprocess.run([str(HS1_PYTHON), "-c", probe], capture_output=True, timeout=120).returncode == 0


def _run_hs1(tmp_path: Path, model_dir: Path, store_dir: Path, docs: list[Document] | None = None) -> dict:
    queries_file = tmp_path / "queries.json"
    queries_file.write_text(json.dumps(QUERIES), encoding="utf-8")
    args = [str(HS1_PYTHON), str(Path(__file__).with_name("hs1_open.py")), str(model_dir), str(store_dir)]
    args.append(str(queries_file))
    if docs is not None:
        docs_file = tmp_path / "docs.json"
        docs_file.write_text(json.dumps([{"id": d.id, "content": d.content, "meta": d.meta} for d in docs]))
        args.append(str(docs_file))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _hs2_view(store: PhraseDocumentStore, model_dir: Path) -> dict:
    retriever = PhraseRetriever(document_store=store, model=str(model_dir), top_k=5, unit="phrase", device="cpu")
    answers = []
    for query in QUERIES:
        found = retriever.run(query=query)["answers"]
        answers.append([{"text": a.data, "document_id": a.document.id, "score": a.score} for a in found])
    documents = sorted(({"id": d.id, "content": d.content, "meta": d.meta} for d in store.filter_documents()), key=str)
    return {"documents": sorted(documents, key=lambda d: d["id"]), "answers": answers}


def _assert_same_view(one: dict, two: dict) -> None:
    assert one["documents"] == two["documents"]
    for first, second in zip(one["answers"], two["answers"], strict=True):
        assert [(a["text"], a["document_id"]) for a in first] == [(a["text"], a["document_id"]) for a in second]
        assert [a["score"] for a in first] == pytest.approx([a["score"] for a in second], rel=1e-5, abs=1e-6)


@pytest.mark.skipif(not _has_farm_haystack(), reason="needs the Haystack 1.x environment .venv with farm-haystack")
def test_one_directory_format_serves_both_layers(tmp_path, tiny_model_dir, hs2_docs, one_torch_thread):
    from dphr_haystack.model.cache import load_phrase_model

    model = load_phrase_model(str(tiny_model_dir), "cpu")
    made_by_hs2 = tmp_path / "made-by-hs2"
    store = PhraseDocumentStore(path=str(made_by_hs2), progress_bar=False)
    store.write_documents(hs2_docs)
    store.update_phrases(model)
    expected = _hs2_view(store, tiny_model_dir)
    store.close()
    _assert_same_view(_run_hs1(tmp_path, tiny_model_dir, made_by_hs2), expected)

    made_by_hs1 = tmp_path / "made-by-hs1"
    seen_by_hs1 = _run_hs1(tmp_path, tiny_model_dir, made_by_hs1, hs2_docs)
    opened = PhraseDocumentStore(path=str(made_by_hs1), progress_bar=False)
    assert opened.pending_documents() == [] and opened.phrase_count() == 6
    _assert_same_view(seen_by_hs1, _hs2_view(opened, tiny_model_dir))
    _assert_same_view(seen_by_hs1, expected)
