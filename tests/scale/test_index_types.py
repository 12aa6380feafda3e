"""Index types through FAISS factory strings: sizing rules, reindex without re-encoding, on-disk IVF lists."""

from __future__ import annotations

import numpy as np
import pytest

from dphr_haystack import InvalidParameterError, PhraseIndex, PhraseSearcher
from dphr_haystack.index import structures as it
from tests.scale.conftest import synthetic_shard

pytestmark = pytest.mark.unit


def test_factory_strings_and_sizing_rules():
    assert it.factory_for("opq-ivf-pq", 3_000_000, 768) == "OPQ96,IVF8192,PQ96np"  # DensePhrases' OPQ96 at d=768
    assert it.factory_for("ivf-sq4", 10**6, 384) == "IVF4096,SQ4"
    assert it.factory_for("hnsw", 10, 32) == "HNSW32,Flat" and it.factory_for("flat", 10, 32) == "Flat"
    assert it.pq_subquantizers(384) == 48 and it.pq_subquantizers(36) == 4
    assert it.default_nlist(10**4) == 256 and it.default_nlist(1000) == 16 and it.default_nlist(100) == 2
    for n in (100, 10**4, 10**6, 10**9):
        assert 39 * it.default_nlist(n) <= max(n, 39) and it.default_nlist(n) <= 65536
    assert it.training_sample_size("IVF1024,SQ8", 1024, 10**8) == 64 * 1024
    assert it.training_sample_size("IVF65536,SQ8", 65536, 10**9) == 1_000_000  # capped (max_train)
    assert it.training_sample_size("IVF16,PQ8", 16, 10**6) == 39 * 256  # PQ codebooks need 39·256
    assert it.training_sample_size("OPQ8,IVF16,PQ8x4", 16, 10**6) == 64 * 16  # 4-bit codebooks: 39·16 suffice
    assert it.training_sample_size("IVF1024,Flat", 1024, 5000) == 5000  # never more than stored
    for kind in it.INDEX_TYPES:
        it.make_faiss_index(384, it.factory_for(kind, 10**6, 384))  # every named type is a valid factory
    import faiss

    opq_index = it.make_faiss_index(384, "OPQ48,IVF64,PQ48")  # keep it alive: the transform belongs to it
    opq = faiss.downcast_VectorTransform(opq_index.chain.at(0))
    assert isinstance(opq, faiss.OPQMatrix) and opq.niter == it.OPQ_ITERATIONS == 10
    with pytest.raises(InvalidParameterError, match="unknown index type"):
        it.factory_for("lsh", 10, 32)


@pytest.fixture(scope="module")
def synthetic_index(_tiny_model_session, tmp_path_factory):
    """4,000 clustered float16 vectors of d=32 in 400 passages, flat, on disk."""
    path = tmp_path_factory.mktemp("types") / "flat"
    index = PhraseIndex.create(_tiny_model_session, path=path)
    index.add_shard(synthetic_shard(400, 10, _tiny_model_session.hidden_size))
    return path


def _queries(dim: int, n: int = 20) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    return rng.normal(size=(n, dim)).astype(np.float32), rng.normal(size=(n, dim)).astype(np.float32)


def _recall(index: PhraseIndex, reference: PhraseIndex, k: int = 10) -> float:
    q = np.concatenate(_queries(index.dim))
    got, want = index.search_tokens(q, k)[1], reference.search_tokens(q, k)[1]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(got, want)]))


@pytest.mark.parametrize(
    "kind, factory, params, min_recall",
    [
        ("ivf-flat", "IVF8,Flat", {"nprobe": 8}, 1.0),
        ("ivf-sq8", "IVF8,SQ8", {"nprobe": 8}, 0.9),
        ("ivf-sq4", "IVF8,SQ4", {"nprobe": 8}, 0.5),
        ("ivf-pq", "IVF8,PQ16x4np", {"nprobe": 8}, 0.3),  # fast 4-bit codes; OPQ-PQ quality: see benchmarks
        ("hnsw", "HNSW16,Flat", {"efSearch": 256}, 0.6),  # inner product is no metric: HNSW saturates (~0.7 here)
    ],
)
def test_reindex_copies_builds_each_type_and_spans_use_exact_vectors(
    synthetic_index, tiny_model, tmp_path, kind, factory, params, min_recall
):
    flat = PhraseIndex.load(synthetic_index)
    copy = flat.reindex(factory, path=tmp_path / kind, search_params=params, progress=False)
    assert flat.faiss_factory == "Flat" and PhraseIndex.load(synthetic_index).faiss_factory == "Flat"  # untouched
    reopened = PhraseIndex.load(tmp_path / kind)
    assert reopened.faiss_factory == factory and reopened.search_params == params
    assert reopened.manifest["faiss_build"]["train_vectors"] == (
        0 if kind == "hnsw" else it.training_sample_size(factory, 8, len(flat))
    )
    assert _recall(reopened, flat) >= min_recall and _recall(copy, flat) >= min_recall
    qs, qe = _queries(flat.dim, 5)
    got = PhraseSearcher(reopened, tiny_model).search_vectors(qs, qe, unit="phrase", top_k=3)
    want = PhraseSearcher(flat, tiny_model).search_vectors(qs, qe, unit="phrase", top_k=3)
    if kind == "ivf-flat":
        assert got == want  # exhaustive probing: identical results
    for hits in got:  # whatever the structure found, the span score is the exact stored-vector score
        for hit in hits:
            s, e = (
                flat.first_token[hit.passage_row] + hit.start_token,
                flat.first_token[hit.passage_row] + hit.end_token,
            )
            exact = (
                flat.vectors(np.array([s])) @ qs[got.index(hits)] + flat.vectors(np.array([e])) @ qe[got.index(hits)]
            )
            assert hit.score == pytest.approx(float(exact[0]), rel=1e-5, abs=1e-5)


