"""The phrase dump on a local Ray cluster: disjoint shards, a crashed worker retried, resume, merge = serial."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dphr_haystack import IndexLoadError, PhraseIndex, PhraseSearcher, dump_phrases, list_shards
from dphr_haystack.cli import main as dphr
from dphr_haystack.encode.add import add_passages
from dphr_haystack.errors import DistributedDumpError
from dphr_haystack.index.merge import merge_dump
from dphr_haystack.index.shards import PhraseShard
from tests.conftest import tiny_passages

pytestmark = pytest.mark.unit

QUERIES = ["capital of france", "who wrote hamlet", "highest mountain", "python language"]


def _corpus(tmp_path, copies: int = 4):
    records = [{**p, "id": f"{p['id']}-{c}"} for c in range(copies) for p in tiny_passages()]
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path, records


def _same_index(a: PhraseIndex, b: PhraseIndex) -> None:
    assert len(a) == len(b) and a.num_passages == b.num_passages
    assert np.array_equal(np.asarray(a.storage.vectors.view()), np.asarray(b.storage.vectors.view()))
    assert np.array_equal(a.tokens, b.tokens)
    assert a.passages == b.passages


def test_ray_dump_survives_a_killed_worker_and_merges_to_the_serial_index(ray_cluster, tiny_model, tmp_path):
    from dphr_haystack.encode.distributed import dump_distributed

    corpus, records = _corpus(tmp_path)  # 24 passages -> 8 shards of 3
    model_dir = tmp_path / "model"
    tiny_model.save(model_dir)
    out = tmp_path / "dump"
    summary = dump_distributed(model_dir, corpus, out, num_workers=2, shard_size=3, crash_once=(0, 1))
    assert summary.num_shards == 8 and summary.passages == 24
    by_worker = {r.worker: r for r in summary.workers}
    assert by_worker[0].attempts == 2 and by_worker[1].attempts == 1  # worker 0's process died once, Ray retried it
    assert by_worker[0].skipped_shards == 1 and by_worker[0].encoded_shards == 3  # the retry resumed after shard 0
    assert summary.encoded_shards == 7 and summary.skipped_shards == 1
    shard_ids = [[r["id"] for r in PhraseShard.load(s).passages] for s in list_shards(out)]
    flat = [pid for ids in shard_ids for pid in ids]
    assert flat == [r["id"] for r in records] and len(set(flat)) == 24  # disjoint, complete, in corpus order

    again = dump_distributed(model_dir, corpus, out, num_workers=2, shard_size=3)
    assert again.encoded_shards == 0 and again.skipped_shards == 8  # a re-run resumes: nothing left to do

    merged = merge_dump(out, tmp_path / "merged", model=tiny_model)
    serial_dump = tmp_path / "serial-dump"
    dump_phrases(tiny_model, corpus, serial_dump, shard_size=3, progress=False)
    _same_index(merged, merge_dump(serial_dump))  # bit-identical to a one-process dump
    built = PhraseIndex.create(tiny_model)
    add_passages(built, tiny_model, corpus, progress=False)
    assert np.array_equal(merged.tokens, built.tokens) and merged.passages == built.passages
    np.testing.assert_allclose(merged.vectors(), built.vectors(), atol=2e-3)
    search = lambda index: PhraseSearcher(index, tiny_model).search_batch(QUERIES, unit="passage", top_k=5)  # noqa: E731
    assert [[h.passage_id for h in hits] for hits in search(merged)] == [
        [h.passage_id for h in hits] for hits in search(built)
    ]


def test_from_dump_refuses_gaps_and_other_models(tiny_model, tmp_path, tiny_base_dir):
    from dphr_haystack import ModelMismatchError, PhraseModel, PhraseModelConfig

    out = tmp_path / "d"
    dump_phrases(tiny_model, tiny_passages(), out, shard_size=1, progress=False, worker=1, num_workers=2)
    with pytest.raises(IndexLoadError, match=r"\[0, 2"):
        merge_dump(out)
    dump_phrases(tiny_model, tiny_passages(), out, shard_size=1, progress=False, worker=0, num_workers=2)
    other = PhraseModel.from_base(tiny_base_dir, config=PhraseModelConfig(max_passage_length=40, passage_stride=8))
    with pytest.raises(ModelMismatchError):
        merge_dump(out, model=other)
    assert merge_dump(out, model=tiny_model).num_passages == 6


def test_cli_dump_by_hand_split_workers_then_merge_into_a_quantized_index(tiny_model, tmp_path, capsys):
    corpus, _ = _corpus(tmp_path, copies=2)
    model_dir = tmp_path / "model"
    tiny_model.save(model_dir)
    dump_dir = tmp_path / "dump"
    for worker in ("0", "1"):  # two independent processes (here: calls) split the shards
        assert (
            dphr(
                [
                    "dump",
                    "--model",
                    str(model_dir),
                    "--corpus",
                    str(corpus),
                    "--out",
                    str(dump_dir),
                    "--device",
                    "cpu",
                    "--shard-size",
                    "5",
                    "--worker",
                    worker,
                    "--num-workers",
                    "2",
                    "--no-progress",
                ]
            )
            == 0
        )
    assert (
        dphr(
            [
                "merge",
                "--dump",
                str(dump_dir),
                "--out",
                str(tmp_path / "sq8"),
                "--type",
                "ivf-sq8",
                "--nlist",
                "2",
                "--nprobe",
                "2",
            ]
        )
        == 0
    )
    index = PhraseIndex.load(tmp_path / "sq8", model=tiny_model)
    assert index.faiss_factory == "IVF2,SQ8" and index.num_passages == 12 and index.search_params == {"nprobe": 2}
    assert "worker 1/2" in capsys.readouterr().out


def test_cli_dump_with_ray_merge_and_reindex(ray_cluster, tiny_model, tmp_path, capsys):
    corpus, _ = _corpus(tmp_path, copies=2)
    model_dir = tmp_path / "model"
    tiny_model.save(model_dir)
    dump_dir, index_dir = tmp_path / "dump", tmp_path / "index"
    assert (
        dphr(
            [
                "dump",
                "--model",
                str(model_dir),
                "--corpus",
                str(corpus),
                "--out",
                str(dump_dir),
                "--ray",
                "--num-workers",
                "2",
                "--shard-size",
                "4",
            ]
        )
        == 0
    )
    assert json.loads((dump_dir / "dump-status.json").read_text())["state"] == "complete"
    assert dphr(["merge", "--dump", str(dump_dir), "--out", str(index_dir), "--model-path", str(model_dir)]) == 0
    assert (
        dphr(
            [
                "reindex",
                "--index",
                str(index_dir),
                "--out",
                str(tmp_path / "ivf"),
                "--type",
                "ivf-flat",
                "--nlist",
                "2",
                "--nprobe",
                "2",
            ]
        )
        == 0
    )
    ivf = PhraseIndex.load(tmp_path / "ivf", model=tiny_model)
    assert ivf.faiss_factory == "IVF2,Flat" and ivf.search_params == {"nprobe": 2}
    flat = PhraseIndex.load(index_dir, model=tiny_model)
    search = lambda index: PhraseSearcher(index, tiny_model).search_batch(QUERIES, unit="phrase", top_k=5)  # noqa: E731
    assert search(ivf) == search(flat)  # nprobe = nlist: exhaustive, so identical to flat
    out = capsys.readouterr().out
    assert "Ray workers" in out and "merged 12 passages" in out and "IVF2,Flat" in out


def test_a_worker_failing_beyond_its_retries_raises_and_the_dump_stays_unmergeable(ray_cluster, tiny_model, tmp_path):
    from dphr_haystack.encode.distributed import dump_distributed

    corpus, _ = _corpus(tmp_path, copies=2)  # 12 passages -> 4 shards of 3
    out = tmp_path / "dump"
    with pytest.raises(DistributedDumpError, match="re-run to resume"):
        dump_distributed(tiny_model, corpus, out, num_workers=2, shard_size=3, max_retries=0, crash_once=(1, 1))
    assert [p.name for p in list_shards(out)] == ["shard-000000", "shard-000001", "shard-000002"]
    with pytest.raises(IndexLoadError, match="not complete"):  # worker 1's second shard never got written
        merge_dump(out)
