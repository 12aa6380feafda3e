"""A trained token filter's threshold within a vector budget, counted on training paragraphs (no index built).

The filter stage's sweep (:func:`train.filter.threshold_sweep`) builds a FAISS index per threshold and keeps the
most accurate one within ``filter.vector_budget``; with a base-size encoder on a CPU that sweep costs far more than
the count alone, and a model trained on a lent GPU without FAISS comes back without a threshold. This sets one by
the count alone: the filter logits of ``sample`` SQuAD train paragraphs drawn as the filter stage draws its
budget sample (:func:`train.filter.sample_passages`, same seed), and the **lowest** threshold on a grid of ``step``
that keeps at most ``budget`` vectors per passage: the one keeping the most vectors the budget allows, where
the sweep's rule (the most accurate within the budget) lands when accuracy grows with the vectors kept; the validation
afterwards measures what it gives.

    python -m train.filter_budget --model runs/gpu-distill-mpnet/filter/final --budget 40 [--sample 500]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dphr_haystack import PhraseModel

from .data import load_squad
from .filter import sample_passages, store_filter_threshold, vectors_per_passage

DEFAULT_TRAIN = "../shared/data/squad/train-v1.1-rebuilt.json.gz"


def lowest_within(counts: dict[float, float], budget: float) -> float | None:
    """The lowest threshold whose count is within ``budget`` (None when none is)."""
    within = [threshold for threshold, count in counts.items() if count <= budget + 1e-12]
    return min(within) if within else None


def choose(
    model: PhraseModel,
    passages: Sequence[dict[str, Any]],
    budget: float,
    grid: Sequence[float],
    batch_size: int = 16,
) -> dict[str, Any]:
    """Count the vectors per passage each threshold of ``grid`` keeps of ``passages``; the lowest within budget."""
    texts, titles = [p["text"] for p in passages], [p.get("title", "") for p in passages]
    logits = [e.filter_logits for e in model.encode_passages(texts, titles, batch_size=batch_size)]
    counts = {float(t): vectors_per_passage(logits, float(t)) for t in grid}
    threshold = lowest_within(counts, budget)
    return {
        "budget": budget,
        "passages": len(passages),
        "unfiltered_vectors_per_passage": vectors_per_passage(logits, None),
        "counts": counts,
        "threshold": threshold,
        "vectors_per_passage": counts.get(threshold) if threshold is not None else None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a saved phrase model directory (its threshold is set)")
    parser.add_argument("--budget", type=float, default=40.0, help="stored vectors per passage at most")
    parser.add_argument("--train", default=DEFAULT_TRAIN, help="SQuAD-format training file")
    parser.add_argument("--sample", type=int, default=500, help="training paragraphs the count is made on")
    parser.add_argument("--seed", type=int, default=0, help="the sample's seed (the recipe's)")
    parser.add_argument("--low", type=float, default=-3.0)
    parser.add_argument("--high", type=float, default=4.0)
    parser.add_argument("--step", type=float, default=0.05)
    args = parser.parse_args(argv)
    started = time.monotonic()
    model = PhraseModel.load(args.model)
    passages = sample_passages(load_squad(args.train).passages, args.sample, args.seed)
    grid = (np.round(np.arange(args.low, args.high + args.step / 2, args.step), 4) + 0.0).tolist()  # no -0.0
    result = choose(model, passages, args.budget, grid)
    if result["threshold"] is None:
        print(f"filter_budget: no threshold up to {args.high} keeps <= {args.budget} vectors per passage")
        return 1
    store_filter_threshold(args.model, result["threshold"])
    result["seconds"] = time.monotonic() - started
    (Path(args.model) / "filter_budget.json").write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"{args.model}: filter threshold {result['threshold']:g} keeps {result['vectors_per_passage']:.1f} vectors "
        f"per passage of {args.sample} training paragraphs (unfiltered "
        f"{result['unfiltered_vectors_per_passage']:.1f}); {result['seconds']:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
