"""Query-side fine-tuning: the phrase encoder and its index stay fixed; the query encoders learn to rank
retrieved candidates (marginal likelihood of gold phrases, Lee et al. 2021a; of gold passages, Lee et al.
2021b Eq. 5)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from dphr_haystack.evaluation import exact_match
from dphr_haystack.index.phrase_index import PhraseIndex
from dphr_haystack.model.inputs import tokenize_queries
from dphr_haystack.model.phrase_model import PhraseModel
from dphr_haystack.search import PhraseHit, PhraseSearcher

from .data import RCData
from .losses import QuerySideLoss
from .tasks import epoch_order

LABEL_STRATEGIES = ("phrase", "doc", "phrase,doc")


def hit_rows(index: PhraseIndex, hit: PhraseHit) -> tuple[int, int]:
    """Index rows of a hit's start and end tokens (rows are consecutive per passage, positions ascending)."""
    first, count = int(index.first_token[hit.passage_row]), int(index.num_tokens[hit.passage_row])
    positions = index.tokens["position"][first : first + count]
    start = first + int(np.searchsorted(positions, hit.start_token))
    end = first + int(np.searchsorted(positions, hit.end_token))
    return start, end


class QsftTask:
    """Retrieve the top-k phrases with the current query encoders, then maximise the gold candidates' likelihood."""

    def __init__(
        self, model: PhraseModel, data: RCData, index: PhraseIndex, top_k: int = 100, label_strategy: str = "phrase"
    ) -> None:
        if label_strategy not in LABEL_STRATEGIES:
            raise ValueError(f"label_strategy={label_strategy!r}; valid: {', '.join(LABEL_STRATEGIES)}")
        self.tokenizer, self.config = model.tokenizer, model.config
        self.examples = [ex for ex in data.examples if ex.question.strip()]
        self.index = index
        self.searcher = PhraseSearcher(index, model)
        self.top_k = top_k
        self.use_phrase = "phrase" in label_strategy.split(",")
        self.use_doc = "doc" in label_strategy.split(",")
        self.loss = QuerySideLoss()

    def num_batches(self, batch_size: int, world_size: int) -> int:
        return max(1, len(self.examples) // (batch_size * world_size))

    def batches(self, epoch: int, batch_size: int, rank: int, world_size: int, seed: int) -> Iterator[dict[str, Any]]:
        order = epoch_order(len(self.examples), epoch, seed)[rank::world_size]
        for b in range(self.num_batches(batch_size, world_size)):
            chunk = [self.examples[i] for i in order[b * batch_size : (b + 1) * batch_size]]
            if not chunk:
                continue
            q = tokenize_queries(self.tokenizer, [ex.question for ex in chunk], self.config)
            yield {
                **{f"q_{k}": v for k, v in q.items()},
                "answers": [ex.answers for ex in chunk],
                "gold_passages": [ex.passage_id for ex in chunk],
            }

    def candidates(
        self, q_start: np.ndarray, q_end: np.ndarray, answers: Sequence[Sequence[str]], gold_passages: Sequence[str]
    ) -> dict[str, torch.Tensor]:
        """Top-k candidates per query: start/end vectors (B, K, d), mask and phrase/doc targets (B, K)."""
        hits = self.searcher.search_vectors(q_start, q_end, unit="phrase", top_k=self.top_k)
        B, K, d = len(hits), self.top_k, self.index.dim
        starts, ends = np.zeros((B, K, d), np.float32), np.zeros((B, K, d), np.float32)
        mask, phrase_t, doc_t = (np.zeros((B, K), bool) for _ in range(3))
        for i, per_query in enumerate(hits):
            if not per_query:
                continue
            rows = np.array([hit_rows(self.index, h) for h in per_query])  # (k, 2)
            vecs = self.index.vectors(np.unique(rows))
            lookup = {r: j for j, r in enumerate(np.unique(rows))}
            n = len(per_query)
            starts[i, :n] = vecs[[lookup[r] for r in rows[:, 0]]]
            ends[i, :n] = vecs[[lookup[r] for r in rows[:, 1]]]
            mask[i, :n] = True
            phrase_t[i, :n] = [exact_match(h.text, answers[i]) for h in per_query]
            doc_t[i, :n] = [h.passage_id == gold_passages[i] for h in per_query]
        return {
            "cand_start": torch.from_numpy(starts),
            "cand_end": torch.from_numpy(ends),
            "cand_mask": torch.from_numpy(mask),
            "phrase_targets": torch.from_numpy(phrase_t),
            "doc_targets": torch.from_numpy(doc_t),
        }

    def step(self, model: PhraseModel, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        q_args = (batch["q_input_ids"], batch["q_attention_mask"], batch["q_token_type_ids"])
        was_training = model.training
        model.eval()
        with torch.no_grad():
            qs, qe = model.query_vectors(*q_args)
        model.train(was_training)
        cand = self.candidates(
            qs.float().cpu().numpy(), qe.float().cpu().numpy(), batch["answers"], batch["gold_passages"]
        )
        cand = {k: v.to(qs.device) for k, v in cand.items()}
        q_start, q_end = model.query_vectors(*q_args)
        return self.loss(
            q_start,
            q_end,
            cand["cand_start"],
            cand["cand_end"],
            cand["cand_mask"],
            phrase_targets=cand["phrase_targets"] if self.use_phrase else None,
            doc_targets=cand["doc_targets"] if self.use_doc else None,
        )
