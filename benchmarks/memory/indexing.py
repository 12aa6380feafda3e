"""Peak memory (RSS) of the phrase dump and of `dphr index` against corpus size (bounded memory).

    .venv/bin/python -m benchmarks.memory.indexing                                  # MiniLM, 250-2000 paragraphs
    .venv/bin/python -m benchmarks.memory.indexing --model tiny --sizes 250 500     # quick check

Each measurement is a fresh subprocess on the first N SQuAD train (rebuilt) paragraphs, written as JSON lines.
Its peak RSS is the kernel's high-water mark of that process (``VmHWM`` in /proc/self/status, read as it
ends; ``ru_maxrss`` from ``os.wait4`` is recorded too, but Linux carries the forking parent's peak into it).
Modes:

* ``load``: imports and model load only (the fixed cost every other mode pays);
* ``dump``: ``dump_phrases`` into shards (``--shard-size`` passages each);
* ``index``: ``dphr index`` (its ``main``), committing every ``--shard-size`` passages;
* ``index_faiss_ram``: the library call ``PhraseIndex.create(model, path)`` + ``add_passages``, which also keeps
  the searchable in-RAM FAISS flat index up to date (N·d·4 bytes: grows with the corpus by design; before the
  fix, ``dphr index`` did this too although it never searches).

Bounded memory means the peak does not grow with N beyond what the output itself needs in RAM. Writes
benchmarks/results/memory.json and memory.png.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from benchmarks.common import (
    ROOT,
    SQUAD_TRAIN,
    machine,
    proc_memory,
    pyplot,
    save_figure,
    squad_passages,
    write_result,
)

MODES = ("load", "dump", "index", "index_faiss_ram")


def _trace_chunks(trace: list) -> None:
    """Record RSS and peak RSS after every encoded chunk (shard) of passages."""
    import dphr_haystack.encode.add as add_module
    import dphr_haystack.encode.dump as dump_module

    original = dump_module.encode_shard_stream
    done = [0]

    def traced(model, passages, *args, **kwargs):
        records, pieces = original(model, passages, *args, **kwargs)

        def counted():
            yield from pieces
            done[0] += len(passages)
            trace.append({"passages": done[0], **proc_memory()})

        return records, counted()

    dump_module.encode_shard_stream = add_module.encode_shard_stream = traced


def _child(mode: str, model_dir: str, corpus: str, out: str, batch_size: int, shard_size: int) -> None:
    """Runs inside the measured subprocess; prints a JSON report with its own peak RSS."""
    report: dict = {"mode": mode, "trace": []}
    _trace_chunks(report["trace"])
    if mode == "index":
        from dphr_haystack.cli import main as dphr

        code = dphr(
            [
                "index",
                "--model",
                model_dir,
                "--corpus",
                corpus,
                "--out",
                out,
                "--chunk-size",
                str(shard_size),
                "--batch-size",
                str(batch_size),
                "--device",
                "cpu",
                "--no-progress",
            ]
        )
        if code:
            raise SystemExit(code)
    else:
        from dphr_haystack import PhraseIndex, PhraseModel, dump_phrases
        from dphr_haystack.encode.add import add_passages

        model = PhraseModel.load(model_dir)
        if mode == "index_faiss_ram":
            index = PhraseIndex.create(model, path=out)
            add_passages(index, model, corpus, batch_size=batch_size, chunk_size=shard_size, progress=False)
            report.update(passages=index.num_passages, vectors=len(index))
        if mode == "dump":
            summary = dump_phrases(model, corpus, out, shard_size=shard_size, batch_size=batch_size, progress=False)
            report.update(passages=summary.passages, vectors=summary.vectors, shards=len(summary.shards))
    report["vm_hwm_mib"] = proc_memory()["VmHWM"]
    print(json.dumps(report))


def _measure(command: list[str], env: dict[str, str]) -> dict:
    """Run ``command``; its wall time and peak RSS in MiB (ru_maxrss of that child alone)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    stdout, stderr = process.stdout.read(), process.stderr.read()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{stderr[-3000:]}")
    report = json.loads(stdout.strip().splitlines()[-1])
    return {
        "peak_rss_mib": report.get("vm_hwm_mib", usage.ru_maxrss / 1024),
        "ru_maxrss_mib": usage.ru_maxrss / 1024,
        "seconds": seconds,
        "report": report,
    }


def _model_dir(kind: str, root: Path) -> Path:
    from dphr_haystack import PhraseModel, PhraseModelConfig

    out = root / f"model-{kind}"
    if kind == "minilm":
        model = PhraseModel.from_base("minilm")
    else:
        from dphr_haystack.testing import make_tiny_base

        passages, _ = squad_passages(SQUAD_TRAIN, limit=500)
        base = make_tiny_base(root / "tiny-base", [p["text"] for p in passages], hidden_size=64, layers=2)
        model = PhraseModel.from_base(base, PhraseModelConfig(max_passage_length=128, passage_stride=32))
    model.save(out)
    return out


