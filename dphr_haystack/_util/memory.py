"""Keep a long dump or indexing run's memory flat on glibc (Linux); no-ops elsewhere.

Encoding a chunk of passages allocates many multi-megabyte numpy and torch buffers. glibc raises its mmap
threshold each time such a buffer is freed, so later ones come from the heap, where freed space fragments and is
not given back: without help the peak RSS creeps up with every chunk (benchmarks/memory/indexing.py measured about
+150 MiB per 1,000 SQuAD paragraphs with MiniLM). Returning free heap memory after each chunk
(``malloc_trim``) keeps the peak at one chunk's working set; processes that only index (the ``dphr index``
CLI) also pin the thresholds so large buffers are always mapped and unmapped directly.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


@functools.cache
def _libc():
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim, libc.mallopt  # noqa: B018 - glibc only
    except (OSError, AttributeError):
        return None
    return libc


def release_free_memory() -> None:
    """Give the heap's free pages back to the operating system (after a chunk of passages is done)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def pin_malloc_thresholds(threshold: int = 128 * 1024) -> None:
    """Process-wide: buffers of ``threshold`` bytes or more are always mmapped, and freed memory above that is
    returned at once (glibc's dynamic thresholds are turned off). For processes that index and exit."""
    libc = _libc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, threshold)
        libc.mallopt(_M_TRIM_THRESHOLD, threshold)
