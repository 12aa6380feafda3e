"""Query-side fine-tuning loss: marginal likelihood of gold candidates among retrieved phrases."""

from __future__ import annotations

import math

import torch
from torch import nn

from ._masked import full_precision, masked_logsumexp, upcast, zero_loss


class QuerySideLoss(nn.Module):
    """Marginal log-likelihood over the top-K retrieved phrases (DensePhrases QSFT; Lee et al. 2021b Eq. 5).

    With candidate c's start/end vectors s_c, e_c, z_c = q_s·s_c + q_e·e_c, z^s_c = q_s·s_c, z^e_c = q_e·e_c
    over the valid candidates C, T the phrase-level targets (text matches a gold answer) and D the
    document-level targets (the candidate's passage is gold)::

        L_phrase = −log Σ_{c∈T} softmax_C(z)_c − log Σ_{c∈T} softmax_C(z^s)_c − log Σ_{c∈T} softmax_C(z^e)_c
        L_doc    = −log Σ_{c∈D} softmax_C(z)_c                      (Lee et al. 2021b, Eq. 5)
        L        = mean over queries with T ≠ ∅ of L_phrase + mean over queries with D ≠ ∅ of L_doc

    Each −log Σ_T softmax is computed as logsumexp_C − logsumexp_T. Queries with no positive of a kind skip that
    term. ``min_prob`` reproduces DensePhrases' ``−log clamp(Σ_T softmax, min_prob, 1)``: each term is capped at
    −log(min_prob), and a capped term passes no gradient (DensePhrases: ``min_prob=1e-7``). With DensePhrases'
    candidates, padding candidates are zero vectors that stay in the softmax: pass a mask of all ones.

    Args:
        min_prob: None (no cap, the default) or the smallest probability a target set is given.

    Inputs:
        q_start, q_end: (B, d) query vectors (with gradients).
        cand_start, cand_end: (B, K, d) candidate start/end token vectors (fixed index).
        cand_mask: (B, K) 1 for real candidates (rows are padded to K).
        phrase_targets: (B, K) bool or None; doc_targets: (B, K) bool or None.

    Returns:
        dict with ``loss``, ``phrase``, ``doc`` (detached) and ``answered`` (fraction of queries with a target).

    Example:
        >>> out = QuerySideLoss()(qs, qe, cs, ce, cmask, phrase_targets=gold)
    """

    def __init__(self, min_prob: float | None = None) -> None:
        super().__init__()
        if min_prob is not None and not 0.0 < min_prob < 1.0:
            raise ValueError(f"min_prob must be in (0, 1) or None, got {min_prob!r}")
        self.min_prob = min_prob

    def _nll(self, scores: torch.Tensor, valid: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """−log Σ_targets softmax_valid(scores) per query (B,), capped at −log(min_prob) when set."""
        nll = masked_logsumexp(scores, valid) - masked_logsumexp(scores, targets)  # (B,)
        return nll if self.min_prob is None else torch.clamp(nll, max=-math.log(self.min_prob))

    @full_precision
    def forward(
        self,
        q_start: torch.Tensor,
        q_end: torch.Tensor,
        cand_start: torch.Tensor,
        cand_end: torch.Tensor,
        cand_mask: torch.Tensor,
        phrase_targets: torch.Tensor | None = None,
        doc_targets: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        valid = cand_mask.bool()  # (B, K)
        zs = torch.einsum("bd,bkd->bk", upcast(q_start), upcast(cand_start))  # (B, K)
        ze = torch.einsum("bd,bkd->bk", upcast(q_end), upcast(cand_end))  # (B, K)
        z = zs + ze  # (B, K)
        total = zero_loss(z)
        phrase = doc = zero_loss(z)
        any_target = torch.zeros(valid.shape[0], dtype=torch.bool, device=valid.device)
        if phrase_targets is not None:
            t = phrase_targets.bool() & valid  # (B, K)
            has = t.any(dim=1)  # (B,)
            any_target |= has
            if bool(has.any()):
                per_query = sum(self._nll(x, valid, t) for x in (z, zs, ze))  # (B,)
                phrase = per_query[has].mean()
                total = total + phrase
        if doc_targets is not None:
            t = doc_targets.bool() & valid  # (B, K)
            has = t.any(dim=1)  # (B,)
            any_target |= has
            if bool(has.any()):
                doc = self._nll(z, valid, t)[has].mean()
                total = total + doc
        return {"loss": total, "phrase": phrase.detach(), "doc": doc.detach(), "answered": any_target.float().mean()}
