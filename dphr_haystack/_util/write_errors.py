"""Typed write errors of a directory this package keeps (a phrase index, a document store): a full disk says so."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from pathlib import Path

from ..errors import DphrError, IndexWriteError

_FULL = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk is full (disk quota exceeded)"}


def write_error(exc: OSError, what: str, path: Path | None) -> IndexWriteError:
    """A typed error for a failed write of ``what`` (e.g. "phrase index") at ``path``: the disk is full, an I/O
    error, ...; it keeps ``exc``'s errno."""
    reason = _FULL.get(exc.errno or 0)
    detail = f"{reason} ({exc.strerror or exc})" if reason else f"{type(exc).__name__}: {exc}"
    error = IndexWriteError(
        f"cannot write the {what} {path or '(in memory)'}: {detail}; it keeps its last committed state"
        + (": free some space and retry" if reason else "")
    )
    error.errno = exc.errno
    return error


@contextlib.contextmanager
def write_errors(what: str, path: Path | None) -> Iterator[None]:
    """Raise any untyped OSError of the block as :class:`~dphr_haystack.errors.IndexWriteError` (typed errors, such
    as a phrase index's own write error inside a store's write, pass through)."""
    try:
        yield
    except DphrError:
        raise
    except OSError as exc:
        raise write_error(exc, what, path) from exc
