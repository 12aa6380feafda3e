"""Index types on SQuAD-open-small: size, build time, latency and accuracy of each FAISS structure.

    .venv/bin/python -m benchmarks.index.index_types                       # the cached SQuAD-open-small index
    .venv/bin/python -m benchmarks.index.index_types --corpus dev          # fallback: dev-public paragraphs only
    .venv/bin/python -m benchmarks.index.index_types --corpus dev --max-passages 200 --questions 50 --name x  # smoke

Source: the flat phrase index of SQuAD-open-small that ``quality/squad_open_small.py`` builds and caches
(``benchmarks/cache/squad-open-small/phrases``, the untrained MiniLM phrase model ``minilm``); with
``--corpus dev``, a flat index of the dev-public paragraphs built here (cached under
``benchmarks/cache/index-types-dev``). Every other type is built from the flat index's stored vectors with
``PhraseIndex.reindex(factory, path=...)`` (no re-encoding), written to disk, loaded back like a user would,
and evaluated on the same dev-public questions (``--questions``, fixed seed, the held-out validation articles
of ``quality.squad_open_small`` excluded) with ``evaluation.evaluate_searcher`` (top-20). Span scoring always uses
the exact stored vectors, so differences come from which start/end tokens each structure finds.

Columns: bytes of the FAISS structure on disk (+ ``.ivfdata``), bytes of ``vectors.bin`` (the same for all),
train/add seconds, single-question search latency p50/p95 over precomputed query vectors (unit=passage, top-20,
1 thread), passage accuracy@1/5/20 and phrase EM@1, and their ratio to Flat. nlist = ``default_nlist(n)`` capped
at ``--max-nlist``; nprobe and HNSW efSearch are the ``index_types`` defaults unless given.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import ROOT, SQUAD_DEV, finish_result, machine, percentiles, pyplot, save_figure, write_result
from dphr_haystack.encode.add import add_passages
from dphr_haystack.index import structures as it
from dphr_haystack.index.phrase_index import MANIFEST, PhraseIndex

CACHE = ROOT / "benchmarks" / "cache"
SQUAD_OPEN_SMALL = CACHE / "squad-open-small" / "phrases"
KINDS = ("flat", "ivf-flat", "ivf-sq8", "ivf-sq8-ondisk", "ivf-sq4", "opq-ivf-pq", "hnsw")
METRICS = ("passage_acc@1", "passage_acc@5", "passage_acc@20", "phrase_em@1")


def dev_index(model, max_passages: int | None) -> Path:
    """A flat phrase index of the dev-public paragraphs (cached; resumable)."""
    from benchmarks.common import squad_passages

    out = CACHE / ("index-types-dev" + (f"-{max_passages}" if max_passages else "")) / "flat"
    passages, _ = squad_passages(SQUAD_DEV, max_passages)
    if (out / MANIFEST).is_file():
        index = PhraseIndex.load(out, model=model)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        index = PhraseIndex.create(model, path=out, model_path="minilm")
    add_passages(index, model, passages, batch_size=32, chunk_size=256, duplicates="skip", progress=True)
    return out


def structure_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.name.startswith("faiss-"))


def search_latency(index: PhraseIndex, model, q_start: np.ndarray, q_end: np.ndarray) -> dict:
    """Single-question passage search (top-20) on precomputed query vectors, one thread."""
    import faiss
    import torch

    from dphr_haystack.search import PhraseSearcher

    searcher = PhraseSearcher(index, model)
    threads = faiss.omp_get_max_threads(), torch.get_num_threads()
    faiss.omp_set_num_threads(1)
    torch.set_num_threads(1)
    searcher.search_vectors(q_start[:1], q_end[:1], unit="passage", top_k=20)  # warm-up
    times = []
    for i in range(len(q_start)):
        t0 = time.perf_counter()
        searcher.search_vectors(q_start[i : i + 1], q_end[i : i + 1], unit="passage", top_k=20)
        times.append((time.perf_counter() - t0) * 1000)
    faiss.omp_set_num_threads(threads[0])
    torch.set_num_threads(threads[1])
    return percentiles(times)


def evaluate(index: PhraseIndex, model, examples, q_start, q_end, latency_questions: int) -> dict:
    from dphr_haystack.evaluation import evaluate_searcher
    from dphr_haystack.search import PhraseSearcher

    report = evaluate_searcher(PhraseSearcher(index, model), examples, top_k=20, progress=False)
    return {
        **{k: report.summary[k] for k in (*METRICS, "mrr@20", "ms_per_question")},
        "search": search_latency(index, model, q_start[:latency_questions], q_end[:latency_questions]),
    }


def markdown(result: dict) -> str:
    rows = result["rows"]
    flat = next((r for r in rows if r["kind"] == "flat"), None)
    lines = [
        f"Corpus: {result['corpus']} ({result['passages']:,} passages, {result['vectors']:,} phrase vectors of d="
        f"{result['dim']}, float16 `vectors.bin` = {result['vectors_bytes'] / 1e6:,.0f} MB for every type); "
        f"{result['questions']} dev-public questions; model `{result['model']}` (untrained MiniLM phrase model). "
        f"Latency: one question, passage unit, top-20, precomputed query vectors, 1 thread, "
        f"{result['latency_questions']} questions. nlist {result['nlist']}; nprobe = nlist/16; '+refineR': "
        f"R·k candidates re-ranked by exact stored-vector scores. Ratios are to Flat. "
        f"Total runtime {result['seconds'] / 60:.1f} min.",
        "",
        "| type | factory | FAISS on disk MB | train vectors | train+add s | p50 ms | p95 ms | acc@1 | acc@5 | "
        "acc@20 | EM@1 | acc@20 / Flat | EM@1 / Flat |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def rel(row: dict, key: str) -> str:
        return f"{row[key] / flat[key]:.3f}" if flat and flat[key] else "-"

    for r in rows:
        lines.append(
            f"| {r['kind']} | `{r['factory']}` | {r['structure_bytes'] / 1e6:,.1f} | {r['train_vectors']:,} | "
            f"{r['build_s']:.0f} | {r['search']['p50_ms']:.1f} | {r['search']['p95_ms']:.1f} | "
            f"{100 * r['passage_acc@1']:.1f} | {100 * r['passage_acc@5']:.1f} | {100 * r['passage_acc@20']:.1f} | "
            f"{100 * r['phrase_em@1']:.1f} | {rel(r, 'passage_acc@20')} | {rel(r, 'phrase_em@1')} |"
        )
    if result.get("skipped"):
        lines += ["", "Skipped: " + "; ".join(result["skipped"])]
    lines += [
        "",
        "Flat keeps no FAISS file: it is rebuilt in RAM from `vectors.bin` on load "
        f"({4 * result['dim']} bytes per vector as float32).",
    ]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    plt = pyplot()

    rows = result["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    bases = [r["kind"] for r in rows if "+refine" not in r["kind"]]
    for r in rows:
        base = r["kind"].split(" +")[0]
        color = colors[bases.index(base) % len(colors)]
        refined = "+refine" in r["kind"]
        size = max(r["structure_bytes"], 4 * result["dim"] * result["vectors"] if r["kind"] == "flat" else 0) / 1e6
        acc = 100 * r["passage_acc@20"]
        for ax, x in ((axes[0], size), (axes[1], r["search"]["p50_ms"])):
            ax.scatter(
                x, acc, s=55, color=color, marker="^" if refined else "o", label=r["kind"] if ax is axes[1] else None
            )
    axes[1].legend(fontsize=7, loc="lower right")
    axes[0].set(
        xscale="log",
        xlabel="FAISS structure MB (flat: float32 in RAM)",
        ylabel="passage acc@20 (%)",
        title="Size vs accuracy",
    )
    axes[1].set(
        xscale="log",
        xlabel="search p50 ms / question (1 thread)",
        ylabel="passage acc@20 (%)",
        title="Latency vs accuracy",
    )
    for ax in axes:
        ax.grid(alpha=0.3)
    m = result["machine"]
    fig.suptitle(
        f"Index types on {result['corpus']} ({result['vectors']:,} vectors) · {m['cpu']} ({m['cores']} cores)",
        fontsize=9,
    )
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", choices=["squad-open-small", "dev"], default="squad-open-small")
    parser.add_argument("--max-passages", type=int, default=None, help="with --corpus dev: the first N (smoke)")
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--latency-questions", type=int, default=100, help="single-question timings (default 100)")
    parser.add_argument(
        "--refine",
        type=int,
        default=4,
        help="also evaluate SQ/PQ types with search_params refine=R (exact re-ranking); 0: off",
    )
    parser.add_argument("--types", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--max-nlist", type=int, default=2048)
    parser.add_argument("--nprobe", type=int, default=None, help="default: index_types (nlist/16, at most 256)")
    parser.add_argument("--pq-max-train", type=int, default=20000)
    parser.add_argument(
        "--hnsw-max-vectors",
        type=int,
        default=1_500_000,
        help="skip HNSW above this (its build runs ~1k vectors/s on 2 shared cores)",
    )
    parser.add_argument("--workdir", type=Path, default=CACHE / "index-types-work")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="index_types")
    args = parser.parse_args()
    started = time.perf_counter()

    from benchmarks.common import validation_titles
    from dphr_haystack.evaluation import read_questions
    from dphr_haystack.model.phrase_model import PhraseModel

    model = PhraseModel.from_base("minilm")
    if args.corpus == "squad-open-small":
        source = SQUAD_OPEN_SMALL
        if not (source / MANIFEST).is_file():
            raise SystemExit(
                f"{source} is not built yet: run benchmarks/quality/squad_open_small.py --build-only "
                "(or use --corpus dev)"
            )
    else:
        source = dev_index(model, args.max_passages)
    flat = PhraseIndex.load(source, model=model, flat_search="mmap")
    n = len(flat)
    examples = read_questions(SQUAD_DEV, limit=args.questions, seed=args.seed, exclude_titles=validation_titles())
    q_start, q_end = model.encode_queries([ex.question for ex in examples])
    nlist = min(it.default_nlist(n), args.max_nlist)
    result = {
        "machine": machine(),
        "command": " ".join(sys.argv),
        "corpus": args.corpus if not args.max_passages else f"dev-public first {args.max_passages}",
        "source_index": str(source),
        "model": "minilm",
        "passages": flat.num_passages,
        "vectors": n,
        "dim": flat.dim,
        "vectors_bytes": (source / "vectors.bin").stat().st_size,
        "questions": len(examples),
        "nlist": nlist,
        "latency_questions": min(args.latency_questions, len(examples)),
        "rows": [],
        "skipped": [],
        "load_average_start": os.getloadavg(),
    }
    print(f"source {source}: {flat.num_passages} passages, {n} vectors; {len(examples)} questions; nlist {nlist}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    for kind in args.types:
        if kind == "hnsw" and n > args.hnsw_max_vectors:
            result["skipped"].append(f"hnsw ({n:,} vectors > --hnsw-max-vectors {args.hnsw_max_vectors:,})")
            continue
        t0 = time.perf_counter()
        if kind == "flat":
            index = PhraseIndex.load(source, model=model)  # the FAISS flat is rebuilt in RAM from vectors.bin
            factory, build = "Flat", {"train_vectors": 0, "seconds": time.perf_counter() - t0}
            structure = 0
        else:
            factory = it.factory_for("ivf-sq8" if kind == "ivf-sq8-ondisk" else kind, n, flat.dim, nlist=nlist)
            target = args.workdir / kind
            shutil.rmtree(target, ignore_errors=True)
            params = {"nprobe": args.nprobe} if args.nprobe and "IVF" in factory else None
            flat.reindex(
                factory,
                path=target,
                on_disk=kind.endswith("ondisk"),
                search_params=params,
                pq_max_train=args.pq_max_train,
            )
            index = PhraseIndex.load(target, model=model)
            build = index.manifest["faiss_build"]
            structure = structure_bytes(target)
        variants = [(kind, None)]
        if args.refine > 1 and ("SQ" in factory or "PQ" in factory):
            variants.append((f"{kind} +refine{args.refine}", args.refine))
        for name, refine in variants:
            if refine:
                index.set_search_params(refine=refine)
            row = {
                "kind": name,
                "factory": factory,
                "train_vectors": build["train_vectors"],
                "build_s": build["seconds"],
                "structure_bytes": structure,
                "search_params": index.search_params,
            }
            row.update(evaluate(index, model, examples, q_start, q_end, args.latency_questions))
            result["rows"].append(row)
            print(
                f"{name:22s} {factory:24s} {structure / 1e6:9.1f} MB build {row['build_s']:7.1f}s p50 "
                f"{row['search']['p50_ms']:7.1f} ms acc@20 {row['passage_acc@20']:.3f} EM@1 "
                f"{row['phrase_em@1']:.3f}",
                flush=True,
            )
        del index
        if kind != "flat":
            shutil.rmtree(args.workdir / kind, ignore_errors=True)
        result["seconds"] = time.perf_counter() - started
        write_result(args.name, {**result, "markdown": markdown(result)})
    shutil.rmtree(args.workdir, ignore_errors=True)
    result["seconds"] = time.perf_counter() - started
    finish_result(args.name, result, markdown, plot)


if __name__ == "__main__":
    main()
