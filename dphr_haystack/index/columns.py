"""An append-only column of a phrase index: an array in memory, or rows of a raw file whose valid length the
manifest records (``vectors.bin``, ``tokens.bin``, ``tombstones.bin``)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .._util.nofollow import open_no_follow


class Column:
    """An append-only array, in memory or in a raw file whose valid length the manifest records."""

    def __init__(self, dtype: np.dtype, width: int | None, path: Path | None = None, length: int = 0) -> None:
        self.dtype, self.width, self.path, self.length = np.dtype(dtype), width, path, length
        self._parts: list[np.ndarray] = []
        self._cache: np.ndarray | None = None

    @property
    def row_bytes(self) -> int:
        return self.dtype.itemsize * (self.width or 1)

    def append(self, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values, dtype=self.dtype)
        if self.path is None:
            self._parts.append(values.copy())
        else:
            with open_no_follow(self.path, "r+b") as handle:  # a symbolic link here is refused, not followed
                handle.truncate(self.length * self.row_bytes)  # drop bytes of an append that never committed
                handle.seek(self.length * self.row_bytes)
                handle.write(values.tobytes())
                handle.flush()
                os.fsync(handle.fileno())
        self.length += len(values)
        self._cache = None

    def truncate(self, length: int) -> None:
        """Forget rows past ``length`` (an append that will not be committed); a file's bytes past it are dropped
        by the next append, and are never read before (the manifest records the committed length)."""
        if length >= self.length:
            return
        if self.path is None:
            self._parts = [self.view()[:length].copy()]
        self.length = length
        self._cache = None

    def extend_to(self, length: int) -> None:
        """Take a longer committed length (what another writer appended to the file)."""
        self.length = length
        self._cache = None

    def view(self) -> np.ndarray:
        if self._cache is not None:
            return self._cache
        shape = (self.length, self.width) if self.width else (self.length,)
        if self.length == 0:
            self._cache = np.zeros(shape, dtype=self.dtype)
        elif self.path is None:
            self._cache = np.concatenate(self._parts) if len(self._parts) > 1 else self._parts[0]
            self._parts = [self._cache]
        else:
            # a plain ndarray over the mapped file: every slice of an np.memmap is an np.memmap too, and making
            # one costs more than reading the rows searches take (hundreds of small slices a question)
            self._cache = np.memmap(self.path, dtype=self.dtype, mode="r", shape=shape).view(np.ndarray)
        return self._cache

    def write_to(self, path: Path) -> None:
        with open_no_follow(path, "wb") as handle:
            view = self.view()
            for start in range(0, len(view), 1 << 20):
                handle.write(np.ascontiguousarray(view[start : start + (1 << 20)]).tobytes())
