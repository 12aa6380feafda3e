"""Each loss against a slow, direct (loop-based, float64) reference: values and gradients."""

from __future__ import annotations

import math

import pytest
import torch

from train.losses import LOSSES, DensePhrasesLoss, FilterLoss, QuerySideLoss, UnifiedLoss, build_loss, gold_vectors

pytestmark = pytest.mark.unit


def _leaf(*shape: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_(True)


def _grads(value: torch.Tensor, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return list(torch.autograd.grad(value, inputs, retain_graph=True))


def _assert_close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a.double(), b.double(), rtol=1e-6, atol=1e-8)


def _bce(x: torch.Tensor, y: float, w: float) -> torch.Tensor:
    sig = 1.0 / (1.0 + torch.exp(-x))
    return -(w * y * torch.log(sig) + (1.0 - y) * torch.log(1.0 - sig))


def _ref_filter(flt, starts, ends, mask, pos_weight=None):
    total, count = 0.0, 0
    for i in range(flt.shape[0]):
        if int(starts[i]) <= 0:
            continue
        valid = [t for t in range(flt.shape[1]) if mask[i, t] > 0]
        w = float(pos_weight) if pos_weight is not None else float(len(valid))
        per_side = []
        for ch, gold in ((0, int(starts[i])), (1, int(ends[i]))):
            per_side.append(sum(_bce(flt[i, t, ch], 1.0 if t == gold else 0.0, w) for t in valid) / len(valid))
        total = total + 0.5 * (per_side[0] + per_side[1])
        count += 1
    return total / count


def _ref_ce(logits: list[torch.Tensor], target: int) -> torch.Tensor:
    z = sum(torch.exp(x) for x in logits)
    return -(logits[target] - torch.log(z))


def _ref_densephrases(qs, qe, h, mask, starts, ends, flt, pre_s, pre_e, t_s, t_e, lam_neg, lam_flt, lam_kl):
    B, L, _ = h.shape
    single = neg = kl = 0.0
    for i in range(B):
        valid = [t for t in range(L) if mask[i, t] > 0]
        for q, gold, pre, teacher in ((qs, starts, pre_s, t_s), (qe, ends, pre_e, t_e)):
            logits = [torch.dot(q[i], h[i, t]) for t in valid]
            single = single + 0.5 * _ref_ce(logits, valid.index(int(gold[i]))) / B
            cols = [torch.dot(q[i], h[k, int(gold[k])]) for k in range(B)]
            cols += [torch.dot(q[i], pre[m]) for m in range(pre.shape[0])]
            neg = neg + 0.5 * _ref_ce(cols, i) / B
            zt = sum(torch.exp(teacher[i, t]) for t in valid)
            zs = sum(torch.exp(x) for x in logits)
            for j, t in enumerate(valid):
                p = torch.exp(teacher[i, t]) / zt
                kl = kl + 0.5 * p * (torch.log(p) - (logits[j] - torch.log(zs))) / B
    flt_value = _ref_filter(flt, starts, ends, mask)
    return single + lam_neg * neg + lam_kl * kl + lam_flt * flt_value


def test_registry_and_unknown_name():
    assert set(LOSSES) == {"densephrases", "unified", "filter", "qsft"}
    assert isinstance(build_loss("unified", lambda_inb=4.0), UnifiedLoss)
    with pytest.raises(ValueError, match="valid: densephrases, filter, qsft, unified"):
        build_loss("nope")


@pytest.mark.parametrize("pos_weight", [None, 7.0])
def test_filter_loss_matches_reference(pos_weight):
    flt = _leaf(3, 5, 2, seed=1)
    starts, ends = torch.tensor([1, 0, 3]), torch.tensor([2, 0, 3])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    value = FilterLoss(pos_weight)(flt, starts, ends, mask)
    ref = _ref_filter(flt, starts, ends, mask, pos_weight)
    _assert_close(value, ref)
    for a, b in zip(_grads(value, [flt]), _grads(ref, [flt]), strict=True):
        _assert_close(a, b)
    assert _grads(value, [flt])[0][1].abs().sum() == 0  # the unanswerable example contributes nothing


def test_filter_loss_without_answerable_examples_is_zero_with_graph():
    flt = _leaf(2, 4, 2, seed=2)
    value = FilterLoss()(flt, torch.tensor([0, 0]), torch.tensor([0, 0]), torch.ones(2, 4))
    value.backward()
    assert value.item() == 0.0 and flt.grad is not None


def test_densephrases_loss_matches_reference():
    B, L, d, P = 3, 6, 4, 2
    qs, qe, h = _leaf(B, d, seed=3), _leaf(B, d, seed=4), _leaf(B, L, d, seed=5)
    flt, pre_s, pre_e = _leaf(B, L, 2, seed=6), _leaf(P, d, seed=7), _leaf(P, d, seed=8)
    t_s, t_e = _leaf(B, L, seed=9), _leaf(B, L, seed=10)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]])
    starts, ends = torch.tensor([2, 0, 1]), torch.tensor([4, 0, 3])
    loss = DensePhrasesLoss(lambda_neg=2.0, lambda_flt=0.5, lambda_kl=3.0)
    out = loss(
        qs,
        qe,
        h,
        mask,
        starts,
        ends,
        filter_logits=flt,
        pre_start=pre_s,
        pre_end=pre_e,
        teacher_start=t_s,
        teacher_end=t_e,
    )
    ref = _ref_densephrases(qs, qe, h, mask, starts, ends, flt, pre_s, pre_e, t_s, t_e, 2.0, 0.5, 3.0)
    _assert_close(out["loss"], ref)
    inputs = [qs, qe, h, flt, pre_s, pre_e, t_s]
    for a, b in zip(_grads(out["loss"], inputs), _grads(ref, inputs), strict=True):
        _assert_close(a, b)
    assert set(out) == {"loss", "single", "neg", "kl", "filter"}


