"""The unified contrastive loss of Kim et al. 2022 (Eq. 2): one softmax over all negative tokens, λ-weighted."""

from __future__ import annotations

import math

import torch
from torch import nn

from ._masked import full_precision, masked_logsumexp, upcast


class UnifiedLoss(nn.Module):
    """Per side (start, end), the gold token against every token of own, in/pre-batch and hard passages.

    For query i with gold token p⁺ (position a_i of its own passage c_i) and score s(q, p) = q·h_p::

        L_i = −log  e^{s(q,p⁺)} / ( e^{s(q,p⁺)} + Σ_{p⁻} λ(p⁻) e^{s(q,p⁻)} )
            = logsumexp([s(q,p⁺)] ∪ {s(q,p⁻) + log λ(p⁻)}) − s(q,p⁺)

        λ(p⁻) = λ_inp  for the other tokens of c_i (N_inp),
                λ_inb  for every token of the other in-batch passages (N_inb) and of pre-batch passages (N_prb),
                λ_hard for every token of the hard-negative passages of the batch (N_hard).

    L = ½ (mean_i L_i^start + mean_i L_i^end). Padding is masked; defaults follow the paper
    (λ_inp = λ_hard = 1, λ_inb = 256).

    Inputs:
        q_start, q_end: (B, d) query vectors.
        states: (K, L, d) token states of the batch passages (K ≥ B under DDP all-gather).
        mask: (K, L) 1 for real tokens.
        start_positions, end_positions: (B,) gold positions inside each query's own passage.
        own_index: (B,) row of each query's own passage in ``states`` (default ``arange(B)``).
        exclude: (B, K) True where passage k must not be a negative of query i (e.g. the same passage
            appearing twice in a batch); the own passage is never excluded.
        pre_vectors: (P, d) detached token vectors of pre-batch passages; pre_allowed (B, P) optional.
        hard_states: (H, Lh, d) hard-negative passages shared by the batch, hard_mask (H, Lh).

    Returns:
        dict with ``loss``, ``start`` and ``end`` (detached), and ``negatives`` (count per query, float).

    Example:
        >>> out = UnifiedLoss()(qs, qe, states, mask, starts, ends, hard_states=hs, hard_mask=hm)
    """

    def __init__(self, lambda_inp: float = 1.0, lambda_inb: float = 256.0, lambda_hard: float = 1.0) -> None:
        super().__init__()
        if min(lambda_inp, lambda_inb, lambda_hard) <= 0:
            raise ValueError("the λ weights of the unified loss must be > 0")
        self.log_inp, self.log_inb, self.log_hard = math.log(lambda_inp), math.log(lambda_inb), math.log(lambda_hard)

    @full_precision
    def forward(
        self,
        q_start: torch.Tensor,
        q_end: torch.Tensor,
        states: torch.Tensor,
        mask: torch.Tensor,
        start_positions: torch.Tensor,
        end_positions: torch.Tensor,
        own_index: torch.Tensor | None = None,
        exclude: torch.Tensor | None = None,
        pre_vectors: torch.Tensor | None = None,
        pre_allowed: torch.Tensor | None = None,
        hard_states: torch.Tensor | None = None,
        hard_mask: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        B, K = q_start.shape[0], states.shape[0]
        device = states.device
        if own_index is None:
            own_index = torch.arange(B, device=device)
        rows = torch.arange(B, device=device)
        own = torch.zeros(B, K, dtype=torch.bool, device=device)
        own[rows, own_index] = True  # (B, K)
        allowed = mask.bool()[None].expand(B, -1, -1).clone()  # (B, K, L)
        if exclude is not None:
            allowed &= ~(exclude.bool() & ~own)[:, :, None]
        log_w = torch.full(allowed.shape, self.log_inb, device=device, dtype=upcast(states).dtype)  # (B, K, L)
        log_w[own] = self.log_inp
        sides = {}
        count = None
        for name, q, positions in (("start", q_start, start_positions), ("end", q_end, end_positions)):
            q = upcast(q)
            scores = torch.einsum("bd,kld->bkl", q, upcast(states))  # (B, K, L)
            positive = scores[rows, own_index, positions]  # (B,)
            weighted = scores + log_w  # (B, K, L)
            weighted[rows, own_index, positions] = positive  # the gold token itself has weight 1
            parts = [weighted.reshape(B, -1)]  # (B, K·L)
            masks = [allowed.reshape(B, -1)]
            if pre_vectors is not None and len(pre_vectors):
                parts.append(q @ upcast(pre_vectors).T + self.log_inb)  # (B, P)
                masks.append(
                    pre_allowed.bool() if pre_allowed is not None else torch.ones_like(parts[-1], dtype=torch.bool)
                )
            if hard_states is not None and len(hard_states):
                hard = torch.einsum("bd,hld->bhl", q, upcast(hard_states)).reshape(B, -1)  # (B, H·Lh)
                parts.append(hard + self.log_hard)
                masks.append(hard_mask.bool().reshape(1, -1).expand(B, -1))
            logits, keep = torch.cat(parts, dim=1), torch.cat(masks, dim=1)  # (B, N)
            sides[name] = (masked_logsumexp(logits, keep, dim=1) - positive).mean()
            count = keep.sum(dim=1).float().mean() - 1
        loss = 0.5 * (sides["start"] + sides["end"])
        return {"loss": loss, "start": sides["start"].detach(), "end": sides["end"].detach(), "negatives": count}
