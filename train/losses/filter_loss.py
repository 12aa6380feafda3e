"""Token-filter loss (DensePhrases, Lee et al. 2021a): BCE of the start/end filter logits against the gold
positions."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ._masked import full_precision, upcast, zero_loss


class FilterLoss(nn.Module):
    """Binary cross-entropy of per-token filter logits, positives up-weighted, answerable examples only.

    Equation, for an answerable example with gold start a and end b over its valid positions V::

        L_start = 1/|V| Σ_{t∈V} BCE(f^s_t, 1[t = a]; pos_weight = w)
        L_end   = 1/|V| Σ_{t∈V} BCE(f^e_t, 1[t = b]; pos_weight = w)
        L_flt   = mean over answerable examples of ½ (L_start + L_end)

    where BCE(x, y; w) = −[w·y·log σ(x) + (1 − y)·log(1 − σ(x))]. DensePhrases sets w = L (the window
    length) so that the single positive weighs as much as all negatives; with ``pos_weight=None`` w is
    the number of valid positions of each row. An example is answerable when its gold start is > 0
    (position 0, [CLS], marks an answer outside the window).

    Inputs:
        filter_logits: (B, L, 2) start and end filter logits.
        start_positions, end_positions: (B,) gold positions in the window.
        mask: (B, L) 1 for real tokens (padding is left out of the mean).

    Returns:
        A scalar; zero (with a graph) when no example of the batch is answerable.

    Example:
        >>> loss = FilterLoss()(torch.randn(2, 5, 2), torch.tensor([1, 0]), torch.tensor([2, 0]), torch.ones(2, 5))
    """

    def __init__(self, pos_weight: float | None = None) -> None:
        super().__init__()
        self.pos_weight = pos_weight

    @full_precision
    def forward(
        self,
        filter_logits: torch.Tensor,
        start_positions: torch.Tensor,
        end_positions: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        mask = mask.bool()  # (B, L)
        answerable = start_positions > 0  # (B,)
        if not bool(answerable.any()):
            return zero_loss(filter_logits)
        logits = upcast(filter_logits[answerable])  # (A, L, 2)
        mask = mask[answerable]  # (A, L)
        n_valid = mask.sum(dim=1).clamp(min=1).to(logits.dtype)  # (A,)
        weight = torch.full_like(n_valid, float(self.pos_weight)) if self.pos_weight is not None else n_valid  # (A,)
        terms = []
        for channel, positions in enumerate((start_positions[answerable], end_positions[answerable])):
            target = F.one_hot(positions, num_classes=logits.shape[1]).to(logits.dtype)  # (A, L)
            per_token = F.binary_cross_entropy_with_logits(
                logits[..., channel], target, reduction="none", pos_weight=weight[:, None].expand_as(target)
            )  # (A, L)
            terms.append((per_token * mask).sum(dim=1) / n_valid)  # (A,)
        return (0.5 * (terms[0] + terms[1])).mean()