def test_densephrases_loss_with_gathered_gold_vectors_splits_like_one_batch():
    """Under DDP each process passes every process's gold vectors: the mean over processes is the batch loss."""
    B, L, d = 4, 5, 3
    qs, qe, h = _leaf(B, d, seed=30), _leaf(B, d, seed=31), _leaf(B, L, d, seed=32)
    mask = torch.ones(B, L, dtype=torch.long)
    starts, ends = torch.tensor([1, 0, 2, 3]), torch.tensor([2, 0, 4, 3])
    loss = DensePhrasesLoss(lambda_neg=2.0, lambda_flt=0.0)
    whole = loss(qs, qe, h, mask, starts, ends)["loss"]
    gathered_s, gathered_e = gold_vectors(h, starts), gold_vectors(h, ends)
    parts = []
    for rank in (0, 1):
        rows = slice(2 * rank, 2 * rank + 2)
        parts.append(
            loss(
                qs[rows],
                qe[rows],
                h[rows],
                mask[rows],
                starts[rows],
                ends[rows],
                batch_start=gathered_s,
                batch_end=gathered_e,
                own_index=torch.arange(2) + 2 * rank,
            )["loss"]
        )
    _assert_close(0.5 * (parts[0] + parts[1]), whole)
    for a, b in zip(_grads(0.5 * (parts[0] + parts[1]), [qs, qe, h]), _grads(whole, [qs, qe, h]), strict=True):
        _assert_close(a, b)


def _ref_unified(qs, qe, h, mask, starts, ends, exclude, pre, hard, hard_mask, lam_inp, lam_inb, lam_hard):
    B, L, _ = h.shape
    total = 0.0
    for q, gold in ((qs, starts), (qe, ends)):
        for i in range(B):
            pos = torch.exp(torch.dot(q[i], h[i, int(gold[i])]))
            denominator = pos
            for k in range(B):
                if k != i and exclude[i, k]:
                    continue
                for t in range(L):
                    if mask[k, t] == 0 or (k == i and t == int(gold[i])):
                        continue
                    weight = lam_inp if k == i else lam_inb
                    denominator = denominator + weight * torch.exp(torch.dot(q[i], h[k, t]))
            for m in range(pre.shape[0]):
                denominator = denominator + lam_inb * torch.exp(torch.dot(q[i], pre[m]))
            for j in range(hard.shape[0]):
                for t in range(hard.shape[1]):
                    if hard_mask[j, t]:
                        denominator = denominator + lam_hard * torch.exp(torch.dot(q[i], hard[j, t]))
            total = total - 0.5 * torch.log(pos / denominator) / B
    return total


@pytest.mark.parametrize("lambdas", [(1.0, 256.0, 1.0), (2.0, 3.0, 5.0)])
def test_unified_loss_matches_reference(lambdas):
    B, L, d, P, H, Lh = 3, 5, 4, 4, 2, 3
    qs, qe, h = _leaf(B, d, seed=11), _leaf(B, d, seed=12), _leaf(B, L, d, seed=13)
    pre, hard = _leaf(P, d, seed=14), _leaf(H, Lh, d, seed=15)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0]])
    hard_mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    starts, ends = torch.tensor([1, 0, 2]), torch.tensor([3, 0, 2])
    exclude = torch.tensor([[False, False, True], [False, False, False], [True, False, False]])
    out = UnifiedLoss(*lambdas)(
        qs, qe, h, mask, starts, ends, exclude=exclude, pre_vectors=pre, hard_states=hard, hard_mask=hard_mask
    )
    ref = _ref_unified(qs, qe, h, mask, starts, ends, exclude, pre, hard, hard_mask, *lambdas)
    _assert_close(out["loss"], ref)
    inputs = [qs, qe, h, pre, hard]
    for a, b in zip(_grads(out["loss"], inputs), _grads(ref, inputs), strict=True):
        _assert_close(a, b)
    # Padding never matters: changing padded states changes nothing.
    assert _grads(out["loss"], [h])[0][1, 3:].abs().sum() == 0


