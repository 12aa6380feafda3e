"""One long passage is encoded and written a batch of windows at a time: what a dump or an on-disk index holds while
encoding it does not grow with its length (it used to hold the whole passage's float32 vectors, several times over:
1.95 GiB peak RSS for a 1 MB passage), and the streamed result equals the in-memory one. The measured peak RSS is in
benchmarks/memory/long_passage.py."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import dphr_haystack.index.storage as index_storage_module
from dphr_haystack import PhraseIndex, PhraseModel, PhraseModelConfig, PhraseSearcher, PhraseShard, dump_phrases
from dphr_haystack.corpus import Passage
from dphr_haystack.encode.add import add_passages
from dphr_haystack.encode.dump import encode_shard, encode_shard_stream
from dphr_haystack.index.codec import VectorCodec
from dphr_haystack.index.shards import list_shards
from dphr_haystack.model.inputs import _room, count_rows, count_windows, passage_windows
from tests.conftest import TINY_TEXTS

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory) -> PhraseModel:
    """Hidden size 128 (a float32 vector is 512 bytes), one layer, windows of 64 subwords: cheap to run over tens of
    thousands of tokens, wide enough that a passage's vectors dwarf its token lists."""
    from dphr_haystack.testing import make_tiny_base

    base = make_tiny_base(tmp_path_factory.mktemp("wide"), [t for _, t in TINY_TEXTS], hidden_size=128, layers=1)
    return PhraseModel.from_base(base, PhraseModelConfig(max_passage_length=64, passage_stride=16))


def long_passage(words: int, pid: str = "long") -> Passage:
    vocabulary = " ".join(t for _, t in TINY_TEXTS).split()
    text = " ".join(vocabulary[i % len(vocabulary)] for i in range(words))
    return Passage(id=pid, text=text, title="Long")


def short_passages() -> list[Passage]:
    return [Passage(id=f"p{i}", text=text, title=title) for i, (title, text) in enumerate(TINY_TEXTS)]


@pytest.mark.parametrize("n", [0, 1, 5, 46, 47, 48, 100, 1000, 4097])
@pytest.mark.parametrize("title", ["", "Paris"])
def test_windows_own_the_context_tokens_in_order(tiny_model, n, title):
    """The streamed pieces rely on it: windows, in order, own consecutive runs of the context tokens."""
    tokenized = tiny_model.tokenize_passages(["paris " * n], [title])[0]
    owned = [w.owned_context for w in passage_windows(tiny_model.tokenizer, tokenized, tiny_model.config)]
    assert np.array_equal(np.concatenate(owned), np.arange(len(tokenized.context_ids)))
    assert _room(tokenized, tiny_model.config) > 0


@pytest.fixture(scope="module")
def step_model(wide_model) -> PhraseModel:
    """``wide_model`` with DensePhrases' step windows (every 20 context subwords, every window kept) and its
    ``[CLS] [SEP]`` prefix for untitled passages, as an imported DensePhrases checkpoint dumps."""
    import copy

    model = copy.deepcopy(wide_model)
    model.config = PhraseModelConfig(
        max_passage_length=64, passage_stride=20, passage_stride_mode="step", sep_after_empty_title=True
    )
    return model


@pytest.mark.parametrize("n", [0, 1, 5, 46, 47, 48, 100, 1000])
@pytest.mark.parametrize("title", ["", "Paris"])
@pytest.mark.parametrize("mode", ["overlap", "step"])
def test_windows_fill_consecutive_rows_in_both_stride_modes(tiny_model, n, title, mode):
    """What the streamed pieces rely on: the windows' rows, in window order, are consecutive from 0, in both stride
    modes and prefix rules; count_windows and count_rows say what the windows are without building them."""
    tiny_model.config = PhraseModelConfig(
        max_passage_length=48,
        passage_stride=8 if mode == "overlap" else 30,
        passage_stride_mode=mode,
        sep_after_empty_title=mode == "step",
    )
    tokenized = tiny_model.tokenize_passages(["paris " * n], [title])[0]
    windows = list(passage_windows(tiny_model.tokenizer, tokenized, tiny_model.config))
    rows = np.concatenate([w.rows for w in windows])
    assert np.array_equal(rows, np.arange(len(rows)))
    assert len(windows) == count_windows(tokenized, tiny_model.config)
    assert len(rows) == count_rows(tokenized, tiny_model.config)
    encoded = tiny_model.encode_passages(["paris " * n], [title])[0]
    assert len(encoded.vectors) == len(rows)
    cls_id, sep_id = tiny_model.tokenizer.cls_token_id, tiny_model.tokenizer.sep_token_id
    if not title:  # sep_after_empty_title (on here in step mode): an untitled window starts [CLS] [SEP]
        assert windows[0].context_start == (2 if mode == "step" else 1)
        assert windows[0].input_ids[: windows[0].context_start] == ([cls_id, sep_id] if mode == "step" else [cls_id])
    assert all(len(w.input_ids) <= 48 for w in windows)


