"""Key vectors: an index whose FAISS structure searches a few k-means centroids of each passage and whose searcher
reads the passages they hit whole; kept, saved, caught up and rolled back like every other column."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dphr_haystack import IndexLoadError, InvalidParameterError, PhraseIndex, PhraseSearcher
from dphr_haystack.encode.add import add_passages
from dphr_haystack.index import auto
from dphr_haystack.index.keys import key_vectors, passage_centroids
from dphr_haystack.index.shards import ShardPiece
from tests.conftest import tiny_passages
from tests.scale.conftest import synthetic_shard

pytestmark = pytest.mark.unit


def test_centroids_find_separated_clusters_deterministically():
    rng = np.random.default_rng(3)
    centers = 10 * np.eye(4, 16, dtype=np.float32)
    members = np.repeat(np.arange(4), 6)
    x = centers[members] + 0.1 * rng.normal(size=(24, 16)).astype(np.float32)
    found, nearest = passage_centroids(x, 4)
    again = passage_centroids(x, 4)
    np.testing.assert_array_equal(found, again[0])
    np.testing.assert_array_equal(nearest, again[1])
    # one centroid per cluster, each near its mean, standing for a member of its own cluster
    order = np.argsort(members[nearest])
    np.testing.assert_array_equal(members[nearest][order], np.arange(4))
    for centroid, cluster in zip(found[order], range(4), strict=True):
        np.testing.assert_allclose(centroid, x[members == cluster].mean(axis=0), atol=1e-5)
    short, itself = passage_centroids(x[:3], 4)  # no more vectors than the budget: the vectors themselves
    np.testing.assert_array_equal(short, x[:3])
    np.testing.assert_array_equal(itself, [0, 1, 2])


def test_key_vectors_of_consecutive_passages_stand_for_their_own_rows():
    rng = np.random.default_rng(0)
    stored = rng.normal(size=(40, 8)).astype(np.float16)
    counts = np.array([3, 30, 0, 7])
    vectors, rows = key_vectors(stored, counts, 100, 4, lambda v: v.astype(np.float32))
    assert vectors.shape == (3 + 4 + 4, 8) and vectors.dtype == np.float32
    np.testing.assert_array_equal(rows[:3], [100, 101, 102])
    assert np.all((rows[3:7] >= 103) & (rows[3:7] < 133)) and np.all((rows[7:] >= 133) & (rows[7:] < 140))
    with pytest.raises(ValueError, match="add up to"):
        key_vectors(stored, np.array([3, 3]), 0, 4, lambda v: v.astype(np.float32))


@pytest.mark.parametrize("budget", [0, -1, 2.5, True, "8"])
def test_a_key_budget_must_be_a_positive_integer(tiny_model, budget):
    with pytest.raises(InvalidParameterError, match="key_vectors"):
        PhraseIndex.create(tiny_model, key_vectors=budget)


def _keyed(tiny_model, path, budget=4, passages=60, tokens=10, **create):
    index = PhraseIndex.create(tiny_model, path=path, key_vectors=budget, **create)
    index.add_shard(synthetic_shard(passages, tokens, tiny_model.hidden_size))
    return index


def test_faiss_searches_the_keys_and_answers_with_the_rows_they_stand_for(tiny_model, tmp_path):
    index = _keyed(tiny_model, tmp_path / "idx")
    keys, rows = index.storage.keys.view(), index.storage.key_rows.view()
    assert index.key_vectors == 4 and index.num_searched_vectors == len(keys) == len(rows) == 60 * 4
    assert index.faiss_index.ntotal == 240 and len(index) == 600
    assert index.manifest["counts"]["keys"] == 240 and "key_rows" in index.manifest["checksums"]
    queries = np.random.default_rng(4).normal(size=(6, index.dim)).astype(np.float32)
    scores, found = index.search_tokens(queries, 1)
    exact = queries @ index.codec.decode(keys).T  # the best key by inner product, as the row it stands for
    np.testing.assert_array_equal(found[:, 0], rows[exact.argmax(axis=1)])
    np.testing.assert_allclose(scores[:, 0], exact.max(axis=1), rtol=1e-4)
    # every key of a passage stands for one of its rows
    passage_of_key = np.repeat(np.arange(60), 4)
    np.testing.assert_array_equal(index.tokens["passage"][rows], passage_of_key)
    loaded = PhraseIndex.load(tmp_path / "idx")
    np.testing.assert_array_equal(loaded.search_tokens(queries, 5)[1], index.search_tokens(queries, 5)[1])
    copy = tmp_path / "copy"
    index.save(copy)
    np.testing.assert_array_equal(
        PhraseIndex.load(copy).search_tokens(queries, 5)[1], index.search_tokens(queries, 5)[1]
    )


def test_key_rows_that_leave_the_stored_rows_fail_the_load(tiny_model, tmp_path):
    index = _keyed(tiny_model, tmp_path / "idx")
    rows = np.fromfile(tmp_path / "idx" / "key_rows.bin", dtype="<i8")
    rows[3] = len(index) + 5
    rows.tofile(tmp_path / "idx" / "key_rows.bin")
    with pytest.raises(IndexLoadError, match="key_rows.bin is corrupted"):
        PhraseIndex.load(tmp_path / "idx")
    with pytest.raises(IndexLoadError, match="key rows outside"):
        PhraseIndex.load(tmp_path / "idx", verify=False)
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["format_version"] == 2  # a library from before key vectors refuses it
    for bad, message in (
        ({"key_vectors": 0}, "key_vectors 0"),
        ({"key_vectors": "8"}, "key_vectors '8'"),
        ({"format_version": 1}, "format version 1 .key_vectors 4."),  # keys an index of version 1 cannot have
        ({"counts": {**manifest["counts"], "keys": -1}}, "-1 keys"),
    ):
        (tmp_path / "idx" / "manifest.json").write_text(json.dumps({**manifest, **bad}))
        with pytest.raises(IndexLoadError, match=message):
            PhraseIndex.load(tmp_path / "idx")


def test_a_reader_catches_up_with_the_keys_another_writer_added(tiny_model, tmp_path):
    writer = _keyed(tiny_model, tmp_path / "idx")
    reader = PhraseIndex.load(tmp_path / "idx")
    writer.add_shard(synthetic_shard(20, 3, tiny_model.hidden_size, seed=1, prefix="t"))  # 3 tokens: 3 keys each
    writer.delete_passages(["s0"])
    assert reader.refresh() is True
    assert reader.num_searched_vectors == writer.num_searched_vectors == 240 + 60
    assert reader.faiss_index.ntotal == 300 and reader.num_live_passages == 79
    queries = np.random.default_rng(5).normal(size=(6, reader.dim)).astype(np.float32)
    np.testing.assert_array_equal(reader.search_tokens(queries, 300)[1], writer.search_tokens(queries, 300)[1])
    assert set(reader.search_tokens(queries, 300)[1].ravel()) == set(reader.storage.key_rows.view())


def test_a_failed_add_rolls_the_keys_back(tiny_model, tmp_path):
    index = _keyed(tiny_model, tmp_path / "idx")
    shard = synthetic_shard(10, 10, tiny_model.hidden_size, seed=2, prefix="f")

    def pieces():
        yield ShardPiece(shard.vectors[:50], shard.tokens[:50])
        raise RuntimeError("encoding failed")

    with pytest.raises(RuntimeError, match="encoding failed"):
        index.append_stream(shard.passages, pieces(), shard.codec)
    assert index.num_searched_vectors == index.faiss_index.ntotal == 240
    reloaded = PhraseIndex.load(tmp_path / "idx")
    assert reloaded.num_searched_vectors == 240 and reloaded.num_passages == 60
    index.add_shard(shard)  # the next write starts from the committed keys
    assert PhraseIndex.load(tmp_path / "idx").num_searched_vectors == 280


def test_ivf_and_auto_structures_are_built_over_the_keys(tiny_model, tmp_path, monkeypatch):
    index = _keyed(tiny_model, tmp_path / "idx", passages=200)
    index.reindex("IVF8,Flat", progress=False)
    index.set_search_params(nprobe=8)
    assert index.faiss_index.ntotal == 800
    queries = np.random.default_rng(6).normal(size=(6, index.dim)).astype(np.float32)
    exact = queries @ index.codec.decode(index.storage.keys.view()).T
    found = index.search_tokens(queries, 1)[1][:, 0]
    np.testing.assert_array_equal(found, index.storage.key_rows.view()[exact.argmax(axis=1)])
    monkeypatch.setattr(auto, "EXACT_LIMIT", 300)  # auto sizes its structure by the keys (800), not the rows (2,000)
    grown = _keyed(tiny_model, tmp_path / "auto", passages=200, faiss_factory="auto")
    assert grown.manifest["structure"]["built_for"] == 800 and grown.faiss_index.ntotal == 800
    assert "IVF" in grown.faiss_factory


def test_searching_keys_that_cover_every_token_answers_as_searching_every_token(tiny_model, tmp_path):
    plain = PhraseIndex.create(tiny_model)
    keyed = PhraseIndex.create(tiny_model, key_vectors=4096)  # no passage has more tokens: its keys are its vectors
    for index in (plain, keyed):
        add_passages(index, tiny_model, tiny_passages(), progress=False)
    assert keyed.num_searched_vectors == len(keyed) == len(plain)
    questions = ["Who wrote Hamlet?", "Where is the Eiffel Tower?", "When was Python released?"]
    for unit in ("phrase", "passage", "document"):
        # the best c starts and ends of the passages the best 2c tokens hit are the best c of the index
        want = PhraseSearcher(plain, tiny_model, unit=unit, top_k=5).search_batch(questions)
        got = PhraseSearcher(keyed, tiny_model, unit=unit, top_k=5).search_batch(questions)
        assert got == want and all(len(hits) for hits in got)
    keyed.delete_passages(["p3"])
    hits = PhraseSearcher(keyed, tiny_model, unit="phrase", top_k=20).search("Who wrote Hamlet?")
    assert len(hits) == 20 and all(h.passage_id != "p3" for h in hits)


def test_keys_keep_the_lower_row_of_equal_scores_as_searching_every_vector_does(tiny_model):
    # copies of a passage score alike: which copy a search keeps at the cut must not depend on how it selects
    copies = [dict(p, id=f"{p['id']}-{copy}") for p in tiny_passages() for copy in "ab"]
    plain, keyed = PhraseIndex.create(tiny_model), PhraseIndex.create(tiny_model, key_vectors=4096)
    for index in (plain, keyed):
        add_passages(index, tiny_model, copies, progress=False)
    questions = ["Who wrote Hamlet?", "Where is the Eiffel Tower?", "When was Python released?", "Who made it?"]
    q_start, q_end = tiny_model.encode_queries(questions)
    for candidates in (1, 2, 3, 5):
        for unit in ("phrase", "passage"):
            want = PhraseSearcher(plain, tiny_model).search_vectors(q_start, q_end, unit, 5, candidates=candidates)
            got = PhraseSearcher(keyed, tiny_model).search_vectors(q_start, q_end, unit, 5, candidates=candidates)
            assert got == want, (candidates, unit)


def test_two_keys_a_passage_still_find_and_read_whole_passages(tiny_model, tmp_path):
    index = PhraseIndex.create(tiny_model, path=tmp_path / "idx", key_vectors=2)
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    assert index.num_searched_vectors == 2 * index.num_passages < len(index)
    hits = PhraseSearcher(index, tiny_model, unit="phrase", top_k=10).search("Who wrote Hamlet?")
    assert len(hits) == 10
    # spans start and end at tokens that are no key's stand-in: the passages hit were read whole
    rows = index.storage.key_rows.view()
    stand_ins = set(zip(index.tokens["passage"][rows].tolist(), index.tokens["position"][rows].tolist(), strict=True))
    spans = [(index.passage_row(h.passage_id), h.start_token, h.end_token) for h in hits]
    assert any((row, start) not in stand_ins or (row, end) not in stand_ins for row, start, end in spans)


def test_dphr_index_makes_a_keyed_index_and_a_resume_keeps_its_budget(tmp_path, tiny_model_dir, capsys):
    from dphr_haystack.cli import main as dphr

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in tiny_passages()))
    args = ["index", "--model", str(tiny_model_dir), "--out", str(tmp_path / "i"), "--corpus", str(corpus)]
    args += ["--no-progress", "--device", "cpu"]
    assert dphr([*args, "--key-vectors", "3", "--chunk-size", "2"]) == 0
    assert "18 key vectors searched" in capsys.readouterr().out  # 6 passages, 3 keys each
    assert PhraseIndex.load(tmp_path / "i").key_vectors == 3
    assert dphr([*args, "--key-vectors", "8"]) == 2
    assert "was built with key_vectors=3; this run asks key_vectors=8" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # out of range: refused by the parser
        dphr([*args, "--key-vectors", "0"])
    assert "key_vectors=0 is out of range" in capsys.readouterr().err
    assert dphr(args) == 0 and dphr([*args, "--key-vectors", "3"]) == 0


def test_a_copy_with_key_vectors_keeps_the_live_passages_and_their_vectors(tiny_model, tmp_path, capsys):
    from dphr_haystack.cli import main as dphr
    from dphr_haystack.index.merge import copy_with_key_vectors

    plain = PhraseIndex.create(tiny_model, path=tmp_path / "plain")
    add_passages(plain, tiny_model, tiny_passages(), progress=False)
    plain.delete_passages(["p1"])
    keyed = copy_with_key_vectors(plain, tmp_path / "keyed", 3, progress=False)
    assert keyed.key_vectors == 3 and keyed.num_passages == 5 and keyed.live_passage_ids() == plain.live_passage_ids()
    assert keyed.num_searched_vectors == keyed.faiss_index.ntotal == 15
    for pid in keyed.live_passage_ids():  # the same vectors and tokens: nothing encoded again
        mine, theirs = keyed.passage_row(pid), plain.passage_row(pid)
        got = slice(keyed.first_token[mine], keyed.first_token[mine] + keyed.num_tokens[mine])
        want = slice(plain.first_token[theirs], plain.first_token[theirs] + plain.num_tokens[theirs])
        np.testing.assert_array_equal(keyed.vectors(got), plain.vectors(want))
        np.testing.assert_array_equal(keyed.tokens[got]["char_start"], plain.tokens[want]["char_start"])
    back = copy_with_key_vectors(keyed, tmp_path / "back", None, progress=False)
    assert back.key_vectors is None and back.num_searched_vectors == len(back) == len(keyed)
    assert (
        dphr(["reindex", "--index", str(tmp_path / "plain"), "--out", str(tmp_path / "cli"), "--key-vectors", "2"])
        == 0
    )
    assert "searches 10 key vectors" in capsys.readouterr().out
    assert PhraseIndex.load(tmp_path / "cli").key_vectors == 2
    assert (
        dphr(["reindex", "--index", str(tmp_path / "cli"), "--out", str(tmp_path / "none"), "--key-vectors", "none"])
        == 0
    )
    assert (
        "searches every vector" in capsys.readouterr().out and PhraseIndex.load(tmp_path / "none").key_vectors is None
    )
    assert dphr(["reindex", "--index", str(tmp_path / "plain"), "--key-vectors", "2"]) == 2  # a copy needs --out
    assert "give --out DIR" in capsys.readouterr().err


def test_reindexing_by_type_sizes_the_lists_by_the_vectors_faiss_holds(tiny_model, tmp_path, capsys):
    from dphr_haystack.cli import main as dphr

    _keyed(tiny_model, tmp_path / "keyed", passages=200)  # 2,000 stored rows, 800 keys: IVF16, not IVF32
    assert dphr(["reindex", "--index", str(tmp_path / "keyed"), "--type", "ivf-flat"]) == 0
    assert "as IVF16,Flat" in capsys.readouterr().out
    plain = PhraseIndex.create(tiny_model, path=tmp_path / "plain")
    plain.add_shard(synthetic_shard(200, 10, tiny_model.hidden_size))
    out = ["--out", str(tmp_path / "copy"), "--key-vectors", "4", "--type", "ivf-flat"]
    assert dphr(["reindex", "--index", str(tmp_path / "plain"), *out]) == 0
    assert PhraseIndex.load(tmp_path / "copy").faiss_factory == "IVF16,Flat"


def test_a_key_vector_copy_of_an_empty_int8_index_calibrates_at_its_first_add(tiny_model, tmp_path):
    from dphr_haystack.index.merge import copy_with_key_vectors

    empty = PhraseIndex.create(tiny_model, path=tmp_path / "empty", dtype="int8")
    copy = copy_with_key_vectors(empty, tmp_path / "copy", 3, progress=False)
    fresh = PhraseIndex.create(tiny_model, dtype="int8", key_vectors=3)
    for index in (copy, fresh):
        add_passages(index, tiny_model, tiny_passages(), progress=False)
    assert copy.codec == fresh.codec and copy.codec.scale != 1.0
    np.testing.assert_array_equal(copy.vectors(np.arange(len(copy))), fresh.vectors(np.arange(len(fresh))))
