"""The weighted-RRF benchmark's fusion and choice rules, on hand-made rankings (no model, no data)."""

from __future__ import annotations

from haystack.schema import Document

from benchmarks.quality.hybrid_weights import choose
from benchmarks.rankings import fused_scores
from dphr_haystack.evaluation import QAExample


def _rankings(answer_in: str) -> tuple[list, list]:
    """BM25 ranks b0..b19, the phrase side p0..p19 (disjoint); only ``answer_in`` holds the answer."""

    def doc(doc_id: str) -> Document:
        return Document(content="Paris" if doc_id == answer_in else f"nothing in {doc_id}", id=doc_id)

    return [doc(f"b{i}") for i in range(20)], [doc(f"p{i}") for i in range(20)]


def test_unweighted_fusion_equals_equal_weights_and_heavy_bm25_weights_drop_phrase_only_passages():
    example = QAExample(qid="q", question="What is the capital of France?", answers=("Paris",))
    ranked = [_rankings(answer_in="p0")]  # the phrase side's top passage, which BM25 did not find

    unweighted = fused_scores([example], ranked, None, top_k=20)
    assert unweighted == fused_scores([example], ranked, 0.5, top_k=20)
    assert unweighted["passage_acc@1"] == 0.0 and unweighted["passage_acc@5"] == 1.0  # ranked 2nd, after b0
    # 2·0.6/(61+19) > 2·0.4/61: all of BM25's top 20 outrank the phrase side's first passage
    assert fused_scores([example], ranked, 0.6, top_k=20)["passage_acc@20"] == 0.0
    assert fused_scores([example], ranked, 0.3, top_k=20)["passage_acc@1"] == 1.0


def test_choice_prefers_the_metric_then_the_weight_nearest_one_half():
    def row(weight: float, mrr: float, acc1: float) -> dict:
        return {"weight": weight, "validation": {"mrr@20": mrr, "passage_acc@1": acc1}}

    rows = [row(0.4, 0.70, 0.60), row(0.5, 0.75, 0.61), row(0.6, 0.75, 0.62), row(0.8, 0.74, 0.65)]
    assert choose(rows) == 0.5
    assert choose(rows, "passage_acc@1") == 0.8
