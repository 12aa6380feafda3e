"""The writer lock lives inside the directory it locks: nothing is left beside an index or a store, writers exclude
each other on a directory's first creation and across a directory swapped in by rename (processes included), and the
lock files earlier versions kept beside directories are removed once no writer holds them."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dphr_haystack import DirectoryLockedError, PhraseIndex
from dphr_haystack._util.atomic import replace_directory
from dphr_haystack._util.lock import LOCK_NAME, WriterLock, legacy_lock_file_for, lock_file_for
from dphr_haystack._util.nofollow import make_temp_dir
from dphr_haystack.encode.add import add_passages
from dphr_haystack.encode.dump import dump_phrases
from dphr_haystack.errors import InvalidParameterError
from dphr_haystack.index.merge import merge_dump
from tests.conftest import tiny_passages

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def _beside(path: Path) -> list[str]:
    """Hidden files beside ``path`` named after it (where earlier versions kept the lock)."""
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}"))


def _hold_in_another_process(code: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ}
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_indexes_stores_and_merges_keep_their_lock_inside(tmp_path, tiny_model):
    from dphr_haystack.nodes import PhraseDocumentStore

    index = PhraseIndex.create(tiny_model, path=tmp_path / "idx")
    add_passages(index, tiny_model, tiny_passages()[:3], progress=False)
    index.delete_passages(["p0"])
    index.save(tmp_path / "copy")
    index.save(tmp_path / "copy")  # over an existing copy: swapped in by rename
    dump_phrases(tiny_model, tiny_passages(), tmp_path / "dump", shard_size=3, progress=False)
    merge_dump(tmp_path / "dump", tmp_path / "merged", progress=False)
    store = PhraseDocumentStore(path=str(tmp_path / "store"), progress_bar=False)
    from haystack.schema import Document

    store.write_documents([Document(content="Paris is in France.", id="d1")])
    store.save(tmp_path / "snapshot")
    for name in ("idx", "copy", "merged", "store", "snapshot"):
        assert _beside(tmp_path / name) == [], name
        assert lock_file_for(tmp_path / name) == tmp_path / name / LOCK_NAME
        assert (tmp_path / name / LOCK_NAME).is_file(), name
    assert sorted(PhraseIndex.load(tmp_path / "copy").live_passage_ids()) == ["p1", "p2"]
    assert PhraseIndex.load(tmp_path / "merged").num_passages == 6
    assert PhraseDocumentStore(path=str(tmp_path / "snapshot"), progress_bar=False).get_document_count() == 1


def test_a_directory_made_only_for_the_lock_is_removed_again(tmp_path, tiny_model):
    path = tmp_path / "parent" / "new"
    with WriterLock(path).hold():
        assert (path / LOCK_NAME).is_file()
    assert not path.exists() and (tmp_path / "parent").is_dir()
    with WriterLock(path).hold():
        (path / "data").write_text("kept")
    assert (path / "data").read_text() == "kept"  # something was written: the directory stays
    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, tiny_passages()[:1], progress=False)
    with pytest.raises(InvalidParameterError, match="exists and is not a directory"):
        index.save(tmp_path / "parent" / "new" / "data")  # a file where the directory goes
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidParameterError, match="not a directory"):
        PhraseIndex.create(tiny_model, path=tmp_path / "file")
    assert (tmp_path / "file").read_text() == "x"


def test_the_first_writers_of_a_new_directory_exclude_each_other(tmp_path, tiny_model):
    path = tmp_path / "not-yet" / "idx"
    holder = _hold_in_another_process(
        "import time; from pathlib import Path; from dphr_haystack._util.lock import WriterLock\n"
        f"with WriterLock(Path({str(path)!r})).hold():\n"
        "    print('held', flush=True); time.sleep(30)"
    )
    try:
        assert path.is_dir() and (path / LOCK_NAME).is_file()  # the lock made the directory it locks
        with pytest.raises(DirectoryLockedError, match=rf"pid {holder.pid} "):
            PhraseIndex.create(tiny_model, path=path, lock_timeout=0.3)
        assert [p.name for p in path.iterdir()] == [LOCK_NAME]  # the second creator wrote nothing
    finally:
        holder.kill()
        holder.wait()
    # Two threads creating one new index: one creates it, the other waits, then finds it taken.
    outcomes: list[str] = []
    target = tmp_path / "raced" / "idx"

    def create() -> None:
        try:
            PhraseIndex.create(tiny_model, path=target, lock_timeout=30)
            outcomes.append("created")
        except InvalidParameterError as exc:
            outcomes.append("refused" if "not empty" in str(exc) else str(exc))

    threads = [threading.Thread(target=create) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(outcomes) == ["created", "refused"]
    assert PhraseIndex.load(target).num_passages == 0


def test_a_directory_swapped_in_by_rename_keeps_its_lock(tmp_path):
    path = tmp_path / "dir"
    path.mkdir()
    (path / "data").write_text("old")
    seen: dict[str, object] = {}

    def waiter() -> None:
        with WriterLock(path, timeout=30).hold():
            seen["acquired"] = time.monotonic()
            seen["data"] = (path / "data").read_text()
            try:  # while it holds the lock nobody else gets it: it holds the lock file of the current directory
                with WriterLock(path, timeout=0.2).hold():
                    seen["other"] = "got it"
            except DirectoryLockedError:
                seen["other"] = "excluded"

    holder = WriterLock(path)
    with holder.hold():
        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.3)  # the waiter waits on the lock file of the directory about to be replaced
        new = make_temp_dir(path)
        (new / "data").write_text("new")
        holder.lock_replacement(new)
        replace_directory(new, path)
        with pytest.raises(DirectoryLockedError):  # a writer coming after the swap waits for the same holder
            with WriterLock(path, timeout=0.2).hold():
                pass
        released = time.monotonic()
    thread.join(30)
    assert seen["acquired"] >= released and seen["data"] == "new" and seen["other"] == "excluded"
    with pytest.raises(RuntimeError, match="held"):
        WriterLock(path).lock_replacement(tmp_path)


_COUNTER = """
import sys, time
from pathlib import Path
from dphr_haystack._util.atomic import replace_directory, write_file_atomic
from dphr_haystack._util.lock import WriterLock
from dphr_haystack._util.nofollow import make_temp_dir
path, rounds = Path(sys.argv[1]), int(sys.argv[2])
lock = WriterLock(path, timeout=120)
ready = path.parent
(ready / f"ready-{sys.argv[3]}").touch()
while len(list(ready.glob("ready-*"))) < int(sys.argv[4]):
    time.sleep(0.01)
