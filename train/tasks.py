"""The reading-comprehension training task: DensePhrases objective or unified loss, optional hard negatives."""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from dphr_haystack.model.phrase_model import PhraseModel

from .data import Feature, PassageWindows, RCData, collate, per_question
from .losses import DensePhrasesLoss, UnifiedLoss, build_loss, gold_vectors, kl_divergence
from .losses._masked import upcast
from .teacher import CrossEncoderTeacher
from .trainer import gather_with_grad, is_distributed

logger = logging.getLogger(__name__)

BATCHING = ("question", "passage")
QUERY_CHUNK = 16


def chunked_query_vectors(
    model: PhraseModel, batch: dict[str, Any], chunk: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Query start/end vectors (B, d) computed in length-sorted chunks, each padded only to its own longest.

    ``chunk`` defaults to ``QUERY_CHUNK`` on the CPU, where padding costs compute, and to the whole batch on an
    accelerator, where every chunk costs a forward and backward pass of kernel launches and padding is free.
    """
    ids, mask, types = batch["q_input_ids"], batch["q_attention_mask"], batch["q_token_type_ids"]
    if chunk is None:
        chunk = QUERY_CHUNK if ids.device.type == "cpu" else max(1, len(ids))
    lengths = mask.sum(dim=1)  # (B,)
    order = torch.argsort(lengths)
    starts, ends = [], []
    for rows in order.split(chunk):
        width = int(lengths[rows].max())
        q_start, q_end = model.query_vectors(ids[rows, :width], mask[rows, :width], types[rows, :width])
        starts.append(q_start)
        ends.append(q_end)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(len(order), device=order.device)
    return torch.cat(starts)[inverse], torch.cat(ends)[inverse]


def epoch_order(n: int, epoch: int, seed: int) -> list[int]:
    """A permutation of range(n), fixed by (seed, epoch) so resumed runs see the same order."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=generator).tolist()


def bucketed_batches(
    order: Sequence[int], lengths: Sequence[int], per_step: int, bucket_batches: int, seed: int, epoch: int
) -> list[list[int]]:
    """Cut a shuffled ``order`` into batches of ``per_step`` with little padding, in a random batch order.

    Each run of ``bucket_batches`` batches of ``order`` is sorted by ``lengths`` before it is cut, then the
    batches are shuffled (deterministic in ``seed`` and ``epoch``).
    """
    plan = []
    span = per_step * bucket_batches
    for c in range(0, len(order), span):
        bucket = sorted(order[c : c + span], key=lengths.__getitem__)
        plan.extend(list(bucket[i : i + per_step]) for i in range(0, len(bucket), per_step))
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch + 17)
    return [plan[i] for i in torch.randperm(len(plan), generator=generator).tolist()]


