"""Where a model reference loads from: a saved phrase model, or a base encoder to build an untrained one on.

:mod:`~dphr_haystack.model.registry` says what a name means; this module turns any reference (shipped name,
``minilm``, a directory, a hub name) into a :class:`ModelSource`, downloading a hub model and refusing a directory
that asks to run its own code on the way. :func:`~dphr_haystack.model.loading.load_model` then loads it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import ModelLoadError
from .config import CONFIG_FILE
from .densephrases import CHECKPOINT_WEIGHTS_FILE
from .registry import DEFAULT_MODEL, is_hub_id, is_minilm_alias, is_mpnet_alias, is_shipped_name, shipped_model_path
from .remote_code import refuse_remote_code
from .weights import WEIGHTS_FILE

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelSource:
    """How to load a phrase model.

    Attributes:
        kind: ``saved`` (``PhraseModel.load``: a saved phrase model, shipped model or DensePhrases checkpoint
            directory) or ``base`` (``PhraseModel.from_base``: an UNTRAINED phrase model on a base encoder).
        location: The directory, or for ``base`` the alias ``minilm`` as given.
    """

    kind: Literal["saved", "base"]
    location: str | Path


def model_source(reference: str | Path) -> ModelSource:
    """Where the phrase model ``reference`` loads from: what the CLI, the searcher and the Haystack nodes accept.

    ``reference`` is a shipped model (``dphr-minilm-squad-distilled``, alias ``default``; ``dphr-minilm-squad-384``,
    ``dphr-minilm-squad``), ``minilm`` (an UNTRAINED phrase model on the offline all-MiniLM-L6-v2), a directory
    written by ``PhraseModel.save``, a DensePhrases checkpoint directory, a plain BERT-family encoder directory (an
    untrained phrase model is built on it), or a hub name ``org/name`` (downloaded here). A local directory wins over
    a shipped name.

    Raises:
        ModelLoadError: The path does not exist (the message names it) or the model cannot be fetched.
        RemoteCodeError: The directory asks to run its own code.
    """
    model = str(reference)
    if is_minilm_alias(model) or is_mpnet_alias(model):
        logger.warning(
            "PhraseRetriever model %r: an UNTRAINED phrase model built on %s; expect arbitrary answers (the "
            "trained default is %r)",
            model,
            "all-mpnet-base-v2" if is_mpnet_alias(model) else "all-MiniLM-L6-v2",
            DEFAULT_MODEL,
        )
        return ModelSource("base", model)
    path = Path(model).expanduser()
    if path.is_dir():
        return directory_source(path)
    if is_shipped_name(model):
        return ModelSource("saved", shipped_model_path(model))
    if path.exists():
        raise ModelLoadError(f"phrase model path is a file, expected a directory: {path.resolve()}")
    if is_hub_id(model):
        return directory_source(download_model(model))
    raise ModelLoadError(
        f"phrase model not found: {path.resolve()} (model={model!r}); pass a model directory, "
        f"{DEFAULT_MODEL!r} (shipped), 'minilm', or a hub name like 'org/name'"
    )


def directory_source(path: Path) -> ModelSource:
    """A local directory's source: a phrase model or DensePhrases checkpoint, else a plain encoder (a warning)."""
    refuse_remote_code(path)  # before any loader (and before the plain-encoder warning)
    if (path / CONFIG_FILE).is_file():
        return ModelSource("saved", path)
    if (path / CHECKPOINT_WEIGHTS_FILE).is_file() and not (path / WEIGHTS_FILE).is_file():
        return ModelSource("saved", path)  # a DensePhrases checkpoint
    logger.warning("%s is a plain encoder, not a phrase model: building an UNTRAINED phrase model on it", path)
    return ModelSource("base", path)


def download_model(name: str) -> Path:
    """The local snapshot of the Hugging Face hub model ``name`` (downloaded when not cached).

    Raises:
        ModelLoadError: The hub cannot be reached or has no such model.
    """
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name))
    except Exception as exc:
        raise ModelLoadError(
            f"phrase model {name!r} is not a local directory ({Path(name).resolve()} does not "
            f"exist) and could not be fetched from the Hugging Face hub: {exc}"
        ) from exc
