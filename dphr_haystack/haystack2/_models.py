"""Phrase models of the Haystack 2 components: the core's process-wide cache, shared with the 1.x nodes."""

from __future__ import annotations

from ..model.cache import load_phrase_model as load_model
from ..model.cache import model_fingerprint as fingerprint

DEVICES = ("cpu", "cuda", "auto")

__all__ = ["DEVICES", "fingerprint", "load_model"]
