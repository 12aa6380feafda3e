"""A reader-writer lock: many concurrent readers or one writer, re-entrant, writers not starved."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ReadWriteLock:
    """Shared (read) / exclusive (write) lock for threads.

    Re-entrant: a thread holding the write lock may take it again or take the read lock; a thread holding
    the read lock may take it again. Upgrading (read → write in one thread) would deadlock with another
    upgrader, so it raises RuntimeError. New readers wait while a writer is waiting, so writers are not starved.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers: dict[int, int] = {}  # thread id -> read depth
        self._writer: int | None = None
        self._write_depth = 0
        self._writers_waiting = 0

    def held_by_me(self) -> bool:
        """Whether the calling thread holds this lock (read or write)."""
        me = threading.get_ident()
        return self._writer == me or me in self._readers

    @contextmanager
    def read(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            if self._writer != me and me not in self._readers:
                while self._writer is not None or self._writers_waiting:
                    self._cond.wait()
            self._readers[me] = self._readers.get(me, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                depth = self._readers[me] - 1
                if depth:
                    self._readers[me] = depth
                else:
                    del self._readers[me]
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            if self._writer == me:
                self._write_depth += 1
            else:
                if me in self._readers:
                    raise RuntimeError("a thread holding the read lock cannot take the write lock")
                self._writers_waiting += 1
                try:
                    while self._writer is not None or self._readers:
                        self._cond.wait()
                finally:
                    self._writers_waiting -= 1
                self._writer, self._write_depth = me, 1
        try:
            yield
        finally:
            with self._cond:
                self._write_depth -= 1
                if self._write_depth == 0:
                    self._writer = None
                    self._cond.notify_all()

    def __reduce__(self):
        return (type(self), ())  # a copied or pickled owner gets a fresh, unlocked lock


def read_locked(method):
    """Method decorator: run under ``self._lock.read()``."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock.read():
            return method(self, *args, **kwargs)

    return wrapper


def write_locked(method):
    """Method decorator: run under ``self._lock.write()``."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock.write():
            return method(self, *args, **kwargs)

    return wrapper
