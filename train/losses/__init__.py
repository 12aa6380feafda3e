"""Training losses: small modules taking scores or vectors plus masks (never the model).

``LOSSES`` maps the names recipes use to the loss classes; :func:`build_loss` instantiates one.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from .densephrases_loss import DensePhrasesLoss, gold_vectors, kl_divergence
from .filter_loss import FilterLoss
from .qsft_loss import QuerySideLoss
from .unified_loss import UnifiedLoss

LOSSES: dict[str, type[nn.Module]] = {
    "densephrases": DensePhrasesLoss,
    "unified": UnifiedLoss,
    "filter": FilterLoss,
    "qsft": QuerySideLoss,
}


def build_loss(name: str, **kwargs: Any) -> nn.Module:
    """Instantiate the loss registered as ``name``; unknown names raise ValueError listing the valid keys."""
    if name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; valid: {', '.join(sorted(LOSSES))}")
    return LOSSES[name](**kwargs)


__all__ = [
    "LOSSES",
    "DensePhrasesLoss",
    "FilterLoss",
    "QuerySideLoss",
    "UnifiedLoss",
    "build_loss",
    "gold_vectors",
    "kl_divergence",
]
