"""Variants of a saved phrase index that benchmarks compare side by side: a copy with some of its vectors in another
FAISS structure, its search parameters for one process, its disk and resident footprint."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import (
    ROOT,
    confidence_scores,
    held_out_questions,
    hit_scores,
    percentiles,
    squad_open_small_questions,
)

UNSEEN = "SQuAD-open-small (unseen)"
_RSS_PROBE = """
import sys
import numpy as np
from dphr_haystack.index.phrase_index import PhraseIndex

def rss():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:")) * 1024

before = rss()
index = PhraseIndex.load(sys.argv[1])
queries = np.random.default_rng(0).standard_normal((64, index.dim)).astype(np.float32)
for row in range(0, 64, 8):
    index.search_tokens(queries[row : row + 8], 200)
print(rss() - before)
"""


def question_sets(model, questions: int) -> dict[str, tuple[list, np.ndarray, np.ndarray]]:
    """``questions`` held-out validation and unseen SQuAD-open-small questions each, with ``model``'s int8 query
    vectors: ``{"validation": (examples, q_start, q_end), UNSEEN: (...)}``."""
    sets = {}
    for name, examples in (
        ("validation", held_out_questions(questions)),
        (UNSEEN, squad_open_small_questions(questions)),
    ):
        q_start, q_end = model.encode_queries([ex.question for ex in examples], batch_size=64, precision="int8")
        sets[name] = (examples, q_start, q_end)
    return sets


def use_search_params(index, params: dict[str, Any]) -> None:
    """Search with ``params`` in this process only (``set_search_params`` would commit them to a saved index)."""
    from dphr_haystack.index import structures

    index.manifest["search_params"] = dict(params)
    structures.apply_search_params(index.faiss_index, params)


def filtered_index(
    index, model, keep: np.ndarray, threshold: float, factory: str = "auto", vectors: np.ndarray | None = None
):
    """An in-memory index of every passage of ``index`` with only the vectors at ``keep`` (or ``vectors``, stored
    dtype, one in place of each of them), in the FAISS structure ``factory`` (``auto``: the one the index picks for
    its size)."""
    from dphr_haystack.index.phrase_index import PhraseIndex
    from dphr_haystack.index.shards import PhraseShard

    if vectors is None:
        vectors = index.storage.vectors.view()[keep]
    shard = PhraseShard(vectors, index.tokens[keep].copy(), index.passages, index.codec)
    filtered = PhraseIndex.create(model, filter_threshold=threshold, faiss_factory=factory)
    filtered.add_shard(shard)
    return filtered


def filter_scores(index, model, chunk: int = 65_536, head=None) -> np.ndarray:
    """The larger of each stored vector's start and end filter logits, computed from the stored vector by the
    model's filter (or ``head``, another filter head over the same states)."""
    import torch

    head = model.filter_linear if head is None else head
    stored = index.storage.vectors.view()
    scores = np.empty(len(stored), dtype=np.float32)
    with torch.inference_mode():
        for start in range(0, len(stored), chunk):
            states = torch.from_numpy(index.codec.decode(stored[start : start + chunk]).astype(np.float32))
            scores[start : start + chunk] = head(states).max(dim=1).values.numpy()
    return scores


def footprint(index, where: Path) -> dict[str, float]:
    """Disk bytes of ``index`` on disk (saved at ``where`` first when it lives in memory) and the RSS (bytes, VmRSS:
    page cache of the stored vectors it reads included) a fresh process gains by loading it and answering 64 random
    token searches (``benchmarks.memory.index_footprint`` separates RAM from page cache on real questions)."""
    saved = index.path is None
    if saved:
        if where.exists():
            shutil.rmtree(where)
        index.save(where)
    path = where if saved else Path(index.path)
    disk = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    probe = subprocess.run(
        [sys.executable, "-c", _RSS_PROBE, str(path)], check=True, capture_output=True, text=True, cwd=ROOT
    )
    rss = int(probe.stdout.strip().splitlines()[-1])
    if saved:
        shutil.rmtree(where)
    return {"disk_bytes": disk, "rss_bytes": rss}


def answer_sets(
    index,
    model,
    sets: dict[str, tuple[list, np.ndarray, np.ndarray]],
    latency_set: str,
    latency_questions: int = 200,
    verify: bool = False,
    searcher=None,
) -> dict[str, Any]:
    """EM@1 / F1@1, passage acc@1 / acc@5 and the top answer's calibration (ECE, AUROC right vs wrong) of the default
    searcher per question set (its examples and query vectors; with ``verify`` also the calibration of the answers
    once the model's verification reader read them, ``verified``), and ``latency_ms``: p50 / p95 of one phrase search
    (top 10, one thread, without ``verify``) on ``latency_set``'s first ``latency_questions``. ``searcher``: another
    searcher of ``index`` (default: ``PhraseSearcher(index, model)``)."""
    import torch

    from dphr_haystack import PhraseSearcher
    from dphr_haystack.verification import verify_batch

    searcher = PhraseSearcher(index, model) if searcher is None else searcher
    out: dict[str, Any] = {}
    for name, (examples, q_start, q_end) in sets.items():
        questions = [ex.question for ex in examples]
        answers = searcher.search_vectors(q_start, q_end, "phrase", 10, questions=questions)
        passages = searcher.search_vectors(q_start, q_end, "passage", 10, questions=questions)
        out[name] = {**hit_scores(examples, answers, passages, 5), **confidence_scores(examples, answers)}
        if verify:
            checked = verify_batch(answers, questions, index, searcher.calibration)
            out[name]["verified"] = confidence_scores(examples, checked)
    examples, q_start, q_end = sets[latency_set]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    times = []
    try:
        for i in range(min(latency_questions, len(examples))):
            started = time.perf_counter()
            question = [examples[i].question]
            searcher.search_vectors(q_start[i : i + 1], q_end[i : i + 1], "phrase", 10, questions=question)
            times.append((time.perf_counter() - started) * 1000)
    finally:
        torch.set_num_threads(threads)
    out["latency_ms"] = percentiles(times)
    return out
