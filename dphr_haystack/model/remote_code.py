"""Model directories never run code: the one check made before transformers reads a model directory.

transformers runs Python shipped inside a model directory when its ``config.json`` or ``tokenizer_config.json``
maps an Auto class to a module of its own (``auto_map``) and the caller trusts remote code (with
``trust_remote_code=None`` it asks on the terminal). dphr_haystack passes ``trust_remote_code=False`` to every
transformers loader and, before that, refuses any directory whose loader files ask for custom code, naming the file,
so no prompt is ever shown and no module of the directory is ever imported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError, RemoteCodeError

# The JSON files transformers (and this package) read from a model directory that can name classes to import.
LOADER_FILES = (
    "config.json",
    "tokenizer_config.json",
    "encoder_config.json",
    "preprocessor_config.json",
    "processor_config.json",
)
# Keys that make transformers import code from the directory (or the hub), or that ask for it.
_REMOTE_KEYS = ("auto_map", "custom_pipelines", "trust_remote_code")
# transformers' own value for every loader call made by this package and its training recipes.
TRUST_REMOTE_CODE = False


def refuse_remote_code(directory: str | Path) -> None:
    """Raise :class:`~dphr_haystack.errors.RemoteCodeError` when ``directory`` asks to run its own code.

    Reads the small JSON files transformers consults (``config.json``, ``tokenizer_config.json``, ...) without
    asking transformers; a directory that does not exist or is not a directory is left to the loader's own error.

    Raises:
        RemoteCodeError: A loader file has an ``auto_map``, ``custom_pipelines`` or a true ``trust_remote_code``.
        ModelLoadError: A loader file exists but is not a readable JSON object.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return
    for name in LOADER_FILES:
        file = directory / name
        if not file.is_file():
            continue
        data = _read_json_object(file)
        asks = [key for key in _REMOTE_KEYS if key in data and (key != "trust_remote_code" or data[key])]
        if asks:
            raise RemoteCodeError(
                f"{file} asks to run code shipped with the model ({', '.join(asks)}: {_preview(data[asks[0]])}); "
                "dphr_haystack never runs a model directory's own code: use a model of a built-in architecture, "
                f"or remove {asks[0]!r} from {name} if the directory needs no custom code"
            )


def _read_json_object(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ModelLoadError(f"cannot read {file}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelLoadError(f"{file}: expected a JSON object, got {type(data).__name__}")
    return data


def _preview(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "..."
