"""An exclusive inter-process writer lock on a directory (an index or a store).

The lock is an advisory ``flock`` on a file beside the directory, ``.<name>.lock``, so it survives the atomic swap
of the directory itself. The holder writes its pid, host, command and start time into the file, so a second writer
that gives up can name it. Readers never take the lock: writers commit by atomic renames of append-only state, so
a reader sees one committed state or the next.

The lock is re-entrant within one :class:`WriterLock` object (a write method calling another) and released when the
process dies, whatever kills it. ``flock`` locks belong to an open file, so two lock objects on one directory exclude
each other even inside one process.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import DirectoryLockedError, UnsafePathError
from ..params import check_param

DEFAULT_LOCK_TIMEOUT = 60.0  # seconds a writer waits for another writer of the same directory
_POLL_SECONDS = 0.05


def lock_file_for(directory: Path) -> Path:
    """The lock file of ``directory``: a hidden sibling, unaffected by swapping the directory.

    Symbolic links on the way are resolved, so a writer reaching the directory through a link and one reaching it
    by its real path take the same lock."""
    directory = Path(os.path.realpath(directory))
    return directory.with_name(f".{directory.name}.lock")


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

    def _acquire(self) -> None:
        import fcntl

        file = lock_file_for(self.directory)
        file.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(file, flags, 0o644)
        except OSError as exc:
            if file.is_symlink():
                raise UnsafePathError(f"{file} (the writer lock) is a symbolic link; refusing to follow it") from exc
            raise DirectoryLockedError(f"cannot open the writer lock {file}: {exc}") from exc
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = _read_holder(fd)
                    os.close(fd)
                    raise DirectoryLockedError(
                        f"{self.directory} is being written by another writer ({holder}); waited {self.timeout:g} s "
                        "(raise lock_timeout to wait longer)"
                    ) from None
                time.sleep(_POLL_SECONDS)
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
        self._fd = fd

    def _release(self) -> None:
        import fcntl

        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __getstate__(self) -> dict:
        return {"directory": self.directory, "timeout": self.timeout}

    def __setstate__(self, state: dict) -> None:  # a copied or pickled owner gets a fresh, unheld lock
        self.__init__(state["directory"], state["timeout"])


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "holder unknown"
    return f"pid {info.get('pid')} on {info.get('host')}, since {info.get('since')}: {info.get('command')!s:.120}"
