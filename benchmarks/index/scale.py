"""Scaling curve: token-search latency, memory and recall against the number of stored vectors.

    .venv/bin/python -m benchmarks.index.scale                                   # 10^4 … 10^7, d=384 (~30-40 min)
    .venv/bin/python -m benchmarks.index.scale --sizes 10000 100000 --name scale-quick   # ~3 min

Vectors are synthetic phrase-like vectors (d=384, float16 as ``vectors.bin`` stores them): a mixture of 4,096
Gaussian clusters (centres N(0, I), per-cluster noise scale 0.25-0.6), so IVF/PQ see cluster structure; real
phrase vectors differ, so recall here shows trends, and the SQuAD table (``index/index_types.py``) gives
accuracy on real vectors. Queries come from the same mixture; each "question" searches 2 vectors (its start
and end queries, as PhraseSearcher does) for k=20 neighbours (2·top_k candidates for a top-10 passage search).

Per size and index type: the build (training sample per ``dphr_haystack.index.structures``, train and add
seconds), then a **fresh subprocess** loads the structure the way ``PhraseIndex.load`` does and measures
single-question latency with one thread (p50/p95 over ``--questions`` questions, fewer at 10^7; one thread
per request, as a server would run, and immune to OpenMP barrier stalls on a shared machine), batched
throughput with all threads, and
memory from ``/proc/self/status``: ``RssAnon`` (heap: what must fit in RAM) and ``RssFile`` (memory-mapped
file pages: evictable page cache). Recall@20 is against exact search. Types:

* ``flat``: FAISS IndexFlatIP in RAM, rebuilt from the vectors on load (float32: 4·d bytes per vector) — up
  to 10^6 (10^7 would need 15.4 GB of RAM here).
* ``flat-mmap``: exact torch matmul top-k straight over the memory-mapped float16 vectors (no structure).
* ``ivf-flat``, ``ivf-sq8``, ``ivf-sq4``, ``opq-ivf-pq`` (``OPQ48,IVF…,PQ48np``), ``hnsw`` (``HNSW32,Flat``).
* ``ivf-sq8-ondisk``: the ivf-sq8 lists moved to an ``OnDiskInvertedLists`` file and memory-mapped.
* ``auto``: what ``faiss_factory="auto"`` builds at that size (``dphr_haystack.index.auto``): exact search over the
  float16 codes up to 32,768 vectors, ``IVF…,SQ8`` up to 2^21, ``OPQ96,IVF…,PQ96np`` (96 bytes a vector) above,
  each IVF structure re-ranking ``refine``·k candidates exactly from the memory-mapped stored vectors (4 for SQ8,
  8 for PQ); nlist capped and nprobe fixed as for the other types (a store tunes its nprobe on probe queries).

nlist = ``index_types.default_nlist(n)`` capped at ``--max-nlist`` (1024) to keep 10^7 builds to minutes on 2
cores; nprobe = ``--nprobe`` (64); HNSW efSearch 128. A structure is trained once per factory string and the
trained (empty) copy reused for larger sizes with the same factory (the usual train-on-a-sample practice;
sizes ≥ 10^5 share nlist 1024); OPQ/PQ codebooks train on at most ``--pq-max-train`` (20,000) points. Per-type
size limits keep the run in tens of minutes (HNSW ≤ 10^5: its build runs ~1k vectors/s here). Results:
``results/<name>.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import (
    RESULTS,
    ROOT,
    finish_result,
    machine,
    percentiles,
    proc_memory,
    pyplot,
    save_figure,
    write_result,
)
from dphr_haystack.index import auto
from dphr_haystack.index import structures as it
from dphr_haystack.index.backends import TorchFlatSearch
from dphr_haystack.index.codec import VectorCodec

TYPES = {  # name: largest size measured by default
    "flat": 10**6,
    "flat-mmap": 10**7,
    "ivf-flat": 10**6,
    "ivf-sq8": 10**7,
    "ivf-sq8-ondisk": 10**7,
    "ivf-sq4": 10**6,
    "opq-ivf-pq": 10**7,
    "hnsw": 10**5,
    "auto": 10**7,
}
CLUSTERS = 4096
K = 20
CODEC = VectorCodec("float16")


# ----------------------------------------------------------------------------- data
def _mixture(dim: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(CLUSTERS, dim)).astype(np.float32)
    scales = rng.uniform(0.25, 0.6, size=CLUSTERS).astype(np.float32)
    return centers, scales


def make_vectors(path: Path, n: int, dim: int, chunk: int = 1 << 19) -> np.memmap:
    """Synthetic float16 vectors, written once in chunks (deterministic per chunk) and memory-mapped."""
    from tqdm import tqdm

    done = path.with_suffix(".done")
    if done.is_file() and json.loads(done.read_text()) == {"n": n, "dim": dim}:
        return np.memmap(path, dtype=np.float16, mode="r", shape=(n, dim))
    centers, scales = _mixture(dim)
    out = np.memmap(path, dtype=np.float16, mode="w+", shape=(n, dim))
    for start in tqdm(range(0, n, chunk), desc="synthetic vectors", unit="chunk"):
        rng = np.random.default_rng([11, start])
        rows = min(chunk, n - start)
        cluster = rng.integers(0, CLUSTERS, rows)
        noise = rng.standard_normal((rows, dim), dtype=np.float32)
        out[start : start + rows] = (centers[cluster] + scales[cluster, None] * noise).astype(np.float16)
    out.flush()
    del out
    done.write_text(json.dumps({"n": n, "dim": dim}))
    return np.memmap(path, dtype=np.float16, mode="r", shape=(n, dim))


def make_queries(questions: int, dim: int) -> np.ndarray:
    """2 query vectors per question (start, end), from the same mixture."""
    centers, scales = _mixture(dim)
    rng = np.random.default_rng(99)
    cluster = rng.integers(0, CLUSTERS, 2 * questions)
    return (centers[cluster] + scales[cluster, None] * rng.standard_normal((2 * questions, dim))).astype(np.float32)


# ----------------------------------------------------------------------------- memory of this process
# ----------------------------------------------------------------------------- build (main process)
def build(
    kind: str,
    vectors: np.ndarray,
    out_dir: Path,
    max_nlist: int,
    nprobe: int,
    pq_max_train: int,
    trained: dict[str, tuple[bytes, float, int, int]],
) -> dict:
    """Train (or reuse a trained copy) + add one FAISS type from the stored vectors; write it to out_dir."""
    import faiss

    n, dim = vectors.shape
    out_dir.mkdir(parents=True, exist_ok=True)
    if kind in ("flat", "flat-mmap"):
        return {"factory": "Flat", "train_vectors": 0, "train_s": 0.0, "add_s": 0.0, "index_file": None}
    if kind == "auto" and auto.auto_factory(n, dim) == "Flat":
        index = it.make_exact_index(dim, CODEC)
        t0 = time.perf_counter()
        it.add_exact(index, CODEC, vectors)
        facts = {"factory": "Flat", "train_vectors": 0, "train_s": 0.0, "add_s": time.perf_counter() - t0}
        return _write(index, out_dir, {**facts, "search_params": {}})
    source = out_dir.parent / f"ivf-sq8-{n}"
    if kind == "ivf-sq8-ondisk" and (source / "facts.json").is_file():
        # The ivf-sq8 structure just built, its lists moved to an on-disk file: read it memory-mapped, merge.
        facts = json.loads((source / "facts.json").read_text())
        index = faiss.read_index(str(source / "faiss.index"), faiss.IO_FLAG_MMAP)
        t0 = time.perf_counter()
        it.move_lists_to_disk(index, out_dir / "lists.ivfdata")
        facts.update(
            to_disk_s=time.perf_counter() - t0,
            ivfdata_bytes=(out_dir / "lists.ivfdata").stat().st_size,
            built_from="ivf-sq8 (lists moved to disk)",
        )
        return _write(index, out_dir, facts)
    base_kind = "ivf-sq8" if kind == "ivf-sq8-ondisk" else kind
    nlist = min(it.default_nlist(n), max_nlist)
    if kind == "auto":
        factory = re.sub(r"IVF\d+", f"IVF{nlist}", auto.auto_factory(n, dim))
    else:
        factory = it.factory_for(base_kind, n, dim, nlist=nlist)
    if factory in trained:
        blob, train_s, trained_on, trained_at = trained[factory]
        index = faiss.deserialize_index(np.frombuffer(blob, dtype=np.uint8))
    else:
        index = it.make_faiss_index(dim, factory, pq_max_train=pq_max_train)
        t0 = time.perf_counter()
        trained_on = it.train_faiss(index, factory, vectors, CODEC.decode)
        train_s, trained_at = time.perf_counter() - t0, n
        trained[factory] = (faiss.serialize_index(index).tobytes(), train_s, trained_on, n)
    t0 = time.perf_counter()
    it.add_in_chunks(index, vectors, CODEC.decode, progress=n >= 10**6)
    add_s = time.perf_counter() - t0
    params = it.default_search_params(index)
    if "nprobe" in params:
        params["nprobe"] = min(nprobe, nlist)
    if kind == "auto":
        params["refine"] = auto.auto_refine(factory)
    facts = {
        "factory": factory,
        "nlist": nlist if it.ivf_of(index) is not None else None,
        "train_vectors": trained_on,
        "train_s": train_s,
        "trained_at_size": trained_at,
        "add_s": add_s,
        "search_params": params,
    }
    if kind == "ivf-sq8-ondisk":
        t0 = time.perf_counter()
        it.move_lists_to_disk(index, out_dir / "lists.ivfdata")
        facts["to_disk_s"] = time.perf_counter() - t0
        facts["ivfdata_bytes"] = (out_dir / "lists.ivfdata").stat().st_size
    return _write(index, out_dir, facts)


def _write(index, out_dir: Path, facts: dict) -> dict:
    import faiss

    file = out_dir / "faiss.index"
    faiss.write_index(index, str(file))
    facts["index_file"] = str(file)
    facts["structure_bytes"] = file.stat().st_size + facts.get("ivfdata_bytes", 0)
    (out_dir / "facts.json").write_text(json.dumps(facts))
    del index
    gc.collect()
    return facts


# ----------------------------------------------------------------------------- measure (fresh subprocess)
def measure(spec: dict) -> dict:
    """Load the structure like PhraseIndex.load does, then time searches and read this process's memory."""
    import faiss
    import torch

    before = proc_memory()
    n, dim = spec["n"], spec["dim"]
    vectors = np.memmap(spec["vectors"], dtype=np.float16, mode="r", shape=(spec["total"], dim))[:n]
    queries = np.load(spec["queries"])
    t0 = time.perf_counter()
    if spec["kind"] == "flat":
        index = faiss.IndexFlatIP(dim)
        it.add_in_chunks(index, vectors, CODEC.decode)  # PhraseIndex.load rebuilds a flat index from vectors.bin
        search = index.search
    elif spec["kind"] == "flat-mmap":
        search = TorchFlatSearch(lambda: vectors, CODEC, "cpu").search
    else:
        index = it.read_faiss(Path(spec["index_file"]), ondisk=spec["kind"].endswith("ondisk"))
        params = dict(spec["search_params"])
        refine = int(params.pop("refine", 1))
        it.apply_search_params(index, params)
        search = index.search if refine <= 1 else _refined(index.search, refine, vectors)
    load_s = time.perf_counter() - t0
    questions = len(queries) // 2
    single_n = min(spec["single"], questions)
    threads = faiss.omp_get_max_threads(), torch.get_num_threads()
    faiss.omp_set_num_threads(1)
    torch.set_num_threads(1)
    search(queries[:2], K)  # warm-up
    single = []
    for i in range(single_n):
        t0 = time.perf_counter()
        search(queries[2 * i : 2 * i + 2], K)
        single.append((time.perf_counter() - t0) * 1000)
    faiss.omp_set_num_threads(threads[0])
    torch.set_num_threads(threads[1])
    t0 = time.perf_counter()
    _, ids = search(queries, K)
    batch_s = time.perf_counter() - t0
    np.save(spec["ids_out"], ids)
    after = proc_memory()
    return {
        "load_s": load_s,
        "questions_single": single_n,
        **percentiles(single),
        "batched_questions_per_s": questions / batch_s,
        "batch_questions": questions,
        "rss_anon_mib": after["RssAnon"] - before["RssAnon"],
        "rss_file_mib": after["RssFile"] - before["RssFile"],
        "peak_rss_mib": after["VmHWM"],
        "single_threads": 1,
        "batch_threads": threads[0],
    }


