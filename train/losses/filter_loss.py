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

    Window targets: ``start_positions``/``end_positions`` may instead be (B, L) 0/1 tensors marking every
    answer start/end of a window (all of its questions at once: the filter does not see the question, so
    an answer of one question is no negative for another). Then 1[t = a] becomes the target of token t,
    a row is answerable when it has a positive in either channel, and with ``pos_weight=None`` the
    weight of each row and channel is |V| / #positives, so all positives together weigh as much as all
    negatives (w = L again when there is one).

    Inputs:
        filter_logits: (B, L, 2) start and end filter logits.
        start_positions, end_positions: (B,) gold positions in the window, or (B, L) 0/1 window targets.
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
        width = filter_logits.shape[1]
        if start_positions.dim() == 2:  # window targets
            targets = [start_positions.bool() & mask, end_positions.bool() & mask]  # (B, L) each
            answerable = targets[0].any(dim=1) | targets[1].any(dim=1)  # (B,)
        else:
            answerable = start_positions > 0  # (B,)
            targets = [F.one_hot(p, num_classes=width).bool() for p in (start_positions, end_positions)]
        if not bool(answerable.any()):
            return zero_loss(filter_logits)
        logits = upcast(filter_logits[answerable])  # (A, L, 2)
        mask = mask[answerable]  # (A, L)
        n_valid = mask.sum(dim=1).clamp(min=1).to(logits.dtype)  # (A,)
        terms = []
        for channel, target in enumerate(targets):
            target = target[answerable].to(logits.dtype)  # (A, L)
            if self.pos_weight is not None:
                weight = torch.full_like(n_valid, float(self.pos_weight))  # (A,)
            else:
                weight = n_valid / target.sum(dim=1).clamp(min=1)  # (A,)
            per_token = F.binary_cross_entropy_with_logits(
                logits[..., channel], target, reduction="none", pos_weight=weight[:, None].expand_as(target)
            )  # (A, L)
            terms.append((per_token * mask).sum(dim=1) / n_valid)  # (A,)
        return (0.5 * (terms[0] + terms[1])).mean()
