"""Reading text and JSON files, transparently from ``.gz``."""

from __future__ import annotations

import codecs
import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def open_text(path: str | Path) -> IO[str]:
    """Open a UTF-8 text file for reading, decompressing it when its name ends in ``.gz``."""
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open("r", encoding="utf-8")


def read_json(path: str | Path) -> Any:
    """Parse a JSON file, transparently from ``.gz``."""
    with open_text(path) as handle:
        return json.load(handle)


def _read_failure(exc: BaseException) -> str:
    """What a failed read of a (possibly gzipped) file means, in words."""
    if isinstance(exc, gzip.BadGzipFile):
        return f"not a valid gzip file ({exc})"
    if isinstance(exc, EOFError):
        return "the gzip stream ends early: the file is truncated"
    if isinstance(exc, zlib.error):
        return f"corrupted gzip data ({exc})"
    return f"cannot read the file ({exc})"


def numbered_lines(path: str | Path, error: type[Exception]) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a UTF-8 text file (``.gz`` decompressed), a leading byte-order mark dropped.

    Every failure, opening, decompressing (not gzip, truncated, corrupted) or decoding (not UTF-8), raises
    ``error`` with a message ``<path>:<line>: <what went wrong>``.
    """
    path = Path(path)
    try:
        handle = gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")
    except OSError as exc:
        raise error(f"{path}: {_read_failure(exc)}") from exc
    with handle:
        line_no = 0
        while True:
            try:
                raw = handle.readline()
            except (OSError, EOFError, zlib.error) as exc:
                raise error(f"{path}:{line_no + 1}: {_read_failure(exc)}") from exc
            if not raw:
                return
            line_no += 1
            if line_no == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise error(
                    f"{path}:{line_no}: not UTF-8 text (byte {exc.start + 1} of the line is {raw[exc.start]:#04x}); "
                    "save the file as UTF-8"
                ) from exc
            yield line_no, text
