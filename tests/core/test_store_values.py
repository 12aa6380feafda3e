"""What a store refuses (non-finite embeddings, non-string meta keys), and an IVF index on a full disk."""

from __future__ import annotations

import errno
import math
import os
from pathlib import Path

import numpy as np
import pytest

from dphr_haystack import PhraseIndex
from dphr_haystack.documents.validation import check_embedding, check_meta, check_storable
from dphr_haystack.errors import IndexWriteError, InvalidDocumentError
from dphr_haystack.index import structures
from dphr_haystack.index.shards import TOKEN_DTYPE, PhraseShard
from tests.reliability._disk_full import assert_same_state, index_state, small_tmpfs

pytestmark = pytest.mark.unit


# ----------------------------------------------------------------- embeddings and meta keys
@pytest.mark.parametrize(
    "embedding",
    [[0.1, math.nan], [math.inf, 0.0], np.array([0.0, -np.inf], dtype=np.float32), np.array([np.nan])],
    ids=["nan-list", "inf-list", "-inf-array", "nan-array"],
)
def test_non_finite_embedding_is_refused(embedding):
    with pytest.raises(InvalidDocumentError, match=r"document 'd': embedding is (nan|inf|-inf) at position"):
        check_storable("d", "text", {}, embedding=embedding)
    with pytest.raises(InvalidDocumentError):
        check_embedding("d", embedding)


@pytest.mark.parametrize("embedding", [None, [], [0.0, 1.5, -2.0], np.ones(4, dtype=np.float16)])
def test_finite_embedding_passes(embedding):
    check_storable("d", "text", {"a": 1}, embedding=embedding)


@pytest.mark.parametrize("embedding", [["a", "b"], [[1.0, 2.0]], [1.0, None]])
def test_embedding_that_is_no_vector_of_numbers_is_refused(embedding):
    with pytest.raises(InvalidDocumentError, match="embedding"):
        check_storable("d", "text", {}, embedding=embedding)


def test_sparse_embedding_values_are_checked():
    class Sparse:
        indices = [0, 3]
        values = [0.5, math.nan]

    with pytest.raises(InvalidDocumentError, match="sparse embedding values is nan"):
        check_storable("d", "text", {}, sparse_embedding=Sparse())
    with pytest.raises(InvalidDocumentError, match="sparse embedding"):
        check_storable("d", "text", {}, sparse_embedding={"indices": [1], "values": [math.inf]})
    check_storable("d", "text", {}, sparse_embedding={"indices": [1], "values": [0.5]})


@pytest.mark.parametrize(
    ("meta", "key"),
    [({2: "c"}, "key 2 "), ({"a": {None: 1}}, "key None "), ({"a": [{(1, 2): 1}]}, "key (1, 2) "), ({1.5: 0}, "1.5")],
)
def test_non_string_meta_key_is_refused_naming_it(meta, key):
    with pytest.raises(InvalidDocumentError, match="not a string") as caught:
        check_storable("d", "text", meta)
    assert key in str(caught.value)
    with pytest.raises(InvalidDocumentError, match="not a string"):
        check_meta("d", meta)


def test_string_meta_keys_pass():
    check_storable("d", "text", {"2": "c", "nested": {"x": [1, {"y": None}]}})


# ----------------------------------------------------------------- an IVF index on a full disk
def _shard(passages: int = 40, tokens: int = 10, dim: int = 16, seed: int = 0) -> PhraseShard:
    rng = np.random.default_rng(seed)
    count = passages * tokens
    rows = np.zeros(count, dtype=TOKEN_DTYPE)
    rows["passage"] = np.repeat(np.arange(passages), tokens)
    rows["position"] = np.tile(np.arange(tokens), passages)
    rows["char_start"] = rows["position"] * 2
    rows["char_end"] = rows["position"] * 2 + 1
    records = [
        {"id": f"s{i}", "document_id": f"d{i}", "title": f"T{i}", "text": " ".join(["w"] * tokens), "meta": {}}
        for i in range(passages)
    ]
    for record in records:
        record["num_context_tokens"] = tokens
    vectors = rng.standard_normal((count, dim)).astype(np.float16)
    return PhraseShard(vectors, rows, records)


def _ivf_index(path: Path) -> PhraseIndex:
    index = PhraseIndex.create_for_encoder(16, "random", {}, path, faiss_factory="IVF4,Flat")
    index.add_shard(_shard())
    assert index.faiss_factory == "IVF4,Flat" and index.faiss_index.ntotal == 400
    return index


class _FullDiskHandle:
    """A file handle whose writes fail with ENOSPC after ``room`` bytes."""

    def __init__(self, handle, room: int) -> None:
        self._handle, self._room = handle, room

    def write(self, data) -> int:
        size = len(memoryview(data).cast("B"))
        if size > self._room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self._room -= size
        return self._handle.write(data)

    def __getattr__(self, name: str):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._handle.close()


@pytest.mark.parametrize("room", [0, 5000])
def test_ivf_delete_on_a_full_disk_raises_index_write_error_and_rolls_back(tmp_path, monkeypatch, room):
    index = _ivf_index(tmp_path / "idx")
    before = index_state(index)
    opener = structures.open_no_follow
    monkeypatch.setattr(structures, "open_no_follow", lambda *a, **k: _FullDiskHandle(opener(*a, **k), room))
    with pytest.raises(IndexWriteError, match="disk is full") as caught:
        index.delete_passages(["s1", "s2"])
    assert caught.value.errno == errno.ENOSPC
    assert_same_state(index_state(index), before, "same object")
    assert_same_state(index_state(PhraseIndex.load(tmp_path / "idx")), before, "reopened")
    assert not [f for f in os.listdir(tmp_path / "idx") if ".tmp" in f], "a temporary FAISS file was left"
    monkeypatch.setattr(structures, "open_no_follow", opener)  # space again: the next delete lands
    assert index.delete_passages(["s1", "s2"]) == 2
    assert PhraseIndex.load(tmp_path / "idx").num_live_passages == 38


def _fill(mount: Path, leave: int) -> Path:
    filler = mount / "filler"
    info = os.statvfs(mount)
    with filler.open("wb") as handle:
        try:
            handle.write(b"\0" * max(info.f_bavail * info.f_frsize - leave, 0))
            handle.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


@pytest.mark.parametrize("leave", [0, 8192, 20480, 36864])
def test_ivf_delete_on_a_real_full_file_system(tmp_path, leave):
    """FAISS's own C writer raised a RuntimeError here (or lost the error at fclose); now IndexWriteError, ENOSPC."""
    with small_tmpfs(tmp_path, "2m") as mount:
        index = _ivf_index(mount / "idx")
        with index.writing():  # the writer lock file exists before the disk fills
            pass
        before = index_state(index)
        filler = _fill(mount, leave)
        with pytest.raises(IndexWriteError, match="disk is full") as caught:
            index.delete_passages(["s1", "s2"])
        assert caught.value.errno == errno.ENOSPC
        assert_same_state(index_state(index), before, "same object")
        filler.unlink()
        assert_same_state(index_state(PhraseIndex.load(mount / "idx")), before, "reopened")
        assert index.delete_passages(["s1", "s2"]) == 2
        assert PhraseIndex.load(mount / "idx").num_live_passages == 38