def _refined(search, refine: int, vectors: np.ndarray):
    """``search`` fetching ``refine``·k candidates, re-ranked exactly from the stored vectors, as a store does."""

    def refined(queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        _, ids = search(queries, k * refine)
        return it.refine_exact(queries, ids, k, vectors, CODEC.decode)

    return refined


def run_measure(spec: dict, timeout: int) -> dict:
    cmd = [sys.executable, __file__, "--measure", json.dumps(spec)]
    # the child runs this file as a script: it finds the benchmarks package through PYTHONPATH
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"measure {spec['kind']} n={spec['n']} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def exact_ids(vectors: np.ndarray, queries: np.ndarray) -> np.ndarray:
    return TorchFlatSearch(lambda: vectors, CODEC, "cpu").search(queries, K)[1]


def recall(ids: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(a[a >= 0]) & set(b)) / K for a, b in zip(ids, truth)]))


# ----------------------------------------------------------------------------- report
def plot(result: dict, path: Path) -> None:
    plt = pyplot()

    rows = result["rows"]
    kinds = [k for k in TYPES if any(r["kind"] == k for r in rows)]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    for kind in kinds:
        mine = sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["n"])
        ns = [r["n"] for r in mine]
        style = "--" if kind.startswith("flat") else "-"
        axes[0].plot(ns, [r["p50_ms"] for r in mine], style, marker="o", label=kind)
        axes[1].plot(ns, [max(r["rss_anon_mib"], 0.1) for r in mine], style, marker="o", label=kind)
        axes[2].plot(ns, [r["recall_at_20"] for r in mine], style, marker="o", label=kind)
    axes[0].set(
        xscale="log",
        yscale="log",
        xlabel="stored vectors",
        ylabel="ms per question (p50, 2 query vectors)",
        title="Token-search latency (single question)",
    )
    axes[1].set(
        xscale="log",
        yscale="log",
        xlabel="stored vectors",
        ylabel="MiB (RssAnon after load + search)",
        title="Resident heap memory of the search process",
    )
    axes[2].set(
        xscale="log",
        xlabel="stored vectors",
        ylabel="recall@20 vs exact",
        title="Recall of the top-20 tokens",
        ylim=(0, 1.02),
    )
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    m = result["machine"]
    fig.suptitle(
        f"dphr scaling, synthetic d={result['dim']} float16 vectors · {m['cpu']} ({m['cores']} cores)", fontsize=9
    )
    save_figure(fig, path)


