"""The one device picker: ``auto`` / ``cpu`` / ``cuda[:N]`` to a usable torch device name, falling back with a warning.

Used by the phrase index's search backends, the model cache of the Haystack nodes, the CLI and the training recipes.
"""

from __future__ import annotations

import logging
import warnings

from ..errors import InvalidParameterError

logger = logging.getLogger(__name__)


class DeviceFallbackWarning(UserWarning):
    """A GPU was requested but cannot be used; the work runs on the CPU instead."""


def cuda_available() -> bool:
    """Whether torch sees a usable CUDA device."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return bool(torch.cuda.is_available())


def resolve_device(device: str | None = "auto") -> str:
    """``auto`` → ``cuda`` when available else ``cpu``; ``cuda[:N]`` without CUDA → ``cpu`` with a warning."""
    device = (device or "auto").strip().lower()
    if device == "auto":
        return "cuda" if cuda_available() else "cpu"
    if device == "cpu":
        return "cpu"
    if device.startswith("cuda"):
        if cuda_available():
            import torch

            ordinal = int(device.split(":", 1)[1]) if ":" in device else 0
            if ordinal < torch.cuda.device_count():
                return device
            warn_cpu_fallback(f"{device} requested but only {torch.cuda.device_count()} CUDA device(s) are visible")
            return "cpu"
        warn_cpu_fallback(f"{device} requested but CUDA is not available (torch {_torch_version()})")
        return "cpu"
    raise InvalidParameterError(f"device={device!r}; valid: auto, cpu, cuda, cuda:N")


def _torch_version() -> str:
    import torch

    return torch.__version__


def warn_cpu_fallback(reason: str) -> None:
    """Log and warn (:class:`DeviceFallbackWarning`) that work asked of a GPU runs on the CPU, and why."""
    message = f"{reason}; falling back to the CPU"
    logger.warning(message)
    warnings.warn(message, DeviceFallbackWarning, stacklevel=3)
