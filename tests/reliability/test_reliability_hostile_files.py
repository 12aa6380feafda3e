"""Hostile directories and files: symbolic links planted where the library writes, failed first runs, undecodable
corpora, manifests and index files whose checksums were recomputed to hide impossible values.

Every case ends in a typed error naming the file (and line, for corpora), with nothing outside the directory written.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from dphr_haystack import PhraseIndex, dump_phrases
from dphr_haystack.cli import main as dphr
from dphr_haystack.encode.add import add_passages
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
    add_passages(index, tiny_model, tiny_passages()[:3], progress=False)
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
    add_passages(index, tiny_model, tiny_passages()[:2], progress=False)
    target_dir = tmp_path / "outside-dir"
    target_dir.mkdir()
    (target_dir / "keep").write_bytes(SECRET)
    (tmp_path / "linked-index").symlink_to(target_dir, target_is_directory=True)
    with pytest.raises(UnsafePathError, match="linked-index"):
        index.save(tmp_path / "linked-index")
    assert sorted(p.name for p in target_dir.iterdir()) == ["keep"]
    lock_target = _outside(tmp_path, "lock-target")
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / ".dphr.lock").symlink_to(lock_target)
    with pytest.raises(UnsafePathError, match="lock"):
        index.save(tmp_path / "locked")
    assert lock_target.read_bytes() == SECRET
    (tmp_path / ".old.lock").symlink_to(lock_target)  # where earlier versions kept the lock: left alone
    index.save(tmp_path / "old")
    assert lock_target.read_bytes() == SECRET and (tmp_path / ".old.lock").is_symlink()
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


@pytest.mark.parametrize("name", ["store.sqlite3", "store.sqlite3-wal"])
def test_store_database_and_save_refuse_links(tmp_path, model_dir, name):
    pytest.importorskip("haystack")
    from haystack.schema import Document

    from dphr_haystack.errors import IndexLoadError
    from dphr_haystack.nodes import PhraseDocumentStore

    shared = tmp_path / "shared"
    store = PhraseDocumentStore(path=str(shared), progress_bar=False)
    store.write_documents([Document(content="Paris is the capital of France.", id="p")])
    del store
    target = _outside(tmp_path, name)
    _plant_link(shared / name, target)
    before = target.read_bytes()
    with pytest.raises((UnsafePathError, IndexLoadError), match=name):
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


# ----------------------------------------------------------------- 6. a failed first run pins nothing
def test_a_mistyped_corpus_leaves_no_index_directory(tmp_path, tiny_model_dir, capsys):
    out = tmp_path / "X"
    args = ["index", "--model", str(tiny_model_dir), "--out", str(out), "--no-progress", "--device", "cpu"]
    assert dphr([*args, "--corpus", str(tmp_path / "typo.jsnol"), "--dtype", "int8"]) == 2
    assert "not found" in capsys.readouterr().err
    assert not out.exists()
    (tmp_path / "empty.jsonl").write_text('{"id": "a", "text": "  "}\n')
    assert dphr([*args, "--corpus", str(tmp_path / "empty.jsonl")]) == 2
    assert not out.exists()
    (tmp_path / "latin1.jsonl").write_bytes('{"id": "a", "text": "café"}\n'.encode("latin-1"))
    assert dphr([*args, "--corpus", str(tmp_path / "latin1.jsonl")]) == 2
    assert not out.exists()
    from tests.conftest import tiny_passages

    # the corrected run builds with the settings it asks for (nothing pinned by the failed ones)
    assert dphr([*args, "--corpus", str(_corpus(tmp_path / "c.jsonl", tiny_passages())), "--dtype", "int8"]) == 0
    assert PhraseIndex.load(out).codec.dtype == "int8"


def test_a_dump_with_a_mistyped_corpus_leaves_no_directory(tmp_path, tiny_model):
    from dphr_haystack.errors import CorpusFormatError

    with pytest.raises(CorpusFormatError, match="not found"):
        dump_phrases(tiny_model, tmp_path / "typo.jsnol", tmp_path / "dump", progress=False)
    assert not (tmp_path / "dump").exists()


@pytest.mark.parametrize(
    "option, value, built",
    [
        ("--dtype", "int8", "float16"),
        ("--filter-threshold", "0.5", "none"),
        ("--faiss-factory", "IVF4,Flat", "auto"),
    ],
)
def test_a_resumed_index_refuses_conflicting_settings(tmp_path, tiny_model_dir, capsys, option, value, built):
    from tests.conftest import tiny_passages

    out = tmp_path / "index"
    corpus = _corpus(tmp_path / "c.jsonl", tiny_passages())
    args = ["index", "--model", str(tiny_model_dir), "--out", str(out), "--no-progress", "--device", "cpu"]
    args += ["--corpus", str(corpus)]
    assert dphr([*args, "--filter-threshold", "none", "--chunk-size", "2"]) == 0
    manifest = (out / "manifest.json").read_bytes()
    capsys.readouterr()
    assert dphr([*args, option, value]) == 2
    err = capsys.readouterr().err
    setting = option[2:].replace("-", "_")
    assert f"was built with {setting}={built!r}" in err and f"this run asks {setting}=" in err and value in err
    assert (out / "manifest.json").read_bytes() == manifest  # refused before any write
    assert dphr([*args, option, built]) == 0  # the index's own settings resume fine
    assert dphr(args) == 0  # as does leaving the options out


def test_check_settings_compares_what_the_index_was_built_with(tmp_path, tiny_model):
    from dphr_haystack.errors import SettingsConflictError

    index = PhraseIndex.create(tiny_model, path=tmp_path / "i", faiss_factory="IVF4,Flat", filter_threshold=0.0)
    index.check_settings("float16", 0.0, "IVF4, Flat")
    for asked in (
        {"dtype": "int8"},
        {"filter_threshold": "none"},
        {"filter_threshold": 0.25},
        {"faiss_factory": "auto"},
        {"key_vectors": 8},
    ):
        with pytest.raises(SettingsConflictError, match=str(tmp_path / "i")):
            index.check_settings(**asked)


# ----------------------------------------------------------------- 7. corpus files: typed errors naming file:line
def _gzip(data: bytes) -> bytes:
    import gzip

    return gzip.compress(data)


JSONL = "".join(json.dumps({"id": f"p{i}", "text": f"Passage number {i}."}) + "\n" for i in range(3000)).encode()


@pytest.mark.parametrize(
    "name, content, match",
    [
        ("plain.jsonl.gz", JSONL, r"plain.jsonl.gz:1: not a valid gzip file"),
        ("cut.jsonl.gz", _gzip(JSONL)[: len(_gzip(JSONL)) // 2], r"cut.jsonl.gz:\d+: the gzip stream ends early"),
        ("flipped.jsonl.gz", _gzip(JSONL)[:-6] + b"\0\0\0\0\0\0", r"flipped.jsonl.gz:\d+: not a valid gzip file"),
        ("latin1.jsonl", b'{"id": "a", "text": "ok"}\n{"id": "b", "text": "caf\xe9"}\n', r"latin1.jsonl:2: not UTF-8"),
        (
            "latin1.json",
            b'{"data": [{"title": "T",\n "paragraphs": [{"context": "caf\xe9"}]}]}',
            r"latin1.json:2: not UTF",
        ),
        (
            "dup.jsonl",
            b'{"id": "a", "text": "x"}\n\n{"id": "a", "text": "y"}\n',
            r"dup.jsonl:3: duplicate passage id 'a'",
        ),
        ("deep.jsonl", b'{"id": "a", "text": "x"}\n' + b"[" * 100_000 + b"\n", r"deep.jsonl:2: not a JSON object"),
        ("deep.json", b"[" * 100_000, r"deep.json: JSON nested too deeply"),
        ("broken.json", b'{"data": [\n{"title": "T",,\n', r"broken.json:2: neither SQuAD JSON nor JSON lines"),
        ("text.jsonl", b'{"id": "a", "text": "x"}\n{"id": "b", "text": 5}\n', r"text.jsonl:2: text must be a string"),
    ],
)
def test_unreadable_corpora_raise_corpus_format_errors_naming_file_and_line(tmp_path, name, content, match):
    from dphr_haystack import read_corpus
    from dphr_haystack.errors import CorpusFormatError

    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(CorpusFormatError, match=match):
        list(read_corpus(path))


def test_a_byte_order_mark_is_accepted(tmp_path):
    from dphr_haystack import read_corpus

    bom = b"\xef\xbb\xbf"
    (tmp_path / "bom.jsonl").write_bytes(bom + b'{"id": "a", "text": "x"}\n{"id": "b", "text": "y"}\n')
    squad = json.dumps({"data": [{"title": "T", "paragraphs": [{"context": "c"}]}]}).encode()
    (tmp_path / "bom.json").write_bytes(bom + squad)
    (tmp_path / "bom.jsonl.gz").write_bytes(_gzip(bom + b'{"id": "g", "text": "z"}\n'))
    assert [p.id for p in read_corpus(tmp_path / "bom.jsonl")] == ["a", "b"]
    assert [p.id for p in read_corpus(tmp_path / "bom.json")] == ["T-0-0"]
    assert [p.id for p in read_corpus(tmp_path / "bom.jsonl.gz")] == ["g"]


# ----------------------------------------------------------------- 7 and 10. manifests and index files, re-checksummed
@pytest.fixture(scope="module")
def clean_index(tmp_path_factory, _tiny_model_session) -> Path:
    """A flat, on-disk index of the six tiny passages, one of them deleted."""
    from tests.conftest import tiny_passages

    path = tmp_path_factory.mktemp("hostile-index") / "index"
    index = PhraseIndex.create(_tiny_model_session, path=path, faiss_factory="Flat")
    add_passages(index, _tiny_model_session, tiny_passages(), progress=False)
    index.delete_passages([tiny_passages()[-1]["id"]])
    return path


def _tampered(clean: Path, folder: Path, mutate) -> Path:
    """A copy of ``clean`` changed by ``mutate(folder, manifest)``, its counts and checksums recomputed to match."""
    from dphr_haystack.index.storage import FILES, sha256_prefix

    shutil.copytree(clean, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    mutate(folder, manifest)
    manifest["passages_bytes"] = (folder / FILES["passages"]).stat().st_size
    manifest["counts"]["tombstones"] = (folder / FILES["tombstones"]).stat().st_size // 8
    sizes = {"tokens": None, "passages": None, "tombstones": None}
    manifest["checksums"] = {key: sha256_prefix(folder / FILES[key], size) for key, size in sizes.items()}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def _tombstones(*rows):
    import numpy as np

    def mutate(folder, manifest):
        np.asarray(rows, dtype=np.int64).tofile(folder / "tombstones.bin")

    return mutate


def _token(field: str, value: int, row: int = 0):
    import numpy as np

    from dphr_haystack.index.shards import TOKEN_DTYPE

    def mutate(folder, manifest):
        tokens = np.fromfile(folder / "tokens.bin", dtype=TOKEN_DTYPE)
        tokens[row][field] = value
        tokens.tofile(folder / "tokens.bin")

    return mutate


def _duplicate_id(folder, manifest):
    lines = (folder / "passages.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    records[2]["id"] = records[1]["id"]  # both live
    (folder / "passages.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _manifest(**changes):
    def mutate(folder, manifest):
        for key, value in changes.items():
            if key == "codec":
                manifest["codec"].update(value)
            else:
                manifest[key] = value

    return mutate


def test_a_recomputed_clean_copy_loads(clean_index, tmp_path, tiny_model):
    """The tampering helper alone (no change) leaves a valid index: the refusals below are the changes' doing."""
    folder = _tampered(clean_index, tmp_path / "copy", lambda folder, manifest: None)
    index = PhraseIndex.load(folder, model=tiny_model)
    assert index.num_live_passages == PhraseIndex.load(clean_index).num_live_passages == 5


