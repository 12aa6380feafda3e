"""Low-rank adapters (LoRA, Hu et al. 2021) on a phrase model's encoders: train and ship a base-size model small.

Every linear map of an encoder's transformer layers (attention query, key, value and output, the feed-forward in and
out) becomes W x + b + (alpha / rank) · B A x, with A (rank × in) random and B (out × rank) zero at the start, so an
adapted model first computes exactly what its base does. Training only A and B (and whatever else is left
trainable) changes 2.65M parameters an encoder of all-mpnet-base-v2 at rank 16 instead of 86M: the frozen W and b
stay bit-identical to the base's, so a save with ``omit_base_weights`` stores only the adapters and what else
changed (10.6 MB in float16 for two MPNet encoders), which is what a lent GPU's 64 MiB a call can bring back.

An adapted model records its adapters in its config (``adapters``: rank, alpha, the encoder roles adapted); every
load builds them again, so a saved adapted model loads, searches and resumes training as it was.
:func:`merge_adapters` folds them into the weights (W + (alpha / rank) B A) for a model that no longer trains.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from .config import ADAPTER_ROLES as ROLES
from .config import check_adapters

ENCODERS = {"phrase": ("phrase_encoder",), "query": ("query_encoder", "query_start_encoder", "query_end_encoder")}
LAYER_MARK = ".layer."  # the transformer layers of BERT-family encoders (encoder.layer.N...); not the pooler


class LoRALinear(nn.Linear):
    """An ``nn.Linear`` plus a low-rank update: its ``weight`` and ``bias`` keep their names (and stay the base's
    tensors), ``lora_a`` and ``lora_b`` are the adapter."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        nn.Module.__init__(self)
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight
        self.bias = base.bias
        self.rank, self.alpha = rank, alpha
        self.scale = alpha / rank
        device, dtype = base.weight.device, base.weight.dtype
        self.lora_a = nn.Parameter(torch.empty(rank, self.in_features, device=device, dtype=dtype))
        self.lora_b = nn.Parameter(torch.zeros(self.out_features, rank, device=device, dtype=dtype))
        if device.type != "meta":
            nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        update = nn.functional.linear(nn.functional.linear(x, self.lora_a), self.lora_b)
        return super().forward(x) + self.scale * update

    def merged(self) -> nn.Linear:
        """A plain ``nn.Linear`` computing what this one does (W + scale · B A)."""
        out = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None)
        out = out.to(device=self.weight.device, dtype=self.weight.dtype)
        with torch.no_grad():
            out.weight.copy_(self.weight + self.scale * (self.lora_b @ self.lora_a))
            if self.bias is not None:
                out.bias.copy_(self.bias)
        return out


def adapted_linears(model: nn.Module, roles: list[str]) -> Iterator[tuple[nn.Module, str, nn.Linear]]:
    """(parent module, attribute, linear) of every linear map in the transformer layers of the encoders of
    ``roles``."""
    prefixes = tuple(f"{name}." for role in roles for name in ENCODERS[role])
    for name, module in list(model.named_modules()):
        if not name.startswith(prefixes) or LAYER_MARK not in f".{name}" or not isinstance(module, nn.Linear):
            continue
        parent_name, _, attribute = name.rpartition(".")
        yield model.get_submodule(parent_name), attribute, module


def add_adapters(model: nn.Module, spec: Mapping[str, Any]) -> int:
    """Replace the linear maps of :func:`adapted_linears` by :class:`LoRALinear` (in place, the base tensors
    shared); returns how many. Linears already adapted are left as they are."""
    spec = check_adapters(spec)
    count = 0
    for parent, attribute, linear in adapted_linears(model, spec["roles"]):
        if not isinstance(linear, LoRALinear):
            setattr(parent, attribute, LoRALinear(linear, spec["rank"], spec["alpha"]))
            count += 1
    return count


def with_adapters(model: nn.Module, spec: Mapping[str, Any]) -> int:
    """Adapt a phrase model (:func:`add_adapters`) and record the adapters in its config, so that it saves and loads
    adapted; returns how many linear maps were adapted."""
    spec = check_adapters(spec)
    count = add_adapters(model, spec)
    model.config.adapters = spec
    return count


def merge_adapters(model: nn.Module) -> int:
    """Fold every :class:`LoRALinear` of ``model`` into a plain ``nn.Linear`` (in place; a phrase model's config
    then records no adapters); returns how many."""
    config = getattr(model, "config", None)
    if getattr(config, "adapters", None) is not None:
        config.adapters = None
    count = 0
    for name, module in list(model.named_modules()):
        if isinstance(module, LoRALinear):
            parent_name, _, attribute = name.rpartition(".")
            setattr(model.get_submodule(parent_name), attribute, module.merged())
            count += 1
    return count


def adapter_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The adapters' own parameters (``lora_a``, ``lora_b``)."""
    return [p for name, p in model.named_parameters() if name.endswith((".lora_a", ".lora_b"))]


def adapter_parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in adapter_parameters(model))


__all__ = [
    "ROLES",
    "LoRALinear",
    "adapted_linears",
    "adapter_parameter_count",
    "adapter_parameters",
    "add_adapters",
    "check_adapters",
    "merge_adapters",
    "with_adapters",
]
