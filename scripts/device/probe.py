"""Probe vectors: what a trained model gives for a few fixed passages and questions, computed in float32 on the CPU.

The training call stores them with its export; ``restore.py`` computes them again with the rebuilt model and
compares, which checks the shards, the tensors taken from this machine's base and the tokenizer in one go.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

PROBE_TITLES = ("River Thames", "Photosynthesis", "Apollo 11")
PROBE_PASSAGES = (
    "The Thames flows through southern England, past Oxford and Reading, and reaches the North Sea east of London. "
    "Its tidal reach extends upstream to Teddington Lock, about 55 miles from the estuary.",
    "Plants capture light energy with chlorophyll and use it to turn carbon dioxide and water into glucose, "
    "releasing oxygen as a by-product. The process takes place in the chloroplasts of leaf cells.",
    "Apollo 11 landed on the Moon on 20 July 1969. Neil Armstrong and Buzz Aldrin walked on the surface while "
    "Michael Collins stayed in lunar orbit aboard the command module Columbia.",
)
PROBE_QUERIES = (
    "Into which sea does the Thames flow?",
    "What gas do plants release during photosynthesis?",
    "Who stayed in orbit during the Apollo 11 landing?",
    "when did apollo 11 land on the moon",
)
VECTOR_KEYS = ("passage_vectors", "query_start", "query_end")


def probe_vectors(model: Any) -> dict[str, np.ndarray]:
    """Passage token vectors, filter logits and query start/end vectors of the probes (float32, CPU)."""
    import torch

    model = model.to("cpu").eval()
    with torch.inference_mode():
        encoded = model.encode_passages(list(PROBE_PASSAGES), list(PROBE_TITLES))
        q_start, q_end = model.encode_queries(list(PROBE_QUERIES))
    return {
        "passage_vectors": np.concatenate([e.vectors for e in encoded]).astype(np.float32),
        "filter_logits": np.concatenate([e.filter_logits for e in encoded]).astype(np.float32),
        "query_start": np.asarray(q_start, dtype=np.float32),
        "query_end": np.asarray(q_end, dtype=np.float32),
    }


def save_probe(vectors: dict[str, np.ndarray], path: Path) -> None:
    from safetensors.numpy import save_file

    save_file({k: np.ascontiguousarray(v) for k, v in vectors.items()}, str(path), metadata={"format": "np"})


def load_probe(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path))


def compare(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per key: the largest absolute difference, that relative to the largest value, and (vectors) the smallest
    row cosine; ``min_cosine`` and ``max_rel_diff`` over all keys."""
    if set(got) != set(want):
        raise ValueError(f"probe keys differ: {sorted(got)} vs {sorted(want)}")
    out: dict[str, Any] = {}
    for key in sorted(want):
        a, b = np.asarray(got[key], dtype=np.float64), np.asarray(want[key], dtype=np.float64)
        if a.shape != b.shape:
            raise ValueError(f"probe {key}: shape {a.shape} vs {b.shape} (another tokenizer or config?)")
        diff = float(np.abs(a - b).max()) if a.size else 0.0
        scale = float(np.abs(b).max()) if b.size else 0.0
        row = {"max_abs_diff": diff, "max_rel_diff": diff / scale if scale else diff, "rows": int(a.shape[0])}
        if key in VECTOR_KEYS and a.size:
            norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
            cos = (a * b).sum(axis=1) / np.maximum(norms, 1e-30)
            row["min_cosine"] = float(cos.min())
        out[key] = row
    out["min_cosine"] = min(r["min_cosine"] for r in out.values() if "min_cosine" in r)
    out["max_rel_diff"] = max(r["max_rel_diff"] for k, r in out.items() if isinstance(r, dict))
    return out
