"""Disk full: ENOSPC at every write step of an add, a delete and a save, and a real small file system filling up.

Every write step of one operation (counted by :class:`~tests.reliability._disk_full.DiskFull`) is made to fail in
turn. After each failure: the operation raised a typed error that says the disk is full; the same index object and a
fresh load of its directory hold exactly the last acknowledged state (same passages, vectors, token search results);
the next write succeeds and is visible after a reload, and the failed write's passages never appear.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from dphr_haystack import DphrError, PhraseIndex
from dphr_haystack.encode.add import add_passages
from tests.reliability._checks import assert_index_consistent
from tests.reliability._disk_full import DiskFull, assert_same_state, copy_index, index_state, small_tmpfs

VARIANTS = {  # name: (faiss_factory, dtype, passages in the base index)
    "flat": ("auto", "float16", 6),
    "ivf": ("IVF2,Flat", "float16", 6),
    "hnsw": ("HNSW8", "float16", 6),
    "int8-empty": ("auto", "int8", 0),  # the codec is calibrated by the add
    "ivf-empty": ("IVF2,Flat", "float16", 0),  # the structure is trained by the add
}


@pytest.fixture
def disk(monkeypatch) -> DiskFull:
    return DiskFull(monkeypatch)


def _passages(squad_passages: list[dict], first: int, count: int) -> list[dict]:
    return [dict(p) for p in squad_passages[first : first + count]]


def _base(tmp_path: Path, model, squad_passages: list[dict], variant: str) -> Path:
    factory, dtype, count = VARIANTS[variant]
    path = tmp_path / "base"
    index = PhraseIndex.create(model, path=path, faiss_factory=factory, dtype=dtype)
    if count:
        add_passages(index, model, _passages(squad_passages, 0, count), progress=False)
    return path


def _assert_disk_full_error(exc: BaseException) -> None:
    assert isinstance(exc, DphrError), f"untyped {type(exc).__name__}: {exc}"
    assert "disk is full" in str(exc).lower() and getattr(exc, "errno", None) == errno.ENOSPC, str(exc)


def _walk(disk: DiskFull, tmp_path: Path, base: Path, model, operation, next_write, check_extra=None) -> dict:
    """Run ``operation(index)`` on a fresh copy of ``base`` with ENOSPC at each of its write steps in turn."""
    counting = PhraseIndex.load(copy_index(base, tmp_path / "count"), model=model)
    with disk.armed():
        operation(counting)
    steps, names = disk.steps, list(disk.log)
    assert steps > 0
    after_ok = index_state(counting)
    reference = PhraseIndex.load(copy_index(base, tmp_path / "reference"), model=model)
    next_write(reference)
    want_next = index_state(PhraseIndex.load(reference.path, model=model))
    outcomes = {"typed": 0, "rolled forward": 0}
    failures = []
    for k in range(1, steps + 1):
        where = f"ENOSPC at step {k}/{steps} ({names[k - 1]})"
        try:
            outcomes[
                _fail_at(disk, k, tmp_path, base, model, operation, next_write, check_extra, after_ok, want_next)
            ] += 1
        except Exception as exc:  # every failure point is tried; all that broke are reported together
            failures.append(f"{where}: {type(exc).__name__}: {str(exc)[:300]}")
    print(
        f"{steps} write steps {names}; outcomes {outcomes}; {steps - len(failures)} of {steps} failure points passed"
    )
    assert not failures, f"{len(failures)} of {steps} failure points broke the index:\n" + "\n".join(failures)
    return {"steps": steps, **outcomes}


def _fail_at(disk, k, tmp_path, base, model, operation, next_write, check_extra, after_ok, want_next) -> str:
    """One failure point of :func:`_walk`; returns the outcome (the typed error, or a write rolled forward)."""
    where = f"ENOSPC at step {k}"
    work = copy_index(base, tmp_path / "work")
    index = PhraseIndex.load(work, model=model)
    before = index_state(index)
    error = None
    try:
        with disk.armed(k):
            operation(index)
    except Exception as exc:
        error, outcome, want = exc, "typed", before
    else:  # a failure after the commit point: the write is durable and acknowledged
        outcome, want = "rolled forward", after_ok
    assert_index_consistent(index)
    assert_same_state(index_state(index), want, f"{where}, same object")
    assert_same_state(index_state(PhraseIndex.load(work, model=model)), want, f"{where}, reloaded")
    if check_extra is not None:
        check_extra(index, k)
    if want is before:
        next_write(index)
        assert_index_consistent(index)
        assert_same_state(index_state(index), want_next, f"{where}, next write")
        assert_same_state(index_state(PhraseIndex.load(work, model=model)), want_next, f"{where}, next write reloaded")
    if error is not None:  # checked last, so that a broken state is what a failure reports first
        _assert_disk_full_error(error)
    return outcome


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_add_passages_disk_full_at_every_write_step(disk, tmp_path, tiny_model, squad_passages, variant):
    base = _base(tmp_path, tiny_model, squad_passages, variant)
    failed, following = _passages(squad_passages, 10, 4), _passages(squad_passages, 20, 3)
    failed_ids = {p["id"] for p in failed}

    def add(index):
        add_passages(index, tiny_model, failed, progress=False)

    def next_add(index):
        add_passages(index, tiny_model, following, progress=False)
        assert not failed_ids & {p["id"] for p in index.passages}, "a failed add's passages appeared"

    _walk(disk, tmp_path, base, tiny_model, add, next_add)


def test_add_shard_disk_full_at_every_write_step(disk, tmp_path, tiny_model, squad_passages):
    from dphr_haystack.corpus import read_corpus
    from dphr_haystack.encode.dump import encode_shard

    base = _base(tmp_path, tiny_model, squad_passages, "ivf")
    shard = encode_shard(
        tiny_model, list(read_corpus(_passages(squad_passages, 10, 3))), PhraseIndex.load(base).codec, None
    )

    def next_add(index):
        add_passages(index, tiny_model, _passages(squad_passages, 20, 2), progress=False)

    _walk(disk, tmp_path, base, tiny_model, lambda index: index.add_shard(shard), next_add)


def test_overwriting_add_disk_full_keeps_the_old_passages(disk, tmp_path, tiny_model, squad_passages):
    """``duplicates="overwrite"`` deletes the stored passages and adds the new ones in one transaction: a full disk
    loses neither."""
    base = _base(tmp_path, tiny_model, squad_passages, "flat")
    renewed = [{**p, "text": p["text"] + " Rewritten."} for p in _passages(squad_passages, 0, 2)]

    def overwrite(index):
        add_passages(
            index, tiny_model, renewed + _passages(squad_passages, 10, 2), duplicates="overwrite", progress=False
        )

    def next_add(index):
        add_passages(index, tiny_model, _passages(squad_passages, 20, 2), progress=False)

    _walk(disk, tmp_path, base, tiny_model, overwrite, next_add)


@pytest.mark.parametrize("variant", ["flat", "ivf", "hnsw"])
def test_delete_disk_full_at_every_write_step(disk, tmp_path, tiny_model, squad_passages, variant):
    base = _base(tmp_path, tiny_model, squad_passages, variant)
    ids = [p["id"] for p in _passages(squad_passages, 0, 6)]

    def delete(index):
        assert index.delete_passages([ids[1], ids[3]]) == 2

    def next_delete(index):
        assert index.delete_passages([ids[4]]) == 1
        assert {ids[1], ids[3]} <= set(index.live_passage_ids())

    _walk(disk, tmp_path, base, tiny_model, delete, next_delete)


@pytest.mark.parametrize("variant", ["flat", "ivf"])
def test_save_disk_full_at_every_write_step(disk, tmp_path, tiny_model, squad_passages, variant):
    """``save`` over another index directory: the target keeps its previous index, the source is untouched."""
    base = _base(tmp_path, tiny_model, squad_passages, variant)
    previous = PhraseIndex.create(tiny_model, path=tmp_path / "previous")
    add_passages(previous, tiny_model, _passages(squad_passages, 30, 2), progress=False)
    previous_state = index_state(previous)
    target = tmp_path / "target"

    def reset_target():
        copy_index(previous.path, target)

    def save(index):
        index.save(target)

    def next_save(index):
        reset_target()
        index.save(target)
        assert_same_state(index_state(PhraseIndex.load(target, model=tiny_model)), index_state(index), "saved copy")

    def target_kept(index, k):
        saved = PhraseIndex.load(target, model=tiny_model)
        state = index_state(saved)
        if state["passages"] != index_state(index)["passages"]:
            assert_same_state(state, previous_state, f"save target after ENOSPC at step {k}")
        leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".target.tmp")]
        assert not leftovers, f"temporary directories left behind: {leftovers}"
        reset_target()

    reset_target()
    _walk(disk, tmp_path, base, tiny_model, save, next_save, target_kept)


@pytest.mark.parametrize("operation", ["save to its own path", "set_search_params"])
def test_commit_only_writes_disk_full(disk, tmp_path, tiny_model, squad_passages, operation):
    """Writes that only commit: a save to the index's own path, persisted search parameters (rolled back in the
    structure too)."""
    base = _base(tmp_path, tiny_model, squad_passages, "ivf")

    def write(index):
        if operation == "set_search_params":
            index.set_search_params(nprobe=2)
        else:
            index.save(index.path)

    def next_add(index):
        add_passages(index, tiny_model, _passages(squad_passages, 20, 2), progress=False)

    _walk(disk, tmp_path, base, tiny_model, write, next_add)


def test_auto_structure_failing_after_the_add_committed(disk, tmp_path, tiny_model, squad_passages, monkeypatch):
    """The add commits, then the structure ``auto`` picks for the new size fails to build on a full disk: the add
    stands (no error; memory and disk agree) and the build is retried at the next add."""
    from dphr_haystack.index import auto

    base = _base(tmp_path, tiny_model, squad_passages, "flat")
    monkeypatch.setattr(auto, "EXACT_LIMIT", len(PhraseIndex.load(base)) + 1)  # the add outgrows exact search
    added, following = _passages(squad_passages, 10, 4), _passages(squad_passages, 20, 2)
    counting = PhraseIndex.load(copy_index(base, tmp_path / "count"), model=tiny_model)
    with disk.armed():
        add_passages(counting, tiny_model, added, progress=False)
    steps, add_steps = disk.steps, disk.log.index("write_index")  # the add commits before the first FAISS file
    assert counting.faiss_factory.startswith("IVF")
    failures = []
    for k in range(add_steps + 1, steps + 1):
        index = PhraseIndex.load(copy_index(base, tmp_path / "work"), model=tiny_model)
        try:
            with disk.armed(k):
                add_passages(index, tiny_model, added, progress=False)  # committed: no error
            assert_index_consistent(index)
            assert {p["id"] for p in added} <= set(index.live_passage_ids())
            assert_same_state(index_state(PhraseIndex.load(index.path)), index_state(index), "reloaded")
            add_passages(index, tiny_model, following, progress=False)
            assert index.faiss_factory.startswith("IVF"), "the structure was not built at the next add"
            assert_same_state(index_state(PhraseIndex.load(index.path)), index_state(index), "next add reloaded")
        except Exception as exc:
            failures.append(f"ENOSPC at step {k}/{steps}: {type(exc).__name__}: {str(exc)[:200]}")
    print(f"add + auto structure: {steps} write steps ({add_steps} the add's); {len(failures)} broke")
    assert not failures, "\n".join(failures)


# ----------------------------------------------------------------- dphr index
def _write_corpus(path: Path, passages: list[dict]) -> Path:
    path.write_text("".join(json.dumps(p) + "\n" for p in passages), encoding="utf-8")
    return path


def _dphr_index(model_dir: Path, corpus: Path, out: Path) -> int:
    from dphr_haystack.cli import main

    args = ["index", "--model", str(model_dir), "--corpus", str(corpus), "--out", str(out), "--chunk-size", "64"]
    return main([*args, "--batch-size", "8", "--device", "cpu", "--no-progress"])


def test_dphr_index_on_a_full_disk_exits_with_a_one_line_error(disk, tmp_path, model_dir, squad_passages, capsys):
    from dphr_haystack.model.loading import load_model

    model = load_model(model_dir)
    base = _base(tmp_path, model, squad_passages, "flat")
    want = index_state(PhraseIndex.load(base))
    corpus = _write_corpus(tmp_path / "more.jsonl", _passages(squad_passages, 10, 4))
    with disk.armed():
        assert _dphr_index(model_dir, corpus, copy_index(base, tmp_path / "count")) == 0
    steps = disk.steps
    capsys.readouterr()
    failures = []
    for k in range(1, steps + 1):
        out = copy_index(base, tmp_path / "out")
        try:
            with disk.armed(k):
                code = _dphr_index(model_dir, corpus, out)
            err = capsys.readouterr().err.strip()
            assert code == 2, f"exit code {code}"
            assert len(err.splitlines()) == 1 and err.startswith("dphr: error:") and "disk is full" in err, err
            assert_same_state(index_state(PhraseIndex.load(out, model=model)), want, "the index after the error")
            assert _dphr_index(model_dir, corpus, out) == 0  # the rerun resumes
        except Exception as exc:
            failures.append(f"ENOSPC at step {k}/{steps}: {type(exc).__name__}: {str(exc)[:200]}")
        capsys.readouterr()
    with capsys.disabled():
        print(f"dphr index: {steps} write steps; {steps - len(failures)} of {steps} failure points passed")
    assert not failures, "\n".join(failures)
    # a new index: a full disk while creating it, then a rerun builds it
    for k in range(1, 4):
        out = tmp_path / f"fresh-{k}"
        with disk.armed(k):
            assert _dphr_index(model_dir, corpus, out) == 2
        assert "disk is full" in capsys.readouterr().err
        assert _dphr_index(model_dir, corpus, out) == 0
        assert PhraseIndex.load(out).num_passages == 4


# ----------------------------------------------------------------- a real, small file system
@pytest.fixture
def small_fs(tmp_path):
    """A 2 MiB tmpfs (needs root and mount permission; skipped otherwise)."""
    with small_tmpfs(tmp_path, "2m") as mount:
        yield mount


def _free_bytes(path: Path) -> int:
    info = os.statvfs(path)
    return info.f_bavail * info.f_frsize


def _fill(mount: Path, leave: int) -> Path:
    """Fill the file system with one file until about ``leave`` bytes are free."""
    filler = mount / f"filler-{uuid.uuid4().hex[:6]}"
    size = max(_free_bytes(mount) - leave, 0)
    with filler.open("wb") as handle:
        try:
            handle.write(b"\0" * size)
            handle.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def test_add_on_a_filling_file_system(tmp_path, small_fs, tiny_model, squad_passages):
    base = _base(tmp_path, tiny_model, squad_passages, "flat")
    failed, following = _passages(squad_passages, 10, 4), _passages(squad_passages, 20, 2)
    failed_ids = {p["id"] for p in failed}
    probe = PhraseIndex.load(copy_index(base, tmp_path / "probe"), model=tiny_model)
    sizes = {f.name: f.stat().st_size for f in probe.path.iterdir()}
    add_passages(probe, tiny_model, failed, progress=False)
    after_ok = index_state(probe)
    grown = [(probe.path / name).stat().st_size - sizes[name] for name in ("vectors.bin", "tokens.bin")]
    need = sum(f.stat().st_size - sizes.get(f.name, 0) for f in probe.path.iterdir()) + sizes["manifest.json"]
    # ten levels across the add's write phases: vectors, tokens, passages.jsonl, the manifest, then room to spare
    vectors, tokens = grown[0], grown[0] + grown[1]
    levels = [0, vectors // 2, vectors + 4096, (vectors + tokens) // 2, tokens + 2048, tokens + 4096]
    levels = sorted(levels + [need - 4096, need, need + 8192, need + 65536])
    results = []
    for level in levels:
        work = copy_index(base, small_fs / "idx")
        index = PhraseIndex.load(work, model=tiny_model)
        with index.writing():  # the writer lock file exists before the disk fills
            pass
        before = index_state(index)
        filler = _fill(small_fs, level)
        free = _free_bytes(small_fs)
        try:
            add_passages(index, tiny_model, failed, progress=False)
        except Exception as exc:
            error, want, outcome = exc, before, "disk full"
        else:
            error, want, outcome = None, after_ok, "added"
        try:
            assert_index_consistent(index)
            assert_same_state(index_state(index), want, "same object")
            assert_same_state(index_state(PhraseIndex.load(work, model=tiny_model)), want, "reloaded")
            filler.unlink()
            add_passages(index, tiny_model, following, progress=False)
            ids = {p["id"] for p in PhraseIndex.load(work, model=tiny_model).passages}
            assert {p["id"] for p in following} <= ids, "the next add is not visible"
            assert (failed_ids & ids) == (failed_ids if outcome == "added" else set()), "a failed add's passages"
            if error is not None:
                _assert_disk_full_error(error)
        except Exception as exc:
            outcome = f"BROKEN {type(exc).__name__}: {str(exc)[:200]}"
        results.append((level, free, outcome))
        filler.unlink(missing_ok=True)
        shutil.rmtree(work)
    print(f"add of ~{need} B at free-space levels (asked, free, outcome): {results}")
    assert not [r for r in results if r[2].startswith("BROKEN")], results
    assert any(o == "disk full" for *_, o in results) and any(o == "added" for *_, o in results)