for i in range(rounds):
    with lock.hold():
        value = int((path / "counter").read_text()) if (path / "counter").exists() else 0
        time.sleep(0.002)  # widen the window a lost update needs
        if i % 2:  # the whole directory replaced by a copy (save), or the file replaced in place (a commit)
            new = make_temp_dir(path)
            (new / "counter").write_text(str(value + 1))
            lock.lock_replacement(new)
            replace_directory(new, path)
        else:
            write_file_atomic(path / "counter", str(value + 1))
"""


def test_processes_swapping_one_directory_never_lose_an_update(tmp_path):
    """Writers in several processes increment a counter, half of the time by replacing the whole directory with a
    copy: every increment counts, so no two of them ever held the lock at once, also across the swaps and the
    directory's first creation."""
    (tmp_path / "shared").mkdir()
    path = tmp_path / "shared" / "dir"  # created by the first writer's lock
    processes, rounds = 3, 30
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _COUNTER, str(path), str(rounds), str(n), str(processes)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(processes)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
    assert int((path / "counter").read_text()) == processes * rounds
    assert _beside(path) == [] and sorted(p.name for p in path.iterdir()) == [LOCK_NAME, "counter"]


def test_lock_files_of_earlier_versions_are_removed_once_free(tmp_path, tiny_model):
    path = tmp_path / "idx"
    index = PhraseIndex.create(tiny_model, path=path)
    add_passages(index, tiny_model, tiny_passages()[:3], progress=False)
    legacy = legacy_lock_file_for(path)
    assert legacy == tmp_path / ".idx.lock"
    legacy.write_text('{"pid": 1}')  # what an earlier version left: nobody holds it
    assert PhraseIndex.load(path).delete_passages(["p0"]) == 1
    assert not legacy.exists()
    # A writer of an earlier version holding it: the new writer waits for it to let go, then removes it.
    legacy.write_text("")
    holder = _hold_in_another_process(
        "import fcntl, os, time\n"
        f"fd = os.open({str(legacy)!r}, os.O_RDWR)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True); time.sleep(1.5)"
    )
    try:
        started = time.monotonic()
        assert PhraseIndex.load(path, lock_timeout=30).delete_passages(["p1"]) == 1
        assert time.monotonic() - started >= 0.5 and not legacy.exists()
    finally:
        holder.kill()
        holder.wait()
    # Anything but a regular file there is not ours to remove, and never followed.
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    legacy.symlink_to(target)
    assert PhraseIndex.load(path).delete_passages(["p2"]) == 1
    assert legacy.is_symlink() and target.read_text() == "keep"
