"""Disk space: how many bytes a directory's files take, and a size in words."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def directory_bytes(path: Path) -> int:
    """The bytes of the files directly in ``path`` (folders and links left out)."""
    total = 0
    with os.scandir(path) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):  # a file removed meanwhile
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
    return total


def human_size(n: int) -> str:
    """``n`` bytes in the largest binary unit that keeps it at 1 or more: "1.50 GiB", "12.00 KiB", "512 B"."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"
