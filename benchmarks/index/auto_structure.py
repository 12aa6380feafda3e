"""The automatic index structure's ``nprobe`` against exhaustive search, on the default model's SQuAD-open-small
phrase index.

    .venv/bin/python -m benchmarks.index.auto_structure [--nprobe 32,64,128,256,512] [--questions 300]
        [--validation 3000] [--cache runs/bench-cache/squad-open-small]

Indexes above the exact-search threshold get an IVF structure with ``nprobe`` tuned at build time and exact
re-ranking from the stored vectors (``dphr_haystack.index.auto``). For each ``nprobe`` in the sweep and for
exhaustive search (every list probed, 16x re-ranking), this benchmark measures:

- what the build-time rule sees: recall of the exact top-k tokens (k = 20, 64, 256) for the rule's probe queries
  (midpoints of stored vectors) and for real question vectors (start and end);
- what users see: phrase EM@1 / F1@1 and passage acc@1 / acc@20 (the SQuAD-open-small questions, and the distinct
  questions of the held-out validation articles), how often the top phrase equals exhaustive search's, and the
  p50 search time of a phrase answer (top-10, as a Haystack retriever asks) with query vectors encoded beforehand.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    DEFAULT_MODEL,
    cached_open_small_phrases,
    finish_result,
    held_out_questions,
    hit_scores,
    machine,
    model_id,
    pyplot,
    save_figure,
    squad_open_small_questions,
)
from benchmarks.index_variants import use_search_params

RECALL_KS = (20, 64, 256)
ANSWER_TOP_K = 10  # a Haystack retriever's default


def _run(searcher, q_start, q_end, examples, unit: str, top_k: int) -> tuple[list, list[float]]:
    hits, times = [], []
    for i in range(len(examples)):
        started = time.perf_counter()
        question = [examples[i].question]  # lets the searcher skip answers that copy the question, as in a pipeline
        hits.append(searcher.search_vectors(q_start[i : i + 1], q_end[i : i + 1], unit, top_k, questions=question)[0])
        times.append((time.perf_counter() - started) * 1000)
    return hits, times


def _recalls(index, queries, truth, params: dict[str, Any]) -> dict[str, float]:
    """Recall of the exact top-k rows (``truth``, ranked) of a search with ``params``, for each k of RECALL_KS."""
    import numpy as np

    use_search_params(index, params)
    out = {}
    for k in RECALL_KS:
        found = index.search_tokens(queries, k)[1]
        out[f"recall@{k}"] = float(np.mean([len(set(t[:k]) & set(f)) / k for t, f in zip(truth, found)]))
    return out


def _distinct(examples: list) -> list:
    seen: set[str] = set()
    return [e for e in examples if not (e.question in seen or seen.add(e.question))]


def measure(model_name: str, cache: Path | None, sweep: list[int], questions: int, validation: int) -> dict[str, Any]:
    import numpy as np

    from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher
    from dphr_haystack.index import auto

    started = time.perf_counter()
    model = PhraseModel.load(model_name)
    path = cached_open_small_phrases(model, cache)
    index = PhraseIndex.load(path, model=model)
    if not index.search_params.get("nprobe"):
        raise SystemExit(f"{path} is searched exactly ({index.faiss_factory}): nothing to compare")
    sets = {"SQuAD-open-small": squad_open_small_questions(questions)}
    if validation:
        sets["validation"] = _distinct(held_out_questions(validation))
    encoded = {name: model.encode_queries([e.question for e in examples]) for name, examples in sets.items()}
    searcher = PhraseSearcher(index, model)
    index.search_tokens(encoded["SQuAD-open-small"][0][:1], 8)  # loads the structure
    tuned = dict(index.search_params)
    nlist = int(index.faiss_factory.split(",")[0].removeprefix("IVF"))
    stored, decode = index.storage.vectors.view(), index.codec.decode
    probes = auto.probe_queries(stored, decode, 256)
    q_start, q_end = encoded["SQuAD-open-small"]
    real = np.concatenate([q_start, q_end]).astype(np.float32)
    truth = {
        "probe": auto.exact_top_rows(probes, stored, decode, max(RECALL_KS)),
        "question": auto.exact_top_rows(real, stored, decode, max(RECALL_KS)),
    }
    settings = {f"nprobe {n}": {**tuned, "nprobe": n} for n in sweep if n <= nlist}
    settings["exhaustive"] = {**tuned, "nprobe": nlist, "refine": 16}
    rows, tops = [], {}
    for name, params in settings.items():
        row: dict[str, Any] = {"search": name, "params": params, "tuned": params == tuned}
        for kind, queries in (("probe", probes), ("question", real)):
            row[kind] = _recalls(index, queries, truth[kind], params)
        use_search_params(index, params)
        for set_name, examples in sets.items():
            qs, qe = encoded[set_name]
            answers, answer_ms = _run(searcher, qs, qe, examples, "phrase", ANSWER_TOP_K)
            passages, passage_ms = _run(searcher, qs, qe, examples, "passage", 20)
            tops[(name, set_name)] = [a[0].text if a else "" for a in answers]
            row[set_name] = {
                **hit_scores(examples, answers, passages, 20),
                "answer_p50_ms": statistics.median(answer_ms),
                "passage_p50_ms": statistics.median(passage_ms),
            }
        rows.append(row)
        print(name, {k: v for k, v in row.items() if k not in ("params",)}, flush=True)
    use_search_params(index, tuned)
    for row in rows:
        for set_name in sets:
            mine, best = tops[(row["search"], set_name)], tops[("exhaustive", set_name)]
            row[set_name]["same_top_phrase"] = float(np.mean([a == b for a, b in zip(mine, best, strict=True)]))
    return {
        "machine": machine(),
        "model": model_name,
        "model_id": model_id(model_name),
        "index": path.name,
        "structure": index.faiss_factory,
        "tuned": tuned,
        "built": index.manifest.get("structure"),
        "vectors": len(index),
        "question_sets": {name: len(examples) for name, examples in sets.items()},
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    built = result.get("built") or {}
    lines = [
        f"`{result['model']}` on SQuAD-open-small ({result['index']}: {result['vectors']:,} vectors, "
        f"`{result['structure']}`, built with {result['tuned']} for {built.get('built_for', '?'):,} vectors), "
        f"{result['machine']['cpu']}. Recall: of the exact top-k tokens, for 256 probe queries (midpoints of stored "
        f"vectors, as the build-time rule uses) and for the {2 * result['question_sets']['SQuAD-open-small']} start "
        "and end vectors of the SQuAD-open-small questions. Same top: the top phrase equals exhaustive search's.",
        "",
        "| search | probe recall@20 / @64 / @256 | question recall@20 / @64 / @256 |",
        "|---|---:|---:|",
    ]
    for r in result["rows"]:
        cells = [
            " / ".join(f"{100 * r[kind][f'recall@{k}']:.1f}" for k in RECALL_KS) for kind in ("probe", "question")
        ]
        lines.append(f"| {r['search']}{' (built)' if r['tuned'] else ''} | {cells[0]} | {cells[1]} |")
    for set_name, n in result["question_sets"].items():
        lines += [
            "",
            f"{set_name} ({n:,} questions):",
            "",
            "| search | EM@1 | F1@1 | passage acc@1 | passage acc@20 | same top | answer p50 ms | passages p50 ms |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in result["rows"]:
            s = r[set_name]
            lines.append(
                f"| {r['search']} | {100 * s['em@1']:.1f} | {100 * s['f1@1']:.1f} | {100 * s['acc@1']:.1f} | "
                f"{100 * s['acc@20']:.1f} | {100 * s['same_top_phrase']:.1f}% | {s['answer_p50_ms']:.1f} | "
                f"{s['passage_p50_ms']:.1f} |"
            )
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()
    rows = result["rows"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3))
    names = [r["search"] for r in rows]
    for set_name in result["question_sets"]:
        left.plot(names, [100 * r[set_name]["em@1"] for r in rows], marker="o", label=f"EM@1 {set_name}")
    left.plot(
        names, [100 * r["probe"]["recall@20"] for r in rows], marker="s", ls=":", label="probe recall@20 (the rule)"
    )
    left.plot(names, [100 * r["question"]["recall@20"] for r in rows], marker="^", ls=":", label="question recall@20")
    left.set_ylabel("%")
    left.legend(fontsize=7)
    left.tick_params(axis="x", labelrotation=30, labelsize=7)
    right.bar(names, [r["SQuAD-open-small"]["answer_p50_ms"] for r in rows], color="#4c72b0")
    right.set_ylabel("phrase answer search, p50 ms")
    right.tick_params(axis="x", labelrotation=30, labelsize=7)
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--cache", type=Path, default=None, help="a SQuAD-open-small cache (default: the first found)")
    parser.add_argument("--nprobe", default="32,64,128,256,512", help="nprobe values to sweep, comma-separated")
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--validation", type=int, default=3000, help="validation questions (0: none)")
    args = parser.parse_args()
    sweep = [int(n) for n in args.nprobe.split(",") if n.strip()]
    finish_result(
        "auto_structure", measure(args.model, args.cache, sweep, args.questions, args.validation), markdown, plot
    )


if __name__ == "__main__":
    main()
