"""Atomic files and directories: the one way this package replaces what is on disk.

* :func:`write_file_atomic` writes a file through a fresh temporary sibling renamed over it (optionally fsynced
  first), so a reader sees the old or the new bytes, never a part.
* :func:`replace_directory` replaces a whole directory (an index, a saved store, a training checkpoint) by a
  complete new one.

On Linux the swap is one ``renameat2(RENAME_EXCHANGE)`` call, so a process killed at any instant leaves
either the old or the new directory at the target path. Elsewhere (or on file systems without the call)
the target is first renamed to ``.<name>.old-<pid>`` and the new directory moved in; a process killed
between the two renames leaves no target, and :func:`recover_directory` (called by the loaders) moves the
old one back.

Neither writes through a symbolic link: temporary names are fresh (:mod:`~dphr_haystack._util.nofollow`) and a
target that is a symbolic link is refused with :class:`~dphr_haystack.errors.UnsafePathError`.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import logging
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from ..errors import UnsafePathError
from .nofollow import open_no_follow, refuse_symlink, temp_name_parts, temp_path

logger = logging.getLogger(__name__)

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _libc_renameat2():
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_RENAMEAT2 = _libc_renameat2()


def exchange(first: Path, second: Path) -> bool:
    """Atomically swap two existing paths; False when the platform or file system cannot."""
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(code, f"cannot swap {first} and {second}: {os.strerror(code)}")


def fsync_file(file: Path) -> None:
    """Flush a written file's bytes to disk."""
    with Path(file).open("rb") as handle:
        os.fsync(handle.fileno())


def write_file_atomic(file: Path, content: str | bytes | Callable[[Path], object], *, fsync: bool = True) -> None:
    """Write ``file`` through a fresh temporary sibling renamed over it.

    Args:
        file: The file to write or replace; a symbolic link there is refused (UnsafePathError), not followed.
        content: UTF-8 text, bytes, or a function that writes the temporary path it is given (a new, empty
            regular file named ``.<name>.tmp-<pid>-<hex>``, created here so nothing else was there).
        fsync: Flush the temporary file to disk before the rename (a crash-safe commit needs it).
    """
    file = refuse_symlink(file)
    tmp = temp_path(file)
    try:
        with open_no_follow(tmp, "xb") as handle:
            if isinstance(content, str):
                handle.write(content.encode("utf-8"))
            elif isinstance(content, bytes):
                handle.write(content)
        if not isinstance(content, (str, bytes)):
            content(tmp)
            if tmp.is_symlink() or not tmp.is_file():
                raise UnsafePathError(f"{tmp} was replaced by something other than a file while being written")
        if fsync:
            fsync_file(tmp)
        os.replace(tmp, file)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def fsync_directory(path: Path) -> None:
    """Make a rename inside ``path`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def replace_directory(new: Path, target: Path) -> None:
    """Move the complete directory ``new`` to ``target``, replacing what is there, crash-safely.

    A symbolic link at ``target`` is refused (UnsafePathError; ``new`` is removed), never replaced through.
    """
    new, target = Path(new), Path(target)
    try:
        refuse_symlink(target)
    except UnsafePathError:
        shutil.rmtree(new, ignore_errors=True)
        raise
    remove_leftovers(target)
    if target.exists():
        if exchange(new, target):
            fsync_directory(target.parent)
            shutil.rmtree(new, ignore_errors=True)  # now holds the previous version
            return
        old = target.with_name(f".{target.name}.old-{os.getpid()}-{uuid.uuid4().hex[:12]}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(new, target)
        fsync_directory(target.parent)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(new, target)
        fsync_directory(target.parent)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _leftovers(target: Path) -> list[tuple[Path, str]]:
    """``(path, kind)`` of the temporary and swapped-out siblings of ``target`` left by dead processes."""
    found = []
    if not target.parent.is_dir():
        return found
    for entry in target.parent.iterdir():
        parts = temp_name_parts(entry.name)
        if (
            parts
            and parts[0] == target.name
            and parts[1] in ("old", "tmp")
            and not entry.is_symlink()  # never ours: not moved back into place, and rmtree would refuse it anyway
            and not _pid_alive(parts[2])
        ):
            found.append((entry, parts[1]))
    return found


def recover_directory(target: Path) -> bool:
    """Undo an interrupted two-rename swap: when ``target`` is missing, move the newest old copy back."""
    target = Path(target)
    if target.exists():
        return False
    olds = sorted((p for p, kind in _leftovers(target) if kind == "old"), key=lambda p: p.stat().st_mtime)
    if not olds:
        return False
    os.replace(olds[-1], target)
    logger.warning("recovered %s from %s, left by a save that was interrupted", target, olds[-1].name)
    return True


def remove_leftovers(target: Path) -> None:
    """Delete temporary and swapped-out copies of ``target`` that crashed processes left behind."""
    recover_directory(target)
    for path, _ in _leftovers(target):
        shutil.rmtree(path, ignore_errors=True)


def file_sha256(file: Path) -> str:
    """SHA-256 of a file's bytes, read in 4 MiB blocks."""
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()
