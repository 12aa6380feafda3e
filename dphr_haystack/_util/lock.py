"""An exclusive inter-process writer lock on a directory (an index or a store).

The lock is an advisory ``flock`` on a file inside the directory, :data:`LOCK_NAME`. Taking it creates the
directory when it does not exist yet (parents included), so two first writers of a new path exclude each other too;
a directory the lock created and that still holds nothing else when the lock is released is removed again, so a
failed first write leaves no directory behind. The holder writes its pid, host, command and start time into the file,
so a second writer that gives up can name it. Readers never take the lock: writers commit by atomic renames of
append-only state, so a reader sees one committed state or the next.

Directories replaced as a whole (``save()``: a complete copy swapped in by rename) keep their lock semantics: the
holder takes the lock file of the replacement before the swap (:meth:`WriterLock.lock_replacement`), so the directory
the swap puts in place is locked by the same holder until it lets go, and a writer that was waiting on the replaced
directory's lock file finds, once it gets it, that it is no longer the lock file at the path, and waits on the new
one (every acquisition checks that the file it locked is still the directory's lock file).

A directory that cannot be written (a read-only mount, a directory that is not the writer's) raises
:class:`~dphr_haystack.errors.ReadOnlyStoreError` instead of looking locked.

The lock is re-entrant within one :class:`WriterLock` object (a write method calling another) and released when the
process dies, whatever kills it. ``flock`` locks belong to an open file, so two lock objects on one directory exclude
each other even inside one process.

Directories written by earlier versions kept the lock file beside the directory (``.<name>.lock``). A writer that
holds the new lock removes such a file once no process holds it (waiting for a writer of an earlier version that
does); writers of an earlier version and of this one should not write one directory at the same time.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import stat
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import DirectoryLockedError, InvalidParameterError, ReadOnlyStoreError, UnsafePathError
from ..params import check_param

logger = logging.getLogger(__name__)

DEFAULT_LOCK_TIMEOUT = 60.0  # seconds a writer waits for another writer of the same directory
LOCK_NAME = ".dphr.lock"  # the lock file inside a locked directory
_POLL_SECONDS = 0.05
_FLAGS = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)


def lock_file_for(directory: Path) -> Path:
    """The lock file of ``directory``: :data:`LOCK_NAME` inside it.

    Symbolic links on the way are resolved, so a writer reaching the directory through a link and one reaching it
    by its real path take the same lock."""
    return Path(os.path.realpath(directory)) / LOCK_NAME


def legacy_lock_file_for(directory: Path) -> Path:
    """Where earlier versions kept the lock file of ``directory``: the hidden sibling ``.<name>.lock``."""
    directory = Path(os.path.realpath(directory))
    return directory.with_name(f".{directory.name}.lock")


def is_lock_file(path: Path) -> bool:
    """Whether ``path`` is a directory's lock file (not part of what the directory holds)."""
    return path.name == LOCK_NAME


def directory_entries(directory: Path) -> list[Path]:
    """What ``directory`` holds, its lock file left out (none when it does not exist)."""
    if not directory.is_dir():
        return []
    return [entry for entry in directory.iterdir() if not is_lock_file(entry)]


def check_lock_timeout(timeout: float | None) -> float:
    """``timeout`` as a float ≥ 0 (None: the default), else InvalidParameterError."""
    if timeout is None:
        return DEFAULT_LOCK_TIMEOUT
    return float(check_param("lock_timeout", timeout))