def test_losses_compute_in_float32_under_mixed_precision():
    """Encoders under bf16 autocast hand the losses bf16 states; the losses still compute (and mix) in float32."""
    B, L, d = 3, 5, 4
    qs, qe, h = (_leaf(*shape, seed=s).bfloat16() for shape, s in (((B, d), 21), ((B, d), 22), ((B, L, d), 23)))
    mask = torch.ones(B, L, dtype=torch.long)
    starts, ends = torch.tensor([1, 0, 2]), torch.tensor([3, 0, 2])
    loss = UnifiedLoss(1.0, 256.0, 1.0)
    plain = loss(qs, qe, h, mask, starts, ends, pre_vectors=h[:, 0].clone())["loss"]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = loss(qs, qe, h, mask, starts, ends, pre_vectors=h[:, 0].clone())["loss"]
    assert mixed.dtype == torch.float32
    assert torch.equal(mixed, plain)


def test_unified_loss_own_index_for_gathered_passages():
    """Under DDP all-gather, queries are local and passages global: own_index points into the gathered rows."""
    K, L, d = 4, 4, 3
    h = _leaf(K, L, d, seed=16)
    qs, qe = _leaf(2, d, seed=17), _leaf(2, d, seed=18)
    mask = torch.ones(K, L, dtype=torch.long)
    starts, ends = torch.tensor([1, 2]), torch.tensor([2, 3])
    loss = UnifiedLoss(1.0, 4.0, 1.0)
    gathered = loss(qs, qe, h, mask, starts, ends, own_index=torch.tensor([2, 3]))["loss"]
    # Same as local queries whose own passages come first (the negatives are a set).
    order = torch.tensor([2, 3, 0, 1])
    local = loss(qs, qe, h[order], mask, starts, ends)["loss"]
    _assert_close(gathered, local)


def _ref_qsft(qs, qe, cs, ce, cmask, phrase_t, doc_t):
    B, K, _ = cs.shape
    phrase_terms, doc_terms = [], []
    for i in range(B):
        valid = [c for c in range(K) if cmask[i, c]]
        z = {c: torch.dot(qs[i], cs[i, c]) + torch.dot(qe[i], ce[i, c]) for c in valid}
        zs = {c: torch.dot(qs[i], cs[i, c]) for c in valid}
        ze = {c: torch.dot(qe[i], ce[i, c]) for c in valid}

        def nll(scores, targets):
            norm = sum(torch.exp(v) for v in scores.values())
            return -torch.log(sum(torch.exp(scores[c]) for c in targets) / norm)

        gold = [c for c in valid if phrase_t[i, c]]
        if gold:
            phrase_terms.append(nll(z, gold) + nll(zs, gold) + nll(ze, gold))
        gold_docs = [c for c in valid if doc_t[i, c]]
        if gold_docs:
            doc_terms.append(nll(z, gold_docs))
    return sum(phrase_terms) / len(phrase_terms) + sum(doc_terms) / len(doc_terms)


def test_qsft_loss_matches_reference():
    B, K, d = 3, 5, 4
    qs, qe = _leaf(B, d, seed=19), _leaf(B, d, seed=20)
    cs, ce = _leaf(B, K, d, seed=21), _leaf(B, K, d, seed=22)
    cmask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.bool)
    phrase_t = torch.tensor([[0, 1, 0, 1, 0], [0, 0, 0, 1, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)  # row 1: padded
    doc_t = torch.tensor([[1, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.bool)
    out = QuerySideLoss()(qs, qe, cs, ce, cmask, phrase_targets=phrase_t, doc_targets=doc_t)
    ref = _ref_qsft(qs, qe, cs, ce, cmask, phrase_t, doc_t)
    _assert_close(out["loss"], ref)
    for a, b in zip(_grads(out["loss"], [qs, qe, cs, ce]), _grads(ref, [qs, qe, cs, ce]), strict=True):
        _assert_close(a, b)
    assert math.isclose(out["answered"].item(), 1.0)


def test_qsft_loss_without_targets_is_zero():
    qs, qe = _leaf(2, 3, seed=23), _leaf(2, 3, seed=24)
    cs, ce = _leaf(2, 4, 3, seed=25), _leaf(2, 4, 3, seed=26)
    out = QuerySideLoss()(qs, qe, cs, ce, torch.ones(2, 4), phrase_targets=torch.zeros(2, 4, dtype=torch.bool))
    out["loss"].backward()
    assert out["loss"].item() == 0.0 and out["answered"].item() == 0.0
