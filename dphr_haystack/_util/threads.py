"""Intra-op threads of torch and FAISS: one thread for query-time work, torch's default for bulk work.

Encoding one question is a few milliseconds of small matrix products. Spread over several OpenMP threads it gains
little on an idle machine and loses badly on a busy one, where the threads wait for each other at every operation
(4 clients querying at once on 2 cores: p50 196 ms a query on torch's default of 2 threads, 32 ms on 1 thread
with this module; ``benchmarks/speed/cli_search.py``). So query work
(``dphr search``, :class:`~dphr_haystack.search.PhraseSearcher`, the retrievers) runs on one thread unless told
otherwise, and bulk work (indexing, evaluation) keeps torch's default of one thread per core.

A thread count comes from, first to last: an explicit ``threads`` (``--threads``, ``threads=``), the enclosing
:func:`using_threads` block of the calling thread, :func:`set_threads` (the command line's ``--threads``), the
environment variable ``DPHR_THREADS``, the default of the kind of work (:data:`QUERY_THREADS` for ``query``,
torch's own for ``bulk``). torch (with OpenMP) keeps the count per thread, so a :func:`using_threads` block changes
and restores its own thread's count only: blocks running at once in several threads (a server) do not disturb each
other. A thread that has not run torch work yet starts from the count set last anywhere.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from ..errors import InvalidParameterError
from ..params import arg_type, check_param

THREADS_ENV = "DPHR_THREADS"
QUERY_THREADS = 1  # intra-op threads of query-time work unless told otherwise
Work = Literal["query", "bulk"]
WORK: tuple[str, ...] = ("query", "bulk")

_LOCAL = threading.local()  # .threads: the count of the innermost using_threads block of this thread
_PROCESS: dict[str, int] = {}  # "threads": set_threads' count


def check_threads(threads: object, name: str = "threads") -> int | None:
    """``threads`` as an int from 1 up (None passes: "the default"); InvalidParameterError otherwise."""
    if threads is None:
        return None
    try:
        return int(check_param("threads", threads))
    except InvalidParameterError as exc:
        raise InvalidParameterError(str(exc).replace("threads=", f"{name}=", 1)) from None


def env_threads() -> int | None:
    """The count ``DPHR_THREADS`` sets, None when it is unset or empty."""
    text = os.environ.get(THREADS_ENV, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise InvalidParameterError(f"{THREADS_ENV}={text!r} is not an integer from 1 up") from None
    return check_threads(value, THREADS_ENV)


def resolve_threads(threads: int | None = None, work: Work = "query") -> int | None:
    """The intra-op thread count for ``work`` (``query`` or ``bulk``); None: leave torch's as it is.

    See the module docstring for the order in which ``threads``, an enclosing block, the command line,
    ``DPHR_THREADS`` and the default of the work are asked.
    """
    if work not in WORK:
        raise InvalidParameterError(f"work={work!r}; valid: {', '.join(WORK)}")
    explicit = check_threads(threads)
    if explicit is not None:
        return explicit
    pinned = getattr(_LOCAL, "threads", None)
    if pinned is not None:
        return pinned
    if "threads" in _PROCESS:
        return _PROCESS["threads"]
    from_env = env_threads()
    if from_env is not None:
        return from_env
    return QUERY_THREADS if work == "query" else None


def _apply(threads: int) -> None:
    """Give torch (and FAISS, once something has imported it) ``threads`` intra-op threads."""
    import torch

    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    faiss = sys.modules.get("faiss")  # FAISS may bring an OpenMP runtime of its own
    if faiss is not None and hasattr(faiss, "omp_set_num_threads") and faiss.omp_get_max_threads() != threads:
        faiss.omp_set_num_threads(threads)


def _counts() -> tuple[int, int | None]:
    """This thread's torch and FAISS (None: not loaded) intra-op thread counts."""
    import torch

    faiss = sys.modules.get("faiss")
    faiss_threads = (
        faiss.omp_get_max_threads() if faiss is not None and hasattr(faiss, "omp_get_max_threads") else None
    )
    return int(torch.get_num_threads()), faiss_threads


def _restore(counts: tuple[int, int | None]) -> None:
    import torch

    torch_threads, faiss_threads = counts
    if torch.get_num_threads() != torch_threads:
        torch.set_num_threads(torch_threads)
    faiss = sys.modules.get("faiss")
    if faiss is not None and faiss_threads is not None and faiss.omp_get_max_threads() != faiss_threads:
        faiss.omp_set_num_threads(faiss_threads)


@contextmanager
def using_threads(threads: int | None) -> Iterator[None]:
    """Run the block with ``threads`` intra-op threads in this thread (None: as they are), then put this thread's
    count from before back. Nested blocks see the innermost count (:func:`resolve_threads` returns it)."""
    threads = check_threads(threads)
    if threads is None:
        yield
        return
    before = _counts()
    _apply(threads)
    enclosing = getattr(_LOCAL, "threads", None)
    _LOCAL.threads = threads
    try:
        yield
    finally:
        _LOCAL.threads = enclosing
        _restore(before)


def set_threads(threads: int | None) -> None:
    """For the whole process (the command line): torch and FAISS get ``threads`` intra-op threads in this thread and
    in threads that start torch work later, and query and bulk work take that count. None changes nothing."""
    threads = check_threads(threads)
    if threads is None:
        return
    _PROCESS["threads"] = threads
    _apply(threads)


def reset_threads() -> None:
    """Forget :func:`set_threads`'s count (torch keeps the one it has)."""
    _PROCESS.pop("threads", None)


def add_threads_argument(parser: argparse.ArgumentParser, work: Work) -> None:
    """Add ``--threads`` to a command doing ``work`` (its value goes to :func:`resolve_threads`)."""
    default = f"{QUERY_THREADS}" if work == "query" else "torch's, one per core"
    parser.add_argument(
        "--threads",
        type=arg_type("threads"),
        default=None,
        help=f"intra-op threads of torch and FAISS (default: ${THREADS_ENV}, else {default})",
    )