def _markdown(result: dict) -> str:
    """Peak RSS per mode and corpus size, and its growth per 1,000 passages, for benchmarks/README.md."""
    modes = list(result["runs"])
    lines = [
        f"Model `{result['model']}`; corpus: {result['corpus']}; batch {result['batch_size']}, "
        f"{result['shard_size']} passages per shard/commit. Peak RSS (VmHWM) of a fresh process, MiB. "
        f"Total runtime {result['runtime_seconds'] / 60:.1f} min.",
        "",
        "| passages | " + " | ".join(modes) + " | stored vectors MiB |",
        "|---:|" + "---:|" * (len(modes) + 1),
    ]
    for i, size in enumerate(result["sizes"]):
        stored = next(
            (runs[i].get("vectors_mib") for runs in result["runs"].values() if "vectors_mib" in runs[i]), None
        )
        lines.append(
            f"| {size:,} | "
            + " | ".join(f"{result['runs'][m][i]['peak_rss_mib']:,.0f}" for m in modes)
            + f" | {'–' if stored is None else f'{stored:,.1f}'} |"
        )
    lines.append(
        "| growth MiB / 1,000 passages | "
        + " | ".join(f"{result['growth'][m]['mib_per_1000_passages']:+.1f}" for m in modes)
        + " | |"
    )
    drift = []
    for mode in modes:
        trace = result["runs"][mode][-1]["trace"]
        if len(trace) > 1:
            drift.append(f"{mode} {trace[0]['VmRSS']:,.0f} → {trace[-1]['VmRSS']:,.0f}")
    if drift:
        lines += [
            "",
            f"Resident memory (VmRSS) after the first and the last chunk of the {result['sizes'][-1]:,}-passage "
            f"runs, MiB: {'; '.join(drift)}. The peak of `dump` and `index` is the model load's.",
        ]
    return "\n".join(lines)


def _plot(result: dict, path: Path) -> None:
    plt = pyplot()

    fig, (ax, trace_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    sizes = result["sizes"]
    for n, (mode, runs) in enumerate(result["runs"].items()):
        color = f"C{n}"
        ax.plot(sizes, [r["peak_rss_mib"] for r in runs], marker="o", label=mode, color=color)
        largest = runs[-1]["trace"]
        if largest:
            trace_ax.plot(
                [t["passages"] for t in largest], [t["VmHWM"] for t in largest], marker=".", label=mode, color=color
            )
    ax.set_xlabel("corpus size (SQuAD paragraphs)")
    ax.set_ylabel("peak RSS (MiB)")
    ax.set_title(f"Peak memory vs corpus size ({result['model']} phrase model)")
    trace_ax.set_xlabel("passages encoded so far")
    trace_ax.set_ylabel("peak RSS so far (MiB)")
    trace_ax.set_title(f"Within the {sizes[-1]}-paragraph run, after each chunk")
    for axis in (ax, trace_ax):
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        axis.legend()
    save_figure(fig, path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["minilm", "tiny"], default="minilm")
    parser.add_argument("--sizes", type=int, nargs="+", default=[250, 500, 1000, 2000])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--shard-size", type=int, default=250, help="passages per dump shard and per index commit")
    parser.add_argument("--name", default="memory", help="results/<name>.json and .png")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.model_dir, args.corpus, args.out, args.batch_size, args.shard_size)
        return

    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="dphr-memory-"))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        model_dir = _model_dir(args.model, root)
        passages, _ = squad_passages(SQUAD_TRAIN, limit=max(args.sizes))
        runs: dict[str, list[dict]] = {mode: [] for mode in args.modes}
        for size in args.sizes:
            corpus = root / f"corpus-{size}.jsonl"
            corpus.write_text("".join(json.dumps(p) + "\n" for p in passages[:size]), encoding="utf-8")
            for mode in args.modes:
                out = root / f"{mode}-{size}"
                command = [
                    sys.executable,
                    __file__,
                    "--child",
                    mode,
                    "--model-dir",
                    str(model_dir),
                    "--corpus",
                    str(corpus),
                    "--out",
                    str(out),
                    "--batch-size",
                    str(args.batch_size),
                    "--shard-size",
                    str(args.shard_size),
                ]
                measured = _measure(command, env)
                run = {
                    "passages": size,
                    "peak_rss_mib": round(measured["peak_rss_mib"], 1),
                    "ru_maxrss_mib": round(measured["ru_maxrss_mib"], 1),
                    "seconds": round(measured["seconds"], 1),
                }
                if mode.startswith("index"):
                    manifest = json.loads((out / "manifest.json").read_text())
                    run["vectors"] = manifest["counts"]["vectors"]
                    run["vectors_mib"] = round((out / "vectors.bin").stat().st_size / 2**20, 1)
                elif mode == "dump":
                    run["vectors"] = measured["report"]["vectors"]
                run["trace"] = measured["report"]["trace"]
                runs[mode].append(run)
                print(
                    f"{mode:>5} {size:>5} passages: peak RSS {run['peak_rss_mib']:7.1f} MiB, {run['seconds']:6.1f} s",
                    flush=True,
                )
                shutil.rmtree(out, ignore_errors=True)
        growth = {}
        for mode, mode_runs in runs.items():
            first, last = mode_runs[0], mode_runs[-1]
            span = (last["passages"] - first["passages"]) / 1000
            growth[mode] = {
                "mib_per_1000_passages": round((last["peak_rss_mib"] - first["peak_rss_mib"]) / span, 1)
                if span
                else 0.0,
                "ratio_last_to_first": round(last["peak_rss_mib"] / first["peak_rss_mib"], 3),
            }
        result = {
            "command": " ".join(["benchmarks/memory/indexing.py", *sys.argv[1:]]),
            "machine": machine(),
            "model": args.model,
            "sizes": args.sizes,
            "batch_size": args.batch_size,
            "shard_size": args.shard_size,
            "corpus": f"first N paragraphs of {SQUAD_TRAIN.name} as JSON lines",
            "runs": runs,
            "growth": growth,
            "runtime_seconds": round(time.perf_counter() - started, 1),
        }
        result["markdown"] = _markdown(result)
        path = write_result(args.name, result)
        _plot(result, path.with_suffix(".png"))
        print(json.dumps(growth, indent=1))
        print(f"wrote {path} and {path.with_suffix('.png')} in {result['runtime_seconds']:.0f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
