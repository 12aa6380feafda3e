"""Key vectors as a user gets them: an index created with ``key_vectors=B``, filled through the write path, beside
the index of every vector.

    .venv/bin/python -m benchmarks.index.key_store [--questions 2000] [--budgets 8] [--factories OPQ96,IVF2048,PQ96np]
        [--dtype int8]

For each budget ``B`` a new on-disk index is created with ``key_vectors=B`` and the ``auto`` structure and filled as
``dphr index`` fills one: :meth:`~dphr_haystack.index.phrase_index.PhraseIndex.append_stream` commits 512 passages at
a time (computing each passage's key vectors, rebuilding the ``auto`` structure as it grows), from the passages and
stored vectors of the cached SQuAD-open-small index (the same vectors, nothing encoded again). Measured for it and for
the cached index of every vector, in one run: the build's wall time, the FAISS structure's bytes a passage (serialised:
what it holds in RAM), the disk a passage, the RSS a fresh process gains by loading the index and answering 64 token
searches, and the default :class:`~dphr_haystack.PhraseSearcher`'s answers on held-out validation and unseen
questions (EM@1 / F1@1, passage acc@1 / acc@5, ECE, AUROC, p50 / p95 of one phrase search). ``--factories``: each keyed
index is then reindexed to these FAISS structures (tuned by ``auto``'s rule) and measured again; ``--dtype int8``
stores the keyed index's vectors in int8 (re-coded as they are appended), half the disk of float16.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import (
    DEFAULT_MODEL,
    ROOT,
    cached_open_small_phrases,
    finish_result,
    machine,
    model_id,
    pyplot,
    save_figure,
)
from benchmarks.index_variants import UNSEEN, answer_sets, footprint, question_sets
from dphr_haystack.index.merge import passage_chunks

BUILD_ROOT = ROOT / "benchmarks" / "cache" / "key-store"


def build_keyed(whole, model, budget: int, where: Path, dtype: str) -> tuple[Any, float]:
    """A new index at ``where`` with ``key_vectors=budget`` holding every passage of ``whole``, its vectors stored as
    ``dtype`` (re-coded when that is not ``whole``'s); its build seconds."""
    from dphr_haystack.index.phrase_index import PhraseIndex

    if where.exists():
        shutil.rmtree(where)
    started = time.perf_counter()
    keyed = PhraseIndex.create(
        model, path=where, filter_threshold=whole.filter_threshold, dtype=dtype, key_vectors=budget
    )
    for records, piece in passage_chunks(whole, 512):  # committed 512 passages at a time, as dphr index commits
        keyed.append_stream(records, [piece], whole.codec)
    return keyed, time.perf_counter() - started


def faiss_bytes(index) -> int:
    import faiss

    return int(faiss.serialize_index(index.faiss_index).nbytes)


def measure(
    model_name: str,
    questions: int,
    budgets: Sequence[int],
    factories: Sequence[str],
    cache: Path | None,
    dtype: str | None = None,
) -> dict[str, Any]:
    from dphr_haystack.index.phrase_index import PhraseIndex
    from dphr_haystack.nodes import load_phrase_model

    started = time.perf_counter()
    model = load_phrase_model(model_name, "cpu")
    whole = PhraseIndex.load(cached_open_small_phrases(model, cache))
    passages = whole.num_passages
    sets = question_sets(model, questions)
    rows: list[dict[str, Any]] = []

    def record(name: str, index, budget: int | None, build_s: float | None) -> None:
        t0 = time.perf_counter()
        results = answer_sets(index, model, sets, latency_set=UNSEEN)
        spent = footprint(index, Path(index.path))
        row = {
            "variant": name,
            "key_vectors": budget,
            "structure": index.faiss_factory,
            "dtype": index.codec.dtype,
            "search_params": index.search_params,
            "searched_vectors_per_passage": index.num_searched_vectors / passages,
            "faiss_bytes_per_passage": faiss_bytes(index) / passages,
            "disk_bytes_per_passage": spent["disk_bytes"] / passages,
            "rss_bytes_per_passage": spent["rss_bytes"] / passages,
            "build_seconds": build_s,
            "results": results,
            "seconds": time.perf_counter() - t0,
        }
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "results"}), json.dumps(results), flush=True)

    record("every vector (today)", whole, None, None)
    dtype = dtype or whole.codec.dtype
    stored = "" if dtype == whole.codec.dtype else f", {dtype} vectors"
    for budget in budgets:
        where = BUILD_ROOT / f"{cache.name if cache else 'squad-open-small'}-keys-{budget}"
        keyed, build_s = build_keyed(whole, model, budget, where, dtype)
        record(f"{budget} key vectors a passage{stored}, auto", keyed, budget, build_s)
        for factory in factories:
            t0 = time.perf_counter()
            keyed.reindex(factory, progress=False)
            tuned = keyed.structure.tune_nprobe()
            keyed.set_search_params(**{k: tuned[k] for k in ("nprobe", "refine", "max_codes") if k in tuned})
            record(f"{budget} key vectors a passage{stored}, {factory}", keyed, budget, time.perf_counter() - t0)
        shutil.rmtree(keyed.path)
    return {
        "machine": machine(),
        "model": model_name,
        "model_id": model_id(model_name),
        "passages": passages,
        "stored_vectors": len(whole),
        "questions": {name: len(s[0]) for name, s in sets.items()},
        "chunk": 512,
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Key vectors in an index of `{result['model']}`'s SQuAD-open-small passages ({result['passages']:,}, "
        f"{result['stored_vectors'] / result['passages']:.1f} stored vectors a passage), filled {result['chunk']} "
        f"passages a commit, default searcher, int8 queries, {result['machine']['cpu']}; "
        f"{result['questions']['validation']:,} validation and {result['questions'][UNSEEN]:,} unseen questions:",
        "",
        "| index | FAISS structure | searched vectors / passage | FAISS B / passage | disk KB / passage "
        "| fresh RSS KB / passage | build s | val EM@1 | unseen EM@1 / F1@1 | unseen acc@1 / acc@5 "
        "| unseen ECE / AUROC | search p50 / p95 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|---|",
    ]
    for r in result["rows"]:
        v, u, t = r["results"]["validation"], r["results"][UNSEEN], r["results"]["latency_ms"]
        build = "" if r["build_seconds"] is None else f"{r['build_seconds']:.0f}"
        lines.append(
            f"| {r['variant']} | `{r['structure']}` | {r['searched_vectors_per_passage']:.1f} | "
            f"{r['faiss_bytes_per_passage']:,.0f} | {r['disk_bytes_per_passage'] / 1024:.1f} | "
            f"{r['rss_bytes_per_passage'] / 1024:.1f} | {build} | {100 * v['em@1']:.2f} | "
            f"{100 * u['em@1']:.2f} / {100 * u['f1@1']:.2f} | {100 * u['acc@1']:.2f} / {100 * u['acc@5']:.2f} | "
            f"{u['ece']:.3f} / {u['auroc_right_vs_wrong']:.3f} | {t['p50_ms']:.1f} / {t['p95_ms']:.1f} |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    """EM@1 of each set against the FAISS bytes a passage, one point per index."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for name, marker in (("validation", "o"), (UNSEEN, "s")):
        xs = [r["faiss_bytes_per_passage"] for r in result["rows"]]
        ys = [100 * r["results"][name]["em@1"] for r in result["rows"]]
        ax.scatter(xs, ys, marker=marker, label=name)
        for x, y, r in zip(xs, ys, result["rows"], strict=True):
            ax.annotate(r["variant"], (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.margins(x=0.35, y=0.15)  # room for the labels
    ax.set_xlabel("FAISS bytes a passage (RAM)")
    ax.set_ylabel("EM@1 %")
    ax.legend(fontsize=7)
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--questions", type=int, default=600)
    parser.add_argument("--budgets", type=int, nargs="+", default=[8])
    parser.add_argument("--dtype", choices=["float16", "int8"], default=None, help="keyed index's vectors")
    parser.add_argument("--factories", nargs="*", default=[], help="FAISS structures each keyed index is rebuilt as")
    parser.add_argument("--cache", type=Path, default=None, help="another cache root (a rehearsal on a small index)")
    parser.add_argument("--name", default="key_store")
    args = parser.parse_args()
    result = measure(args.model, args.questions, args.budgets, args.factories, args.cache, args.dtype)
    finish_result(args.name, result, markdown, plot)


if __name__ == "__main__":
    main()
