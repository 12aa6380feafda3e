"""The original DensePhrases training objective (Lee et al. 2021a, Eq. 9; densephrases-reference.md §2)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ._masked import full_precision, upcast, zero_loss
from .filter_loss import FilterLoss


def gold_vectors(states: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Hidden state at each example's gold position: (B, L, d), (B,) → (B, d)."""
    return states[torch.arange(states.shape[0], device=states.device), positions]


class DensePhrasesLoss(nn.Module):
    """L = L_single + λ_kl·L_kl + λ_neg·L_neg + λ_flt·L_flt, each term averaged over start and end.

    With l^s_t = q_s·h_t and l^e_t = q_e·h_t over the valid positions of each example's own window, gold
    start a and end b (0 = [CLS] when the answer is outside the window)::

        L_single = ½ [CE(l^s, a) + CE(l^e, b)]
        L_neg    = ½ [CE(M^s, i) + CE(M^e, i)],  M^s_{ik} = q_s^(i)·g^s_k,  k over B in-batch gold start
                   vectors g^s_k = h^(k)_{a_k} followed by the detached pre-batch gold vectors (queue of
                   the C previous batches); likewise for the end; the target of row i is column i
        L_kl     = ½ [KL(softmax(t^s) ‖ softmax(l^s)) + KL(softmax(t^e) ‖ softmax(l^e))], summed over
                   positions, averaged over the batch (only when teacher logits t are given, e.g. by
                   :class:`train.teacher.CrossEncoderTeacher`)
        L_flt    = :class:`FilterLoss` (BCE, pos_weight = L, answerable examples only)

    Unlike DensePhrases, padding positions are masked out of the single-passage softmax (DensePhrases pads
    every window to the same length and leaves them in); pass an all-ones mask to reproduce it.

    Inputs:
        q_start, q_end: (B, d) query vectors.
        states: (B, L, d) phrase-encoder states of each example's window.
        mask: (B, L) 1 for real tokens.
        start_positions, end_positions: (B,) gold positions.
        filter_logits: (B, L, 2) or None.
        pre_start, pre_end: (P, d) detached pre-batch gold vectors or None.
        teacher_start, teacher_end: (B, L) teacher logits or None.
        batch_start, batch_end: (K, d) in-batch gold vectors of every DDP process (all-gathered, K ≥ B);
            None: this batch's own gold vectors.
        own_index: (B,) column of each query's own gold vector in ``batch_start`` (default ``arange(B)``).

    Returns:
        dict with ``loss`` and the unweighted terms ``single``, ``neg``, ``kl``, ``filter``.

    Example:
        >>> out = DensePhrasesLoss(lambda_neg=4.0)(qs, qe, states, mask, starts, ends)
        >>> out["loss"].backward()
    """

    def __init__(
        self,
        lambda_neg: float = 4.0,
        lambda_flt: float = 1.0,
        lambda_kl: float = 0.0,
        filter_pos_weight: float | None = None,
    ) -> None:
        super().__init__()
        self.lambda_neg = lambda_neg
        self.lambda_flt = lambda_flt
        self.lambda_kl = lambda_kl
        self.filter_loss = FilterLoss(filter_pos_weight)

    @full_precision
    def forward(
        self,
        q_start: torch.Tensor,
        q_end: torch.Tensor,
        states: torch.Tensor,
        mask: torch.Tensor,
        start_positions: torch.Tensor,
        end_positions: torch.Tensor,
        filter_logits: torch.Tensor | None = None,
        pre_start: torch.Tensor | None = None,
        pre_end: torch.Tensor | None = None,
        teacher_start: torch.Tensor | None = None,
        teacher_end: torch.Tensor | None = None,
        batch_start: torch.Tensor | None = None,
        batch_end: torch.Tensor | None = None,
        own_index: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        q_start, q_end, states = upcast(q_start), upcast(q_end), upcast(states)
        valid = mask.bool()  # (B, L)
        start_logits = torch.einsum("bd,bld->bl", q_start, states).masked_fill(~valid, float("-inf"))  # (B, L)
        end_logits = torch.einsum("bd,bld->bl", q_end, states).masked_fill(~valid, float("-inf"))  # (B, L)
        single = 0.5 * (F.cross_entropy(start_logits, start_positions) + F.cross_entropy(end_logits, end_positions))

        targets = own_index if own_index is not None else torch.arange(states.shape[0], device=states.device)  # (B,)
        neg_terms = []
        for q, positions, gathered, pre in (
            (q_start, start_positions, batch_start, pre_start),
            (q_end, end_positions, batch_end, pre_end),
        ):
            columns = upcast(gathered) if gathered is not None else gold_vectors(states, positions)  # (K, d)
            if pre is not None and len(pre):
                columns = torch.cat([columns, upcast(pre)])  # (K + P, d)
            neg_terms.append(F.cross_entropy(q @ columns.T, targets))  # scores (B, K + P)
        neg = 0.5 * (neg_terms[0] + neg_terms[1])

        kl = zero_loss(single)
        if teacher_start is not None and teacher_end is not None:
            kl = 0.5 * (
                kl_divergence(teacher_start, start_logits, valid) + kl_divergence(teacher_end, end_logits, valid)
            )
        flt = zero_loss(single)
        if filter_logits is not None:
            flt = self.filter_loss(filter_logits, start_positions, end_positions, mask)
        loss = single + self.lambda_neg * neg + self.lambda_kl * kl + self.lambda_flt * flt
        return {
            "loss": loss,
            "single": single.detach(),
            "neg": neg.detach(),
            "kl": kl.detach(),
            "filter": flt.detach(),
        }


def kl_divergence(teacher: torch.Tensor, student: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Σ_t p_t (log p_t − log q_t) over valid positions, averaged over rows: (B, L), (B, L), (B, L) → ()."""
    log_p = F.log_softmax(upcast(teacher).masked_fill(~valid, float("-inf")), dim=-1)  # (B, L)
    log_q = F.log_softmax(student, dim=-1)  # (B, L)
    # Fill the masked −inf entries before combining them, so that no 0·inf reaches the backward pass.
    log_p, log_q = log_p.masked_fill(~valid, 0.0), log_q.masked_fill(~valid, 0.0)  # (B, L)
    per_token = log_p.exp() * valid * (log_p - log_q)  # (B, L)
    return per_token.sum(dim=-1).mean()
