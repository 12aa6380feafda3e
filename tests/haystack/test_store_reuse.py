"""Reusing what was built: a phrase index directory (``dphr index``) opened as a 1.x PhraseDocumentStore, a store
directory reopened without encoding again, and the embedding counts Haystack users expect."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from haystack.schema import Document

from dphr_haystack.documents.database import StoreDatabase
from dphr_haystack.encode.add import add_passages
from dphr_haystack.errors import IndexWriteError, InvalidParameterError
from dphr_haystack.index.phrase_index import PhraseIndex
from dphr_haystack.model.phrase_model import PhraseModel
from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever, load_pipeline
from tests.conftest import TINY_TOPICS, tiny_passages

pytestmark = pytest.mark.unit


def _digest(path: Path) -> dict[str, str]:
    """Every file under ``path`` (the writer lock aside) and the SHA-256 of its bytes."""
    return {
        str(f.relative_to(path)): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(path.rglob("*"))
        if f.is_file() and f.name != ".dphr.lock"
    }


@pytest.fixture
def built_index(tmp_path, tiny_model) -> Path:
    """What ``dphr index`` writes: the tiny passages (with a meta field) in a phrase index directory."""
    passages = [{**p, "meta": {"topic": topic}} for p, topic in zip(tiny_passages(), TINY_TOPICS, strict=True)]
    passages[1]["document_id"] = "europe"
    index = PhraseIndex.create(tiny_model, path=tmp_path / "idx")
    add_passages(index, tiny_model, passages, progress=False)
    return tmp_path / "idx"


class _Encodings:
    """Counts the phrase encodings (one per chunk of passages) of every PhraseModel."""

    def __init__(self, monkeypatch) -> None:
        self.calls = 0
        real = PhraseModel.iter_encoded_pieces

        def counted(model, *args, **kwargs):
            self.calls += 1
            return real(model, *args, **kwargs)

        monkeypatch.setattr(PhraseModel, "iter_encoded_pieces", counted)


def _answers(retriever, queries) -> list:
    return [[(d.id, round(d.score, 5), d.meta["best_phrase"]) for d in retriever.retrieve(q)] for q in queries]


QUERIES = ["What is the capital of France?", "Who wrote Hamlet?", "Which river flows into the sea?"]


def test_a_phrase_index_directory_opens_as_a_store(built_index, tiny_model_dir, haystack_docs, monkeypatch):
    before = _digest(built_index)
    encodings = _Encodings(monkeypatch)
    store = PhraseDocumentStore.from_index(built_index, progress_bar=False)
    retriever = PhraseRetriever(document_store=store, model=str(tiny_model_dir), top_k=3, device="cpu")
    assert store.get_document_count() == 6 and store.get_phrase_document_count() == 6
    paris = store.get_document_by_id("p0")
    assert paris.content == tiny_passages()[0]["text"]
    assert paris.meta == {"title": "Paris", "document_id": "p0", "topic": "city"}
    assert store.get_document_by_id("p1").meta["document_id"] == "europe"
    assert store.get_document_count(filters={"topic": ["nature"]}) == 2  # the passages' meta is filterable
    stats = store.update_embeddings(retriever)
    assert (stats.encoded, stats.skipped_existing) == (0, 6) and encodings.calls == 0  # nothing encoded again
    # The same answers as a store that encoded the same documents itself.
    own = PhraseDocumentStore(progress_bar=False)
    own_retriever = PhraseRetriever(document_store=own, model=str(tiny_model_dir), top_k=3, device="cpu")
    own.write_documents(
        [Document(content=p["text"], id=p["id"], meta=store.get_document_by_id(p["id"]).meta) for p in tiny_passages()]
    )
    own.update_embeddings(own_retriever)
    assert _answers(retriever, QUERIES) == _answers(own_retriever, QUERIES)
    # The index directory is never written: new phrases and deletions go to a private copy.
    store.write_documents([Document(content="Rome is the capital of Italy.", id="rome", meta={"title": "Rome"})])
    assert store.update_embeddings(retriever).encoded == 1
    store.delete_documents(ids=["p3"])
    assert store.get_phrase_document_count() == 6 and store.get_document_count() == 6
    assert "rome" in {d.id for d in retriever.retrieve("capital of Italy", top_k=6)}
    assert _digest(built_index) == before
    assert sorted(PhraseIndex.load(built_index).live_passage_ids()) == [f"p{i}" for i in range(6)]
    # save() keeps it all.
    store.save(built_index.parent / "saved")
    saved = PhraseDocumentStore.load(built_index.parent / "saved")
    assert saved.get_phrase_document_count() == 6 and saved.get_document_by_id("p3") is None
    assert "phrase_index" not in saved._config  # a snapshot needs no index directory to reload


def test_a_private_copy_without_room_is_refused_before_it_is_written(
    built_index, tiny_model_dir, tmp_path, monkeypatch
):
    import shutil as real_shutil
    from collections import namedtuple

    import dphr_haystack.index.private as private_module

    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again
    usage, real_usage = namedtuple("usage", "total used free"), real_shutil.disk_usage
    full = lambda path: usage(10**6, 10**6 - 1000, 1000)  # noqa: E731  a disk with 1 kB free
    monkeypatch.setattr(private_module.shutil, "disk_usage", full)
    before = _digest(built_index)
    store = PhraseDocumentStore.from_index(built_index, progress_bar=False)
    retriever = PhraseRetriever(document_store=store, model=str(tiny_model_dir), top_k=3, device="cpu")
    answers = _answers(retriever, QUERIES)
    store.write_documents([Document(content="Rome is the capital of Italy.", id="rome", meta={"title": "Rome"})])
    with pytest.raises(
        IndexWriteError,
        match=r"private copy of it, which needs about [\d.]+ KiB where .*temp has 1000 B free; set TMPDIR",
    ):
        store.update_embeddings(retriever)
    assert list(temp.iterdir()) == [] and _digest(built_index) == before  # nothing written anywhere
    assert _answers(retriever, QUERIES) == answers  # it still answers from the index
    monkeypatch.setattr(private_module.shutil, "disk_usage", real_usage)  # room again: the write goes on
    assert store.update_embeddings(retriever).encoded == 1
    assert store.get_phrase_document_count() == 7
    assert "rome" in {d.id for d in retriever.retrieve("capital of Italy", top_k=7)}
    assert len(list(temp.iterdir())) == 1 and _digest(built_index) == before


def test_a_phrase_index_in_a_yaml_pipeline(built_index, tiny_model_dir):
    pipeline = load_pipeline(
        "phrase_qa.yml",
        overrides={"DocumentStore": {"phrase_index": str(built_index)}, "Retriever": {"model": str(tiny_model_dir)}},
    )
    store = pipeline.get_document_store()
    assert store.get_document_count() == 6 and store.get_embedding_count() == 6
    answers = pipeline.run(query="Who wrote Hamlet?")["answers"]
    assert answers and all(a.document_ids[0] in {f"p{i}" for i in range(6)} for a in answers)


def test_one_source_of_documents_at_a_time(built_index, tmp_path):
    for other in ({"path": str(tmp_path / "s")}, {"load_path": str(tmp_path / "s")}):
        with pytest.raises(InvalidParameterError, match="one of path"):
            PhraseDocumentStore(phrase_index=str(built_index), **other)
    with pytest.raises(Exception, match="manifest.json"):
        PhraseDocumentStore.from_index(tmp_path / "missing")


def test_a_store_directory_reopens_without_encoding(tmp_path, tiny_model_dir, haystack_docs, monkeypatch):
    path = tmp_path / "store"
    store = PhraseDocumentStore(path=str(path), progress_bar=False)
    retriever = PhraseRetriever(document_store=store, model=str(tiny_model_dir), top_k=3, device="cpu")
    store.write_documents(haystack_docs)
    assert store.update_embeddings(retriever).encoded == 6
    expected = _answers(retriever, QUERIES)
    watcher = StoreDatabase(path)  # follows the directory's commits
    watcher.changes()
    encodings = _Encodings(monkeypatch)
    again = PhraseDocumentStore(path=str(path), progress_bar=False)
    retriever = PhraseRetriever(document_store=again, model=str(tiny_model_dir), top_k=3, device="cpu")
    again.write_documents(haystack_docs, duplicate_documents="skip")  # what `dphr eval --corpus` does
    stats = again.update_embeddings(retriever)
    assert (stats.encoded, stats.skipped_existing, encodings.calls) == (0, 6, 0)
    assert _answers(retriever, QUERIES) == expected
    assert not watcher.changed()  # skipped documents are not written again


class _DenseStub:
    """A dense retriever with fixed embeddings (what ``update_embeddings`` needs of one)."""

    def __init__(self, dim: int) -> None:
        self.dim, self.calls = dim, 0

    def embed_documents(self, documents):
        self.calls += len(documents)
        return np.ones((len(documents), self.dim), dtype=np.float32)


def test_embedding_count_counts_documents_with_phrases_or_dense_embeddings(tiny_retriever, haystack_docs, tmp_path):
    """Haystack's stores count documents with an embedding (not vectors); the phrase store's embedding is its
    phrases, and documents with a dense embedding count too."""
    store = tiny_retriever.document_store
    store.write_documents(haystack_docs[:4])
    assert store.get_embedding_count() == 0 and store.get_document_count(only_documents_without_embedding=True) == 4
    store.update_embeddings(tiny_retriever)
    assert store.get_embedding_count() == 4 and store.get_phrase_count() > 4
    assert store.get_embedding_count(filters={"topic": ["city"]}) == 2
    store.write_documents(haystack_docs[4:5])
    store.write_documents([Document(content="Dense only.", id="dense", embedding=np.ones(768, dtype=np.float32))])
    assert store.get_embedding_count() == 5 and store.get_document_count() == 6
    assert store.get_document_count(only_documents_without_embedding=True) == 1  # p4: neither phrases nor dense
    store.delete_documents(ids=["p0"])
    assert store.get_embedding_count() == 4
    # A shared directory: a dense update without update_existing commits only the documents it embedded.
    shared = PhraseDocumentStore(path=str(tmp_path / "shared"), progress_bar=False, embedding_dim=4)
    shared.write_documents(haystack_docs)
    dense = _DenseStub(4)
    shared.update_embeddings(dense, update_existing_embeddings=False)
    assert dense.calls == 6 and shared.get_embedding_count() == 6
    watcher = StoreDatabase(tmp_path / "shared")
    watcher.changes()
    shared.update_embeddings(dense, update_existing_embeddings=False)
    assert dense.calls == 6 and not watcher.changed()
    reopened = PhraseDocumentStore(path=str(tmp_path / "shared"), progress_bar=False)
    assert reopened.get_embedding_count() == 6
