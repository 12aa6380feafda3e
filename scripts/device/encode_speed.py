"""Time phrase encoding on the device: how long the dump of 1,000 passages takes on its GPU (device side).

Indexing is encoding (``dphr_haystack.encode.dump.encode_shard``: every context token's phrase vectors and filter
logits) plus FAISS, which runs on the CPU and which the device has not. This times the encoding of the SQuAD dev
paragraphs with a trained model, as ``dphr index --device cuda`` runs it (bfloat16 autocast), after a warm-up, and
writes ``encode_speed.json`` to ``$OUT``.

Usage (on the device, after a training call)::

    PYTHONPATH=. python3 scripts/device/run.py encode-speed --name gpu-distill-mpnet --passages 2000
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path
from typing import Any

WARM_UP = 64


def squad_passages(path: Path, limit: int) -> list[Any]:
    """The first ``limit`` paragraphs of a SQuAD-format file as passages."""
    from dphr_haystack.corpus import Passage

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        articles = json.load(handle)["data"]
    passages = [
        Passage(id=f"{a_idx}-{p_idx}", text=p["context"], title=article["title"])
        for a_idx, article in enumerate(articles)
        for p_idx, p in enumerate(article["paragraphs"])
    ]
    return passages[:limit]


def encode_speed(model_dir: Path, dev_file: Path, passages: int, batch_size: int = 64) -> dict[str, Any]:
    """Seconds to encode ``passages`` SQuAD dev paragraphs (per 1,000) on this machine's GPU, and what was kept."""
    import torch

    from dphr_haystack import PhraseModel
    from dphr_haystack.encode.dump import encode_shard
    from dphr_haystack.index.codec import VectorCodec

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = PhraseModel.load(model_dir, device=device)
    corpus = squad_passages(dev_file, passages + WARM_UP)
    codec = VectorCodec("float16")
    threshold = model.config.filter_threshold
    encode_shard(model, corpus[:WARM_UP], codec, threshold, batch_size)
    timed = corpus[WARM_UP:]
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    shard = encode_shard(model, timed, codec, threshold, batch_size)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    return {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "model": str(model_dir),
        "passages": len(timed),
        "batch_size": batch_size,
        "filter_threshold": threshold,
        "seconds": seconds,
        "seconds_per_1k_passages": 1000.0 * seconds / max(len(timed), 1),
        "vectors_per_passage": len(shard.vectors) / max(len(timed), 1),
    }
