"""Hostile directories and files: symbolic links planted where the library writes, failed first runs, undecodable
corpora, manifests and index files whose checksums were recomputed to hide impossible values.

Every case ends in a typed error naming the file (and line, for corpora), with nothing outside the directory written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from dphr_haystack import PhraseIndex, dump_phrases
from dphr_haystack.cli import main as dphr
from dphr_haystack.errors import UnsafePathError

pytestmark = pytest.mark.unit

SECRET = b"outside the index: must never change\n"


def _outside(tmp_path: Path, name: str, content: bytes = SECRET) -> Path:
    """A file outside every directory under test, that a planted link points to."""
    folder = tmp_path / "outside"
    folder.mkdir(exist_ok=True)
    target = folder / name
    target.write_bytes(content)
    return target


def _plant_link(file: Path, target: Path) -> None:
    """Replace ``file`` by a symbolic link to ``target``, which gets the file's bytes (so reads still succeed)."""
    if file.exists():
        target.write_bytes(file.read_bytes())
        file.unlink()
    file.symlink_to(target)


def _corpus(path: Path, passages: list[dict]) -> Path:
    path.write_text("".join(json.dumps(p) + "\n" for p in passages), encoding="utf-8")
    return path


# ----------------------------------------------------------------- 3. no writes through symbolic links
def test_open_no_follow_refuses_links_and_non_files(tmp_path):
    from dphr_haystack._util.nofollow import open_no_follow

    target = _outside(tmp_path, "target")
    (tmp_path / "link").symlink_to(target)
    for mode in ("wb", "w", "xb", "ab", "r+b"):
        with pytest.raises(UnsafePathError, match="link"):
            open_no_follow(tmp_path / "link", mode)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UnsafePathError, match="not a regular file"):
        open_no_follow(tmp_path / "fifo", "wb")  # a FIFO would block the open; refused at once instead
    assert target.read_bytes() == SECRET
    with open_no_follow(tmp_path / "plain", "w") as handle:
        handle.write("é")
    assert (tmp_path / "plain").read_text(encoding="utf-8") == "é"


def test_atomic_writes_use_fresh_temporary_names_and_refuse_a_linked_target(tmp_path):
    from dphr_haystack._util.atomic import write_file_atomic

    old_style = _outside(tmp_path, "old-tmp-target")
    (tmp_path / "manifest.json.tmp").symlink_to(old_style)  # the fixed temporary name writers used to share
    write_file_atomic(tmp_path / "manifest.json", "{}")
    assert (tmp_path / "manifest.json").read_text() == "{}" and old_style.read_bytes() == SECRET
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", "manifest.json.tmp", "outside"]
    target = _outside(tmp_path, "target")
    (tmp_path / "linked.json").symlink_to(target)
    with pytest.raises(UnsafePathError, match="linked.json"):
        write_file_atomic(tmp_path / "linked.json", "{}")
    assert target.read_bytes() == SECRET


@pytest.mark.parametrize("name", ["vectors.bin", "tokens.bin", "passages.jsonl", "manifest.json"])
def test_dphr_index_refuses_a_symlinked_index_file(tmp_path, tiny_model_dir, capsys, name):
    """A resumed ``dphr index`` whose directory holds a link where one of its files goes: exit 2, target intact."""
    from tests.conftest import tiny_passages

    passages = tiny_passages()
    first = _corpus(tmp_path / "first.jsonl", passages[:3])
    out = tmp_path / "index"
    args = ["index", "--model", str(tiny_model_dir), "--out", str(out), "--no-progress", "--device", "cpu"]
    assert dphr([*args, "--corpus", str(first)]) == 0
    target = _outside(tmp_path, name)
    _plant_link(out / name, target)
    before = target.read_bytes()
    capsys.readouterr()
    assert dphr([*args, "--corpus", str(_corpus(tmp_path / "all.jsonl", passages))]) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and str(out / name) in err
    assert target.read_bytes() == before


def test_stale_fixed_temporary_names_are_not_followed(tmp_path, tiny_model_dir):
    """Links at the temporary names writers used to share (``manifest.json.tmp``) are never written through."""
    from tests.conftest import tiny_passages

    out = tmp_path / "index"
    args = ["index", "--model", str(tiny_model_dir), "--out", str(out), "--no-progress", "--device", "cpu"]
    assert dphr([*args, "--corpus", str(_corpus(tmp_path / "a.jsonl", tiny_passages()[:2]))]) == 0
    target = _outside(tmp_path, "manifest-tmp")
    (out / "manifest.json.tmp").symlink_to(target)
    assert dphr([*args, "--corpus", str(_corpus(tmp_path / "b.jsonl", tiny_passages()))]) == 0
    assert target.read_bytes() == SECRET
    assert PhraseIndex.load(out).num_passages == len(tiny_passages())


def test_deleting_refuses_a_symlinked_tombstones_file(tmp_path, tiny_model):
    from tests.conftest import tiny_passages

    index = PhraseIndex.create(tiny_model, path=tmp_path / "index")
    index.add_passages(tiny_passages()[:3], tiny_model, progress=False)
    index.delete_passages([tiny_passages()[0]["id"]])
    target = _outside(tmp_path, "tombstones.bin")
    _plant_link(tmp_path / "index" / "tombstones.bin", target)
    before = target.read_bytes()
    with pytest.raises(UnsafePathError, match="tombstones.bin"):
        PhraseIndex.load(tmp_path / "index").delete_passages([tiny_passages()[1]["id"]])
    assert target.read_bytes() == before