class RCTask:
    """Phrase-encoder + query-encoder training on windowed RC features.

    ``loss`` is ``densephrases`` (single-passage + in/pre-batch gold negatives + filter BCE) or ``unified``
    (Kim et al. Eq. 2 over all tokens of own, in-batch, pre-batch and hard passages). With ``negatives``
    (example index → mined passage ids) each example brings ``hard_per_example`` hard passages, topped up
    with random passages when it has too few. A ``teacher`` adds the distillation term on the teacher's logits
    over the same windows (DensePhrases' L_kl: ``loss_kwargs.lambda_kl`` of the densephrases loss, or
    ``lambda_kl`` with the unified loss, where it is added to Eq. 2 on each question's own window).

    ``batching`` ``question`` (a batch is ``batch_size`` (question, window) features, each window encoded
    for its question) or ``passage`` (a batch is ``batch_size`` windows with all of their questions: each
    window is encoded once and every question is scored against that encoding; the other windows of the
    batch are the in-batch negatives). Passage batches are length-bucketed: each run of
    ``bucket_batches`` batches of the shuffled order is sorted by window length before it is cut into
    batches, and the batches are shuffled again, so padding stays small while the order stays random; their
    questions are encoded in length-sorted chunks of ``QUERY_CHUNK`` (SQuAD questions padded to the longest of
    a batch are half padding).

    Under DDP each process takes ``rank::world_size`` of every global batch. With ``gather_negatives`` the
    passages (unified) or gold vectors (densephrases), hard passages and pre-batch queue entries of all
    processes are all-gathered, so every query sees the same negatives as in one process with the global batch.
    """

    def __init__(
        self,
        model: PhraseModel,
        data: RCData,
        features: Sequence[Feature],
        windows: PassageWindows,
        loss: str = "densephrases",
        loss_kwargs: dict[str, Any] | None = None,
        pre_batch: int = 2,
        negatives: dict[int, list[str]] | None = None,
        hard_per_example: int = 1,
        lambda_flt: float = 0.0,
        gather_negatives: bool = False,
        seed: int = 0,
        teacher: CrossEncoderTeacher | None = None,
        lambda_kl: float = 0.0,
        batching: str = "question",
        bucket_batches: int = 50,
    ) -> None:
        self.tokenizer, self.config = model.tokenizer, model.config
        self.data, self.features, self.windows = data, list(features), windows
        self.loss_name = loss
        self.loss = build_loss(loss, **(loss_kwargs or {}))
        if not isinstance(self.loss, (DensePhrasesLoss, UnifiedLoss)):
            raise ValueError(f"RC training takes the densephrases or unified loss, not {loss!r}")
        if lambda_kl < 0:
            raise ValueError(f"lambda_kl must be >= 0, got {lambda_kl}")
        if lambda_kl > 0 and not isinstance(self.loss, UnifiedLoss):
            raise ValueError(
                "lambda_kl weighs the unified loss's distillation term; densephrases: loss_kwargs.lambda_kl"
            )
        kl_weight = self.loss.lambda_kl if isinstance(self.loss, DensePhrasesLoss) else lambda_kl
        if teacher is not None and kl_weight <= 0:
            raise ValueError(
                "a distillation teacher needs a distillation weight: lambda_kl > 0 (unified loss) or "
                "loss_kwargs.lambda_kl > 0 (densephrases loss)"
            )
        if teacher is None and kl_weight > 0:
            logger.warning("lambda_kl = %g but no teacher is set: the distillation term stays 0", kl_weight)
        self.teacher = teacher
        self.lambda_kl = lambda_kl
        self.filter_loss = build_loss("filter") if lambda_flt > 0 and loss == "unified" else None
        self.lambda_flt = lambda_flt
        self.queue: deque[dict[str, torch.Tensor]] = deque(maxlen=max(0, pre_batch))
        self.negatives = negatives or {}
        self.hard_per_example = hard_per_example if negatives is not None else 0
        self.gather = gather_negatives
        self.rng = random.Random(seed)
        if batching not in BATCHING:
            raise ValueError(f"batching={batching!r}; valid: {', '.join(BATCHING)}")
        if bucket_batches < 1:
            raise ValueError(f"bucket_batches must be >= 1, got {bucket_batches}")
        if batching == "passage" and gather_negatives and loss == "densephrases":
            raise ValueError(
                "gather_negatives with passage batching takes the unified loss: the densephrases "
                "loss gathers one gold vector per question, and processes hold different numbers"
            )
        self.batching, self.bucket_batches = batching, bucket_batches
        # A batching unit is a list of feature indices: one feature, or every feature of one window.
        if batching == "passage":
            by_window: dict[int, list[int]] = {}
            for i, f in enumerate(self.features):
                by_window.setdefault(f.window, []).append(i)
            if -1 in by_window:
                raise ValueError("passage batching needs features numbered by window (train.data.build_features)")
            self.units = [by_window[w] for w in sorted(by_window)]
        else:
            self.units = [[i] for i in range(len(self.features))]
        self.unit_length = [len(self.features[u[0]].input_ids) for u in self.units]

    def num_batches(self, batch_size: int, world_size: int) -> int:
        return len(self.units) // (batch_size * world_size) or 1

    def batch_plan(self, epoch: int, per_step: int, seed: int) -> list[list[int]]:
        """The epoch's global batches as lists of unit indices (deterministic in seed and epoch)."""
        order = epoch_order(len(self.units), epoch, seed)
        n_full = len(order) // per_step
        if n_full == 0:  # tiny data: one (possibly short) batch
            return [order]
        order = order[: n_full * per_step]
        if self.batching == "question":
            return [order[b * per_step : (b + 1) * per_step] for b in range(n_full)]
        return bucketed_batches(order, self.unit_length, per_step, self.bucket_batches, seed, epoch)

    def batches(self, epoch: int, batch_size: int, rank: int, world_size: int, seed: int) -> Iterator[dict[str, Any]]:
        plan = self.batch_plan(epoch, batch_size * world_size, seed)
        if len(plan) == 1 and len(plan[0]) < batch_size * world_size:  # tiny data: split what there is
            batch_size = max(1, len(plan[0]) // world_size)
        self.rng.seed(seed * 7919 + epoch)
        grouped = self.batching == "passage"
        for units in plan:
            feats = [self.features[i] for u in units[rank::world_size][:batch_size] for i in self.units[u]]
            questions = [self.data.examples[f.example].question for f in feats]
            hard = self._sample_hard(feats)
            pad_to = self.config.max_passage_length if (self.gather and world_size > 1) else None  # same shapes
            yield collate(
                feats, questions, self.tokenizer, self.config, hard=hard, pad_to=pad_to, group_windows=grouped
            )

    def _sample_hard(self, feats: Sequence[Feature]) -> list[tuple[list[int], list[int]]]:
        if self.hard_per_example <= 0:
            return []
        out = []
        batch_passages = {f.passage_id for f in feats}
        for f in feats:
            mined = [p for p in self.negatives.get(f.example, []) if p in self.windows.row and p not in batch_passages]
            picked = self.rng.sample(mined, min(self.hard_per_example, len(mined)))
            while len(picked) < self.hard_per_example:  # random passages when too few were mined
                candidate = self.windows.ids[self.rng.randrange(len(self.windows.ids))]
                if candidate not in batch_passages and candidate not in picked:
                    picked.append(candidate)
                elif len(self.windows.ids) <= len(batch_passages) + len(picked):
                    break
            out.extend(self.windows.first_window(p) for p in picked)
        return out

    def _gathering(self) -> bool:
        return self.gather and is_distributed()

    def step(self, model: PhraseModel, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        states = model.phrase_states(batch["p_input_ids"], batch["p_attention_mask"], batch["p_token_type_ids"])
        if self.batching == "passage":
            q_start, q_end = chunked_query_vectors(model, batch)
        else:
            q_start, q_end = model.query_vectors(
                batch["q_input_ids"], batch["q_attention_mask"], batch["q_token_type_ids"]
            )
        mask = batch["p_attention_mask"]
        starts, ends = batch["start_positions"], batch["end_positions"]
        if isinstance(self.loss, DensePhrasesLoss):
            if "own_index" in batch:  # one row per question: its own window's states
                states, mask = states[batch["own_index"]], mask[batch["own_index"]]
            return self._densephrases_step(model, batch, states, q_start, q_end, mask, starts, ends)
        return self._unified_step(model, batch, states, q_start, q_end, mask, starts, ends)

    def _densephrases_step(
        self,
        model: PhraseModel,
        batch: dict[str, Any],
        states: torch.Tensor,
        q_start: torch.Tensor,
        q_end: torch.Tensor,
        mask: torch.Tensor,
        starts: torch.Tensor,
        ends: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        pre_s = torch.cat([e["start"] for e in self.queue]) if self.queue else None
        pre_e = torch.cat([e["end"] for e in self.queue]) if self.queue else None
        gold_s, gold_e = gold_vectors(states, starts), gold_vectors(states, ends)  # (B, d) each
        own_index = None
        if self._gathering():  # every process's gold vectors are in-batch negatives of every query
            own_index = torch.arange(len(starts), device=states.device) + torch.distributed.get_rank() * len(starts)
            gold_s, gold_e = gather_with_grad(gold_s), gather_with_grad(gold_e)  # (K, d) each
        teacher_s = teacher_e = None
        if self.teacher is not None:
            if self.teacher.device != states.device:
                self.teacher.to(states.device)
            teacher_s, teacher_e = self.teacher.logits(per_question(batch))  # (B, L) each
        out = self.loss(
            q_start,
            q_end,
            states,
            mask,
            starts,
            ends,
            filter_logits=model.filter_linear(states),
            pre_start=pre_s,
            pre_end=pre_e,
            teacher_start=teacher_s,
            teacher_end=teacher_e,
            batch_start=gold_s if own_index is not None else None,
            batch_end=gold_e if own_index is not None else None,
            own_index=own_index,
        )
        if self.queue.maxlen:
            self.queue.append({"start": gold_s.detach(), "end": gold_e.detach()})
        return out

    def _unified_step(
        self,
        model: PhraseModel,
        batch: dict[str, Any],
        states: torch.Tensor,
        q_start: torch.Tensor,
        q_end: torch.Tensor,
        mask: torch.Tensor,
        starts: torch.Tensor,
        ends: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        K = states.shape[0]  # this process's windows; one per question unless grouped
        passage_ids = list(batch["passage_ids"])
        local_own = batch.get("own_index", torch.arange(K, device=states.device))  # (B,) row of each question
        own_index = local_own
        all_states, all_mask = states, mask
        if self._gathering():
            rank = torch.distributed.get_rank()
            all_states, all_mask = gather_with_grad(states), gather_with_grad(mask)
            own_index = own_index + rank * K
            gathered: list[list[str]] = [[] for _ in range(torch.distributed.get_world_size())]
            torch.distributed.all_gather_object(gathered, passage_ids)
            all_ids = [p for ids in gathered for p in ids]
        else:
            all_ids = passage_ids
        local_codes = self._codes(passage_ids, states.device)[local_own]  # (B,) passage code of each question
        all_codes = self._codes(all_ids, states.device)  # (K,)
        exclude = local_codes[:, None] == all_codes[None, :]  # (B, K)
        pre_vectors = pre_allowed = None
        if self.queue:
            pre_vectors = torch.cat([e["vectors"] for e in self.queue])  # (P, d)
            pre_codes = torch.cat([e["codes"] for e in self.queue])  # (P,)
            pre_allowed = local_codes[:, None] != pre_codes[None, :]  # (B, P)
        hard_states = hard_mask = None
        if "h_input_ids" in batch:
            hard_states = model.phrase_states(
                batch["h_input_ids"], batch["h_attention_mask"], batch["h_token_type_ids"]
            )
            hard_mask = batch["h_attention_mask"]
            if self._gathering():
                hard_states, hard_mask = gather_with_grad(hard_states), gather_with_grad(hard_mask)
        out = self.loss(
            q_start,
            q_end,
            all_states,
            all_mask,
            starts,
            ends,
            own_index=own_index,
            exclude=exclude,
            pre_vectors=pre_vectors,
            pre_allowed=pre_allowed,
            hard_states=hard_states,
            hard_mask=hard_mask,
        )
        if self.teacher is not None:  # DensePhrases' L_kl on each question's own window
            if self.teacher.device != states.device:
                self.teacher.to(states.device)
            teacher_s, teacher_e = self.teacher.logits(per_question(batch))  # (B, L) each
            own_states, valid = states[local_own], mask[local_own].bool()  # (B, L, d), (B, L)
            student_s = torch.einsum("bd,bld->bl", upcast(q_start), upcast(own_states))  # (B, L)
            student_e = torch.einsum("bd,bld->bl", upcast(q_end), upcast(own_states))  # (B, L)
            kl = 0.5 * (kl_divergence(teacher_s, student_s, valid) + kl_divergence(teacher_e, student_e, valid))
            out = {**out, "loss": out["loss"] + self.lambda_kl * kl, "kl": kl.detach()}
        if self.filter_loss is not None:
            flt = self.filter_loss(model.filter_linear(states)[local_own], starts, ends, mask[local_own])
            out = {**out, "loss": out["loss"] + self.lambda_flt * flt, "filter": flt.detach()}
        if self.queue.maxlen:  # under gathering, every process's passages (as one process would store them)
            valid = all_mask.bool()  # (K, L)
            codes = all_codes[:, None].expand_as(valid)[valid]  # (P,) passage code of each stored token
            self.queue.append({"vectors": all_states[valid].detach(), "codes": codes})
        return out

    def _codes(self, passage_ids: Sequence[str], device: torch.device) -> torch.Tensor:
        """Integer code per passage id (ids seen for the first time get new codes)."""
        table = self.__dict__.setdefault("_code_table", {})
        return torch.tensor([table.setdefault(p, len(table)) for p in passage_ids], device=device)
