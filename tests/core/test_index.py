"""PhraseIndex: round trips, incremental add = rebuild, deletes, filter, codecs, FAISS types, bad input."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from dphr_haystack import (
    CorpusStats,
    EmptyCorpusError,
    IndexLoadError,
    InvalidParameterError,
    ModelMismatchError,
    PhraseIndex,
    PhraseSearcher,
    VectorCodec,
)
from dphr_haystack.encode.add import add_passages
from dphr_haystack.index.reindexing import TUNING_QUERIES
from tests.conftest import tiny_passages

pytestmark = pytest.mark.unit

QUERIES = ["capital of france", "who wrote hamlet", "highest mountain", "python language"]


def _top(index, model, unit="phrase", k=5):
    return PhraseSearcher(index, model).search_batch(QUERIES, unit=unit, top_k=k)


def test_save_load_gives_identical_results(tiny_model, tmp_path):
    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    index.save(tmp_path / "idx")
    loaded = PhraseIndex.load(tmp_path / "idx", model=tiny_model)
    assert len(loaded) == len(index) and loaded.num_passages == 6
    assert np.array_equal(np.asarray(loaded.vectors()), index.vectors())
    for unit in ("phrase", "passage", "document"):
        assert _top(loaded, tiny_model, unit) == _top(index, tiny_model, unit)


def test_incremental_add_equals_full_rebuild(tiny_model, tmp_path):
    full = PhraseIndex.create(tiny_model)
    add_passages(full, tiny_model, tiny_passages(), progress=False)
    incremental = PhraseIndex.create(tiny_model, path=tmp_path / "inc")
    add_passages(incremental, tiny_model, tiny_passages()[:2], progress=False)
    incremental = PhraseIndex.load(tmp_path / "inc", model=tiny_model)  # reopen between adds
    add_passages(incremental, tiny_model, tiny_passages()[2:], chunk_size=1, progress=False)
    assert np.array_equal(np.asarray(incremental.vectors()), full.vectors())
    assert _top(incremental, tiny_model) == _top(full, tiny_model)
    reopened = PhraseIndex.load(tmp_path / "inc", model=tiny_model)
    assert _top(reopened, tiny_model, "passage") == _top(full, tiny_model, "passage")


def test_delete_removes_phrases_and_persists(tiny_model, tmp_path):
    index = PhraseIndex.create(tiny_model, path=tmp_path / "idx")
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    assert index.delete_passages(["p0", "p3", "missing"]) == 2
    for hits in _top(index, tiny_model, "passage", k=10):
        assert {h.passage_id for h in hits} == {"p1", "p2", "p4", "p5"}
    reopened = PhraseIndex.load(tmp_path / "idx")
    assert reopened.num_live_passages == 4 and reopened.passage_row("p0") is None
    assert _top(reopened, tiny_model, "passage") == _top(index, tiny_model, "passage")
    assert reopened.delete_documents(["p1"]) == 1
    assert PhraseIndex.load(tmp_path / "idx").num_live_passages == 3


def test_duplicate_policies(tiny_model):
    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, tiny_passages()[:2], progress=False)
    with pytest.raises(InvalidParameterError, match="p0"):
        add_passages(index, tiny_model, [{"id": "p0", "text": "new text"}], progress=False)
    add_passages(index, tiny_model, [{"id": "p0", "text": "new text"}], duplicates="skip", progress=False)
    assert index.passages[index.passage_row("p0")]["text"] != "new text"
    add_passages(index, tiny_model, [{"id": "p0", "text": "new text"}], duplicates="overwrite", progress=False)
    assert index.passages[index.passage_row("p0")]["text"] == "new text" and index.num_live_passages == 2
    with pytest.raises(InvalidParameterError, match="fail, skip, overwrite"):
        add_passages(index, tiny_model, [{"id": "x", "text": "t"}], duplicates="bogus", progress=False)


def test_empty_corpus_and_passages_without_text(tiny_model):
    index = PhraseIndex.create(tiny_model)
    with pytest.raises(EmptyCorpusError):
        add_passages(index, tiny_model, [], progress=False)
    with pytest.raises(EmptyCorpusError, match="2 empty"):
        add_passages(index, tiny_model, [{"id": "a", "text": ""}, {"id": "b", "text": "  \n"}], progress=False)
    stats = add_passages(
        index, tiny_model, [{"id": "a", "text": ""}, {"id": "c", "text": "some text"}], progress=False
    )
    assert isinstance(stats, CorpusStats) and (stats.passages, stats.skipped_empty) == (1, 1)


def test_filter_threshold_shrinks_index_and_keeps_one_token(tiny_model):
    with np.errstate(all="ignore"):
        logits = tiny_model.encode_passages([p["text"] for p in tiny_passages()])
    all_logits = np.concatenate([e.filter_logits.max(axis=1) for e in logits])
    threshold = float(np.median(all_logits))
    full = PhraseIndex.create(tiny_model)
    add_passages(full, tiny_model, tiny_passages(), progress=False)
    filtered = PhraseIndex.create(tiny_model, filter_threshold=threshold)
    add_passages(filtered, tiny_model, tiny_passages(), progress=False)
    assert len(filtered) == pytest.approx(int((all_logits > threshold).sum()), abs=6)
    assert len(filtered) < len(full)
    strict = PhraseIndex.create(tiny_model, filter_threshold=1e9)
    add_passages(strict, tiny_model, tiny_passages(), progress=False)
    assert len(strict) == 6 and np.all(strict.tokens["position"] == 0)  # one token kept per passage
    hits = PhraseSearcher(filtered, tiny_model).search("capital", unit="phrase", top_k=3)
    assert all(h.text for h in hits)


def test_int8_codec_is_close_to_float(tiny_model):
    codec = VectorCodec.calibrate("int8", np.random.default_rng(0).normal(size=(1000, 8)).astype(np.float32))
    x = np.random.default_rng(1).normal(size=(50, 8)).astype(np.float32)
    assert np.abs(codec.decode(codec.encode(x)) - x).max() < 0.05
    index = PhraseIndex.create(tiny_model, dtype="int8")
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    ref = PhraseIndex.create(tiny_model)
    add_passages(ref, tiny_model, tiny_passages(), progress=False)
    assert index.storage.vectors.view().dtype == np.int8
    np.testing.assert_allclose(index.vectors(), ref.vectors(), atol=0.1)


def test_float16_decodes_exactly_whichever_way_it_is_widened():
    from dphr_haystack.index.codec import TORCH_HALF_MIN

    # every float16 value (infinities, NaNs, subnormals), widened by torch (large, writable) and by numpy
    every = np.arange(2**16, dtype=np.uint16).view(np.float16).reshape(-1, 8)
    assert every.size >= TORCH_HALF_MIN
    by_torch = VectorCodec("float16").decode(every.copy())
    frozen = every.copy()
    frozen.flags.writeable = False  # a read-only memory map's rows: numpy's cast
    by_numpy = VectorCodec("float16").decode(frozen)
    assert by_torch.dtype == by_numpy.dtype == np.float32 and by_torch.shape == every.shape
    numbers = ~np.isnan(by_numpy)  # NaNs stay NaNs (a signalling one comes back quiet from the CPU's conversion)
    np.testing.assert_array_equal(np.isnan(by_torch), ~numbers)
    np.testing.assert_array_equal(by_torch[numbers].view(np.uint32), by_numpy[numbers].view(np.uint32))  # -0.0 too
    np.testing.assert_array_equal(by_numpy, every.astype(np.float32))


@pytest.mark.parametrize("dtype", ["float16", "int8", "float32"])
def test_exact_search_keeps_the_stored_codes_and_matches_float32_flat(tiny_model, tmp_path, dtype):
    import faiss

    index = PhraseIndex.create(tiny_model, path=tmp_path / dtype, dtype=dtype)
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    reference = faiss.IndexFlatIP(index.dim)
    reference.add(index.vectors())
    queries = np.random.default_rng(0).standard_normal((4, index.dim)).astype(np.float32)
    expected_scores, expected_rows = reference.search(queries, 20)
    for loaded in (index, PhraseIndex.load(tmp_path / dtype), index.reindex("Flat")):
        scores, rows = loaded.search_tokens(queries, 20)
        np.testing.assert_allclose(scores, expected_scores, rtol=1e-4, atol=1e-3)
        assert (rows == expected_rows).mean() > 0.95  # ties may swap
    bytes_per_dim = {"float16": 2, "int8": 1, "float32": 4}[dtype]
    assert faiss.serialize_index(index.faiss_index).size < len(index) * index.dim * bytes_per_dim + 4096


@pytest.mark.parametrize("factory", ["IVF2,Flat", "HNSW8", "SQfp16"])
def test_other_faiss_factories(tiny_model, tmp_path, factory):
    index = PhraseIndex.create(tiny_model, path=tmp_path / "idx", faiss_factory=factory)
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    if factory.startswith("IVF"):
        index.faiss_index.nprobe = 2
    hits = PhraseSearcher(index, tiny_model).search("capital", unit="passage", top_k=3)
    assert len(hits) == 3
    reopened = PhraseIndex.load(tmp_path / "idx", model=tiny_model)
    assert reopened.manifest["faiss_file"] and reopened.faiss_index.ntotal == len(index)


def test_bad_factory_string(tiny_model):
    with pytest.raises(InvalidParameterError, match="FAISS"):
        PhraseIndex.create(tiny_model, faiss_factory="NoSuchIndex42")


# ----------------------------------------------------------------- loading failures
@pytest.fixture
def saved_index(tiny_model, tmp_path):
    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    index.save(tmp_path / "idx")
    return tmp_path / "idx"


def test_mismatched_model_is_refused(saved_index, tiny_base_dir):
    from dphr_haystack import PhraseModel, PhraseModelConfig

    other = PhraseModel.from_base(tiny_base_dir, PhraseModelConfig(max_passage_length=64, passage_stride=8))
    with pytest.raises(ModelMismatchError, match="manifest.json"):
        PhraseIndex.load(saved_index, model=other)


def test_format_version_mismatch_names_the_file(saved_index):
    manifest = json.loads((saved_index / "manifest.json").read_text())
    manifest["format_version"] = 99
    (saved_index / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexLoadError, match=r"manifest.json.*version 99"):
        PhraseIndex.load(saved_index)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: (d / "manifest.json").write_text("{not json"), "manifest.json"),
        (lambda d: (d / "manifest.json").unlink(), "manifest.json"),
        (lambda d: (d / "vectors.bin").write_bytes(b"\0" * 10), "vectors.bin"),
        (lambda d: (d / "tokens.bin").write_bytes((d / "tokens.bin").read_bytes()[:-7]), "tokens.bin"),
        (
            lambda d: (d / "passages.jsonl").write_bytes(
                (d / "passages.jsonl").read_bytes().replace(b"Paris", b"Pxris")
            ),
            "passages.jsonl",
        ),
    ],
)
def test_corrupted_index_files_fail_with_the_file_named(saved_index, damage, message):
    damage(saved_index)
    with pytest.raises(IndexLoadError, match=message):
        PhraseIndex.load(saved_index)


def test_save_over_existing_index_is_atomic(tiny_model, saved_index):
    index = PhraseIndex.load(saved_index)
    index.delete_passages(["p0"])
    other = PhraseIndex.create(tiny_model)
    add_passages(other, tiny_model, tiny_passages()[:1], progress=False)
    other.save(saved_index)  # replaces the directory as a whole
    assert PhraseIndex.load(saved_index).num_passages == 1
    assert [p.name for p in saved_index.parent.glob(".idx*")] == []  # no lock or temporary file beside it
    assert (saved_index / ".dphr.lock").is_file()  # the writer lock file lives inside


def test_create_refuses_non_empty_directory(tiny_model, tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "file").write_text("keep me")
    with pytest.raises(InvalidParameterError, match="not empty"):
        PhraseIndex.create(tiny_model, path=tmp_path / "x")
    assert (tmp_path / "x" / "file").read_text() == "keep me"


def test_uncommitted_append_is_ignored(tiny_model, tmp_path):
    """Bytes appended after the last manifest commit (a crash mid-add) are invisible and overwritten."""
    index = PhraseIndex.create(tiny_model, path=tmp_path / "idx")
    add_passages(index, tiny_model, tiny_passages()[:3], progress=False)
    with (tmp_path / "idx" / "vectors.bin").open("ab") as handle:
        handle.write(b"\x01" * 1000)
    with (tmp_path / "idx" / "passages.jsonl").open("ab") as handle:
        handle.write(b'{"id": "half-written"')
    reopened = PhraseIndex.load(tmp_path / "idx", model=tiny_model)
    assert reopened.num_passages == 3
    add_passages(reopened, tiny_model, tiny_passages()[3:], progress=False)
    full = PhraseIndex.create(tiny_model)
    add_passages(full, tiny_model, tiny_passages(), progress=False)
    final = PhraseIndex.load(tmp_path / "idx", model=tiny_model)
    assert np.array_equal(np.asarray(final.vectors()), full.vectors())
    assert _top(final, tiny_model, "passage") == _top(full, tiny_model, "passage")


def _many_passages(count: int) -> list[dict]:
    words = "river city bridge tower museum king queen war treaty music painter island mountain lake".split()
    return [
        {"id": f"m{i}", "title": f"Topic {i}", "text": " ".join(words[(i + j) % len(words)] for j in range(25))}
        for i in range(count)
    ]


def test_auto_structure_grows_from_exact_to_a_tuned_ivf(tiny_model, tmp_path, monkeypatch):
    from dphr_haystack.index import auto

    index = PhraseIndex.create(tiny_model, path=tmp_path / "a")  # faiss_factory="auto" by default
    fixed = PhraseIndex.create(tiny_model, faiss_factory="Flat")
    for target in (index, fixed):
        add_passages(target, tiny_model, _many_passages(10), progress=False)
    assert index.auto_structure and index.faiss_factory == "Flat"
    limit = len(index) + 50
    monkeypatch.setattr(auto, "EXACT_LIMIT", limit)
    for passages in (_many_passages(60)[10:], tiny_passages()):
        add_passages(index, tiny_model, passages, progress=False)
        add_passages(fixed, tiny_model, passages, progress=False)
    assert len(index) > limit and index.faiss_factory.startswith("IVF") and index.faiss_factory.endswith(",SQ8")
    structure = index.manifest["structure"]
    assert structure["policy"] == "auto" and limit < structure["built_for"] <= len(index)  # later adds go in
    assert structure["probe_recall"] >= auto.TARGET_RECALL
    assert index.search_params["refine"] == auto.REFINE and index.search_params["nprobe"] >= 1
    assert fixed.faiss_factory == "Flat" and not fixed.auto_structure  # an explicit factory is kept
    queries = fixed.vectors(slice(0, 20)) + 0.1
    exact_scores, _ = fixed.search_tokens(queries, 10)
    scores, _ = PhraseIndex.load(tmp_path / "a").search_tokens(queries, 10)
    np.testing.assert_allclose(scores, exact_scores, rtol=1e-3, atol=1e-3)
    assert not auto.needs_rebuild(index.manifest, len(index), index.dim)
    assert auto.needs_rebuild(index.manifest, len(index) * auto.REBUILD_GROWTH + 1, index.dim)
    index.reindex("HNSW8,Flat", progress=False)
    assert not index.auto_structure  # an explicit reindex fixes the structure


def test_auto_picks_exact_then_sq8_then_opq_pq_codes_by_size():
    from dphr_haystack.index import auto

    assert auto.auto_factory(auto.EXACT_LIMIT, 384) == "Flat"
    assert auto.auto_factory(auto.EXACT_LIMIT + 1, 384).endswith(",SQ8")
    assert auto.auto_factory(auto.PQ_LIMIT, 384) == "IVF4096,SQ8"
    assert auto.auto_factory(auto.PQ_LIMIT + 1, 384) == "OPQ96,IVF8192,PQ96np"  # 96 bytes a vector at d=384
    assert auto.auto_factory(10_000_000, 768).startswith("OPQ192,IVF16384,PQ192")
    assert (
        auto.auto_refine("IVF4096,SQ8") == auto.REFINE and auto.auto_refine("OPQ96,IVF8192,PQ96np") == auto.PQ_REFINE
    )
    assert auto.refine_choices("IVF4096,SQ8") == (auto.REFINE,) and auto.refine_choices("OPQ96,IVF8,PQ96np")[0] == 8
    built_sq8 = {"faiss_factory": "IVF4096,SQ8", "structure": {"policy": "auto", "built_for": auto.PQ_LIMIT // 2}}
    assert not auto.needs_rebuild(built_sq8, auto.PQ_LIMIT, 384)
    assert auto.needs_rebuild(built_sq8, auto.PQ_LIMIT + 1, 384)  # past the limit before growing 4x: PQ now
    built_pq = {
        "faiss_factory": "OPQ96,IVF8192,PQ96np",
        "structure": {"policy": "auto", "built_for": auto.PQ_LIMIT + 1},
    }
    assert not auto.needs_rebuild(built_pq, 3 * auto.PQ_LIMIT, 384)
    assert auto.needs_rebuild(built_pq, 4 * auto.PQ_LIMIT + 5, 384)


def test_auto_tuning_picks_the_refine_that_needs_the_fewest_lists():
    from dphr_haystack.index import auto

    stored = np.random.default_rng(0).normal(size=(500, 8)).astype(np.float32)
    truth = auto.exact_top_rows(auto.probe_queries(stored, np.asarray, auto.PROBE_QUERIES), stored, np.asarray, 20)
    reach = {8: 10**9, 16: 64, 32: 16}  # the nprobe from which each refine finds every exact token

    def search(queries, k, nprobe, refine):
        return truth if nprobe >= reach[refine] else np.full_like(truth, -1)

    tuned = auto.tune_search_params(search, stored, np.asarray, 256, (8, 16, 32))
    assert (tuned["refine"], tuned["nprobe"], tuned["probe_recall"]) == (32, 16, 1.0)
    unreachable = auto.tune_search_params(search, stored, np.asarray, 256, (8,))
    assert (unreachable["nprobe"], unreachable["probe_recall"]) == (256, 0.0)  # every list, the target missed


def test_auto_tunes_pq_codes_to_a_lower_probe_recall_than_sq8():
    from dphr_haystack.index import auto

    assert auto.target_recall("OPQ96,IVF8192,PQ96np") == auto.PQ_TARGET_RECALL < auto.TARGET_RECALL
    assert auto.target_recall("IVF4096,SQ8") == auto.TARGET_RECALL
    stored = np.random.default_rng(1).normal(size=(400, 8)).astype(np.float32)
    truth = auto.exact_top_rows(auto.probe_queries(stored, np.asarray, auto.PROBE_QUERIES), stored, np.asarray, 20)

    def search(queries, k, nprobe, refine):  # 18 of the 20 exact tokens (0.9) from nprobe 32, all from 128
        found = truth.copy()
        if nprobe < 128:
            found[:, 18:] = -1
        return found if nprobe >= 32 else np.full_like(truth, -1)

    lower = auto.tune_search_params(search, stored, np.asarray, 256, (32,), auto.PQ_TARGET_RECALL)
    assert (lower["nprobe"], lower["target_recall"]) == (32, auto.PQ_TARGET_RECALL)
    assert lower["probe_recall"] == pytest.approx(0.9)
    assert auto.tune_search_params(search, stored, np.asarray, 256, (32,))["nprobe"] == 128


def test_auto_caps_a_pq_querys_scan_where_the_probes_keep_the_target():
    from dphr_haystack.index import auto

    assert auto.budgets_scan("OPQ96,IVF8192,PQ96np") and not auto.budgets_scan("IVF4096,SQ8")
    assert auto.scan_budget(128, 7_000_000, 8192) == 109_375
    assert auto.scan_budget(128, 7_000_000, 8192, 1.5) == 164_063
    stored = np.random.default_rng(2).normal(size=(400, 8)).astype(np.float32)
    truth = auto.exact_top_rows(auto.probe_queries(stored, np.asarray, auto.PROBE_QUERIES), stored, np.asarray, 20)
    wide = auto.scan_budget(32, 400, 256, 1.5)
    # exact tokens found (of 20) under a cap of at least 1.5x the average scan, and under a tighter one
    for wide_finds, narrow_finds, want, factor in (
        (19, 16, wide, 1.5),
        (19, 19, auto.scan_budget(32, 400, 256), 1.0),
        (0, 0, 0, 0.0),
    ):

        def search(queries, k, nprobe, refine, max_codes=0, wide_finds=wide_finds, narrow_finds=narrow_finds):
            found = truth.copy() if nprobe >= 32 else np.full_like(truth, -1)  # all 20 from nprobe 32, uncapped
            if max_codes:
                found[:, wide_finds if max_codes >= wide else narrow_finds :] = -1
            return found

        tuned = auto.tune_search_params(search, stored, np.asarray, 256, (32,), auto.PQ_TARGET_RECALL, budget=True)
        assert (tuned["nprobe"], tuned["max_codes"], tuned["scan_budget"]) == (32, want, factor)
        assert tuned["probe_recall"] == pytest.approx(0.95 if want else 1.0)
    assert "max_codes" not in auto.tune_search_params(search, stored, np.asarray, 256, (32,))


def test_auto_structure_switches_to_tuned_pq_codes_past_the_pq_limit(tiny_model, tmp_path, monkeypatch):
    import faiss

    from dphr_haystack.index import auto

    monkeypatch.setattr(auto, "EXACT_LIMIT", 100)
    index = PhraseIndex.create(tiny_model, path=tmp_path / "a")
    add_passages(index, tiny_model, _many_passages(60), progress=False)
    assert index.faiss_factory.endswith(",SQ8")
    monkeypatch.setattr(auto, "PQ_LIMIT", len(index) + 10)  # the next add passes it, long before growing 4x
    add_passages(index, tiny_model, _many_passages(200)[60:], progress=False)
    again = PhraseIndex.load(tmp_path / "a", model=tiny_model)
    m = again.dim // auto.PQ_DIMS_PER_CODE
    assert again.faiss_factory.startswith(f"OPQ{m},IVF") and again.faiss_factory.endswith(f",PQ{m}np")
    assert again.search_params["refine"] in auto.PQ_REFINES and again.manifest["structure"]["policy"] == "auto"
    nlist = int(again.faiss_factory.split(",")[1].removeprefix("IVF"))
    caps = {auto.scan_budget(again.search_params["nprobe"], len(again), nlist, f) for f in auto.SCAN_BUDGETS}
    assert again.search_params["max_codes"] in caps | {0}  # 0 where the probes lose their target under each cap
    assert faiss.extract_index_ivf(again.faiss_index).max_codes == again.search_params["max_codes"]
    exact = PhraseIndex.create(tiny_model, faiss_factory="Flat")
    add_passages(exact, tiny_model, _many_passages(200), progress=False)
    queries = exact.vectors(slice(0, 20)) + 0.1
    exact_scores, _ = exact.search_tokens(queries, 5)
    scores, _ = again.search_tokens(queries, 5)
    np.testing.assert_allclose(scores[:, 0], exact_scores[:, 0], rtol=1e-3)  # re-ranked from the stored vectors
    assert np.isclose(scores, exact_scores, rtol=1e-3).mean() >= 0.9  # PQ codes find nearly all of exact's top 5
    # the scan cap stays the multiple of the lists' average that auto chose as the structure grows
    assert again.manifest["structure"]["scan_budget"] in (0.0, *auto.SCAN_BUDGETS)
    again.manifest["structure"]["scan_budget"] = 1.5
    again.set_search_params(max_codes=1)
    add_passages(again, tiny_model, _many_passages(240)[200:], progress=False)
    grown = auto.scan_budget(again.search_params["nprobe"], len(again), nlist, 1.5)
    assert again.search_params["max_codes"] == grown > 1 and again.faiss_factory.endswith(f",PQ{m}np")
    assert faiss.extract_index_ivf(again.faiss_index).max_codes == grown
    assert PhraseIndex.load(tmp_path / "a", model=tiny_model).search_params["max_codes"] == grown


def test_retune_chooses_an_older_auto_structures_nprobe_again_by_todays_rule(
    tiny_model, tmp_path, monkeypatch, capsys
):
    from dphr_haystack.cli import main as dphr
    from dphr_haystack.index import auto

    index = PhraseIndex.create(tiny_model, path=tmp_path / "a")
    monkeypatch.setattr(auto, "EXACT_LIMIT", 100)
    add_passages(index, tiny_model, _many_passages(60), progress=False)
    assert index.faiss_factory.startswith("IVF")
    tuned, structure = dict(index.search_params), dict(index.manifest["structure"])
    assert structure["target_recall"] == auto.TARGET_RECALL and structure["probe_k"] == auto.PROBE_K
    nlist = int(index.faiss_factory.split(",")[0].removeprefix("IVF"))
    # as an earlier rule left it: another nprobe, no record of the rule
    index.set_search_params(nprobe=nlist)
    for key in auto.TUNING_RECORD:
        index.manifest["structure"].pop(key, None)
    index.commit()
    file = index.manifest["faiss_file"]
    assert dphr(["reindex", "--index", str(tmp_path / "a"), "--retune"]) == 0
    assert f"'nprobe': {nlist}" in capsys.readouterr().out
    again = PhraseIndex.load(tmp_path / "a", model=tiny_model)
    assert again.search_params == tuned and again.manifest["structure"] == structure
    assert again.manifest["faiss_file"] == file  # the structure is kept, not rebuilt
    fixed = PhraseIndex.create(tiny_model, path=tmp_path / "f", faiss_factory="Flat")
    add_passages(fixed, tiny_model, tiny_passages(), progress=False)
    assert dphr(["reindex", "--index", str(tmp_path / "f"), "--retune"]) == 0
    assert "nothing to tune" in capsys.readouterr().out
    assert dphr(["reindex", "--index", str(tmp_path / "a"), "--retune", "--nprobe", "2"]) == 2
    assert "--retune keeps the structure in place: drop --nprobe" in capsys.readouterr().err


def test_structure_options_auto_would_not_read_are_refused(tiny_model, tmp_path, capsys):
    from dphr_haystack.cli import main as dphr

    index = PhraseIndex.create(tiny_model, path=tmp_path / "a")
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    out = ["reindex", "--index", str(tmp_path / "a"), "--out", str(tmp_path / "b")]
    for options in (["--nprobe", "2"], ["--train-size", "1000", "--on-disk"], ["--nlist", "2"]):
        assert dphr([*out, *options]) == 2
        assert f"chosen and tuned for the index's size: {options[0]}" in capsys.readouterr().err
    assert dphr([*out, "--faiss-factory", "IVF2,Flat", "--nlist", "4"]) == 2
    assert "a --faiss-factory string names its own lists" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
    assert dphr([*out, "--type", "ivf-flat", "--nlist", "2", "--nprobe", "2"]) == 0
    assert PhraseIndex.load(tmp_path / "b").search_params["nprobe"] == 2


def test_retune_on_questions_tunes_to_their_recall_and_records_it(
    tiny_model, tiny_model_dir, tmp_path, monkeypatch, capsys, caplog
):
    from dphr_haystack.cli import main as dphr
    from dphr_haystack.index import auto

    index = PhraseIndex.create(tiny_model, path=tmp_path / "a")
    monkeypatch.setattr(auto, "EXACT_LIMIT", 100)
    add_passages(index, tiny_model, _many_passages(60), progress=False)
    nlist = int(index.faiss_factory.split(",")[0].removeprefix("IVF"))
    asked = [f"Which {w} is in topic {i}?" for i, w in enumerate("river city bridge tower museum king".split() * 5)]
    (tmp_path / "asked.txt").write_text("\n".join(asked) + "\n\n")
    command = ["reindex", "--index", str(tmp_path / "a"), "--retune", "--questions", str(tmp_path / "asked.txt")]
    assert dphr(command) == 2 and "does not record its model" in capsys.readouterr().err  # a model made in memory
    assert dphr([*command, "--model", str(tiny_model_dir)]) == 0
    assert "on 30 questions" in capsys.readouterr().out
    again = PhraseIndex.load(tmp_path / "a", model=tiny_model)
    structure = again.manifest["structure"]
    assert structure["tuned_on"] == "questions" and structure["probe_queries"] == 60
    assert structure["target_recall"] == auto.QUESTION_TARGET_RECALL
    # the recorded recall is the questions' own at the chosen parameters, at the target unless every list is probed
    q_start, q_end = tiny_model.encode_queries(asked, batch_size=64, precision="int8")
    queries, truth = auto.question_truth(
        np.concatenate([q_start, q_end]), again.storage.vectors.view(), again.codec.decode
    )
    params = again.search_params
    found = again.structure.probe_search(queries, truth.shape[1], params["nprobe"], params["refine"])
    assert auto.token_recall(truth, found).mean() == pytest.approx(structure["probe_recall"])
    assert structure["probe_recall"] >= auto.QUESTION_TARGET_RECALL or params["nprobe"] == nlist
    # the questions' vectors are kept beside the index: a rebuild (the index grew) tunes on them again
    kept = again.tuning_queries()
    assert kept is not None and kept.shape == (60, again.dim) and (tmp_path / "a" / TUNING_QUERIES).is_file()
    with caplog.at_level(logging.WARNING, logger="dphr_haystack.index.reindexing"), again.writing():
        again.build_auto_structure(progress=False)
    rebuilt = again.manifest["structure"]
    assert rebuilt["tuned_on"] == "questions" and rebuilt["tuning_queries"] == structure["tuning_queries"]
    assert rebuilt["probe_queries"] == 60 and "--retune --questions" not in caplog.text
    # a copy keeps them; one whose kept file was changed tunes on probes, and says so
    again.save(tmp_path / "b")
    copy = PhraseIndex.load(tmp_path / "b", model=tiny_model)
    assert np.array_equal(copy.tuning_queries(), kept)
    np.save(tmp_path / "b" / TUNING_QUERIES, kept[::-1])
    assert copy.tuning_queries() is None
    with caplog.at_level(logging.WARNING, logger="dphr_haystack.index.reindexing"), copy.writing():
        copy.build_auto_structure(progress=False)
    assert copy.manifest["structure"]["tuned_on"] == "probes" and "--retune --questions" in caplog.text
    assert "tuning_queries" not in copy.manifest["structure"]
    assert dphr(["reindex", "--index", str(tmp_path / "a"), "--retune"]) == 0  # probes again, the kept ones dropped
    tuned = PhraseIndex.load(tmp_path / "a", model=tiny_model)
    assert tuned.manifest["structure"]["tuned_on"] == "probes" and tuned.tuning_queries() is None
    # an index without a directory keeps them in memory
    memory = PhraseIndex.create(tiny_model)
    add_passages(memory, tiny_model, _many_passages(60), progress=False)
    memory.retune(np.concatenate([q_start, q_end]))
    assert np.array_equal(memory.tuning_queries(), np.concatenate([q_start, q_end]).astype(np.float32))
    with memory.writing():
        memory.build_auto_structure(progress=False)
    assert memory.manifest["structure"]["tuned_on"] == "questions"
    capsys.readouterr()
    (tmp_path / "none.txt").write_text("\n")
    assert (
        dphr(["reindex", "--index", str(tmp_path / "a"), "--retune", "--questions", str(tmp_path / "none.txt")]) == 2
    )
    assert "no questions in it" in capsys.readouterr().err
    assert dphr(["reindex", "--index", str(tmp_path / "a"), "--questions", str(tmp_path / "asked.txt")]) == 2
    assert "add --retune" in capsys.readouterr().err
    with pytest.raises(InvalidParameterError, match="retune queries of shape"):
        again.retune(np.zeros((4, again.dim + 1), dtype=np.float32))


def test_setting_search_params_applies_every_recorded_one_again(tiny_model, tmp_path, monkeypatch):
    import faiss

    from dphr_haystack.index import auto

    monkeypatch.setattr(auto, "EXACT_LIMIT", 100)
    index = PhraseIndex.create(tiny_model, path=tmp_path / "a")
    add_passages(index, tiny_model, _many_passages(60), progress=False)
    ivf = faiss.extract_index_ivf(index.faiss_index)
    index.set_search_params(nprobe=2, max_codes=300)
    index.structure.probe_search(index.vectors(slice(0, 4)).astype(np.float32), 5, 4, 2)  # a tuning's probe
    assert (ivf.nprobe, ivf.max_codes) == (4, 0)
    index.set_search_params(nprobe=1)
    assert (ivf.nprobe, ivf.max_codes) == (1, 300) and index.search_params["max_codes"] == 300