@pytest.mark.parametrize(
    "mutate, match",
    [
        (_tombstones(-1), r"tombstones.bin is corrupted: tombstone -1 is not a passage row"),
        (_tombstones(5, 6), r"tombstones.bin is corrupted: tombstone 6 is not a passage row"),
        (_tombstones(5, 2**40), r"tombstone 1099511627776"),
        (_token("char_start", -(2**31)), r"tokens.bin is corrupted: token 0 .* spans characters -2147483648"),
        (_token("char_end", 2**31 - 1), r"tokens.bin is corrupted: token 0 .* outside its passage"),
        (_token("char_end", 0, row=3), r"tokens.bin is corrupted: token 3 "),  # end before start
        (_token("position", -5, row=2), r"tokens.bin is corrupted: token 2 "),
        (_duplicate_id, r"passages.jsonl is corrupted: passage id '.+' is live at rows 1 and 2"),
        (_manifest(codec={"scale": 1e-300}), r"codec scale must be between"),
        (_manifest(codec={"dtype": "int8", "scale": 1e300}), r"codec scale must be between"),
        (_manifest(codec={"scale": 0}), r"codec scale"),
        (_manifest(codec={"scale": float("nan")}), r"finite"),
        (_manifest(codec={"offset": float("inf")}), r"finite"),
        (_manifest(codec={"offset": 1e300}), r"codec offset"),
        (_manifest(search_params={"refine": "abc"}), r"search parameter refine='abc'"),
        (_manifest(search_params={"refine": 0}), r"refine=0"),
        (_manifest(search_params={"refine": 2.5}), r"refine=2.5"),
        (_manifest(search_params={"nprobe": 2**70}), r"nprobe"),
        (_manifest(search_params={"nprobe": -1}), r"nprobe"),
        (_manifest(search_params=[1, 2]), r"search_params=\[1, 2\] is not a mapping"),
    ],
)
def test_impossible_values_are_refused_on_load(clean_index, tmp_path, tiny_model, mutate, match):
    from dphr_haystack.errors import IndexLoadError

    folder = _tampered(clean_index, tmp_path / "index", mutate)
    for verify in (True, False):
        with pytest.raises(IndexLoadError, match=match):
            PhraseIndex.load(folder, model=tiny_model, verify=verify)