class WriterLock:
    """Exclusive writer lock on ``directory``, shared by the threads of its owner object.

    Example:
        >>> lock = WriterLock(Path("my-index"), timeout=30)
        >>> with lock.hold():
        ...     ...  # refresh from disk, write, commit
    """

    def __init__(self, directory: Path, timeout: float | None = None) -> None:
        self.directory = Path(directory)
        self.timeout = check_lock_timeout(timeout)
        self._fd: int | None = None
        self._extra: list[int] = []  # lock files of replacement directories (see lock_replacement)
        self._created: Path | None = None  # the directory this acquisition created
        self._depth = 0
        self._mutex = threading.RLock()

    @property
    def held(self) -> bool:
        return self._depth > 0

    @contextmanager
    def hold(self) -> Iterator[bool]:
        """Hold the lock for the block; yields True when this call took it (False: already held here)."""
        with self._mutex:  # one thread of this process at a time; others queue here, not on flock
            first = self._depth == 0
            if first:
                self._acquire()
            self._depth += 1
            try:
                yield first
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self._release()

    def lock_replacement(self, new: Path) -> None:
        """Take the lock file inside ``new``, a complete directory about to replace this lock's directory by rename
        (the lock held): after the swap the directory at the path is locked by this holder until :meth:`hold` ends.

        Raises:
            UnsafePathError: The lock file in ``new`` is a symbolic link or not a regular file.
            DirectoryLockedError: Another process holds it (``new`` is not a fresh directory of this writer).
        """
        if not self.held:
            raise RuntimeError("lock_replacement needs the lock held")
        file = Path(new) / LOCK_NAME
        fd = _open_lock_file(file)
        import fcntl

        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DirectoryLockedError(f"{file} is held by another writer; refusing to swap {new} in") from None
        _write_holder(fd)
        self._extra.append(fd)

    def _acquire(self) -> None:

        directory = Path(os.path.realpath(self.directory))
        file = directory / LOCK_NAME
        deadline = time.monotonic() + self.timeout
        while True:
            created = _make_directory(directory)
            fd = _open_lock_file(file)
            if not _flock_by(fd, deadline):
                holder = _read_holder(fd)
                os.close(fd)
                raise DirectoryLockedError(
                    f"{self.directory} is being written by another writer ({holder}); waited "
                    f"{self.timeout:g} s (raise lock_timeout to wait longer)"
                )
            if _is_current(fd, file):
                break
            # The directory was replaced (or removed) while this writer waited: the file it locked is not the
            # directory's lock file any more. Wait on the current one.
            os.close(fd)
        _write_holder(fd)
        self._fd = fd
        self._created = directory if created else None
        try:
            _remove_legacy_lock(directory, deadline)
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        import fcntl

        fd, self._fd = self._fd, None
        extra, self._extra = self._extra, []
        created, self._created = self._created, None
        if fd is None:
            return
        try:
            if created is not None and _is_current(fd, created / LOCK_NAME) and not directory_entries(created):
                # A directory made only for this lock, with nothing written to it: gone again. A writer waiting on
                # its lock file finds it removed and starts over.
                with contextlib.suppress(OSError):
                    (created / LOCK_NAME).unlink()
                    created.rmdir()
            for handle in (fd, *extra):
                with contextlib.suppress(OSError):
                    os.ftruncate(handle, 0)
        finally:
            for handle in (*extra, fd):
                with contextlib.suppress(OSError):
                    fcntl.flock(handle, fcntl.LOCK_UN)
                os.close(handle)

    def __getstate__(self) -> dict:
        return {"directory": self.directory, "timeout": self.timeout}

    def __setstate__(self, state: dict) -> None:  # a copied or pickled owner gets a fresh, unheld lock
        self.__init__(state["directory"], state["timeout"])


def _make_directory(directory: Path) -> bool:
    """Create ``directory`` (and its parents) when missing; True when this call created it."""
    try:
        directory.mkdir(parents=True)
    except FileExistsError:
        if not directory.is_dir():
            raise InvalidParameterError(f"{directory} exists and is not a directory") from None
        return False
    except OSError as exc:
        if exc.errno in _READ_ONLY:
            raise ReadOnlyStoreError(f"cannot create {directory}: {exc.strerror or exc} (read-only)") from exc
        raise
    return True


def _open_lock_file(file: Path) -> int:
    """An open descriptor of a lock file (created when missing), never through a symbolic link."""
    try:
        fd = os.open(file, _FLAGS | os.O_CREAT, 0o644)
    except OSError as exc:
        if file.is_symlink():
            raise UnsafePathError(f"{file} (the writer lock) is a symbolic link; refusing to follow it") from exc
        if exc.errno in _READ_ONLY:
            raise ReadOnlyStoreError(
                f"{file.parent} is read-only (a read-only mount or directory, or not yours): cannot write ({exc})"
            ) from exc
        raise DirectoryLockedError(f"cannot open the writer lock {file}: {exc}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafePathError(f"{file} (the writer lock) is not a regular file")
    return fd


def _is_current(fd: int, file: Path) -> bool:
    """Whether the open lock file ``fd`` is still the file at ``file`` (not replaced or removed meanwhile)."""
    try:
        there = os.stat(file, follow_symlinks=False)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino)


def _write_holder(fd: int) -> None:
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": " ".join(sys.argv)[:300],
        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    try:  # who holds it is only for messages: a full disk must not keep the lock taken and its file open
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
    except OSError:
        pass


def _remove_legacy_lock(directory: Path, deadline: float) -> None:
    """Remove the lock file an earlier version kept beside ``directory`` (the new lock held): once no writer of an
    earlier version holds it, waiting for one that does until ``deadline``. A symbolic link or anything other than a
    regular file there is left alone; so is a file that cannot be removed."""

    legacy = directory.with_name(f".{directory.name}.lock")
    try:
        info = os.lstat(legacy)
    except OSError:
        return
    if not stat.S_ISREG(info.st_mode):
        return
    try:
        fd = os.open(legacy, _FLAGS)
    except OSError:
        return
    try:
        if not _flock_by(fd, deadline):
            raise DirectoryLockedError(
                f"{directory} is being written by a writer of an earlier version ({_read_holder(fd)}, lock file "
                f"{legacy}) that did not let go"
            )
        if _is_current(fd, legacy):
            try:
                legacy.unlink()
            except OSError as exc:
                logger.debug("cannot remove the old lock file %s: %s", legacy, exc)
    finally:
        os.close(fd)  # closing releases the flock


def _flock_by(fd: int, deadline: float) -> bool:
    """Take the exclusive flock on ``fd``, polling until ``deadline`` (``time.monotonic()``); False when it passed."""
    import fcntl

    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_SECONDS)


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "holder unknown"
    return f"pid {info.get('pid')} on {info.get('host')}, since {info.get('since')}: {info.get('command')!s:.120}"