def markdown(result: dict) -> str:
    lines = [
        f"Synthetic d={result['dim']} float16 vectors (mixture of {CLUSTERS} clusters); k={K} neighbours for 2 query "
        f"vectors per question; nlist = min(default, {result['max_nlist']}), nprobe {result['nprobe']}, HNSW "
        f"efSearch 128. Single-question latency on 1 thread; batched on all. Memory: RssAnon / RssFile growth of a "
        f"fresh process after loading and searching. Training is shared between sizes with the same factory "
        f"('trained at'). Load average at start {result['load_average_start'][0]:.1f} (a shared machine: "
        f"latencies are noisy). Total runtime {result['seconds'] / 60:.1f} min"
        + "".join(
            f"; rows of {', '.join(u['types'])} re-measured by `{u['command']}`" for u in result.get("updates", [])
        )
        + ".",
        "",
        "| type | vectors | factory | structure MB | train vecs (at n) | train s | add s | load s | p50 ms | p95 ms | "
        "batched q/s | RssAnon MiB | RssFile MiB | recall@20 |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(result["rows"], key=lambda r: (list(TYPES).index(r["kind"]), r["n"])):
        trained = f"{r['train_vectors']} ({r['trained_at_size']:.0e})" if r.get("train_vectors") else "-"
        lines.append(
            f"| {r['kind']} | {r['n']:.0e} | `{r['factory']}` | {r.get('structure_bytes', 0) / 1e6:.1f} | "
            f"{trained} | {r['train_s']:.1f} | {r['add_s'] + r.get('to_disk_s', 0.0):.1f} | {r['load_s']:.1f} | "
            f"{r['p50_ms']:.2f} | {r['p95_ms']:.2f} | "
            f"{r['batched_questions_per_s']:.1f} | {r['rss_anon_mib']:.0f} | {r['rss_file_mib']:.0f} | "
            f"{r['recall_at_20']:.3f} |"
        )
    if result.get("skipped"):
        lines += ["", "Skipped: " + "; ".join(result["skipped"])]
    lines += [
        "",
        f"Stored vectors (`vectors.bin`, float16) are {2 * result['dim']} bytes per vector for every type "
        "(span scoring reads them); 'structure MB' is the FAISS file (+ .ivfdata for on-disk lists). Recall "
        "is against exact top-20 on synthetic vectors whose within-cluster noise is isotropic in all d "
        "dimensions, the worst case for PQ/SQ4 codes as clusters fill up; `index/index_types.py` measures "
        "accuracy on real phrase vectors.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=float, nargs="+", default=[1e4, 1e5, 1e6, 1e7])
    parser.add_argument("--types", nargs="+", default=list(TYPES), choices=list(TYPES))
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--questions", type=int, default=200, help="questions (2 vectors each) up to 10^5 vectors")
    parser.add_argument("--max-nlist", type=int, default=1024)
    parser.add_argument("--nprobe", type=int, default=64)
    parser.add_argument("--pq-max-train", type=int, default=20000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/dphr-bench-scale"))
    parser.add_argument("--keep", action="store_true", help="keep the synthetic vectors and built indexes")
    parser.add_argument("--name", default="scale")
    parser.add_argument(
        "--update",
        action="store_true",
        help="re-measure only --types and replace their rows in an existing results/<name>.json",
    )
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(json.loads(args.measure))))
        return

    started = time.perf_counter()
    sizes = sorted(int(s) for s in args.sizes)
    args.workdir.mkdir(parents=True, exist_ok=True)
    free_disk = shutil.disk_usage(args.workdir).free
    need = sizes[-1] * args.dim * 2
    if need * 1.6 > free_disk:
        raise SystemExit(
            f"{args.workdir}: {need / 1e9:.1f} GB of vectors (+ indexes) but {free_disk / 1e9:.1f} GB free"
        )
    vectors_file = args.workdir / f"vectors-d{args.dim}.f16"
    all_vectors = make_vectors(vectors_file, sizes[-1], args.dim)
    result = {
        "machine": machine(),
        "command": " ".join(sys.argv),
        "dim": args.dim,
        "k": K,
        "max_nlist": args.max_nlist,
        "nprobe": args.nprobe,
        "pq_max_train": args.pq_max_train,
        "sizes": sizes,
        "rows": [],
        "skipped": [],
        "load_average_start": os.getloadavg(),
    }
    previous = RESULTS / f"{args.name}.json"
    if args.update and previous.is_file():
        result = json.loads(previous.read_text())
        result["rows"] = [r for r in result["rows"] if r["kind"] not in args.types]
        result["skipped"] = [s for s in result["skipped"] if s.split(" ")[0] not in args.types]
        result.setdefault("updates", []).append(
            {
                "command": " ".join(sys.argv),
                "types": args.types,
                "machine": machine(),
                "load_average_start": os.getloadavg(),
            }
        )
        base_seconds = result["seconds"]
    else:
        base_seconds = 0.0
    trained: dict[str, tuple[bytes, float, int, int]] = {}
    for n in sizes:
        questions = args.questions if n <= 10**5 else (args.questions // 2 if n <= 10**6 else 20)
        queries = make_queries(questions, args.dim)
        queries_file = args.workdir / f"queries-{n}.npy"
        np.save(queries_file, queries)
        vectors = all_vectors[:n]
        t0 = time.perf_counter()
        truth = exact_ids(vectors, queries)
        print(
            f"n={n:.0e}: exact ground truth for {questions} questions in {time.perf_counter() - t0:.1f}s", flush=True
        )
        for kind in args.types:
            if not args.keep:  # the previous type's files (ivf-sq8's stay until its on-disk variant is built)
                for old in [p for p in args.workdir.iterdir() if p.is_dir()]:
                    if old.name != f"ivf-sq8-{n}" or kind != "ivf-sq8-ondisk":
                        shutil.rmtree(old, ignore_errors=True)
            if n > TYPES[kind]:
                result["skipped"].append(f"{kind} at {n:.0e} (limit {TYPES[kind]:.0e})")
                continue
            out_dir = args.workdir / f"{kind}-{n}"
            shutil.rmtree(out_dir, ignore_errors=True)
            facts = build(kind, vectors, out_dir, args.max_nlist, args.nprobe, args.pq_max_train, trained)
            single = 5 if kind == "flat-mmap" and n >= 10**7 else questions
            spec = {
                "kind": kind,
                "n": n,
                "total": sizes[-1],
                "dim": args.dim,
                "vectors": str(vectors_file),
                "queries": str(queries_file),
                "index_file": facts["index_file"],
                "search_params": facts.get("search_params", {}),
                "single": single,
                "ids_out": str(out_dir / "ids.npy"),
            }
            measured = run_measure(spec, timeout=3600)
            row = {
                "kind": kind,
                "n": n,
                **facts,
                **measured,
                "recall_at_20": recall(np.load(out_dir / "ids.npy"), truth),
            }
            result["rows"].append(row)
            print(
                f"  {kind:15s} {facts['factory']:22s} build {facts['train_s'] + facts['add_s']:7.1f}s "
                f"p50 {row['p50_ms']:9.2f} ms  anon {row['rss_anon_mib']:8.0f} MiB  "
                f"file {row['rss_file_mib']:7.0f} MiB "
                f"recall@20 {row['recall_at_20']:.3f}",
                flush=True,
            )
            result["seconds"] = base_seconds + time.perf_counter() - started
            write_result(args.name, {**result, "markdown": markdown(result)})  # partial results survive a crash
    if not args.keep:
        shutil.rmtree(args.workdir, ignore_errors=True)
    result["seconds"] = base_seconds + time.perf_counter() - started
    finish_result(args.name, result, markdown, plot)


if __name__ == "__main__":
    main()
