"""Scoring a phrase model checkpoint on validation corpora (the training recipe's own validation, indexed here)."""

from __future__ import annotations

import time
from typing import Any

from benchmarks.common import KS

_INDEXES: dict[tuple[str, str, float | None], Any] = {}


def score(
    model, passages, examples, batch_size: int = 64, corpus: str | None = None, filter_threshold: float | None = None
) -> dict[str, float]:
    """Index ``passages`` with ``model`` and evaluate it. Named corpora keep their index per phrase encoder,
    so checkpoints that differ only on the query side (query-side fine-tuning) are indexed once."""
    from train.validation import build_index, evaluate_index

    started = time.perf_counter()
    key = (model.phrase_fingerprint(), corpus, filter_threshold) if corpus else None
    index = _INDEXES.get(key) if key else None
    if index is None:
        index = build_index(model, passages, batch_size, filter_threshold=filter_threshold)
        if key:
            _INDEXES[key] = index
    out = evaluate_index(index, model, examples, KS)
    return {**out, "passages": len(passages), "vectors": len(index), "seconds": time.perf_counter() - started}


def load_checkpoint(path: str):
    """A phrase model directory (a checkpoint or a final model)."""
    from dphr_haystack.model.phrase_model import PhraseModel

    return PhraseModel.load(path)
