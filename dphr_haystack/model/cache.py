"""A process-wide cache of loaded phrase models, so that several nodes and pipelines share one copy."""

from __future__ import annotations

import threading

from .._util.device import resolve_device
from ..errors import ModelLoadError
from .loading import load_model
from .phrase_model import PhraseModel
from .registry import model_key

_CACHE: dict[tuple[str, str], PhraseModel] = {}
_LOCK = threading.Lock()


def load_phrase_model(model: str, device: str = "auto") -> PhraseModel:
    """Load (once per process and device) a phrase model by alias, local directory or Hugging Face hub name.

    Args:
        model: ``dphr-minilm-squad-distilled`` (alias ``default``), ``dphr-minilm-squad-384`` or
            ``dphr-minilm-squad`` (trained, shipped with the package),
            ``minilm`` (an untrained phrase model built on the offline all-MiniLM-L6-v2), a directory
            written by ``PhraseModel.save``, a DensePhrases checkpoint directory, a plain BERT-family encoder
            directory (an untrained phrase model is built on it), or a hub name ``org/name``.
        device: ``cpu``, ``cuda[:N]`` or ``auto`` (:func:`~dphr_haystack._util.device.resolve_device`).

    Raises:
        ModelLoadError: The path does not exist (the message names it) or the model cannot be read.
    """
    if not isinstance(model, str) or not model.strip():
        raise ModelLoadError(f"model must be a non-empty path or name, got {model!r}")
    dev = resolve_device(device)
    key = (model_key(model), dev)
    with _LOCK:
        cached = _CACHE.get(key)
        if cached is None:
            cached = load_model(model).to(dev).eval()
            _CACHE[key] = cached
        return cached


def clear_model_cache() -> None:
    """Forget every cached phrase model (they are freed once no node holds them)."""
    with _LOCK:
        _CACHE.clear()


def cached_models() -> list[tuple[str, str]]:
    """The (model, device) keys currently cached."""
    with _LOCK:
        return list(_CACHE)


def model_fingerprint(model: PhraseModel) -> str:
    """``model.phrase_fingerprint()`` (kept on the model until its phrase-side weights or settings change)."""
    return model.phrase_fingerprint()