def test_deeply_nested_manifest_is_refused(clean_index, tmp_path):
    from dphr_haystack.errors import IndexLoadError

    folder = tmp_path / "index"
    shutil.copytree(clean_index, folder)
    (folder / "manifest.json").write_text("[" * 100_000)
    with pytest.raises(IndexLoadError, match="manifest.json is corrupted: JSON nested too deeply"):
        PhraseIndex.load(folder)


def test_search_params_not_for_this_structure_fail_at_load(tmp_path, tiny_model):
    """A FAISS file whose manifest sets a parameter the structure lacks: IndexLoadError at load, not at search."""
    from dphr_haystack.errors import IndexLoadError
    from tests.conftest import tiny_passages

    index = PhraseIndex.create(tiny_model, path=tmp_path / "hnsw", faiss_factory="HNSW8")
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    manifest = json.loads((tmp_path / "hnsw" / "manifest.json").read_text())
    manifest["search_params"] = {"nprobe": 4}
    (tmp_path / "hnsw" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexLoadError, match="nprobe"):
        PhraseIndex.load(tmp_path / "hnsw")


def test_any_os_error_while_loading_is_an_index_load_error(clean_index, tmp_path):
    from dphr_haystack.errors import IndexLoadError

    folder = tmp_path / "index"
    shutil.copytree(clean_index, folder)
    (folder / "passages.jsonl").unlink()
    (folder / "passages.jsonl").mkdir()  # a directory where a file goes: IsADirectoryError on read
    with pytest.raises(IndexLoadError, match="passages.jsonl"):
        PhraseIndex.load(folder, verify=False)


