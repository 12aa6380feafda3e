"""Device choice, the torch matmul top-k search (= FAISS flat), GPU fallback warnings, and real-GPU paths."""

from __future__ import annotations

import mmap
import warnings

import numpy as np
import pytest

from dphr_haystack import PhraseIndex, PhraseSearcher, VectorCodec
from dphr_haystack.encode.add import add_passages
from dphr_haystack.index.backends import DeviceFallbackWarning, TorchFlatSearch, cuda_available, resolve_device
from tests.conftest import tiny_passages
from tests.scale.conftest import synthetic_shard

pytestmark = pytest.mark.unit

QUERIES = ["capital of france", "who wrote hamlet", "highest mountain", "python language"]


def _faiss_flat(vectors: np.ndarray):
    import faiss

    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return index


@pytest.mark.parametrize("dtype", ["float16", "int8", "float32"])
@pytest.mark.parametrize("chunk_rows", [16, None])  # 16: 63 chunks, several intermediate merges
def test_torch_top_k_equals_faiss_flat(dtype, chunk_rows):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1000, 24)).astype(np.float32)
    codec = VectorCodec.calibrate(dtype, x)
    stored = codec.encode(x)
    queries = rng.normal(size=(7, 24)).astype(np.float32)
    search = TorchFlatSearch(lambda: stored, codec, "cpu", chunk_rows=chunk_rows)
    scores, ids = search.search(queries, 25)
    ref_scores, ref_ids = _faiss_flat(codec.decode(stored)).search(queries, 25)
    assert np.array_equal(ids, ref_ids)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=1e-4)


def test_torch_top_k_pads_like_faiss_when_k_exceeds_n():
    x = np.random.default_rng(0).normal(size=(5, 8)).astype(np.float16)
    search = TorchFlatSearch(lambda: x, VectorCodec("float16"), "cpu", chunk_rows=2)
    scores, ids = search.search(np.ones((2, 8), np.float32), 8)
    ref_scores, ref_ids = _faiss_flat(x.astype(np.float32)).search(np.ones((2, 8), np.float32), 8)
    assert np.array_equal(ids, ref_ids) and (ids[:, 5:] == -1).all()
    np.testing.assert_allclose(scores[:, :5], ref_scores[:, :5], rtol=1e-5, atol=1e-4)
    empty_scores, empty_ids = TorchFlatSearch(lambda: x[:0], VectorCodec("float16")).search(
        np.ones((1, 8), np.float32), 3
    )
    assert (empty_ids == -1).all()


def _file_backed(array: np.ndarray) -> bool:
    """Whether ``array`` reads a memory-mapped file (some array it views is backed by an mmap), not a RAM copy."""
    base = array
    while base is not None:
        if isinstance(base, mmap.mmap):
            return True
        base = getattr(base, "base", None)
    return False


def test_memory_mapped_flat_search_matches_the_in_ram_faiss_flat(tiny_model, tmp_path):
    index = PhraseIndex.create(tiny_model, path=tmp_path / "idx")
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    mapped = PhraseIndex.load(tmp_path / "idx", model=tiny_model, flat_search="mmap")
    assert mapped.faiss_index is None and _file_backed(mapped.storage.vectors.view())
    for unit in ("phrase", "passage", "document"):
        expected = PhraseSearcher(index, tiny_model).search_batch(QUERIES, unit=unit, top_k=5)
        assert PhraseSearcher(mapped, tiny_model).search_batch(QUERIES, unit=unit, top_k=5) == expected
    mapped.add_shard(synthetic_shard(10, 5, tiny_model.hidden_size, prefix="new"))  # appends are searched too
    reopened = PhraseIndex.load(tmp_path / "idx", flat_search="mmap")
    q = np.random.default_rng(1).normal(size=(3, tiny_model.hidden_size)).astype(np.float32)
    ref = PhraseIndex.load(tmp_path / "idx")
    assert np.array_equal(reopened.search_tokens(q, 30)[1], ref.search_tokens(q, 30)[1])
    assert np.array_equal(mapped.search_tokens(q, 30)[1], ref.search_tokens(q, 30)[1])


