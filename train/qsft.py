"""Query-side fine-tuning: the phrase encoder and its index stay fixed; the query encoders learn to rank
retrieved candidates (marginal likelihood of gold phrases, Lee et al. 2021a; of gold passages, Lee et al.
2021b Eq. 5)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dphr_haystack.answers import exact_match
from dphr_haystack.evaluation.questions import QAExample
from dphr_haystack.index.phrase_index import PhraseIndex
from dphr_haystack.model.inputs import tokenize_queries
from dphr_haystack.model.phrase_model import PhraseModel
from dphr_haystack.search import PhraseHit, PhraseSearcher

from .data import RCData
from .losses import QuerySideLoss
from .tasks import epoch_order

LABEL_STRATEGIES = ("phrase", "doc", "phrase,doc")
CANDIDATE_SCHEMES = ("phrases", "densephrases")
ANSWER_MATCHES = ("auto", "exact", "regex")
# DensePhrases' train_query: the smallest probability a query's gold candidates are given.
DENSEPHRASES_MIN_PROB = 1e-7


@dataclass(frozen=True)
class QsftQuestion:
    """A training question: its answers (strings or, with ``regex``, patterns) and gold passage id (may be '')."""

    question: str
    answers: tuple[str, ...]
    passage_id: str = ""
    regex: bool = False


def qsft_questions(data: RCData | Sequence[QAExample]) -> list[QsftQuestion]:
    """Training questions from reading-comprehension data or an open-domain question file's examples."""
    if isinstance(data, RCData):
        return [QsftQuestion(ex.question, tuple(ex.answers), ex.passage_id) for ex in data.examples]
    return [QsftQuestion(ex.question, tuple(ex.answers), ex.gold_passage_id, ex.regex) for ex in data]


def hit_rows(index: PhraseIndex, hit: PhraseHit) -> tuple[int, int]:
    """Index rows of a hit's start and end tokens (rows are consecutive per passage, positions ascending)."""
    first, count = int(index.first_token[hit.passage_row]), int(index.num_tokens[hit.passage_row])
    positions = index.tokens["position"][first : first + count]
    start = first + int(np.searchsorted(positions, hit.start_token))
    end = first + int(np.searchsorted(positions, hit.end_token))
    return start, end


def anchored_candidates(
    index: PhraseIndex, q_start: np.ndarray, q_end: np.ndarray, top_k: int, max_answer_length: int
) -> list[list[tuple[float, int, int]]]:
    """DensePhrases' raw search output per query: (score, start row, end row) for each of the top-k start tokens
    (with its best end) and each of the top-k end tokens (with its best start), best first, duplicates kept.

    Phrases lie within one live passage and span fewer than ``max_answer_length`` token positions; any subword
    may start or end one (DensePhrases knows no word boundaries). At most 2·top_k per query.
    """
    B, total, L = len(q_start), len(index), max_answer_length
    tokens, live = index.tokens, ~index.deleted
    _, ids = index.search_tokens(np.concatenate([q_start, q_end]).astype(np.float32), min(top_k, total))
    out: list[list[tuple[float, int, int]]] = []
    for i in range(B):
        found: list[tuple[float, int, int]] = []
        for anchors, from_start in ((ids[i], True), (ids[B + i], False)):
            anchors = anchors[anchors >= 0]
            if not len(anchors):
                continue
            offsets = np.arange(L)
            other = anchors[:, None] + offsets if from_start else anchors[:, None] - offsets  # (n, L)
            inside = (other >= 0) & (other < total)
            other = np.clip(other, 0, total - 1)
            anchor = np.broadcast_to(anchors[:, None], other.shape)
            s, e = (anchor, other) if from_start else (other, anchor)
            gap = tokens["position"][e] - tokens["position"][s]
            valid = inside & (tokens["passage"][s] == tokens["passage"][e]) & (gap >= 0) & (gap < L)
            valid &= live[tokens["passage"][s]]
            rows = np.unique(np.concatenate([s[valid], e[valid]]))
            if not len(rows):
                continue
            vecs = index.vectors(rows)
            s_score = (vecs @ q_start[i])[np.searchsorted(rows, np.where(valid, s, rows[0]))]
            e_score = (vecs @ q_end[i])[np.searchsorted(rows, np.where(valid, e, rows[0]))]
            score = np.where(valid, s_score + e_score, -np.inf)  # (n, L)
            best = np.argmax(score, axis=1)
            for a in np.nonzero(valid.any(axis=1))[0]:
                found.append((float(score[a, best[a]]), int(s[a, best[a]]), int(e[a, best[a]])))
        found.sort(key=lambda c: -c[0])
        out.append(found)
    return out


