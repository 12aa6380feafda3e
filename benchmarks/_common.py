"""Shared benchmark helpers: machine/library facts, SQuAD loading, timing, JSON output."""

from __future__ import annotations

import gzip
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
SQUAD_DEV = SHARED_DATA / "squad" / "dev-v1.1-public.json.gz"
SQUAD_TRAIN = SHARED_DATA / "squad" / "train-v1.1-rebuilt.json.gz"
RESULTS = ROOT / "benchmarks" / "results"


def machine() -> dict[str, Any]:
    """Where and with what a benchmark ran."""
    import faiss
    import numpy
    import torch
    import transformers

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
        "torch": torch.__version__, "transformers": transformers.__version__, "faiss": faiss.__version__,
        "numpy": numpy.__version__, "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def model_id(name: str) -> str | None:
    """A short digest of a shipped model's weights (its shard index lists each shard's SHA-256), so results can
    tell which shipped model they measured; ``None`` for directories and untrained models."""
    import hashlib

    from dphr_haystack.shipped import is_shipped_name, shipped_model_path

    if not is_shipped_name(name):
        return None
    index = shipped_model_path(name) / "model.safetensors.index.json"
    return hashlib.sha256(index.read_bytes()).hexdigest()[:12] if index.is_file() else None


def squad_passages(path: Path = SQUAD_DEV, limit: int | None = None) -> tuple[list[dict], list[dict]]:
    """SQuAD paragraphs as passages, and their questions (with the gold passage id and answers)."""
    if not path.is_file():
        raise SystemExit(f"SQuAD data not found at {path}: this benchmark needs ../shared/data")
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        data = json.load(handle)["data"]
    passages, questions = [], []
    for a_idx, article in enumerate(data):
        for p_idx, para in enumerate(article["paragraphs"]):
            pid = f"{article['title']}-{a_idx}-{p_idx}"
            passages.append({"id": pid, "title": article["title"], "text": para["context"], "document_id": article["title"]})
            for qa in para.get("qas", []):
                questions.append({"question": qa["question"], "answers": [a["text"] for a in qa["answers"]], "passage_id": pid})
            if limit and len(passages) >= limit:
                return passages, questions
    return passages, questions


def percentiles(values_ms: list[float]) -> dict[str, float]:
    import numpy as np

    arr = np.asarray(values_ms)
    return {"p50_ms": float(np.percentile(arr, 50)), "p95_ms": float(np.percentile(arr, 95)), "mean_ms": float(arr.mean())}


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def finish_result(name: str, result: dict[str, Any], markdown: Callable[[dict], str],
                  plot: Callable[[dict, Path], None]) -> Path:
    """Record the end load average and the markdown, write the JSON and its plot, and print the table."""
    import os

    result["load_average_end"] = os.getloadavg()
    path = write_result(name, result)  # the measurements first: a rendering error must not lose a long run
    result["markdown"] = markdown(result)
    write_result(name, result)
    plot(result, path.with_suffix(".png"))
    print(result["markdown"])
    print(f"wrote {path} and {path.with_suffix('.png')} in {result['seconds'] / 60:.1f} min")
    return path
