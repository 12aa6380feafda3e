"""Store directories of earlier versions convert to the store database on open, old files untouched."""

from __future__ import annotations

import json

import pytest

from dphr_haystack.documents.database import DATABASE_FILE, StoreDatabase
from dphr_haystack.documents.legacy import convert_legacy, legacy_kind
from dphr_haystack.errors import IndexLoadError


def _hs1_directory(path, with_bytes: bool = True):
    """A Haystack 1.x journal directory: writes, an overwrite, a meta update, a delete, a tail never committed."""
    path.mkdir()
    lines = [
        {"id": "a", "content": "Paris", "content_type": "text", "meta": {"x": 1}, "score": None},
        {"id": "b", "content": "Rome", "content_type": "text", "meta": {}},
        {"id": "c", "content": "Oslo", "content_type": "text", "meta": {}},
        {"dphr_op": "meta", "id": "b", "meta": {"y": 2}},
        {"dphr_op": "delete", "ids": ["c"]},
        {"id": "a", "content": "Paris!", "content_type": "text", "meta": {"x": 3}},
    ]
    committed = "".join(json.dumps(line) + "\n" for line in lines).encode()
    (path / "documents-0.jsonl").write_bytes(committed + b'{"id": "half a docu')
    (path / "labels-0.jsonl").write_text(json.dumps({"id": "l1", "query": "q"}) + "\n")
    manifest = {
        "format": "dphr-phrase-document-store",
        "format_version": 1,
        "config": {"index": "document", "faiss_factory": "Flat"},
        "documents": {"document": "documents-0.jsonl"},
        "labels": {"label": "labels-0.jsonl"},
        "phrases": {},
    }
    if with_bytes:
        manifest["bytes"] = {"documents-0.jsonl": len(committed)}
    (path / "phrase_store.json").write_text(json.dumps(manifest))
    return {p.name: p.read_bytes() for p in path.iterdir()}


def test_a_haystack1_directory_converts_with_every_committed_write(tmp_path):
    before = _hs1_directory(tmp_path / "s")
    assert legacy_kind(tmp_path / "s") == "haystack1"
    assert convert_legacy(tmp_path / "s")
    db = StoreDatabase(tmp_path / "s", create=False)
    docs = {d["id"]: d for d in db.items("document")}
    assert set(docs) == {"a", "b"}
    assert docs["a"]["content"] == "Paris!" and docs["a"]["meta"] == {"x": 3}
    assert docs["b"]["meta"] == {"y": 2}
    assert [label["id"] for label in db.items("label", table="labels")] == ["l1"]
    assert db.config == {"haystack1": {"index": "document", "faiss_factory": "Flat"}}
    assert db.notes() == {"converted_from": "haystack1"}
    after = {p.name: p.read_bytes() for p in (tmp_path / "s").iterdir() if p.name != DATABASE_FILE}
    assert {k: v for k, v in after.items() if not k.startswith(DATABASE_FILE)} == before  # nothing changed
    assert legacy_kind(tmp_path / "s") is None and not convert_legacy(tmp_path / "s")


def test_a_saved_snapshot_without_byte_table_keeps_every_line(tmp_path):
    """A directory written by save() has no byte table: every line of its journals is committed."""
    path = tmp_path / "s"
    path.mkdir()
    (path / "documents-0.jsonl").write_text(
        "".join(json.dumps({"id": f"d{i}", "content": f"t{i}", "meta": {}}) + "\n" for i in range(20))
    )
    manifest = {"format": "dphr-phrase-document-store", "format_version": 1, "config": {}}
    manifest |= {"documents": {"document": "documents-0.jsonl"}, "labels": {}, "phrases": {}}
    (path / "phrase_store.json").write_text(json.dumps(manifest))
    convert_legacy(path)
    assert StoreDatabase(path).count("document") == 20


def test_a_damaged_journal_is_refused_and_nothing_is_written(tmp_path):
    path = tmp_path / "s"
    _hs1_directory(path, with_bytes=False)  # the half line at the end is now "committed": damaged
    with pytest.raises(IndexLoadError, match="line 7"):
        convert_legacy(path)
    assert not (path / DATABASE_FILE).exists()
    assert sorted(p.name for p in path.iterdir()) == ["documents-0.jsonl", "labels-0.jsonl", "phrase_store.json"]


def test_a_haystack2_file_cut_mid_line_is_refused(tmp_path):
    path = tmp_path / "s"
    path.mkdir()
    line = json.dumps({"id": "a", "content": "x", "meta": {}})
    (path / "documents.jsonl").write_text(line + "\n" + line[:10])
    with pytest.raises(IndexLoadError, match="mid-line"):
        convert_legacy(path)
    assert not (path / DATABASE_FILE).exists()
    (path / "documents.jsonl").write_text(line + "\n")
    assert convert_legacy(path)
    assert StoreDatabase(path).items("document") == [{"id": "a", "content": "x", "meta": {}}]