class QsftTask:
    """Retrieve candidates with the current query encoders, then maximise the gold candidates' likelihood.

    ``candidates``: ``phrases`` (the default): the top-k distinct phrase answers of the searcher (whole words,
    question copies skipped), padding masked out of the softmax. ``densephrases``: DensePhrases' train_query:
    the raw 2·top_k start- and end-anchored candidates (:func:`anchored_candidates`), padded with zero vectors
    that stay in the softmax, each target probability clamped at 1e-7.

    ``answer_match``: ``exact`` (SQuAD-normalised text equality), ``regex`` (answers are regular expressions that
    must match at the start, case-insensitively: CuratedTREC) or ``auto``: regex for questions read from a
    CuratedTREC-style file (:func:`dphr_haystack.evaluation.read_questions` marks them), exact otherwise.
    """

    def __init__(
        self,
        model: PhraseModel,
        data: RCData | Sequence[QAExample],
        index: PhraseIndex,
        top_k: int = 100,
        label_strategy: str = "phrase",
        candidates: str = "phrases",
        answer_match: str = "auto",
    ) -> None:
        if label_strategy not in LABEL_STRATEGIES:
            raise ValueError(f"label_strategy={label_strategy!r}; valid: {', '.join(LABEL_STRATEGIES)}")
        if candidates not in CANDIDATE_SCHEMES:
            raise ValueError(f"candidates={candidates!r}; valid: {', '.join(CANDIDATE_SCHEMES)}")
        if answer_match not in ANSWER_MATCHES:
            raise ValueError(f"answer_match={answer_match!r}; valid: {', '.join(ANSWER_MATCHES)}")
        self.tokenizer, self.config = model.tokenizer, model.config
        self.examples = [ex for ex in qsft_questions(data) if ex.question.strip()]
        self.index = index
        self.searcher = PhraseSearcher(index, model, tidy_answers=False)  # raw spans, as the labels are
        self.top_k = top_k
        self.candidate_scheme = candidates
        self.answer_match = answer_match
        self.use_phrase = "phrase" in label_strategy.split(",")
        self.use_doc = "doc" in label_strategy.split(",")
        self.loss = QuerySideLoss(min_prob=DENSEPHRASES_MIN_PROB if candidates == "densephrases" else None)

    def regex(self, example: QsftQuestion) -> bool:
        """Whether ``example``'s answers are matched as regular expressions."""
        return self.answer_match == "regex" or (self.answer_match == "auto" and example.regex)

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
                "regex": [self.regex(ex) for ex in chunk],
            }

    def candidates(
        self,
        q_start: np.ndarray,
        q_end: np.ndarray,
        answers: Sequence[Sequence[str]],
        gold_passages: Sequence[str],
        regex: Sequence[bool] | None = None,
    ) -> dict[str, torch.Tensor]:
        """Candidates per query: start/end vectors (B, K, d), mask and phrase/doc targets (B, K)."""
        regex = list(regex) if regex is not None else [self.answer_match == "regex"] * len(answers)
        if self.candidate_scheme == "densephrases":
            return self._densephrases_candidates(q_start, q_end, answers, gold_passages, regex)
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
            phrase_t[i, :n] = [exact_match(h.text, answers[i], regex[i]) for h in per_query]
            doc_t[i, :n] = [h.passage_id == gold_passages[i] for h in per_query]
        return _tensors(starts, ends, mask, phrase_t, doc_t)

    def _densephrases_candidates(
        self,
        q_start: np.ndarray,
        q_end: np.ndarray,
        answers: Sequence[Sequence[str]],
        gold_passages: Sequence[str],
        regex: Sequence[bool],
    ) -> dict[str, torch.Tensor]:
        found = anchored_candidates(self.index, q_start, q_end, self.top_k, self.searcher.max_answer_length)
        B, K, d = len(found), 2 * self.top_k, self.index.dim
        starts, ends = np.zeros((B, K, d), np.float32), np.zeros((B, K, d), np.float32)
        phrase_t, doc_t = np.zeros((B, K), bool), np.zeros((B, K), bool)
        tokens = self.index.tokens
        for i, per_query in enumerate(found):
            if not per_query:
                continue
            s_rows = np.array([c[1] for c in per_query])
            e_rows = np.array([c[2] for c in per_query])
            rows = np.unique(np.concatenate([s_rows, e_rows]))
            vecs = self.index.vectors(rows)
            n = len(per_query)
            starts[i, :n] = vecs[np.searchsorted(rows, s_rows)]
            ends[i, :n] = vecs[np.searchsorted(rows, e_rows)]
            for j, (s, e) in enumerate(zip(s_rows.tolist(), e_rows.tolist(), strict=True)):
                passage = self.index.passages[int(tokens["passage"][s])]
                text = passage["text"][int(tokens["char_start"][s]) : int(tokens["char_end"][e])]
                phrase_t[i, j] = exact_match(text, answers[i], regex[i])
                doc_t[i, j] = passage["id"] == gold_passages[i]
        mask = np.ones((B, K), bool)  # zero-vector padding stays in the softmax, as in DensePhrases
        return _tensors(starts, ends, mask, phrase_t, doc_t)

    def step(self, model: PhraseModel, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        q_args = (batch["q_input_ids"], batch["q_attention_mask"], batch["q_token_type_ids"])
        was_training = model.training
        model.eval()
        with torch.no_grad():
            qs, qe = model.query_vectors(*q_args)
        model.train(was_training)
        cand = self.candidates(
            qs.float().cpu().numpy(),
            qe.float().cpu().numpy(),
            batch["answers"],
            batch["gold_passages"],
            batch.get("regex"),
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


def _tensors(starts, ends, mask, phrase_t, doc_t) -> dict[str, torch.Tensor]:
    return {
        "cand_start": torch.from_numpy(starts),
        "cand_end": torch.from_numpy(ends),
        "cand_mask": torch.from_numpy(mask),
        "phrase_targets": torch.from_numpy(phrase_t),
        "doc_targets": torch.from_numpy(doc_t),
    }
