"""Corpus readers, the resumable sharded dump, and the ``dphr`` command line."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from dphr_haystack import (
    CorpusFormatError,
    CorpusStats,
    EmptyCorpusError,
    ModelMismatchError,
    PhraseIndex,
    PhraseSearcher,
    dump_phrases,
    list_shards,
    read_corpus,
)
from dphr_haystack.cli import main as dphr
from dphr_haystack.encode.add import add_passages
from dphr_haystack.index.shards import PhraseShard
from tests.conftest import tiny_passages

pytestmark = pytest.mark.unit


def _write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_read_squad_json_gz(tmp_path):
    squad = {"data": [{"title": "T", "paragraphs": [{"context": "one", "qas": []}, {"context": " ", "qas": []}]}]}
    path = tmp_path / "s.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump(squad, handle)
    stats = CorpusStats()
    passages = list(read_corpus(path, stats))
    assert [(p.id, p.document_id, p.title, p.text) for p in passages] == [("T-0-0", "T", "T", "one")]
    assert stats.skipped_empty == 1


def test_read_jsonl_and_objects(tmp_path):
    path = _write_jsonl(
        tmp_path / "c.jsonl", [{"id": 1, "title": "a", "text": "x", "document_id": "d"}, {"id": "2", "text": "y"}]
    )
    passages = list(read_corpus(path))
    assert [(p.id, p.document_id) for p in passages] == [("1", "d"), ("2", "2")]
    assert [p.text for p in read_corpus(["first", "second"])] == ["first", "second"]


@pytest.mark.parametrize(
    "content, match",
    [
        ("not json at all", "SQuAD|JSON"),
        ('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', "duplicate"),
        ('{"id": "a", "text": 5}\n', "string"),
        ('{"id": "a", "text": "x"}\n[1, 2]\n', "JSON object"),
    ],
)
def test_bad_corpus_files(tmp_path, content, match):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(CorpusFormatError, match=match):
        list(read_corpus(path))


def test_missing_corpus_file(tmp_path):
    with pytest.raises(CorpusFormatError, match="not found"):
        list(read_corpus(tmp_path / "nope.jsonl"))


def test_dump_is_resumable_and_builds_the_same_index(tiny_model, tmp_path):
    out = tmp_path / "dump"
    first = dump_phrases(tiny_model, tiny_passages(), out, shard_size=2, progress=False)
    assert (first.encoded_shards, first.skipped_shards, first.passages) == (3, 0, 6)
    (out / "shard-000001" / "shard.json").unlink()  # as if the run died while writing shard 1
    again = dump_phrases(tiny_model, tiny_passages(), out, shard_size=2, progress=False)
    assert (again.encoded_shards, again.skipped_shards) == (1, 2)
    index = PhraseIndex.create(tiny_model)
    for shard_dir in list_shards(out):
        index.add_shard(PhraseShard.load(shard_dir))
    direct = PhraseIndex.create(tiny_model)
    add_passages(direct, tiny_model, tiny_passages(), progress=False)
    assert np.array_equal(index.vectors(), direct.vectors())
    assert np.array_equal(index.tokens, direct.tokens)
    q = ["capital of france"]
    assert PhraseSearcher(index, tiny_model).search_batch(q, unit="phrase") == PhraseSearcher(
        direct, tiny_model
    ).search_batch(q, unit="phrase")


def test_dump_workers_split_shards(tiny_model, tmp_path):
    out = tmp_path / "dump"
    a = dump_phrases(tiny_model, tiny_passages(), out, shard_size=1, progress=False, worker=0, num_workers=2)
    b = dump_phrases(tiny_model, tiny_passages(), out, shard_size=1, progress=False, worker=1, num_workers=2)
    assert a.encoded_shards == b.encoded_shards == 3
    assert len(list_shards(out)) == 6


def test_dump_refuses_other_settings_and_empty_corpus(tiny_model, tmp_path):
    dump_phrases(tiny_model, tiny_passages(), tmp_path / "d", shard_size=2, progress=False)
    with pytest.raises(ModelMismatchError, match="filter_threshold"):
        dump_phrases(tiny_model, tiny_passages(), tmp_path / "d", shard_size=2, filter_threshold=0.0, progress=False)
    with pytest.raises(EmptyCorpusError):
        dump_phrases(tiny_model, [{"id": "a", "text": ""}], tmp_path / "e", progress=False)


def test_int8_dump_shards_merge_into_one_codec(tiny_model, tmp_path):
    dump_phrases(tiny_model, tiny_passages(), tmp_path / "d", shard_size=3, dtype="int8", progress=False)
    index = PhraseIndex.create(tiny_model, dtype="int8")
    for shard_dir in list_shards(tmp_path / "d"):
        index.add_shard(PhraseShard.load(shard_dir))
    ref = PhraseIndex.create(tiny_model)
    add_passages(ref, tiny_model, tiny_passages(), progress=False)
    np.testing.assert_allclose(index.vectors(), ref.vectors(), atol=0.1)


def test_cli_end_to_end(tiny_base_dir, tmp_path, capsys):
    corpus = _write_jsonl(tmp_path / "c.jsonl", tiny_passages() + [{"id": "empty", "text": ""}])
    assert (
        dphr(
            ["model", "init", "--base", str(tiny_base_dir), "--out", str(tmp_path / "m"), "--max-passage-length", "64"]
        )
        == 0
    )
    assert (
        dphr(
            [
                "index",
                "--model",
                str(tmp_path / "m"),
                "--corpus",
                str(corpus),
                "--out",
                str(tmp_path / "i"),
                "--chunk-size",
                "2",
                "--no-progress",
            ]
        )
        == 0
    )
    assert "skipped 1 without text" in capsys.readouterr().out
    assert (
        dphr(["search", "--index", str(tmp_path / "i"), "--unit", "passage", "--top-k", "3", "--json", "capital?"])
        == 0
    )
    record = json.loads(capsys.readouterr().out.strip())
    assert record["unit"] == "passage" and len(record["results"]) == 3
    assert all(r["best_phrase"]["text"] for r in record["results"])
    assert (
        dphr(["search", "--index", str(tmp_path / "i"), "--top-k", "4", "--json", "--partial-words", "capital?"]) == 0
    )
    assert len(json.loads(capsys.readouterr().out.strip())["results"]) == 4
    # Re-running the same index command resumes and adds nothing twice.
    assert (
        dphr(
            [
                "index",
                "--model",
                str(tmp_path / "m"),
                "--corpus",
                str(corpus),
                "--out",
                str(tmp_path / "i"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert PhraseIndex.load(tmp_path / "i").num_passages == 6
    assert dphr(["search", "--index", str(tmp_path / "i"), "--unit", "sentence", "x"]) == 2
    assert "phrase, passage, document" in capsys.readouterr().err
    assert dphr(["search", "--index", str(tmp_path / "i"), "  "]) == 2
    assert dphr(["search", "--index", str(tmp_path / "nope"), "x"]) == 2
    assert "manifest.json" in capsys.readouterr().err
