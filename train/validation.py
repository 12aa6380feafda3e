"""Efficient validation (Kim et al. 2022 §2): retrieval accuracy on small subcorpora of the validation corpus.

* ``C0``: the gold passages of the validation questions;
* ``R_r``: C0 plus a random fraction r of the other passages;
* ``H_k``: C0 ∪ the passages of the top-k phrases a pre-trained (reference) model retrieves from the
  whole validation corpus for each question.

A model is scored on each by indexing the subcorpus with it and reporting phrase EM@1 and passage
accuracy@k (a top-k passage contains a normalised gold answer). Results are ranked by phrase score, as DensePhrases
validates: the encoder is measured, not a confidence calibration fitted after it, so a calibrated model (the shipped
one) and an uncalibrated checkpoint compare alike, and the hard subcorpora are what the reference model's scores
retrieve. The scoring is :class:`dphr_haystack.evaluation.SearcherEvaluator`'s: on the same index and questions the
numbers of an uncalibrated model equal ``dphr eval --index ... --top-k max(ks)``'s ``phrase_em@1`` and
``passage_acc@k``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import Any

from dphr_haystack.encode.add import add_passages
from dphr_haystack.evaluation import QAExample, SearcherEvaluator
from dphr_haystack.index.phrase_index import PhraseIndex
from dphr_haystack.model.phrase_model import PhraseModel
from dphr_haystack.search import PhraseSearcher

from .data import RCData, RCExample

logger = logging.getLogger(__name__)


def build_index(
    model: PhraseModel,
    passages: Sequence[dict[str, Any]],
    batch_size: int = 32,
    faiss_factory: str = "Flat",
    filter_threshold: float | None = None,
) -> PhraseIndex:
    """An in-memory phrase index of ``passages`` encoded by ``model``."""
    index = PhraseIndex.create(model, faiss_factory=faiss_factory, filter_threshold=filter_threshold)
    add_passages(index, model, list(passages), batch_size=batch_size, progress=False)
    return index


def unique_questions(examples: Sequence[RCExample]) -> list[RCExample]:
    """One example per question text (SQuAD files can repeat a question)."""
    seen: set[str] = set()
    out = []
    for ex in examples:
        if ex.question.strip() and ex.question not in seen:
            seen.add(ex.question)
            out.append(ex)
    return out


def build_subcorpora(
    data: RCData,
    reference: PhraseModel | None = None,
    hard_k: Sequence[int] = (10,),
    random_fractions: Sequence[float] = (0.1,),
    seed: int = 0,
    batch_size: int = 32,
) -> dict[str, list[str]]:
    """Passage ids of C0, R_r for each fraction and, with a reference model, H_k for each k."""
    order = {p["id"]: i for i, p in enumerate(data.passages)}
    c0 = {ex.passage_id for ex in data.examples if ex.passage_id in order}
    sub: dict[str, list[str]] = {"C0": sorted(c0, key=order.__getitem__)}
    others = [p["id"] for p in data.passages if p["id"] not in c0]
    rng = random.Random(seed)
    for r in random_fractions:
        picked = set(rng.sample(others, min(len(others), int(round(r * len(others))))))
        sub[f"R_{r:g}"] = [p["id"] for p in data.passages if p["id"] in c0 or p["id"] in picked]
    if reference is not None and hard_k:
        index = build_index(reference, data.passages, batch_size)
        questions = [ex.question for ex in unique_questions(data.examples)]
        hits = PhraseSearcher(index, reference, tidy_answers=False, ranking="score").search_batch(
            questions, unit="phrase", top_k=max(hard_k)
        )  # the raw top phrases pick the hard passages, as before answers were folded
        for k in hard_k:
            hard = set(c0)
            for per_query in hits:
                hard.update(h.passage_id for h in per_query[:k])
            sub[f"H_{k}"] = sorted(hard, key=order.__getitem__)
    return sub


def qa_examples(examples: Sequence[RCExample]) -> list[QAExample]:
    """Reading-comprehension examples as the evaluation's questions (gold passage kept, never used to retrieve)."""
    return [QAExample(ex.qid, ex.question, tuple(ex.answers), gold_passage_id=ex.passage_id) for ex in examples]


def evaluate_index(
    index: PhraseIndex, model: PhraseModel, examples: Sequence[RCExample], ks: Sequence[int] = (1, 5, 20)
) -> dict[str, float]:
    """EM@1 of the top phrase and passage accuracy@k over the distinct questions of ``examples`` on a built index,
    scored as ``dphr eval`` scores (top ``max(ks)`` phrases and passages; see the module docstring)."""
    questions = unique_questions(examples)
    if not questions:
        return {"em@1": 0.0, **{f"acc@{k}": 0.0 for k in ks}}
    scores = SearcherEvaluator(qa_examples(questions), ks)(PhraseSearcher(index, model, ranking="score"))
    return {"em@1": scores["em@1"], **{f"acc@{k}": scores[f"acc@{k}"] for k in ks}}


class Validator:
    """Scores a model on named subcorpora; usable as the trainer's ``eval_fn``.

    Indexes are cached by phrase-encoder fingerprint, so query-side fine-tuning (phrase encoder frozen)
    encodes each subcorpus once.

    Example:
        >>> validator = Validator(dev, build_subcorpora(dev, reference=rc_model), names=["H_10"])
        >>> validator(model)   # {"H_10/em@1": ..., "H_10/acc@1": ..., ...}
    """

    def __init__(
        self,
        data: RCData,
        subcorpora: dict[str, list[str]],
        names: Sequence[str] | None = None,
        ks: Sequence[int] = (1, 5, 20),
        batch_size: int = 32,
        max_questions: int | None = None,
    ) -> None:
        self.data = data
        self.subcorpora = subcorpora
        self.names = list(names) if names is not None else list(subcorpora)
        unknown = [n for n in self.names if n not in subcorpora]
        if unknown:
            raise KeyError(f"unknown subcorpora {unknown}; available: {', '.join(subcorpora)}")
        self.ks = tuple(ks)
        self.batch_size = batch_size
        self.examples = unique_questions(data.examples)[:max_questions]
        self._cache: dict[tuple[str, str], PhraseIndex] = {}

    def passages(self, name: str) -> list[dict[str, Any]]:
        return [self.data.passages[self.data.passage_index[pid]] for pid in self.subcorpora[name]]

    def index_for(self, model: PhraseModel, name: str) -> PhraseIndex:
        key = (model.phrase_fingerprint(), name)
        if key not in self._cache:
            self._cache = {k: v for k, v in self._cache.items() if k[0] == key[0]}
            self._cache[key] = build_index(model, self.passages(name), self.batch_size)
        return self._cache[key]

    def __call__(self, model: PhraseModel) -> dict[str, float]:
        out: dict[str, float] = {}
        for name in self.names:
            index = self.index_for(model, name)
            for key, value in evaluate_index(index, model, self.examples, self.ks).items():
                out[f"{name}/{key}"] = value
            out[f"{name}/passages"] = float(index.num_passages)
        return out
