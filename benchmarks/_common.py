"""Shared benchmark helpers: machine/library facts, SQuAD loading, timing, JSON output."""

from __future__ import annotations

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
# The SQuAD-open-small build (dense embeddings, phrase indexes), shared by the benchmarks that query it.
SQUAD_OPEN_SMALL_CACHE = ROOT / "benchmarks" / "cache" / "squad-open-small"


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
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "faiss": faiss.__version__,
        "numpy": numpy.__version__,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def model_id(name: str) -> str | None:
    """A short digest of a shipped model's stored tensors (names, dtypes, shapes and bytes, in name order), so
    results can tell which shipped model they measured; ``None`` for directories and untrained models. The
    tensors, not the files: safetensors may order a file's header differently each time the same weights are saved.
    """
    import hashlib

    import torch
    from safetensors.torch import load_file

    from dphr_haystack.model.registry import is_shipped_name, shipped_model_path

    if not is_shipped_name(name):
        return None
    files = sorted(shipped_model_path(name).glob("model*.safetensors"))
    if not files:
        return None
    tensors = {key: value for file in files for key, value in load_file(str(file)).items()}
    digest = hashlib.sha256()
    for key in sorted(tensors):
        value = tensors[key].contiguous()
        digest.update(f"{key}|{value.dtype}|{tuple(value.shape)}|".encode())
        digest.update(value.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:12]


def squad_passages(path: Path = SQUAD_DEV, limit: int | None = None) -> tuple[list[dict], list[dict]]:
    """SQuAD paragraphs as passages, and their questions (with the gold passage id and answers)."""
    if not path.is_file():
        raise SystemExit(f"SQuAD data not found at {path}: this benchmark needs ../shared/data")
    from dphr_haystack._util.io import read_json
    from dphr_haystack.corpus import squad_paragraphs

    passages, questions = [], []
    for passage, para in squad_paragraphs(read_json(path), path):
        passages.append(passage)
        for qa in para.get("qas", []):
            questions.append(
                {
                    "question": qa["question"],
                    "answers": [a["text"] for a in qa["answers"]],
                    "passage_id": passage["id"],
                }
            )
        if limit and len(passages) >= limit:
            return passages, questions
    return passages, questions


def percentiles(values_ms: list[float]) -> dict[str, float]:
    import numpy as np

    arr = np.asarray(values_ms)
    return {
        "p50_ms": float(np.percentile(arr, 50)),
        "p95_ms": float(np.percentile(arr, 95)),
        "mean_ms": float(arr.mean()),
    }


