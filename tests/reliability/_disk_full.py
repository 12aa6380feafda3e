"""Disk-full injection for the reliability tests: count the write steps of the index modules, fail the k-th.

A write step is a call that can run out of space: ``write``, ``flush`` or ``truncate`` of a file the index modules
open for writing (``open_no_follow`` in ``index.columns``, ``index.storage`` and ``_util.atomic``), ``os.fsync``,
``os.replace``, the atomic directory exchange, a temporary directory made by a save, a FAISS file write and, with
``database=True``, each statement and each commit of a store database (SQLite writes in C: there the step raises
``sqlite3.OperationalError("database or disk is full")``, as SQLite does).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dphr_haystack import DphrError, PhraseIndex


class DiskFull:
    """Installed with ``monkeypatch``; inside :meth:`armed` counts write steps and raises ENOSPC at ``fail_at``."""

    def __init__(self, monkeypatch, writers: tuple = (), temp_dirs: tuple = (), database: bool = False) -> None:
        """``writers``: further modules whose ``open_no_follow`` opens files for writing (a store's documents files);
        ``temp_dirs``: further modules whose ``make_temp_dir`` is a write step (a store's save); ``database``: the
        store database's statements and commits are write steps too."""
        import faiss

        from dphr_haystack._util import atomic
        from dphr_haystack._util import nofollow as nofollow_module
        from dphr_haystack.index import columns, phrase_index, storage, structures

        self.steps = 0
        self.fail_at: int | None = None
        self.active = False
        self.log: list[str] = []
        opener = nofollow_module.open_no_follow
        for module in (columns, storage, structures, atomic, *writers):
            monkeypatch.setattr(module, "open_no_follow", lambda *a, **k: _Handle(self, opener(*a, **k)))
        for owner, name in ((os, "fsync"), (os, "replace"), (atomic, "exchange"), (faiss, "write_index")):
            monkeypatch.setattr(owner, name, self._wrap(getattr(owner, name), name))
        for module in (phrase_index, *temp_dirs):
            monkeypatch.setattr(module, "make_temp_dir", self._wrap(module.make_temp_dir, "mkdir"))
        if database:
            self._wrap_database(monkeypatch)

    def _wrap_database(self, monkeypatch) -> None:
        from dphr_haystack.documents.database import StoreDatabase

        write, begin = StoreDatabase._write, StoreDatabase._begin

        def full() -> Exception:
            return sqlite3.OperationalError("database or disk is full")

        def statement(db, sql, rows):
            self.step("database write", full)
            return write(db, sql, rows)

        @contextlib.contextmanager
        def transaction(db, immediate: bool = True):
            with begin(db, immediate):
                yield
                if immediate and db._depth == 1:
                    self.step("database commit", full)

        monkeypatch.setattr(StoreDatabase, "_write", statement)
        monkeypatch.setattr(StoreDatabase, "_begin", transaction)

    def _wrap(self, function, name: str):
        def step(*args, **kwargs):
            self.step(name)
            return function(*args, **kwargs)

        return step

    def step(self, name: str, error: Callable[[], Exception] | None = None) -> None:
        if not self.active:
            return
        self.steps += 1
        self.log.append(name)
        if self.steps == self.fail_at:
            if error is not None:
                raise error()
            raise OSError(errno.ENOSPC, f"No space left on device (injected at step {self.steps}: {name})")

    @contextlib.contextmanager
    def armed(self, fail_at: int | None = None) -> Iterator[None]:
        """Count the write steps of the block; raise ENOSPC at the ``fail_at``-th (None: never)."""
        self.steps, self.fail_at, self.log, self.active = 0, fail_at, [], True
        try:
            yield
        finally:
            self.active = False


class _Handle:
    """A file handle whose writes are write steps of a :class:`DiskFull`."""

    def __init__(self, disk: DiskFull, handle) -> None:
        self._disk, self._handle = disk, handle

    def write(self, data):
        self._disk.step("write")
        return self._handle.write(data)

    def flush(self):
        self._disk.step("flush")
        return self._handle.flush()

    def truncate(self, *args):
        self._disk.step("truncate")
        return self._handle.truncate(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    def __enter__(self) -> _Handle:
        return self

    def __exit__(self, *exc) -> None:
        self._handle.close()


def index_state(index: PhraseIndex) -> dict[str, Any]:
    """What a reader of ``index`` sees: passages, deletions, stored vectors and tokens, token search results."""
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((6, index.dim)).astype(np.float32)
    k = max(1, min(8, len(index)))
    scores, rows = index.search_tokens(queries, k) if len(index) else (np.zeros(0), np.zeros(0))
    return {
        "passages": [dict(p) for p in index.passages],
        "deleted": index.deleted.tolist(),
        "live": sorted(index.live_passage_ids()),
        "vectors": index.vectors().round(3).tobytes() if len(index) else b"",
        "tokens": index.tokens.tobytes(),
        "rows": rows.tolist(),
        "scores": np.round(scores, 3).tolist(),
    }


def assert_same_state(got: dict[str, Any], want: dict[str, Any], what: str) -> None:
    for key in want:
        assert got[key] == want[key], f"{what}: {key} differs from the last acknowledged state"


def copy_index(src: Path, dst: Path) -> Path:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    return dst


# ----------------------------------------------------------------- walking a store operation's failure points
def assert_disk_full_error(exc: BaseException) -> None:
    assert isinstance(exc, DphrError), f"untyped {type(exc).__name__}: {exc}"
    assert "disk is full" in str(exc).lower() and getattr(exc, "errno", None) == errno.ENOSPC, str(exc)


def copy_store(src: Path, dst: Path) -> Path:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.lock", ".lock*"))
    return dst


def walk_failure_points(
    disk: DiskFull,
    tmp_path: Path,
    base: Path,
    open_store: Callable[[Path], Any],
    state: Callable[[Any], dict],
    operation: Callable[[Any], Any],
    next_write: Callable[[Any], Any],
    label: str,
) -> dict:
    """Run ``operation(store)`` on a copy of the store directory ``base`` with ENOSPC at each write step in turn."""
    counting = open_store(copy_store(base, tmp_path / "count"))
    with disk.armed():
        operation(counting)
    steps, names = disk.steps, list(disk.log)
    assert steps > 0
    after_ok = state(counting)
    reference = open_store(copy_store(base, tmp_path / "reference"))
    next_write(reference)
    want_next = state(open_store(tmp_path / "reference"))
    outcomes = {"typed": 0, "rolled forward": 0}
    failures = []
    for k in range(1, steps + 1):
        work = copy_store(base, tmp_path / f"work-{k}")
        try:
            store = open_store(work)
            before = state(store)
            error = None
            try:
                with disk.armed(k):
                    operation(store)
            except Exception as exc:
                error, outcome, want = exc, "typed", before
            else:
                outcome, want = "rolled forward", after_ok
            assert_store_state(state(store), want, "same object")
            assert_store_state(state(open_store(work)), want, "reopened")
            if want is before:
                next_write(store)
                assert_store_state(state(store), want_next, "next write")
                assert_store_state(state(open_store(work)), want_next, "next write reopened")
            if error is not None:
                assert_disk_full_error(error)
            outcomes[outcome] += 1
        except Exception as exc:
            failures.append(f"ENOSPC at step {k}/{steps} ({names[k - 1]}): {type(exc).__name__}: {str(exc)[:300]}")
        shutil.rmtree(work, ignore_errors=True)
    print(f"{label}: {steps} write steps {names}; outcomes {outcomes}; {steps - len(failures)} of {steps} passed")
    assert not failures, f"{label}: {len(failures)} of {steps} failure points broke the store:\n" + "\n".join(failures)
    return {"steps": steps, **outcomes}


def assert_store_state(got: dict, want: dict, what: str) -> None:
    for key in want:
        assert got[key] == want[key], (
            f"{what}: {key} differs from the last acknowledged state: {got[key]} != {want[key]}"
        )
    for doc_id in got["phrases"]:  # every phrase belongs to a stored document, encoded from its text
        assert doc_id in got["documents"], f"{what}: phrases of {doc_id!r}, which the store does not hold"


@contextlib.contextmanager
def small_tmpfs(parent: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``2m``, ``8m``) mounted under ``parent`` for the block; the test is skipped where mounting
    is not permitted (it needs root)."""
    import pytest

    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    mount = parent / "small-fs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