def test_streamed_step_pieces_and_shard_equal_encode_passages(step_model):
    """A step-mode model (a DensePhrases import) streams exactly the rows encode_passages gives, and the streamed
    shard stores exactly what filtering those rows stores."""
    passages = [Passage(id="untitled", text=TINY_TEXTS[0][1], title=""), long_passage(2000), short_passages()[1]]
    texts, titles = [p.text for p in passages], [p.title for p in passages]
    reference = step_model.encode_passages(texts, titles, batch_size=4)
    tokenized = step_model.tokenize_passages(texts, titles)
    assert len(reference[1].vectors) > len(tokenized[1].context_ids)  # step windows overlap: more rows than tokens
    pieces: dict[int, list] = {}
    for p_idx, piece in step_model.iter_encoded_pieces(tokenized, batch_size=4):
        pieces.setdefault(p_idx, []).append(piece)
    assert len(pieces[1]) > 5
    for p_idx, enc in enumerate(reference):
        got = pieces[p_idx]
        assert np.array_equal(np.concatenate([p.positions for p in got]), np.arange(len(enc.vectors)))
        assert np.allclose(np.concatenate([p.vectors for p in got]), enc.vectors, atol=1e-5)
        assert np.array_equal(np.concatenate([p.char_offsets for p in got]), enc.char_offsets)
    codec = VectorCodec("float16")
    for threshold in (None, 0.0, 1e9):
        records, stream = encode_shard_stream(step_model, passages, codec, threshold, batch_size=4)
        tokens = np.concatenate([p.tokens for p in stream])
        for local, enc in enumerate(reference):
            keep = (
                np.arange(len(enc.vectors))
                if threshold is None
                else np.nonzero(enc.filter_logits.max(1) > threshold)[0]
            )
            keep = keep if keep.size else np.zeros(1, dtype=np.int64)
            mine = tokens[tokens["passage"] == local]
            assert np.array_equal(mine["position"], keep)
            assert np.array_equal(mine["char_start"], enc.char_offsets[keep, 0])
            assert records[local]["num_context_tokens"] == len(enc.vectors)


def test_streamed_pieces_equal_encode_passages(wide_model):
    passages = [*short_passages()[:2], long_passage(3000), short_passages()[2]]
    texts, titles = [p.text for p in passages], [p.title for p in passages]
    reference = wide_model.encode_passages(texts, titles, batch_size=4)
    tokenized = wide_model.tokenize_passages(texts, titles)
    pieces: dict[int, list] = {}
    seen = []
    for p_idx, piece in wide_model.iter_encoded_pieces(tokenized, batch_size=4):
        pieces.setdefault(p_idx, []).append(piece)
        seen.append(p_idx)
        assert len(piece.positions) <= 4 * wide_model.config.max_passage_length  # one batch of windows at most
    assert seen == sorted(seen) and set(seen) == set(range(len(passages)))
    assert len(pieces[2]) > 10  # the long passage came in many pieces
    for p_idx, enc in enumerate(reference):
        got = pieces[p_idx]
        assert np.array_equal(np.concatenate([p.positions for p in got]), np.arange(len(enc.vectors)))
        assert np.allclose(np.concatenate([p.vectors for p in got]), enc.vectors, atol=1e-5)
        assert np.array_equal(np.concatenate([p.char_offsets for p in got]), enc.char_offsets)


@pytest.mark.parametrize("threshold", [None, 0.0, 1e9])
def test_streamed_shard_equals_the_filtered_passages(wide_model, threshold):
    """Per piece filtering keeps what filtering the whole passage keeps, including the first-token fallback."""
    passages = [short_passages()[0], long_passage(2500), short_passages()[1]]
    codec = VectorCodec("float16")
    records, pieces = encode_shard_stream(wide_model, passages, codec, threshold, batch_size=3)
    parts = list(pieces)
    tokens = np.concatenate([p.tokens for p in parts])
    encoded = wide_model.encode_passages([p.text for p in passages], [p.title for p in passages], batch_size=3)
    for local, enc in enumerate(encoded):
        keep = (
            np.arange(len(enc.vectors)) if threshold is None else np.nonzero(enc.filter_logits.max(1) > threshold)[0]
        )
        keep = keep if keep.size else np.zeros(1, dtype=np.int64)
        mine = tokens[tokens["passage"] == local]
        assert np.array_equal(mine["position"], keep)
        assert np.array_equal(mine["char_start"], enc.char_offsets[keep, 0])
        assert records[local]["num_context_tokens"] == len(enc.vectors)
    assert np.all(np.diff(tokens["passage"]) >= 0)  # passage order
    shard = encode_shard(wide_model, passages, codec, threshold, batch_size=3)
    assert np.array_equal(shard.tokens, tokens)