def test_on_disk_inverted_lists(synthetic_index, tmp_path):
    flat = PhraseIndex.load(synthetic_index)
    in_ram = flat.reindex("IVF8,SQ8", path=tmp_path / "ram", search_params={"nprobe": 4}, progress=False)
    on_disk = flat.reindex(
        "IVF8,SQ8", path=tmp_path / "disk", on_disk=True, search_params={"nprobe": 4}, progress=False
    )
    ivfdata = tmp_path / "disk" / on_disk.manifest["faiss_ivfdata"]
    assert ivfdata.is_file() and ivfdata.stat().st_size >= len(flat) * (flat.dim + 8)  # codes + ids live there
    loaded = PhraseIndex.load(tmp_path / "disk")
    assert it.has_ondisk_lists(loaded.faiss_index) and not it.has_ondisk_lists(in_ram.faiss_index)
    faiss_file = tmp_path / "disk" / loaded.manifest["faiss_file"]
    assert faiss_file.stat().st_size < ivfdata.stat().st_size / 4  # the in-RAM part is the small header
    q = np.concatenate(_queries(flat.dim))
    assert np.array_equal(loaded.search_tokens(q, 10)[1], in_ram.search_tokens(q, 10)[1])
    with pytest.raises(InvalidParameterError, match="on disk"):
        loaded.add_shard(synthetic_shard(2, 3, flat.dim, prefix="more"))
    assert loaded.delete_passages(["s0", "s1"]) == 2  # deletes still commit (new header, same lists)
    loaded.save(tmp_path / "copy")  # a copy carries its .ivfdata
    copy = PhraseIndex.load(tmp_path / "copy")
    assert copy.num_live_passages == 398 and np.array_equal(
        copy.search_tokens(q, 10)[1], in_ram.search_tokens(q, 10)[1]
    )
    copy.reindex("Flat", progress=False)  # back to flat: the on-disk files go away
    assert not any(p.suffix in (".ivfdata", ".index") for p in (tmp_path / "copy").iterdir())
    assert PhraseIndex.load(tmp_path / "copy").faiss_factory == "Flat"
    with pytest.raises(InvalidParameterError, match="IVF"):
        flat.reindex("HNSW8,Flat", path=tmp_path / "bad", on_disk=True, progress=False)


def test_in_place_reindex_and_search_params_persist(synthetic_index, tmp_path):
    flat = PhraseIndex.load(synthetic_index)
    work = flat.reindex("Flat", path=tmp_path / "work", progress=False)
    work.reindex("IVF16,Flat", progress=False)
    assert work.search_params == {"nprobe": 1}  # default: nlist/16
    work.set_search_params(nprobe=16)
    reopened = PhraseIndex.load(tmp_path / "work")
    assert it.ivf_of(reopened.faiss_index).nprobe == 16 and _recall(reopened, flat) == 1.0
    first_file = reopened.manifest["faiss_file"]
    reopened.reindex("IVF4,SQ8", progress=False)
    assert reopened.manifest["faiss_file"] != first_file and not (tmp_path / "work" / first_file).exists()
    reopened.add_shard(synthetic_shard(5, 4, flat.dim, prefix="late"))  # a trained in-RAM IVF index still grows
    assert PhraseIndex.load(tmp_path / "work").faiss_index.ntotal == len(flat) + 20
    with pytest.raises(InvalidParameterError, match="nprobe"):
        flat.set_search_params(nprobe=2)  # a flat index has no such knob


def test_reindex_refuses_empty_indexes_and_bad_factories(tiny_model):
    empty = PhraseIndex.create(tiny_model)
    with pytest.raises(InvalidParameterError, match="empty"):
        empty.reindex("IVF4,Flat")
    with pytest.raises(InvalidParameterError, match="factory"):
        empty.reindex("NoSuchIndex42")


def test_refine_reranks_quantized_candidates_with_the_stored_vectors(synthetic_index, tmp_path):
    flat = PhraseIndex.load(synthetic_index)
    sq4 = flat.reindex("IVF8,SQ4", path=tmp_path / "sq4", search_params={"nprobe": 8}, progress=False)
    plain = _recall(sq4, flat)
    sq4.set_search_params(refine=8)
    assert PhraseIndex.load(tmp_path / "sq4").search_params == {"nprobe": 8, "refine": 8}
    refined = _recall(sq4, flat)
    assert refined >= plain and refined > 0.95
    q = np.concatenate(_queries(flat.dim))
    scores, ids = sq4.search_tokens(q, 10)
    exact = np.einsum("qkd,qd->qk", flat.vectors(ids.ravel()).reshape(*ids.shape, -1), q)
    np.testing.assert_allclose(scores, exact, rtol=1e-5, atol=1e-5)  # refined scores are exact inner products
    assert (np.diff(scores, axis=1) <= 1e-6).all()
    with pytest.raises(InvalidParameterError, match="refine"):
        sq4.set_search_params(refine=0)
