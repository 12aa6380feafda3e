"""Key tokens: search a few tokens of each passage, read the passages they hit whole.

    .venv/bin/python -m benchmarks.index.key_tokens [--questions 600] [--budgets 4 8 16] [--candidates 1 2 4]
        [--readings whole rescored] [--keys filter centroids weighted-centroids filter+mean spaced-centroids]

A stricter filter threshold keeps fewer vectors and loses their answers (``benchmarks.index.filter_thresholds``: at
8 vectors a passage 17 EM points), because a span can only be scored from the vectors kept. This benchmark separates
the two jobs of the vectors: FAISS searches only each passage's ``B`` *key tokens* (its stored tokens with the
largest filter logit, max of start and end, recomputed from the stored vectors), which decide which passages are
read, while the spans of every passage a key token hits are scored from *all* its stored vectors (every stored
token of it a start and an end: the passage is read whole). The FAISS structure then holds ``B`` vectors a passage
(RAM), the stored vectors stay on disk (memory-mapped, read for the passages hit), like DensePhrases' dump beside
its start index.

Variants, searched by the default ``PhraseSearcher`` with the same int8 query vectors on held-out validation and
unseen SQuAD-open-small questions: every stored vector (today), every stored vector with each ``--readings`` of the
hits, and for each budget ``B`` the key tokens alone (spans from the key tokens only, as a stricter filter would) and
the key tokens with each reading of the passages they hit: ``whole`` (every stored token of them a start and an end)
or ``rescored`` (every stored token of them scored exactly against the query, the best as many starts and ends as
the default searcher pairs), at 1x, 2x, ... the default number of start and end tokens searched first
(``--candidates``). The key tokens' FAISS structure is the one ``auto`` picks and tunes for their number (or
``--key-factory``'s, tuned the same way). The key vectors need not be tokens (``--keys``): besides the best tokens
by filter logit, a passage's ``B`` k-means centroids of its stored vectors (plain or weighted by each token's filter
probability) or its ``B - 1`` best tokens and the mean of its vectors, or the centroids an index made with
``key_vectors=B`` keeps (``spaced-centroids``: started from evenly spaced tokens, no filter needed); a centroid's hit
reads its passage like a token's. Measured:
EM@1 / F1@1, passage acc@1 / acc@5, ECE and AUROC (right vs wrong) of the top answer, p50 / p95 of one phrase search
(one thread), the FAISS structure's bytes a passage (serialised: what it holds in RAM) and the stored rows read per
question.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import (
    DEFAULT_MODEL,
    cached_open_small_phrases,
    finish_result,
    log_x_ticks,
    machine,
    model_id,
    pyplot,
    save_figure,
)
from benchmarks.index_variants import (
    UNSEEN,
    answer_sets,
    filter_scores,
    filtered_index,
    question_sets,
    use_search_params,
)
from dphr_haystack import PhraseSearcher
from dphr_haystack import search as search_module
from dphr_haystack.index.keys import key_vectors
from dphr_haystack.index.rounds import SearchedRows

EM_BUDGET = 0.01  # the most EM@1 a variant may lose against every vector, on both question sets


def key_rows(index, scores: np.ndarray, budget: int) -> np.ndarray:
    """The rows of each passage's ``budget`` stored tokens with the largest ``scores`` (ties: the earlier row), in
    row order."""
    passage = index.tokens["passage"]
    order = np.lexsort((np.arange(len(scores)), -scores, passage))  # by passage, best score first
    first_of_passage = np.searchsorted(passage[order], passage[order], side="left")
    rank = np.arange(len(order)) - first_of_passage
    return np.sort(order[rank < budget])


KEYS = {
    "filter": "best tokens by filter logit",
    "centroids": "k-means centroids",
    "weighted-centroids": "k-means centroids, filter-weighted",
    "filter+mean": "best tokens by filter logit and the mean",
    "spaced-centroids": "k-means centroids from spaced tokens (the store's)",
}
KMEANS_ITERATIONS = 8


def kmeans(x: np.ndarray, weights: np.ndarray, init: np.ndarray, iterations: int = KMEANS_ITERATIONS):
    """Weighted Lloyd iterations from the rows ``init`` of ``x``: the centroids and each row's cluster (a cluster
    left empty keeps its centroid)."""
    centers = x[init].astype(np.float32, copy=True)
    squared = np.einsum("ij,ij->i", x, x)
    for _ in range(iterations):
        distance = squared[:, None] - 2 * x @ centers.T + np.einsum("ij,ij->i", centers, centers)[None, :]
        assign = distance.argmin(axis=1)
        member = np.zeros((len(x), len(centers)), dtype=np.float32)
        member[np.arange(len(x)), assign] = weights
        mass = member.sum(axis=0)
        filled = mass > 0
        centers[filled] = (member.T @ x)[filled] / mass[filled, None]
    return centers, assign


def passage_keys(index, scores: np.ndarray, budget: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Each passage's ``budget`` key vectors of ``kind`` (:data:`KEYS`), in the stored dtype, and the stored row each
    stands for (the mapped hit): ``filter``, its stored tokens with the largest filter logit; ``centroids``,
    k-means centroids of its stored vectors started from those tokens (a passage of no more tokens than the budget:
    its tokens), each standing for its cluster's best token; ``weighted-centroids``, the same with each vector
    weighted by its filter probability; ``filter+mean``, its ``budget - 1`` best tokens and the mean of its vectors
    (standing for its best token); ``spaced-centroids``, the keys of :mod:`dphr_haystack.index.keys`."""
    if kind == "spaced-centroids":
        vectors, rows = key_vectors(index.storage.vectors.view(), index.num_tokens, 0, budget, index.codec.decode)
        return index.codec.encode(vectors), rows
    best = key_rows(index, scores, budget)
    if kind == "filter":
        return index.storage.vectors.view()[best], best
    if kind not in KEYS:
        raise ValueError(f"key kind {kind!r}; valid: {', '.join(KEYS)}")
    codec, stored = index.codec, index.storage.vectors.view()
    vectors, rows = [], []
    if kind == "filter+mean":
        best = key_rows(index, scores, budget - 1)
    best_of = np.split(best, np.searchsorted(index.tokens["passage"][best], np.arange(1, index.num_passages)))
    for first, count, own_best in zip(index.first_token, index.num_tokens, best_of, strict=True):
        whole = np.arange(first, first + count)
        x = codec.decode(stored[first : first + count])
        own_scores = scores[first : first + count]
        if kind == "filter+mean":
            vectors.append(x[own_best - first])
            rows.append(own_best)
            if count > len(own_best):  # the mean stands for the passage's best token
                vectors.append(x.mean(axis=0, keepdims=True))
                rows.append(whole[[np.argmax(own_scores)]])
            continue
        if count <= budget:
            vectors.append(x)
            rows.append(whole)
            continue
        weights = 1 / (1 + np.exp(-own_scores)) if kind == "weighted-centroids" else np.ones(count, np.float32)
        centers, assign = kmeans(x, weights.astype(np.float32), own_best - first)
        # each centroid stands for its cluster's best token (an empty cluster: the token it started from)
        ranked = np.where(assign[None, :] == np.arange(budget)[:, None], own_scores[None, :], -np.inf)
        stand = np.where(np.isfinite(ranked.max(axis=1)), ranked.argmax(axis=1), own_best - first)
        vectors.append(centers)
        rows.append(whole[stand])
    return codec.encode(np.concatenate(vectors)), np.concatenate(rows)


