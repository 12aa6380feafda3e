"""Variants of a saved phrase index that benchmarks compare side by side: a copy with some of its vectors in another
FAISS structure, its search parameters for one process, its disk and resident footprint."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT

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


def use_search_params(index, params: dict[str, Any]) -> None:
    """Search with ``params`` in this process only (``set_search_params`` would commit them to a saved index)."""
    from dphr_haystack.index import structures

    index.manifest["search_params"] = dict(params)
    structures.apply_search_params(index.faiss_index, params)


def filtered_index(index, model, keep: np.ndarray, threshold: float, factory: str = "auto"):
    """An in-memory index of every passage of ``index`` with only the vectors at ``keep``, in the FAISS structure
    ``factory`` (``auto``: the one the index picks for its size)."""
    from dphr_haystack.index.phrase_index import PhraseIndex
    from dphr_haystack.index.shards import PhraseShard

    shard = PhraseShard(index.storage.vectors.view()[keep], index.tokens[keep].copy(), index.passages, index.codec)
    filtered = PhraseIndex.create(model, filter_threshold=threshold, faiss_factory=factory)
    filtered.add_shard(shard)
    return filtered


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