def test_cuda_request_without_gpu_warns_and_falls_back(monkeypatch, tiny_model):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(DeviceFallbackWarning, match="CUDA is not available"):
        assert resolve_device("cuda") == "cpu"
    assert resolve_device("auto") == "cpu"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_device("cpu") == "cpu"
    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    expected = PhraseSearcher(index, tiny_model).search_batch(QUERIES, unit="passage", top_k=3)
    with pytest.warns(DeviceFallbackWarning, match="falling back to the CPU"):
        index.to("cuda")
    assert index.search_device == "cpu"
    assert PhraseSearcher(index, tiny_model).search_batch(QUERIES, unit="passage", top_k=3) == expected


def test_quantized_index_on_gpu_without_faiss_gpu_stays_on_cpu(monkeypatch, tiny_model):
    """With CUDA but no faiss-gpu, an IVF index cannot move: a warning, and CPU FAISS keeps serving."""
    from dphr_haystack.index import backends as accel

    index = PhraseIndex.create(tiny_model, faiss_factory="IVF4,Flat")
    index.add_shard(synthetic_shard(60, 8, tiny_model.hidden_size))
    monkeypatch.setattr(accel, "resolve_device", lambda device="auto": "cuda")  # pretend a GPU is there
    monkeypatch.setattr(accel, "faiss_has_gpu", lambda: False)
    with pytest.warns(DeviceFallbackWarning, match="faiss-gpu is not installed"):
        backend = accel.make_search_backend(index.faiss_index, False, index.storage.vectors.view, index.codec, "cuda")
    assert backend.device == "cpu" and backend.index is index.faiss_index


def test_bad_device_name():
    from dphr_haystack import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="device"):
        resolve_device("tpu")


# ----------------------------------------------------------------- real GPU (pytest -m gpu)
gpu = pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", ["float16", "int8"])
def test_gpu_torch_top_k_matches_faiss_flat(dtype):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(20000, 64)).astype(np.float32)
    codec = VectorCodec.calibrate(dtype, x)
    stored = codec.encode(x)
    queries = rng.normal(size=(16, 64)).astype(np.float32)
    scores, ids = TorchFlatSearch(lambda: stored, codec, "cuda", chunk_rows=4096).search(queries, 50)
    ref_scores, ref_ids = _faiss_flat(codec.decode(stored)).search(queries, 50)
    recall = np.mean([len(set(a) & set(b)) / 50 for a, b in zip(ids, ref_ids)])
    assert recall > 0.98  # fp16/bf16 products on the GPU may swap near-ties
    np.testing.assert_allclose(scores, ref_scores, rtol=2e-2, atol=5e-2)


@pytest.mark.gpu
@gpu
def test_gpu_dump_in_bf16_is_close_to_cpu_fp32(tiny_model):
    cpu = tiny_model.encode_passages([p["text"] for p in tiny_passages()])
    on_gpu = tiny_model.to("cuda").encode_passages([p["text"] for p in tiny_passages()])
    for a, b in zip(cpu, on_gpu):
        cos = (a.vectors * b.vectors).sum(1) / (np.linalg.norm(a.vectors, axis=1) * np.linalg.norm(b.vectors, axis=1))
        assert cos.min() > 0.99


@pytest.mark.gpu
@gpu
def test_index_on_gpu_returns_the_cpu_results(tiny_model):
    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    expected = PhraseSearcher(index, tiny_model).search_batch(QUERIES, unit="passage", top_k=3)
    index.to("cuda")
    assert index.search_device.startswith("cuda")
    got = PhraseSearcher(index, tiny_model).search_batch(QUERIES, unit="passage", top_k=3)
    assert [[h.passage_id for h in hits] for hits in got] == [[h.passage_id for h in hits] for hits in expected]


@pytest.mark.gpu
@gpu
def test_faiss_gpu_ivf_when_installed(tiny_model):
    from dphr_haystack.index.backends import faiss_has_gpu

    if not faiss_has_gpu():
        pytest.skip("faiss has no GPU support here (pip install 'dphr-haystack[faiss-gpu]')")
    index = PhraseIndex.create(tiny_model, faiss_factory="IVF4,Flat")
    index.add_shard(synthetic_shard(60, 8, tiny_model.hidden_size))
    index.set_search_params(nprobe=4)
    q = np.random.default_rng(2).normal(size=(4, tiny_model.hidden_size)).astype(np.float32)
    cpu_ids = index.search_tokens(q, 10)[1]
    index.to("cuda")
    assert type(index.structure.backend.index).__name__.startswith("Gpu")
    gpu_ids = index.search_tokens(q, 10)[1]
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(gpu_ids, cpu_ids)]) > 0.9
