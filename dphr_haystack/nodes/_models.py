"""A process-wide cache of loaded phrase models, so that several nodes and pipelines share one copy."""

from __future__ import annotations

import logging
import re
import threading
import weakref
from pathlib import Path

from ..errors import InvalidParameterError, ModelLoadError
from ..model import CONFIG_FILE, MINILM_ALIASES, WEIGHTS_FILE, PhraseModel
from ..shipped import DEFAULT_MODEL, is_shipped_name, shipped_model_path

logger = logging.getLogger(__name__)

DEVICES = ("cpu", "cuda", "auto")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_CACHE: dict[tuple[str, str], PhraseModel] = {}
_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when available else ``cpu``; ``cuda`` without a GPU falls back to CPU with a warning."""
    import torch

    if device not in DEVICES:
        raise InvalidParameterError(f"device={device!r}; valid: {', '.join(DEVICES)}")
    if device == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if device == "cuda":
        logger.warning("device='cuda' requested but no CUDA device is available; using the CPU")
    return "cpu"


def model_key(model: str) -> str:
    """The cache key of a model name: the lower-cased alias, or the absolute path of a local directory."""
    if model.lower() in MINILM_ALIASES:
        return "minilm"
    path = Path(model).expanduser()
    if path.exists():
        return str(path.resolve())
    return str(shipped_model_path(model)) if is_shipped_name(model) else model


def load_phrase_model(model: str, device: str = "auto") -> PhraseModel:
    """Load (once per process and device) a phrase model by alias, local directory or Hugging Face hub name.

    Args:
        model: ``dphr-minilm-squad`` (alias ``default``: the trained phrase model shipped with the package),
            ``minilm`` (an untrained phrase model built on the offline all-MiniLM-L6-v2), a directory
            written by ``PhraseModel.save``, a DensePhrases checkpoint directory, a plain BERT-family encoder
            directory (an untrained phrase model is built on it), or a hub name ``org/name``.
        device: ``cpu``, ``cuda`` or ``auto``.

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
            cached = _load(model).to(dev).eval()
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
    """``model.phrase_fingerprint()``, computed once per model object."""
    fingerprint = _FINGERPRINTS.get(model)
    if fingerprint is None:
        fingerprint = model.phrase_fingerprint()
        _FINGERPRINTS[model] = fingerprint
    return fingerprint


def _load(model: str) -> PhraseModel:
    if model.lower() in MINILM_ALIASES:
        logger.warning("PhraseRetriever model %r: an UNTRAINED phrase model built on all-MiniLM-L6-v2; expect "
                       "arbitrary answers (the trained default is %r)", model, DEFAULT_MODEL)
        return PhraseModel.from_base(model)
    path = Path(model).expanduser()
    if path.is_dir():
        return _load_dir(path)
    if is_shipped_name(model):
        return PhraseModel.load(shipped_model_path(model))
    if path.exists():
        raise ModelLoadError(f"phrase model path is a file, expected a directory: {path.resolve()}")
    if _HUB_ID.fullmatch(model) and not model.startswith((".", "/", "~")):
        return _load_dir(_download(model))
    raise ModelLoadError(f"phrase model not found: {path.resolve()} (model={model!r}); pass a model directory, "
                         f"{DEFAULT_MODEL!r} (shipped), 'minilm', or a hub name like 'org/name'")


def _load_dir(path: Path) -> PhraseModel:
    if (path / CONFIG_FILE).is_file():
        return PhraseModel.load(path)
    if (path / "pytorch_model.bin").is_file() and not (path / WEIGHTS_FILE).is_file():
        return PhraseModel.load(path)  # a DensePhrases checkpoint
    logger.warning("%s is a plain encoder, not a phrase model: building an UNTRAINED phrase model on it", path)
    return PhraseModel.from_base(path)


def _download(name: str) -> Path:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name))
    except Exception as exc:  # noqa: BLE001 - the hub client raises many error types (offline, 404, auth)
        raise ModelLoadError(f"phrase model {name!r} is not a local directory ({Path(name).resolve()} does not "
                             f"exist) and could not be fetched from the Hugging Face hub: {exc}") from exc
