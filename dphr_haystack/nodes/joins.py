"""Join nodes for hybrids: DPR-style linear score fusion, and one node emitting phrase answers plus fused documents.

Score normalisation of :class:`LinearFusionJoin`: **min-max per query and per input list**. Each input's scores are
mapped to [0, 1] (best = 1, worst returned = 0; a single result or a tie = 1), then averaged with the weights (Σ w_i
· minmax_i / Σ w_i, so the fused score is in [0, 1]: 1 = ranked first by every input; the ranking is that of the
weighted sum); a document missing from a list gets 0 from it, the floor of that list. Why min-max: BM25 scores (0–30
raw, or squashed by Haystack's expit(score/8)) and phrase scores (raw inner products in the tens or hundreds) have
unrelated ranges, so raw DPR-style sums (BM25 + λ·dense, Karpukhin et al. 2020) would let one retriever dominate;
min-max makes λ a relative weight on a common [0, 1] scale and, unlike z-scores, does not depend on the spread of a
short top-k list or give missing documents an arbitrary value. Feed raw scores (``scale_score: false`` on both
retrievers) so that expit squashing does not distort the spacing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from haystack.nodes.other.join import JoinNode
from haystack.schema import Answer, Document

from ..errors import InvalidParameterError
from ..params import check_param
from ..spans import AnswerFolder
from ._schema import typed_init

RRF_K = 60  # Cormack et al. 2009


def _check_weights(weights: list[float] | None, n: int) -> list[float]:
    if weights is None:
        return [1.0] * n
    if len(weights) != n:
        raise InvalidParameterError(f"{len(weights)} weights for {n} joined inputs")
    return [float(w) for w in weights]


def _optional_count(name: str, value: int | None) -> int | None:
    """None (keep all) or a count in the range :mod:`dphr_haystack.params` gives ``name``."""
    return None if value is None else check_param(name, value)


def _copy(doc: Document, score: float) -> Document:
    return Document(
        content=doc.content,
        content_type=doc.content_type,
        id=doc.id,
        meta=dict(doc.meta or {}),
        score=score,
        id_hash_keys=doc.id_hash_keys,
        embedding=doc.embedding,
    )


def minmax(scores: Sequence[float]) -> list[float]:
    """Scores mapped to [0, 1]; all 1.0 when they are equal (or a single one)."""
    if not scores:
        return []
    low, high = min(scores), max(scores)
    if high == low:
        return [1.0] * len(scores)
    return [(s - low) / (high - low) for s in scores]


def fuse_linear(
    lists: Sequence[Sequence[Document]], weights: list[float] | None = None, normalization: str = "minmax"
) -> list[Document]:
    """Σ_i w_i · norm_i(score) per document id (missing → 0), best first; input Documents are not modified.

    With ``minmax`` the sum is divided by Σ_i w_i (non-negative weights): a score in [0, 1], 1 for a document
    ranked first by every input. With ``none`` it is the raw weighted sum."""
    weights = _check_weights(weights, len(lists))
    total = sum(weights)
    divide = total if normalization == "minmax" and total > 0 and min(weights) >= 0 else 1.0
    fused: dict[str, float] = {}
    first: dict[str, Document] = {}
    for weight, docs in zip(weights, lists):
        raw = [float(d.score or 0.0) for d in docs]
        normed = minmax(raw) if normalization == "minmax" else raw
        seen: set[str] = set()
        for doc, score in zip(docs, normed):
            if doc.id in seen:
                continue  # a list holding the same id twice counts its best entry once
            seen.add(doc.id)
            first.setdefault(doc.id, doc)
            fused[doc.id] = fused.get(doc.id, 0.0) + weight * score
    order = sorted(fused, key=lambda i: (-fused[i], i))
    return [_copy(first[i], fused[i] / divide) for i in order]


def fuse_rrf(
    lists: Sequence[Sequence[Document]], weights: list[float] | None = None, k: int = RRF_K
) -> list[Document]:
    """Reciprocal rank fusion Σ_i w_i / (k + rank_i), scaled so a document ranked first everywhere scores 1."""
    weights = _check_weights(weights, len(lists))
    fused: dict[str, float] = {}
    first: dict[str, Document] = {}
    for weight, docs in zip(weights, lists):
        seen: set[str] = set()
        for rank, doc in enumerate(docs, 1):
            if doc.id in seen:
                continue
            seen.add(doc.id)
            first.setdefault(doc.id, doc)
            fused[doc.id] = fused.get(doc.id, 0.0) + weight / (k + rank)
    top = sum(weights) / (k + 1) or 1.0
    order = sorted(fused, key=lambda i: (-fused[i], i))
    return [_copy(first[i], fused[i] / top) for i in order]


def dedupe_answers(answers: Sequence[Answer], top_k: int | None = None) -> list[Answer]:
    """Answers best first, each folded into a better one with the same normalised text or an overlapping span in
    the same document (:class:`dphr_haystack.spans.AnswerFolder`, as the phrase search folds its own)."""
    folder = AnswerFolder()
    kept: list[Answer] = []
    for answer in sorted(answers, key=lambda a: -(a.score or 0.0)):  # stable: ties keep their input order
        spans = answer.offsets_in_document or []
        where = tuple(answer.document_ids or [])
        start, end = (spans[0].start, spans[0].end) if spans and where else (0, 0)  # (0, 0) overlaps nothing
        if folder.keep(str(answer.answer or ""), where, start, end):
            kept.append(answer)
    return kept[:top_k] if top_k else kept


@typed_init
class LinearFusionJoin(JoinNode):
    """DPR-style hybrid: ``Σ_i weight_i · minmax(score_i) / Σ_i weight_i`` over the joined retrievers, in ``inputs``
    order: a score in [0, 1], 1 for a document ranked first by every input.

    With ``inputs: [BM25, Phrase]`` and ``weights: [1.0, 1.1]`` this ranks as BM25 + λ·phrase with λ = 1.1, the
    combination of Karpukhin et al. (2020). The normalisation is described in this module's docstring.

    Args:
        weights: One weight per input (default: all 1.0).
        normalization: ``minmax`` (per query and input) or ``none`` (raw scores, as in the DPR paper).
        top_k_join: Documents kept after fusion (None: all).
    """

    outgoing_edges = 1

    def __init__(
        self,
        weights: list[float] | None = None,
        normalization: Literal["minmax", "none"] = "minmax",
        top_k_join: int | None = None,
    ):
        super().__init__()
        if normalization not in ("minmax", "none"):
            raise InvalidParameterError(f"normalization={normalization!r}; valid: minmax, none")
        self.weights = weights
        self.normalization = normalization
        self.top_k_join = _optional_count("top_k_join", top_k_join)

    def run_accumulated(self, inputs: list[dict], top_k_join: int | None = None):
        top_k = self.top_k_join if top_k_join is None else check_param("top_k_join", top_k_join)
        docs = fuse_linear([inp.get("documents") or [] for inp in inputs], self.weights, self.normalization)
        return {"documents": docs[:top_k] if top_k else docs, "labels": inputs[0].get("labels")}, "output_1"

    def run_batch_accumulated(self, inputs: list[dict], top_k_join: int | None = None):
        top_k = self.top_k_join if top_k_join is None else check_param("top_k_join", top_k_join)
        per_query = zip(*[inp.get("documents") or [] for inp in inputs])
        docs = [fuse_linear(lists, self.weights, self.normalization) for lists in per_query]
        return {"documents": [d[:top_k] if top_k else d for d in docs], "labels": inputs[0].get("labels")}, "output_1"


@typed_init
class PhraseHybridJoin(JoinNode):
    """Ends a hybrid pipeline with both outputs: the phrase ``answers`` and the fused ``documents``.

    Haystack 1.x returns only the last node's output, so a pipeline whose retrievers run side by side needs
    one node that emits answers and ranked documents together.

    Args:
        join_mode: ``reciprocal_rank_fusion`` (Σ_i w_i / (60 + rank_i), divided by its value for a document ranked
            first everywhere: in [0, 1]) or ``linear`` (min-max normalised, in [0, 1], see
            :class:`LinearFusionJoin`).
        weights: One weight per input, in ``inputs`` order (default: all 1.0).
        top_k_join: Documents kept after fusion (None: all).
        top_k_answers: Answers kept, best first, duplicates folded (:func:`dedupe_answers`) (None: all).
    """

    outgoing_edges = 1

    def __init__(
        self,
        join_mode: Literal["reciprocal_rank_fusion", "linear"] = "reciprocal_rank_fusion",
        weights: list[float] | None = None,
        top_k_join: int | None = None,
        top_k_answers: int | None = None,
    ):
        super().__init__()
        if join_mode not in ("reciprocal_rank_fusion", "linear"):
            raise InvalidParameterError(f"join_mode={join_mode!r}; valid: reciprocal_rank_fusion, linear")
        self.join_mode = join_mode
        self.weights = weights
        self.top_k_join = _optional_count("top_k_join", top_k_join)
        self.top_k_answers = _optional_count("top_k_answers", top_k_answers)

    def _fuse(self, lists: Sequence[Sequence[Document]]) -> list[Document]:
        if self.join_mode == "linear":
            return fuse_linear(lists, self.weights)
        return fuse_rrf(lists, self.weights)

    def run_accumulated(self, inputs: list[dict], top_k_join: int | None = None):
        top_k = self.top_k_join if top_k_join is None else check_param("top_k_join", top_k_join)
        docs = self._fuse([inp.get("documents") or [] for inp in inputs])
        answers = dedupe_answers([a for inp in inputs for a in (inp.get("answers") or [])], self.top_k_answers)
        output = {"documents": docs[:top_k] if top_k else docs, "answers": answers, "labels": inputs[0].get("labels")}
        return output, "output_1"

    def run_batch_accumulated(self, inputs: list[dict], top_k_join: int | None = None):
        top_k = self.top_k_join if top_k_join is None else check_param("top_k_join", top_k_join)
        n = max(len(inp.get("documents") or []) for inp in inputs)
        docs, answers = [], []
        for q in range(n):
            fused = self._fuse([(inp.get("documents") or [[]] * n)[q] for inp in inputs])
            docs.append(fused[:top_k] if top_k else fused)
            merged = [a for inp in inputs for a in ((inp.get("answers") or [[]] * n)[q] or [])]
            answers.append(dedupe_answers(merged, self.top_k_answers))
        return {"documents": docs, "answers": answers, "labels": inputs[0].get("labels")}, "output_1"


__all__ = ["LinearFusionJoin", "PhraseHybridJoin", "dedupe_answers", "fuse_linear", "fuse_rrf", "minmax"]
