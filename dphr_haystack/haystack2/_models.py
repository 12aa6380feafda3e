"""Phrase models for the Haystack 2 components: loaded once per process and device, fingerprinted once."""

from __future__ import annotations

import logging
import threading
import weakref
from pathlib import Path

from dphr_haystack import DEFAULT_MODEL, InvalidParameterError, ModelLoadError, PhraseModel

logger = logging.getLogger(__name__)

DEVICES = ("cpu", "cuda", "auto")
_MINILM = ("minilm", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2")
_CACHE: dict[tuple[str, str], PhraseModel] = {}
_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when available, else ``cpu``; ``cuda`` without a GPU falls back to the CPU."""
    import torch

    if device not in DEVICES:
        raise InvalidParameterError(f"device={device!r}; valid: {', '.join(DEVICES)}")
    if device != "cpu" and torch.cuda.is_available():
        return "cuda"
    if device == "cuda":
        logger.warning("device='cuda' requested but no CUDA device is available; using the CPU")
    return "cpu"


def load_model(model: str, device: str = "auto") -> PhraseModel:
    """The phrase model ``model`` on ``device``, loaded at most once per process.

    Args:
        model: ``dphr-minilm-squad`` (shipped, trained), ``minilm`` (untrained, on the offline all-MiniLM-L6-v2),
            a directory written by ``PhraseModel.save`` or a DensePhrases checkpoint directory.
        device: ``cpu``, ``cuda`` or ``auto``.

    Raises:
        ModelLoadError: The model cannot be found or read.
    """
    if not isinstance(model, str) or not model.strip():
        raise ModelLoadError(f"model must be a non-empty path or name, got {model!r}")
    dev = resolve_device(device)
    path = Path(model).expanduser()
    key = (str(path.resolve()) if path.exists() else model.lower() if model.lower() in _MINILM else model, dev)
    with _LOCK:
        cached = _CACHE.get(key)
        if cached is None:
            if model.lower() in _MINILM:
                logger.warning("phrase model %r is UNTRAINED (the trained default is %r)", model, DEFAULT_MODEL)
                cached = PhraseModel.from_base(model)
            else:
                cached = PhraseModel.load(model)
            cached = cached.to(dev).eval()
            _CACHE[key] = cached
        return cached


def fingerprint(model: PhraseModel) -> str:
    """``model.phrase_fingerprint()``, computed once per model object."""
    value = _FINGERPRINTS.get(model)
    if value is None:
        value = _FINGERPRINTS[model] = model.phrase_fingerprint()
    return value