@pytest.mark.parametrize("dtype", ["float16", "int8"])
def test_dump_and_disk_index_of_a_long_passage_equal_the_in_memory_index(wide_model, tmp_path, dtype):
    passages = [*short_passages(), long_passage(4000)]
    in_memory = PhraseIndex.create(wide_model, dtype=dtype)
    add_passages(in_memory, wide_model, passages, batch_size=4, chunk_size=3, progress=False)
    on_disk = PhraseIndex.create(wide_model, path=tmp_path / "idx", dtype=dtype)
    add_passages(on_disk, wide_model, passages, batch_size=4, chunk_size=3, progress=False)
    reloaded = PhraseIndex.load(tmp_path / "idx")
    for index in (on_disk, reloaded):
        assert index.num_passages == in_memory.num_passages and len(index) == len(in_memory)
        assert np.array_equal(index.tokens, in_memory.tokens)
        assert np.allclose(index.vectors().astype(np.float32), in_memory.vectors().astype(np.float32), atol=2e-3)
    query = "Who wrote Hamlet?"
    want = PhraseSearcher(in_memory, wide_model).search(query, top_k=5, unit="phrase")
    got = PhraseSearcher(reloaded, wide_model).search(query, top_k=5, unit="phrase")
    assert [(h.passage_id, h.start, h.end) for h in got] == [(h.passage_id, h.start, h.end) for h in want]
    assert on_disk.codec == in_memory.codec
    summary = dump_phrases(
        wide_model, passages, tmp_path / "dump", shard_size=3, batch_size=4, dtype=dtype, progress=False
    )
    shards = [PhraseShard.load(path) for path in list_shards(tmp_path / "dump")]
    assert summary.vectors == len(in_memory) == sum(len(s) for s in shards)
    dumped = in_memory.codec.decode(np.concatenate([s.vectors for s in shards]))
    assert all(s.codec == in_memory.codec for s in shards)
    assert np.array_equal(dumped, in_memory.vectors().astype(np.float32))


def test_a_failure_while_streaming_leaves_the_index_as_it_was(wide_model, tmp_path, monkeypatch):
    index = PhraseIndex.create(wide_model, path=tmp_path / "idx")
    add_passages(index, wide_model, short_passages(), progress=False)
    before = (index.num_passages, len(index), index.tokens.copy())
    calls = {"n": 0}
    original = PhraseModel._encode_batch

    def failing(self, batch):
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("encoder failed mid-passage")
        return original(self, batch)

    monkeypatch.setattr(index_storage_module, "APPEND_BYTES", 1)  # append every piece: the failure comes after some
    monkeypatch.setattr(PhraseModel, "_encode_batch", failing)
    with pytest.raises(RuntimeError, match="mid-passage"):
        add_passages(index, wide_model, [long_passage(3000)], batch_size=2, progress=False)
    assert calls["n"] == 5
    assert (index.num_passages, len(index)) == before[:2] and np.array_equal(index.tokens, before[2])
    reloaded = PhraseIndex.load(tmp_path / "idx")
    assert (reloaded.num_passages, len(reloaded)) == before[:2]
    monkeypatch.setattr(PhraseModel, "_encode_batch", original)
    add_passages(index, wide_model, [long_passage(3000)], batch_size=2, progress=False)
    reloaded = PhraseIndex.load(tmp_path / "idx", verify=True)
    assert reloaded.num_passages == before[0] + 1
    assert reloaded.passages[-1]["id"] == "long" and len(reloaded) == len(index)


def test_memory_while_indexing_a_long_passage_does_not_grow_with_it(wide_model, tmp_path, monkeypatch):
    """Traced (numpy and Python) memory at each encoder call, above what the index held before: bounded by a batch
    and the append buffer, not by the passage. Holding the passage's float32 vectors once would exceed the bound."""
    monkeypatch.setattr(index_storage_module, "APPEND_BYTES", 1 << 20)
    growth: dict[int, int] = {}
    original = PhraseModel._encode_batch

    def traced(self, batch):
        growth[key] = max(growth.get(key, 0), tracemalloc.get_traced_memory()[0] - baseline)
        return original(self, batch)

    monkeypatch.setattr(PhraseModel, "_encode_batch", traced)
    sizes = {}
    for key, words in enumerate((6000, 24000)):
        index = PhraseIndex.create(wide_model, path=tmp_path / f"idx{key}")
        passage = long_passage(words)
        tracemalloc.start()
        try:
            baseline = tracemalloc.get_traced_memory()[0]
            add_passages(index, wide_model, [passage], batch_size=8, progress=False)
        finally:
            tracemalloc.stop()
        sizes[key] = len(index)
    vectors_bytes = sizes[1] * wide_model.hidden_size * 4  # the long passage's float32 vectors, once
    assert sizes[1] > 3.5 * sizes[0]
    assert growth[1] < vectors_bytes / 3, (growth, vectors_bytes)
    # what grows with the passage is its token lists (tens of bytes a token), not its vectors (512 bytes a token)
    assert growth[1] - growth[0] < (sizes[1] - sizes[0]) * 128, (growth, sizes)
