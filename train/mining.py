"""Hard-negative mining (Kim et al. 2022 §3.3): passages of a round-1 model's top-k phrases, minus answer ones."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from dphr_haystack._util.nofollow import open_no_follow
from dphr_haystack.answers import contains_answer
from dphr_haystack.index.phrase_index import PhraseIndex
from dphr_haystack.model.phrase_model import PhraseModel
from dphr_haystack.search import PhraseSearcher

from .data import RCData

logger = logging.getLogger(__name__)


def mine_hard_negatives(
    model: PhraseModel, data: RCData, index: PhraseIndex, top_k: int = 10, query_batch: int = 256
) -> dict[str, list[str]]:
    """Question id → hard-negative passage ids, best first.

    Retrieves the top-k phrases per question from ``index`` (built with ``model`` over ``data.passages``),
    keeps their passages, and drops the gold passage and any passage containing a normalised gold answer.
    """
    searcher = PhraseSearcher(index, model, tidy_answers=False)  # every raw span: its passages are the candidates
    text = {p["id"]: p["text"] for p in data.passages}
    out: dict[str, list[str]] = {}
    examples = data.examples
    for b in range(0, len(examples), query_batch):
        chunk = examples[b : b + query_batch]
        hits = searcher.search_batch([ex.question for ex in chunk], unit="phrase", top_k=top_k)
        for ex, per_query in zip(chunk, hits, strict=True):
            negatives: list[str] = []
            for hit in per_query:
                pid = hit.passage_id
                if pid == ex.passage_id or pid in negatives:
                    continue
                if contains_answer(text.get(pid, ""), ex.answers):
                    continue
                negatives.append(pid)
            out[ex.qid] = negatives
    return out


def write_negatives(path: str | Path, negatives: dict[str, list[str]]) -> None:
    """JSON lines ``{"qid", "negatives"}``."""
    with open_no_follow(Path(path), "w", encoding="utf-8") as handle:
        for qid, pids in negatives.items():
            handle.write(json.dumps({"qid": qid, "negatives": pids}) + "\n")


def read_negatives(path: str | Path) -> dict[str, list[str]]:
    out = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            out[str(record["qid"])] = list(record["negatives"])
    return out


def negatives_by_example(data: RCData, negatives: dict[str, list[str]]) -> dict[int, list[str]]:
    """Example index → negatives (the form :class:`train.tasks.RCTask` takes)."""
    return {i: negatives.get(ex.qid, []) for i, ex in enumerate(data.examples)}


def mining_stats(negatives: dict[str, list[str]], wanted: int = 1) -> dict[str, float]:
    counts: Sequence[int] = [len(v) for v in negatives.values()]
    n = max(1, len(counts))
    return {
        "questions": float(len(counts)),
        "mean_negatives": sum(counts) / n,
        "short_fraction": sum(c < wanted for c in counts) / n,
    }
