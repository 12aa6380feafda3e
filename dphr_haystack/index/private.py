"""Copy-on-write: the private copy of a phrase index that a store writes to instead of a directory it opened but
must not change."""

from __future__ import annotations

import logging
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import TypeVar

from .._util.disk import directory_bytes, human_size
from ..errors import IndexWriteError

logger = logging.getLogger(__name__)
Index = TypeVar("Index")  # a PhraseIndex (not imported: it imports this module)


def private_copy(index: Index) -> Index:
    """A copy of ``index`` in a temporary directory (Python's ``tempfile`` one: ``TMPDIR`` chooses it), removed once
    the copy is garbage.

    A copy the temporary directory's disk has no room for is refused before anything is written
    (:class:`~dphr_haystack.errors.IndexWriteError` saying how much it needs and where to point ``TMPDIR``): a large
    index is gigabytes, and the temporary directory is often a small, memory-backed file system.
    """
    where = Path(tempfile.gettempdir())
    needed = directory_bytes(index.path) if index.path is not None else 0
    free = shutil.disk_usage(where).free
    if needed > free:
        raise IndexWriteError(
            f"cannot write the phrase index {index.path}: a store never writes the index directory it was opened "
            f"from, and its first phrase change writes to a private copy of it, which needs about "
            f"{human_size(needed)} where {where} has {human_size(free)} free; set TMPDIR to a directory "
            "on a disk with room and retry"
        )
    folder = Path(tempfile.mkdtemp(prefix="dphr-phrases-"))
    try:
        index.save(folder / "index")
        private = type(index).load(folder / "index", verify=False)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    weakref.finalize(private, shutil.rmtree, folder, True)
    logger.info("phrase index %s copied to %s (%s) for writing", index.path, folder, human_size(needed))
    return private