class MappedRows:
    """A key-token search's :class:`SearchedRows` with rows of the key index mapped to rows of the whole index."""

    def __init__(self, searched: SearchedRows, rows: np.ndarray) -> None:
        self.searched, self.rows_of_keys = searched, rows

    def rows(self, k: int, which: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        found = self.searched.rows(k, which)
        return None if found is None else (map_rows(found[0], self.rows_of_keys), found[1])


def map_rows(ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Rows of the key index → rows of the whole index (-1, FAISS' none, stays)."""
    return np.where(ids >= 0, rows[np.maximum(ids, 0)], -1)


class KeyTokenIndex:
    """The whole ``index`` (passages, tokens, stored vectors) whose token searches run over ``keys``, an index of
    its ``rows`` only; everything else is the whole index's."""

    def __init__(self, index, keys, rows: np.ndarray) -> None:
        self.whole, self.keys, self.rows_of_keys = index, keys, rows

    def __getattr__(self, name: str):
        return getattr(self.whole, name)

    def __len__(self) -> int:
        return len(self.whole)

    def search_tokens(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores, ids = self.keys.search_tokens(queries, min(k, len(self.keys)))
        return scores, map_rows(ids, self.rows_of_keys)

    def search_token_rows(self, queries: np.ndarray, largest: int) -> MappedRows | None:
        searched = self.keys.search_token_rows(queries, min(largest, len(self.keys)))
        return None if searched is None else MappedRows(searched, self.rows_of_keys)


READINGS = {
    "tokens": "spans from the tokens hit",
    "whole": "passages hit, read whole",
    "rescored": "passages hit, their best tokens",
}


def hit_passage_rows(index, start_ids: np.ndarray, end_ids: np.ndarray) -> np.ndarray:
    """Every stored row of the passages that the start and end hits land in."""
    hit = np.concatenate([start_ids, end_ids])
    passages = np.unique(index.tokens["passage"][hit[hit >= 0]])
    first, count = index.first_token[passages], index.num_tokens[passages]
    return np.concatenate([np.arange(f, f + n) for f, n in zip(first, count, strict=True)] or [np.empty(0, np.int64)])


class ReadingSearcher(PhraseSearcher):
    """A :class:`PhraseSearcher` whose spans read the token hits as ``reading`` says (:data:`READINGS`): ``tokens``
    pairs the hits themselves (the default searcher); ``whole`` reads every passage a hit lands in whole (each of its
    stored tokens a start and an end); ``rescored`` scores every stored token of those passages exactly and pairs
    their best ``hits / factor`` starts and ends, as many as the default searcher's first search (the key search
    took ``factor`` times more hits to find the passages). Counts the rows it reads (``rows_read``, per ``_spans``
    call)."""

    reading: str = "tokens"
    factor: int = 1
    rows_read: list[int]

    def _spans(self, qs, qe, start_ids, end_ids, allowed):
        if self.reading == "tokens":
            self.rows_read.append(len(np.unique(np.concatenate([start_ids, end_ids]))))
            return super()._spans(qs, qe, start_ids, end_ids, allowed)
        rows = hit_passage_rows(self.index, start_ids, end_ids)
        self.rows_read.append(len(rows))
        if self.reading == "whole" or not len(rows):
            return super()._spans(qs, qe, rows, rows, allowed)
        vectors = self.index.vectors(rows)
        keep = min(len(rows), max(1, len(start_ids) // self.factor))
        best_starts = rows[np.argpartition(-(vectors @ qs), keep - 1)[:keep]]
        best_ends = rows[np.argpartition(-(vectors @ qe), keep - 1)[:keep]]
        return super()._spans(qs, qe, best_starts, best_ends, allowed)


def key_structure(index, model, vectors: np.ndarray, rows: np.ndarray, factory: str):
    """An index of the key ``vectors`` (stored dtype), each with the token of the stored row it stands for, in the
    FAISS structure ``factory`` (``auto``: the one ``auto`` picks for their number), an IVF one tuned as ``auto``
    tunes its own (nprobe, refine, a PQ structure's scan cap)."""
    keys = filtered_index(index, model, rows, model.config.filter_threshold, factory, vectors)
    if factory != "auto" and "IVF" in factory:
        tuned = keys.structure.tune_nprobe()
        use_search_params(keys, {name: tuned[name] for name in ("nprobe", "refine", "max_codes") if name in tuned})
    return keys


@contextmanager
def first_candidates(factor: int) -> Iterator[None]:
    """Search ``factor`` times the default number of start and end tokens first (and the calibration's depth for
    phrase answers)."""
    saved = dict(search_module.FIRST_CANDIDATES_PER_RESULT)
    search_module.FIRST_CANDIDATES_PER_RESULT.update({unit: n * factor for unit, n in saved.items()})
    try:
        yield
    finally:
        search_module.FIRST_CANDIDATES_PER_RESULT.update(saved)


def faiss_bytes(index) -> int:
    """Bytes of ``index``'s FAISS structure serialised (what the structure holds in RAM)."""
    import faiss

    return int(faiss.serialize_index(index.faiss_index).nbytes)


def evaluate(index, model, sets, reading: str, factor: int) -> tuple[dict[str, Any], float]:
    """The variant's answers (``answer_sets``) and the stored rows its spans read per ``_spans`` call (mean)."""
    searcher = ReadingSearcher(index, model)
    searcher.reading, searcher.factor, searcher.rows_read = reading, factor, []
    with first_candidates(factor):
        results = answer_sets(index, model, sets, latency_set=UNSEEN, searcher=searcher)
    return results, float(np.mean(searcher.rows_read)) if searcher.rows_read else 0.0


def measure(
    model_name: str,
    questions: int,
    budgets: Sequence[int],
    factors: Sequence[int],
    readings: Sequence[str],
    cache: Path | None = None,
    key_factory: str = "auto",
    keys: Sequence[str] = ("filter",),
) -> dict[str, Any]:
    from dphr_haystack.index.phrase_index import PhraseIndex
    from dphr_haystack.nodes import load_phrase_model

    started = time.perf_counter()
    model = load_phrase_model(model_name, "cpu")
    index = PhraseIndex.load(cached_open_small_phrases(model, cache))
    passages = index.num_passages
    scores = filter_scores(index, model)
    sets = question_sets(model, questions)
    whole_bytes = faiss_bytes(index)
    rows: list[dict[str, Any]] = []

    def record(
        name: str,
        variant,
        budget: int | None,
        reading: str,
        factor: int,
        vectors: int,
        structure: str,
        structure_bytes: int,
        build_s: float,
        kind: str | None = None,
    ) -> None:
        t0 = time.perf_counter()
        results, read = evaluate(variant, model, sets, reading, factor)
        row = {
            "variant": name,
            "budget": budget,
            "keys": kind,
            "reading": reading,
            "candidates_factor": factor,
            "searched_vectors": vectors,
            "searched_vectors_per_passage": vectors / passages,
            "structure": structure,
            "faiss_bytes_per_passage": structure_bytes / passages,
            "key_build_seconds": build_s,
            "rows_read_per_search": read,
            "results": results,
            "seconds": time.perf_counter() - t0,
        }
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "results"}), json.dumps(results), flush=True)

    everything = (len(index), index.faiss_factory, whole_bytes, 0.0)
    record("every vector (today)", index, None, "tokens", 1, *everything)
    for reading in readings:
        record(f"every vector, {READINGS[reading]}", index, None, reading, 1, *everything)
    for kind in keys:
        for budget in budgets:
            t0 = time.perf_counter()
            vectors, rows_of_keys = passage_keys(index, scores, budget, kind)
            key_index = key_structure(index, model, vectors, rows_of_keys, key_factory)
            build_s = time.perf_counter() - t0
            # the key rows' map (int32 a row) is part of the RAM the key tokens cost
            key_bytes = faiss_bytes(key_index) + 4 * len(rows_of_keys)
            variant = KeyTokenIndex(index, key_index, rows_of_keys)
            spec = (len(rows_of_keys), key_index.faiss_factory, key_bytes, build_s)
            name = f"{budget} keys ({KEYS[kind]})"
            if kind == "filter":  # only real tokens can be spans themselves
                record(f"{name}, {READINGS['tokens']}", variant, budget, "tokens", 1, *spec, kind)
            for reading in readings:
                for factor in factors:
                    record(f"{name}, {READINGS[reading]}", variant, budget, reading, factor, *spec, kind)
    today = rows[0]["results"]
    for row in rows:
        row["within_budget"] = all(row["results"][name]["em@1"] >= today[name]["em@1"] - EM_BUDGET for name in sets)
    return {
        "machine": machine(),
        "model": model_name,
        "model_id": model_id(model_name),
        "passages": passages,
        "stored_vectors": len(index),
        "questions": {name: len(s[0]) for name, s in sets.items()},
        "em_budget": EM_BUDGET,
        "first_candidates": dict(search_module.FIRST_CANDIDATES_PER_RESULT),
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Key tokens of `{result['model']}`'s SQuAD-open-small index ({result['passages']:,} passages, "
        f"{result['stored_vectors'] / result['passages']:.1f} stored vectors a passage), default searcher, int8 "
        f"queries, {result['machine']['cpu']}; {result['questions']['validation']:,} validation and "
        f"{result['questions'][UNSEEN]:,} unseen questions; ✓: within {100 * result['em_budget']:.0f} EM point of "
        "every vector on both:",
        "",
        "| FAISS searches | spans read | first tokens | searched vectors / passage | FAISS B / passage | val EM@1 "
        "| unseen EM@1 | unseen F1@1 | unseen acc@1 | unseen acc@5 | unseen ECE | unseen AUROC | rows read / search "
        "| search p50 / p95 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        v, u = r["results"]["validation"], r["results"][UNSEEN]
        kind = KEYS[series_of(r)[0]]
        searched = "every vector" if r["budget"] is None else f"{r['budget']} keys a passage ({kind})"
        searched += f", `{r['structure']}`"
        spans = READINGS[r["reading"]]
        latency = r["results"]["latency_ms"]
        mark = " ✓" if r["within_budget"] else ""
        lines.append(
            f"| {searched} | {spans} | {r['candidates_factor']}× | {r['searched_vectors_per_passage']:.1f} | "
            f"{r['faiss_bytes_per_passage']:,.0f} | {100 * v['em@1']:.2f}{mark} | {100 * u['em@1']:.2f} | "
            f"{100 * u['f1@1']:.2f} | {100 * u['acc@1']:.2f} | {100 * u['acc@5']:.2f} | {u['ece']:.3f} | "
            f"{u['auroc_right_vs_wrong']:.3f} | {r['rows_read_per_search']:,.0f} | {latency['p50_ms']:.1f} / "
            f"{latency['p95_ms']:.1f} |"
        )
    return "\n".join(lines)


def series_of(row: dict[str, Any]) -> tuple[str, str, int]:
    """A keyed row's line in the plot: its keys, its reading, its first tokens (rows from before key kinds were
    measured are ``filter`` keys)."""
    return row.get("keys") or "filter", row["reading"], row["candidates_factor"]


PANELS = (
    ("validation", "em@1", "validation EM@1 %"),
    (UNSEEN, "em@1", "unseen EM@1 %"),
    (UNSEEN, "acc@1", "unseen passage acc@1 %"),
)


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(PANELS), figsize=(13, 3.6))
    today = result["rows"][0]
    keyed = [r for r in result["rows"] if r["budget"] is not None]
    kinds = {series_of(r)[0] for r in keyed}
    for ax, (name, metric, title) in zip(axes, PANELS, strict=True):
        best = 100 * today["results"][name][metric]
        ax.axhline(best, color="grey", linewidth=1, label="every vector")
        if metric == "em@1":
            ax.axhline(best - 100 * result["em_budget"], color="grey", linestyle=":", linewidth=1, label="−1 point")
        for kind, reading, factor in sorted({series_of(r) for r in keyed}):
            own = sorted((r for r in keyed if series_of(r) == (kind, reading, factor)), key=lambda r: r["budget"])
            label = READINGS[reading] + ("" if reading == "tokens" else f", {factor}× first tokens")
            if len(kinds) > 1:
                label = f"{KEYS[kind]}: {label}"
            budgets = [r["budget"] for r in own]
            ax.plot(budgets, [100 * r["results"][name][metric] for r in own], marker="o", label=label)
        log_x_ticks(ax, [r["budget"] for r in keyed], "key vectors searched a passage")
        ax.set_title(title, fontsize=9)
    axes[0].legend(fontsize=6)
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--questions", type=int, default=600)
    parser.add_argument("--budgets", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument(
        "--candidates", type=int, nargs="+", default=[1, 2, 4], help="multiples of the first tokens searched"
    )
    parser.add_argument(
        "--readings", nargs="+", choices=sorted(set(READINGS) - {"tokens"}), default=["whole", "rescored"]
    )
    parser.add_argument(
        "--key-factory",
        default="auto",
        help="FAISS structure of the key tokens (default auto: the one the index picks for their number; an IVF "
        "factory string, e.g. OPQ96,IVF2048,PQ96np, is tuned as auto tunes its own)",
    )
    parser.add_argument(
        "--keys", nargs="+", choices=list(KEYS), default=["filter"], help="how each passage's key vectors are chosen"
    )
    parser.add_argument("--cache", type=Path, default=None, help="another cache root (a rehearsal on a small index)")
    parser.add_argument("--name", default="key_tokens")
    args = parser.parse_args()
    result = measure(
        args.model,
        args.questions,
        args.budgets,
        args.candidates,
        args.readings,
        args.cache,
        args.key_factory,
        args.keys,
    )
    finish_result(args.name, result, markdown, plot)


if __name__ == "__main__":
    main()