def test_a_bad_tombstone_appended_by_another_writer_fails_the_refresh(clean_index, tmp_path):
    """Catching up with another writer's commit validates what it appended, as a load does."""
    from dphr_haystack.errors import IndexLoadError

    folder = tmp_path / "index"
    shutil.copytree(clean_index, folder)
    reader = PhraseIndex.load(folder)
    _tampered(folder, tmp_path / "next", _tombstones(5, -1))
    for name in ("tombstones.bin", "manifest.json"):  # the "other writer" commits: files first, manifest last
        os.replace(tmp_path / "next" / name, folder / name)
    with pytest.raises(IndexLoadError, match="tombstone -1"):
        reader.refresh()
    assert reader.num_live_passages == 5  # nothing of the bad commit was applied


def test_set_search_params_refuses_what_the_loader_would(clean_index, tmp_path):
    """No write leaves a manifest the loader refuses: set_search_params applies the loader's rule first."""
    from dphr_haystack.errors import InvalidParameterError

    folder = tmp_path / "index"
    shutil.copytree(clean_index, folder)
    index = PhraseIndex.load(folder)
    manifest = (folder / "manifest.json").read_bytes()
    for params in ({"refine": "abc"}, {"refine": 2.5}, {"refine": 0}, {"nprobe": 2**70}):
        with pytest.raises(InvalidParameterError):
            index.set_search_params(**params)
    assert (folder / "manifest.json").read_bytes() == manifest
    index.set_search_params(refine=2)
    assert PhraseIndex.load(folder).search_params["refine"] == 2


def test_a_planted_link_named_like_a_swapped_out_copy_is_not_moved_into_place(tmp_path, clean_index):
    """Recovering an interrupted save moves ``.<name>.old-<pid>`` back only when it is a real directory."""
    import subprocess

    from dphr_haystack.errors import IndexLoadError

    dead = subprocess.Popen(["true"])
    dead.wait()
    outside = tmp_path / "outside-index"
    shutil.copytree(clean_index, outside)
    (tmp_path / f".index.old-{dead.pid}").symlink_to(outside, target_is_directory=True)
    with pytest.raises(IndexLoadError, match="not found"):
        PhraseIndex.load(tmp_path / "index")
    assert not (tmp_path / "index").exists()
    shutil.copytree(clean_index, tmp_path / f".real.old-{dead.pid}")  # a real leftover is still recovered
    assert PhraseIndex.load(tmp_path / "real").num_live_passages == 5
