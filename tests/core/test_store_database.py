"""The store directory's database (both Haystack layers): commits, catch-up, damage, locks, read-only."""

from __future__ import annotations

import os
import sqlite3

import pytest

from dphr_haystack.documents import database as db_module
from dphr_haystack.documents.database import DATABASE_FILE, StoreDatabase
from dphr_haystack.errors import DirectoryLockedError, IndexLoadError, ReadOnlyStoreError


def _doc(i: int, text: str = "text") -> dict:
    return {"id": f"d{i}", "content": f"{text} {i}", "meta": {"n": i}}


def test_writes_commit_and_reopen(tmp_path):
    db = StoreDatabase(tmp_path / "s", config={"index": "document"})
    with db.transaction():
        db.put("document", [_doc(1), _doc(2)])
        db.put("other", [_doc(3)])
    with db.transaction():
        db.delete("document", ["d1"])
    again = StoreDatabase(tmp_path / "s", create=False)
    assert again.items("document") == [_doc(2)]
    assert again.items("other") == [_doc(3)]
    assert again.config == {"index": "document"}
    assert again.collections() == ["document", "other"]


def test_a_failed_transaction_commits_nothing(tmp_path):
    db = StoreDatabase(tmp_path)
    with db.transaction():
        db.put("document", [_doc(1)])
    with pytest.raises(KeyError), db.transaction():
        db.put("document", [_doc(2)])
        db.delete("document", ["d1"])
        raise KeyError("boom")
    assert StoreDatabase(tmp_path).items("document") == [_doc(1)]


def test_a_reader_catches_up_with_exactly_what_changed(tmp_path):
    writer, reader = StoreDatabase(tmp_path), StoreDatabase(tmp_path)
    assert not reader.changed()
    with writer.transaction():
        writer.put("document", [_doc(1), _doc(2)])
    assert reader.changed()
    changes = reader.changes()
    assert changes.documents == {"document": {"d1": _doc(1), "d2": _doc(2)}} and not changes.everything
    assert not reader.changed() and not reader.changes()
    with writer.transaction():
        writer.delete("document", ["d1"])
        writer.put("document", [_doc(2, "new")])
    assert reader.changes().documents == {"document": {"d1": None, "d2": _doc(2, "new")}}
    with writer.transaction():
        writer.drop("document")
        writer.put("document", [_doc(7)])
    changes = reader.changes()
    assert changes.collections == {"document"} and "document" not in changes.documents
    assert not writer.changed()  # a writer's own commits are not changes to it


def test_a_new_database_on_the_same_path_is_a_new_store(tmp_path):
    """Name reuse (ABA): another process deletes the store and makes a new one; a long-lived reader reads it all."""
    reader = StoreDatabase(tmp_path)
    with reader.transaction():
        reader.put("document", [_doc(1)])
    for name in os.listdir(tmp_path):
        os.unlink(tmp_path / name)
    fresh = StoreDatabase(tmp_path)
    with fresh.transaction():
        fresh.put("document", [_doc(5)])
    reader.close()
    reader = StoreDatabase.__new__(StoreDatabase)  # an object that remembered the old store's id and cursor
    reader.__init__(tmp_path)
    reader.store_id, reader.seq = "old", 1
    assert reader.changed() and reader.changes().everything


def test_a_damaged_row_is_refused_not_served(tmp_path):
    db = StoreDatabase(tmp_path)
    with db.transaction():
        db.put("document", [_doc(1)])
    raw = sqlite3.connect(tmp_path / DATABASE_FILE)
    body = raw.execute("SELECT body FROM documents").fetchone()[0]
    raw.execute("UPDATE documents SET body = ?", (body.replace("text 1", "texT 1"),))
    raw.commit()
    raw.close()
    with pytest.raises(IndexLoadError, match="damaged"):
        StoreDatabase(tmp_path).items("document")


@pytest.mark.parametrize("content", [b"", b"my own notes\n", b"SQLite format 3\x00" + b"\x00" * 100])
def test_a_file_that_is_not_a_store_database_is_refused_untouched(tmp_path, content):
    (tmp_path / DATABASE_FILE).write_bytes(content)
    if content == b"":
        db = StoreDatabase(tmp_path)  # an empty file is an empty SQLite database: it becomes the store
        assert db.items("document") == []
        return
    with pytest.raises(IndexLoadError):
        StoreDatabase(tmp_path)
    assert (tmp_path / DATABASE_FILE).read_bytes() == content


def test_another_programs_database_is_refused(tmp_path):
    raw = sqlite3.connect(tmp_path / DATABASE_FILE)
    raw.execute("CREATE TABLE accounts (name TEXT)")
    raw.commit()
    raw.close()
    with pytest.raises(IndexLoadError, match="another program"):
        StoreDatabase(tmp_path)


def test_a_held_write_lock_times_out_as_directory_locked(tmp_path):
    StoreDatabase(tmp_path)
    holder = sqlite3.connect(tmp_path / DATABASE_FILE, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    waiting = StoreDatabase(tmp_path, lock_timeout=0.2)
    with pytest.raises(DirectoryLockedError), waiting.transaction():
        waiting.put("document", [_doc(1)])
    holder.execute("ROLLBACK")
    with waiting.transaction():
        waiting.put("document", [_doc(1)])


def test_read_only_directory_reads_and_refuses_writes(tmp_path, monkeypatch):
    db = StoreDatabase(tmp_path / "s")
    with db.transaction():
        db.put("document", [_doc(1)])
    db.close()
    monkeypatch.setattr(db_module.os, "access", lambda path, mode: False)  # as on a read-only mount
    ro = StoreDatabase(tmp_path / "s")
    assert ro.read_only and ro.items("document") == [_doc(1)]
    with pytest.raises(ReadOnlyStoreError), ro.transaction():
        ro.put("document", [_doc(2)])
    with pytest.raises(ReadOnlyStoreError, match="read-only"):
        StoreDatabase(tmp_path / "new")


def test_new_folders_never_reuse_a_name(tmp_path):
    db = StoreDatabase(tmp_path)
    (tmp_path / "phrases-0").mkdir()  # a user's folder
    first = db.new_folder()
    assert first.name == "phrases-1" and "phrases-1" in db.created() and "phrases-0" not in db.created()
    assert db.new_folder().name == "phrases-2"  # claimed, even before it exists on disk


def test_a_pruned_log_makes_a_reader_read_everything(tmp_path, monkeypatch):
    monkeypatch.setattr(db_module, "KEEP_CHANGES", 3)
    writer, reader = StoreDatabase(tmp_path), StoreDatabase(tmp_path)
    with writer.transaction():
        writer.put("document", [_doc(i) for i in range(10)])
    writer.prune()
    assert reader.changes().everything
    with writer.transaction():
        writer.put("document", [_doc(11)])
    assert set(reader.changes().documents["document"]) == {"d11"}