def test_index_save_and_lock_refuse_links(tmp_path, tiny_model):
    from tests.conftest import tiny_passages

    index = PhraseIndex.create(tiny_model)
    index.add_passages(tiny_passages()[:2], tiny_model, progress=False)
    target_dir = tmp_path / "outside-dir"
    target_dir.mkdir()
    (target_dir / "keep").write_bytes(SECRET)
    (tmp_path / "linked-index").symlink_to(target_dir, target_is_directory=True)
    with pytest.raises(UnsafePathError, match="linked-index"):
        index.save(tmp_path / "linked-index")
    assert sorted(p.name for p in target_dir.iterdir()) == ["keep"]
    lock_target = _outside(tmp_path, "lock-target")
    (tmp_path / ".locked.lock").symlink_to(lock_target)
    with pytest.raises(UnsafePathError, match="lock"):
        index.save(tmp_path / "locked")
    assert lock_target.read_bytes() == SECRET
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # no temporary directory left behind


def test_dump_refuses_links(tmp_path, tiny_model):
    from tests.conftest import tiny_passages

    out = tmp_path / "dump"
    out.mkdir()
    settings_target = tmp_path / "outside" / "created-through-a-dangling-link.json"
    (out / "dump.json").symlink_to(settings_target)  # dangling: writing through it would create the target
    with pytest.raises(UnsafePathError, match="dump.json"):
        dump_phrases(tiny_model, tiny_passages(), out, shard_size=2, progress=False)
    assert not settings_target.exists()
    (out / "dump.json").unlink()
    shard_target = tmp_path / "outside-shard"
    shard_target.mkdir()
    (out / "shard-000001").symlink_to(shard_target, target_is_directory=True)
    with pytest.raises(UnsafePathError, match="shard-000001"):
        dump_phrases(tiny_model, tiny_passages(), out, shard_size=2, progress=False)
    assert list(shard_target.iterdir()) == []


@pytest.mark.parametrize("name", ["model.safetensors", "vocab.txt", "dphr_config.json", "encoder_config.json"])
def test_model_save_refuses_links(tmp_path, tiny_model, name):
    folder = tmp_path / "model"
    tiny_model.save(folder)
    target = _outside(tmp_path, name)
    _plant_link(folder / name, target)
    before = target.read_bytes()
    with pytest.raises(UnsafePathError, match=name):
        tiny_model.save(folder)
    assert target.read_bytes() == before
    assert not [p for p in folder.iterdir() if ".tmp-" in p.name]


def test_trainer_checkpoints_and_metrics_refuse_links(tmp_path, tiny_model):
    """The trainer's checkpoint directory, final model and metrics log are never written through links."""
    pytest.importorskip("transformers")
    from train.trainer import Trainer

    args = SimpleNamespace(keep_checkpoints=2)
    trainer = SimpleNamespace(is_main=True, out=tmp_path / "run", model=tiny_model, args=args)
    trainer.out.mkdir()
    Trainer._save_checkpoint(trainer, 1, {"step": 1})  # works: a complete checkpoint
    assert (trainer.out / "checkpoint-1" / "model" / "model.safetensors").is_file()
    target_dir = tmp_path / "outside-checkpoint"
    target_dir.mkdir()
    (trainer.out / "checkpoint-2").symlink_to(target_dir, target_is_directory=True)
    with pytest.raises(UnsafePathError, match="checkpoint-2"):
        Trainer._save_checkpoint(trainer, 2, {"step": 2})
    (trainer.out / "final").symlink_to(target_dir, target_is_directory=True)
    with pytest.raises(UnsafePathError, match="final"):
        Trainer._save_model(trainer, "final")
    assert list(target_dir.iterdir()) == []
    metrics = _outside(tmp_path, "metrics.jsonl")
    (trainer.out / "metrics.jsonl").symlink_to(metrics)
    with pytest.raises(UnsafePathError, match="metrics.jsonl"):
        Trainer._log(trainer, {"loss": 1.0})
    assert metrics.read_bytes() == SECRET
    assert not [p for p in trainer.out.iterdir() if ".tmp-" in p.name]


def test_store_journal_and_save_refuse_links(tmp_path, model_dir):
    pytest.importorskip("haystack")
    from haystack.schema import Document

    from dphr_haystack.nodes import PhraseDocumentStore

    shared = tmp_path / "shared"
    store = PhraseDocumentStore(path=str(shared), progress_bar=False)
    store.write_documents([Document(content="Paris is the capital of France.", id="p")])
    journal = next(p for p in shared.iterdir() if p.name.startswith("documents-"))
    target = _outside(tmp_path, "journal")
    _plant_link(journal, target)
    before = target.read_bytes()
    with pytest.raises(UnsafePathError, match=journal.name):
        PhraseDocumentStore(path=str(shared), progress_bar=False).write_documents(
            [Document(content="The Nile flows north.", id="n")]
        )
    assert target.read_bytes() == before
    memory = PhraseDocumentStore(progress_bar=False)
    memory.write_documents([Document(content="x y z", id="x")])
    target_dir = tmp_path / "outside-store"
    target_dir.mkdir()
    (tmp_path / "saved").symlink_to(target_dir, target_is_directory=True)
    with pytest.raises(UnsafePathError, match="saved"):
        memory.save(tmp_path / "saved")
    assert list(target_dir.iterdir()) == []
