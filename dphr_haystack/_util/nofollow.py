"""Writing files without following symbolic links: the one way this package opens a file it writes.

A directory handed to the library (an index, a store, a dump, a model or a training run) may hold symbolic links
put there by someone else. Writing through one would overwrite whatever it points to, so every write here either

* opens the file with ``O_NOFOLLOW`` on its last path component (:func:`open_no_follow`): a symbolic link there is
  refused with :class:`~dphr_haystack.errors.UnsafePathError` naming the path, as is anything that is not a regular
  file (a FIFO, a device); or
* writes a fresh, unpredictable temporary name created with ``O_EXCL`` (:func:`temp_path`,
  :func:`make_temp_dir`) and renames it over the target; a rename replaces a symbolic link, it never writes through
  one, and :func:`refuse_symlink` refuses a link at the target first.

Temporary names are ``.<name>.tmp-<pid>-<hex>``: unique per process and call, so two writers never share one, and
recognisable (:func:`is_temp_name`), so what a killed process left can be cleaned up.

Parent directories are trusted: the guard is for the last component, where the files of a directory live.
"""

from __future__ import annotations

import os
import re
import stat
import uuid
from pathlib import Path
from typing import IO

from ..errors import UnsafePathError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO planted at the path fails at once instead of blocking the open
_LINK_MESSAGE = "{path} is a symbolic link; refusing to write through it (remove it or choose another path)"
_TEMP = re.compile(r"\.(?P<name>.+)\.(?P<kind>tmp|old|building)-(?P<pid>\d+)(?:-[0-9a-f]+)?")

_MODES = {
    # mode: (flags, truncate existing content)
    "w": (os.O_WRONLY | os.O_CREAT | os.O_TRUNC, True),
    "x": (os.O_WRONLY | os.O_CREAT | os.O_EXCL, False),
    "a": (os.O_WRONLY | os.O_CREAT | os.O_APPEND, False),
    "r+": (os.O_RDWR | os.O_CREAT, False),  # read-write, created when missing, never truncated on open
}


def refuse_symlink(path: str | Path) -> Path:
    """``path``, unless it is a symbolic link (UnsafePathError); a missing path is fine."""
    path = Path(path)
    if path.is_symlink():
        raise UnsafePathError(_LINK_MESSAGE.format(path=path))
    return path


def open_no_follow(path: str | Path, mode: str = "wb", encoding: str | None = None) -> IO:
    """Open ``path`` for writing without following a symbolic link at its last component.

    Args:
        path: The file to write.
        mode: ``w`` (create or truncate), ``x`` (create, must not exist), ``a`` (append) or ``r+`` (read and write,
            created when missing, not truncated), each with ``b`` for bytes; without ``b``, text in ``encoding``.
        encoding: Text encoding (default UTF-8) of a text mode.

    Raises:
        UnsafePathError: ``path`` is a symbolic link, or exists and is not a regular file.
        FileExistsError: ``mode`` is ``x`` and ``path`` exists.
    """
    path = Path(path)
    binary = "b" in mode
    base = mode.replace("b", "")
    if base not in _MODES:
        raise ValueError(f"open_no_follow: unsupported mode {mode!r}")
    flags, _ = _MODES[base]
    if not _NOFOLLOW:  # platforms without O_NOFOLLOW: check first (a check that can race, the best they allow)
        refuse_symlink(path)
    try:
        fd = os.open(path, flags | _NOFOLLOW | _CLOEXEC | _NONBLOCK, 0o644)
    except OSError as exc:
        if path.is_symlink():  # ELOOP (Linux), EMLINK (FreeBSD), EFTYPE (NetBSD): a link at the last component
            raise UnsafePathError(_LINK_MESSAGE.format(path=path)) from exc
        if path.exists() and not path.is_file():
            raise UnsafePathError(f"{path} is not a regular file; refusing to write to it") from exc
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafePathError(f"{path} is not a regular file; refusing to write to it")
        if _NONBLOCK:
            os.set_blocking(fd, True)
        if binary:
            handle = os.fdopen(fd, base + "b")
        else:
            handle = os.fdopen(fd, base, encoding=encoding or "utf-8")
    except BaseException:
        os.close(fd)
        raise
    return handle


def temp_path(target: str | Path) -> Path:
    """A fresh temporary sibling name of ``target``: ``.<name>.tmp-<pid>-<hex>`` (not created)."""
    target = Path(target)
    return target.with_name(f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:12]}")


def make_temp_dir(target: str | Path, kind: str = "tmp") -> Path:
    """Create and return an empty, fresh temporary sibling directory of ``target`` (``.<name>.<kind>-<pid>-<hex>``).

    The name is new and ``mkdir`` fails on anything already there, so nothing in it was put there by anyone else.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    path = target.with_name(f".{target.name}.{kind}-{os.getpid()}-{uuid.uuid4().hex[:12]}")
    path.mkdir()
    return path


def temp_name_parts(name: str) -> tuple[str, str, int] | None:
    """``(target name, kind, pid)`` of a temporary name made here (``tmp``, ``old`` or ``building``), else None."""
    match = _TEMP.fullmatch(name)
    if match is None:
        return None
    return match["name"], match["kind"], int(match["pid"])


def is_temp_name(name: str) -> bool:
    """Whether ``name`` is a temporary file or directory name made by this module."""
    return temp_name_parts(name) is not None
