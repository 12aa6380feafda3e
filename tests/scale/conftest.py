"""Fixtures for the scale tests: a tiny phrase index filled with synthetic vectors, a local Ray cluster."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from dphr_haystack.index.shards import TOKEN_DTYPE, PhraseShard


def synthetic_shard(
    num_passages: int, tokens_per_passage: int, dim: int, seed: int = 0, clusters: int = 16, prefix: str = "s"
) -> PhraseShard:
    """A shard of clustered random vectors (float16) with consistent token and passage records."""
    rng = np.random.default_rng(seed)
    n = num_passages * tokens_per_passage
    centers = rng.normal(size=(clusters, dim)).astype(np.float32)
    vectors = centers[rng.integers(0, clusters, n)] + 0.5 * rng.normal(size=(n, dim)).astype(np.float32)
    tokens = np.zeros(n, dtype=TOKEN_DTYPE)
    tokens["passage"] = np.repeat(np.arange(num_passages), tokens_per_passage)
    positions = np.tile(np.arange(tokens_per_passage), num_passages)
    tokens["position"] = positions
    tokens["char_start"] = positions * 2
    tokens["char_end"] = positions * 2 + 1
    words = " ".join(["w"] * tokens_per_passage)
    passages = [
        {
            "id": f"{prefix}{i}",
            "document_id": f"d{i // 4}",
            "title": f"T{i}",
            "text": words,
            "meta": {},
            "num_context_tokens": tokens_per_passage,
        }
        for i in range(num_passages)
    ]
    return PhraseShard(vectors.astype(np.float16), tokens, passages)


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster with 2 CPUs for the module (skips when Ray is not installed)."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install 'dphr-haystack[distributed]')")
    import ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={
            "env_vars": {
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "HAYSTACK_TELEMETRY_ENABLED": "False",
            }
        },
    )
    yield ray
    ray.shutdown()