def proc_memory() -> dict[str, float]:
    """VmRSS / VmHWM (peak) / RssAnon / RssFile of this process in MiB, from /proc/self/status."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile", "VmHWM", "VmRSS"):
            out[key] = int(value.split()[0]) / 1024
    return out


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def finish_result(
    name: str, result: dict[str, Any], markdown: Callable[[dict], str], plot: Callable[[dict, Path], None]
) -> Path:
    """Record the command, the end load average and the markdown, write the JSON and its plot, print the table."""
    import os
    import sys

    result.setdefault(
        "command", " ".join([".venv/bin/python -m", f"benchmarks.{Path(sys.argv[0]).stem}", *sys.argv[1:]])
    )
    result["load_average_end"] = os.getloadavg()
    path = write_result(name, result)  # the measurements first: a rendering error must not lose a long run
    result["markdown"] = markdown(result)
    write_result(name, result)
    plot(result, path.with_suffix(".png"))
    print(result["markdown"])
    print(f"wrote {path} and {path.with_suffix('.png')} in {result['seconds'] / 60:.1f} min")
    return path


# ----------------------------------------------------------------------------- held-out validation data
VALIDATION_PARAGRAPHS = 427  # the first 8 dev-public articles
KS = (1, 5, 20)


# ----------------------------------------------------------------------------- data
def validation_data(questions: int):
    """The held-out validation articles and up to ``questions`` evenly spaced distinct questions about them."""
    from train.data import load_squad
    from train.validation import unique_questions

    data = load_squad(SQUAD_DEV, VALIDATION_PARAGRAPHS, questions)
    return data, unique_questions(data.examples)


# The first 8 dev-public articles (by file order) are held out for model selection; the benchmark never asks
# their questions (their paragraphs stay in the corpus).
VALIDATION_ARTICLES = 8


def validation_titles() -> list[str]:
    """Titles of the held-out dev-public articles."""
    from dphr_haystack._util.io import read_json

    return [a["title"] for a in read_json(SQUAD_DEV)["data"][:VALIDATION_ARTICLES]]


def squad_open_small_questions(limit: int | None, seed: int = 0) -> list:
    """The SQuAD-open-small questions: dev-public questions outside the held-out validation articles, ``limit`` of
    them sampled with ``seed`` (the sample every SQuAD-open-small benchmark asks)."""
    from dphr_haystack.evaluation import read_questions

    return read_questions(SQUAD_DEV, limit=limit, seed=seed, exclude_titles=set(validation_titles()))


def held_out_questions(limit: int, seed: int = 0) -> list:
    """``limit`` dev-public questions of the held-out validation articles (whose paragraphs SQuAD-open-small holds),
    sampled with ``seed``: questions to choose settings on, disjoint from :func:`squad_open_small_questions`."""
    import random

    from dphr_haystack.evaluation import read_questions

    titles = set(validation_titles())
    examples = [ex for ex in read_questions(SQUAD_DEV) if ex.title in titles]
    return random.Random(seed).sample(examples, min(limit, len(examples)))


def hit_scores(examples, answers: list | None, passages: list | None, top_k: int) -> dict[str, float]:
    """EM@1 / F1@1 of each question's top phrase and passage acc@1 / acc@``top_k`` of its passage ranking, from
    ``PhraseSearcher`` hits (one list per question; ``None``: not measured), by ``dphr_haystack.evaluation``'s
    rules."""
    from dphr_haystack.evaluation import question_result, summarize

    n = len(examples)
    results = [
        question_result(
            example,
            [(h.text, h.score, h.passage_id) for h in (answers[i] if answers is not None else [])],
            [(h.passage_id, h.score, h.text) for h in (passages[i] if passages is not None else [])],
            0.0,
            top_k,
        )
        for i, example in enumerate(examples)
    ]
    out: dict[str, float] = {}
    if answers is not None:
        summary = summarize(results, top_k, has_answers=True, has_passages=False)
        out["em@1"], out["f1@1"] = summary["phrase_em@1"], summary["phrase_f1@1"]
    if passages is not None:
        firsts = [r.first_hit() for r in results]
        out["acc@1"] = sum(f == 1 for f in firsts) / n
        out[f"acc@{top_k}"] = sum(f > 0 for f in firsts) / n  # question_result keeps the first top_k passages
    return out


def filter_digest(model) -> str:
    """The first 8 hex digits of a SHA-256 of the token filter's weights (which tokens an index keeps)."""
    import hashlib

    digest = hashlib.sha256()
    for name, tensor in sorted(model.filter_linear.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:8]


def phrase_cache(model, cache: Path) -> Path:
    """Where ``model``'s phrase index lives: one per phrase encoder, filter threshold and (when it filters) token
    filter, so models that differ only on the query side (query-side fine-tuning) share it. The untrained
    ``minilm`` keeps ``phrases/``."""
    if (
        model.config.base_model.lower() == "minilm"
        and not model.config.filter_threshold
        and (cache / "phrases").is_dir()
        and model.phrase_fingerprint() == _manifest_fingerprint(cache / "phrases")
    ):
        return cache / "phrases"
    if model.config.filter_threshold is None:
        return cache / f"phrases-{model.phrase_fingerprint()[:12]}-filter-none"
    threshold = f"{model.config.filter_threshold:g}-{filter_digest(model)}"
    return cache / f"phrases-{model.phrase_fingerprint()[:12]}-filter-{threshold}"


def _manifest_fingerprint(path: Path) -> str | None:
    from dphr_haystack.index.phrase_index import MANIFEST

    try:
        return json.loads((path / MANIFEST).read_text())["model_fingerprint"]
    except (OSError, ValueError, KeyError):
        return None


# ----------------------------------------------------------------------------- figures
def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend (benchmarks write PNG files only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int = 110) -> None:
    """Lay ``fig`` out tight, write it to ``path`` and free it."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
