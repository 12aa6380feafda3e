"""Reading text and JSON files, transparently from ``.gz``."""

from __future__ import annotations

import gzip
import json
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
