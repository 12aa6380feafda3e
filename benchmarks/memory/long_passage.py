"""Peak memory (RSS) of indexing ONE long passage against its length: 10 KB, 250 KB, 1 MB of text.

    .venv/bin/python -m benchmarks.memory.long_passage                       # shipped model (MiniLM)
    .venv/bin/python -m benchmarks.memory.long_passage --model tiny --sizes-kb 10 250

A passage longer than the model's window is cut into overlapping windows; each measurement is a fresh subprocess
that indexes a one-passage JSON-lines corpus (SQuAD train paragraphs joined until the passage has N bytes of UTF-8
text) and reports its own peak RSS (``VmHWM`` of /proc/self/status as it ends, as in ``memory/indexing.py``). Modes:

* ``load``: imports and model load only (the fixed cost every other mode pays);
* ``index``: ``dphr index`` (its ``main``) with the default token filter of the model;
* ``dump``: ``dump_phrases`` into one shard.

Bounded memory means the peak of a 1 MB passage stays within 10% of a 10 KB one's: the windows of a long passage
are encoded, filtered, quantized and written a batch at a time. For reference, the largest size's text is also
indexed as the ordinary SQuAD paragraphs it was joined from (one passage each): what a corpus of that much text
costs when its passages are short, every encoder batch full (a 10 KB passage fills 11 of the 32 windows of a batch).
Writes benchmarks/results/long_passage_memory.json and .png.
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
    DEFAULT_MODEL,
    ROOT,
    SQUAD_TRAIN,
    machine,
    proc_memory,
    pyplot,
    save_figure,
    squad_passages,
    write_result,
)

MODES = ("load", "index", "dump")


def _child(mode: str, model: str, corpus: str, out: str, batch_size: int) -> None:
    """Runs inside the measured subprocess; prints a JSON report with its own peak RSS."""
    report: dict = {"mode": mode}
    started = time.perf_counter()
    if mode == "index":
        from dphr_haystack.cli import main as dphr

        argv = ["index", "--model", model, "--corpus", corpus, "--out", out, "--batch-size", str(batch_size)]
        code = dphr([*argv, "--device", "cpu", "--no-progress"])
        if code:
            raise SystemExit(code)
        manifest = json.loads((Path(out) / "manifest.json").read_text())
        report["vectors"] = manifest["counts"]["vectors"]
    else:
        from dphr_haystack.model.loading import load_model

        loaded = load_model(model)
        if mode == "dump":
            from dphr_haystack import dump_phrases

            summary = dump_phrases(loaded, corpus, out, batch_size=batch_size, progress=False)
            report["vectors"] = summary.vectors
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["vm_hwm_mib"] = proc_memory()["VmHWM"]
    print(json.dumps(report))


def _measure(command: list[str], env: dict[str, str]) -> dict:
    process = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{process.stderr[-3000:]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


def long_text(size_bytes: int) -> str:
    """SQuAD train paragraphs joined by blank lines until ``size_bytes`` bytes of UTF-8 text (cut at a character)."""
    data = "\n\n".join(p["text"] for p in paragraphs(size_bytes)).encode("utf-8")[:size_bytes]
    return data.decode("utf-8", errors="ignore")


def paragraphs(size_bytes: int) -> list[dict]:
    """The first SQuAD train paragraphs (as passages) holding at least ``size_bytes`` bytes of text."""
    passages, _ = squad_passages(SQUAD_TRAIN, limit=max(50, size_bytes // 400))
    out, total = [], 0
    for passage in passages:
        out.append(passage)
        total += len(passage["text"].encode("utf-8")) + 2
        if total >= size_bytes:
            break
    return out


def _model(kind: str, root: Path) -> str:
    if kind != "tiny":
        return kind
    from dphr_haystack import PhraseModel, PhraseModelConfig
    from dphr_haystack.testing import make_tiny_base

    passages, _ = squad_passages(SQUAD_TRAIN, limit=500)
    base = make_tiny_base(root / "tiny-base", [p["text"] for p in passages], hidden_size=64, layers=2)
    out = root / "model-tiny"
    PhraseModel.from_base(base, PhraseModelConfig(max_passage_length=128, passage_stride=32)).save(out)
    return str(out)


def _markdown(result: dict) -> str:
    modes = list(result["runs"])
    lines = [
        f"Model `{result['model']}`, batch {result['batch_size']}; one passage of N KB of SQuAD train text. Peak RSS "
        "(VmHWM) of a fresh process, MiB; the last column compares the largest passage's peak with the smallest's.",
        "",
        "| mode | " + " | ".join(f"{kb:,} KB" for kb in result["sizes_kb"]) + " | largest / smallest |",
        "|---|" + "---:|" * (len(result["sizes_kb"]) + 1),
    ]
    for mode in modes:
        runs = result["runs"][mode]
        lines.append(
            f"| {mode} | "
            + " | ".join(f"{r['peak_rss_mib']:,.0f}" for r in runs)
            + f" | {runs[-1]['peak_rss_mib'] / runs[0]['peak_rss_mib']:.3f} |"
        )
    seconds = {m: [r["seconds"] for r in runs] for m, runs in result["runs"].items() if m != "load"}
    lines += [
        "",
        "Seconds per run: " + "; ".join(f"{m} " + " / ".join(f"{s:.0f}" for s in v) for m, v in seconds.items()) + ".",
    ]
    reference = result.get("reference")
    if reference:
        lines += [
            "",
            f"Reference: the same {result['sizes_kb'][-1]:,} KB of text as the {reference['passages']:,} SQuAD "
            "paragraphs it was joined from (one passage each, every batch full): peak RSS "
            + ", ".join(f"{mode} {run['peak_rss_mib']:,.0f} MiB" for mode, run in reference["runs"].items())
            + ".",
        ]
    return "\n".join(lines)


def _plot(result: dict, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for n, (mode, runs) in enumerate(result["runs"].items()):
        ax.plot(result["sizes_kb"], [r["peak_rss_mib"] for r in runs], marker="o", label=mode, color=f"C{n}")
        reference = (result.get("reference") or {}).get("runs", {}).get(mode)
        if reference:
            ax.axhline(
                reference["peak_rss_mib"], color=f"C{n}", linestyle="--", linewidth=1, label=f"{mode}, as paragraphs"
            )
    ax.set_xscale("log")
    ax.set_xlabel("passage length (KB of text, log scale)")
    ax.set_ylabel("peak RSS (MiB)")
    ax.set_title(f"One long passage ({result['model']})")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="a shipped model name, tiny, or a directory")
    parser.add_argument("--sizes-kb", type=int, nargs="+", default=[10, 250, 1000])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--no-reference", action="store_true", help="skip the same text as short paragraphs")
    parser.add_argument("--name", default="long_passage_memory", help="results/<name>.json and .png")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.model_dir, args.corpus, args.out, args.batch_size)
        return

    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="dphr-long-passage-"))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        model = _model(args.model, root)
        runs: dict[str, list[dict]] = {mode: [] for mode in args.modes}
        for kb in args.sizes_kb:
            text = long_text(kb * 1000)
            corpus = root / f"corpus-{kb}kb.jsonl"
            corpus.write_text(json.dumps({"id": "long", "title": "Long", "text": text}) + "\n", encoding="utf-8")
            for mode in args.modes:
                out = root / f"{mode}-{kb}"
                command = [sys.executable, __file__, "--child", mode, "--model-dir", model, "--corpus", str(corpus)]
                report = _measure([*command, "--out", str(out), "--batch-size", str(args.batch_size)], env)
                run = {
                    "kb": kb,
                    "chars": len(text),
                    "peak_rss_mib": report["vm_hwm_mib"],
                    "seconds": report["seconds"],
                    "vectors": report.get("vectors"),
                }
                runs[mode].append(run)
                print(
                    f"{mode:>5} {kb:>5} KB: peak RSS {run['peak_rss_mib']:7.1f} MiB, {run['seconds']:6.1f} s",
                    flush=True,
                )
                shutil.rmtree(out, ignore_errors=True)
        reference = None
        if not args.no_reference:
            split = paragraphs(args.sizes_kb[-1] * 1000)
            corpus = root / "corpus-paragraphs.jsonl"
            corpus.write_text("".join(json.dumps(p) + "\n" for p in split), encoding="utf-8")
            reference = {"passages": len(split), "runs": {}}
            for mode in [m for m in args.modes if m != "load"]:
                out = root / f"{mode}-paragraphs"
                command = [sys.executable, __file__, "--child", mode, "--model-dir", model, "--corpus", str(corpus)]
                report = _measure([*command, "--out", str(out), "--batch-size", str(args.batch_size)], env)
                reference["runs"][mode] = {
                    "peak_rss_mib": report["vm_hwm_mib"],
                    "seconds": report["seconds"],
                    "vectors": report.get("vectors"),
                }
                print(f"{mode:>5} {len(split)} paragraphs: peak RSS {report['vm_hwm_mib']:7.1f} MiB", flush=True)
                shutil.rmtree(out, ignore_errors=True)
        result = {
            "command": " ".join(["benchmarks/memory/long_passage.py", *sys.argv[1:]]),
            "machine": machine(),
            "model": args.model,
            "sizes_kb": args.sizes_kb,
            "batch_size": args.batch_size,
            "runs": runs,
            "ratio_largest_to_smallest": {
                mode: round(r[-1]["peak_rss_mib"] / r[0]["peak_rss_mib"], 3) for mode, r in runs.items()
            },
            "reference": reference,
            "runtime_seconds": round(time.perf_counter() - started, 1),
        }
        result["markdown"] = _markdown(result)
        path = write_result(args.name, result)
        _plot(result, path.with_suffix(".png"))
        print(result["markdown"])
        print(f"wrote {path} and {path.with_suffix('.png')} in {result['runtime_seconds']:.0f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
