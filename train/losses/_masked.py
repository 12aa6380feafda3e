"""Masked reductions shared by the losses."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import torch

F = TypeVar("F", bound=Callable)


def masked_logsumexp(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """log Σ_{mask} exp(scores) along ``dim``; −inf where the mask is empty (callers guard against that)."""
    return torch.logsumexp(scores.masked_fill(~mask.bool(), float("-inf")), dim=dim)


def zero_loss(reference: torch.Tensor) -> torch.Tensor:
    """A scalar zero that keeps the graph (so backward() works on batches without any target)."""
    return reference.sum() * 0.0


def upcast(tensor: torch.Tensor) -> torch.Tensor:
    """fp16/bf16 → fp32 for stable softmaxes; fp32/fp64 pass through unchanged."""
    return tensor.float() if tensor.dtype in (torch.float16, torch.bfloat16) else tensor


def full_precision(forward: F) -> F:
    """Run a loss's ``forward`` outside autocast: its inputs are upcast, so its products and softmaxes stay
    float32 under bf16/fp16 mixed precision (autocast would otherwise run them, and mix them, in half precision)."""

    @functools.wraps(forward)
    def wrapper(*args, **kwargs):
        with torch.autocast("cuda", enabled=False), torch.autocast("cpu", enabled=False):
            return forward(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
