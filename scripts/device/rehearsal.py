"""Rehearse the device kit on this CPU, end to end, with a tiny random BERT and a small data subset.

Simulated: the stage carries (each call's working tree + stage checked against the call limit, stages arriving
one call at a time on a "device" side that is a copy of the working tree), the short check calls (the first with
its smoke run), a training call made before the last stage arrived (it must fail naming that stage), the training
call stopped by its time budget after its first step, the next call resuming it to the end, ``$OUT`` (a fresh
folder per call, checked against the real limits and against limits scaled to the tiny model, so that the shards
split and an optional file is left out), and ``restore.py`` on both calls' files, whose vectors must match the
device's own model. The device side runs in subprocesses (``--device-python``, e.g. a transformers 5 venv like
the GPU machine's) from the tree copy, exactly as the call commands run there, or in this process (tests).

Usage: ``bash scripts/device/rehearse.sh`` (see there), or
``python scripts/device/rehearsal.py --work DIR [--device-python PY] [--squad FILE] [--base-kind mpnet]
[--adapters RANK]`` (``--adapters``: the rc stage trains low-rank adapters of that rank, heads and filter only, so
the call brings back the adapters and leaves the encoders' own weights to this machine's base).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: the repository root is what the imports below need
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.device import pack, restore  # noqa: E402
from scripts.device.kit import (  # noqa: E402
    DEVICE_DIR,
    MIB,
    REPO_ROOT,
    OutLimits,
    out_problems,
    read_json,
    stage_dirs,
    tree_bytes,
    tree_files,
)

NAME = "rehearsal"
RECIPE = "train/configs/gpu_windows.yaml"
TREE_DEV_FILE = "dphr_haystack/shipped_datasets/squad-dev/dev-v1.1-public.json.gz"  # travels: packed "from tree"
STEPS = 8
TINY_SETS = (
    "model.config={max_passage_length: 64, passage_stride: 16, max_query_length: 24, query_layout: shared}",
    f"rc.train.max_steps={STEPS}",
    "rc.train.batch_size=4",
    "rc.train.lr=0.001",
    "rc.train.log_every=1",
    "rc.train.save_every=100",
    "torch_threads=1",
)
# $OUT limits scaled to the tiny model: its ~140 KB of trained tensors split into shards, and with them the
# files outnumber the 8 allowed, so the least needed one (curves.png) is left out, as a too large export would be.
SCALED = {"shard_mib": 0.1, "out_file_mib": 0.12, "out_total_mib": 1.0}
STAGES = 3  # the simulated call limit leaves room for about a third of the tiny pack: 3 stages, weights cut
MANIFEST_ROOM = 12 * 1024  # each stage's copy of the manifest
MARGIN_MIB = 0.05


@dataclass
class Sim:
    """One rehearsal: the CPU side's ``.device``, the simulated device machine, and what was seen."""

    work: Path
    device_root: Path
    device_python: str | None = None
    log: list[dict[str, Any]] = field(default_factory=list)

    @property
    def cpu_device_dir(self) -> Path:
        return self.work / "cpu" / DEVICE_DIR

    @property
    def device_dir(self) -> Path:
        return self.device_root / DEVICE_DIR

    def device(self, argv: list[str], out: Path | None = None) -> tuple[int, str]:
        """Run ``run.py argv`` on the simulated device: a fresh ``$OUT``; returns (exit status, output)."""
        if out is not None:
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
        if self.device_python is not None:
            env = {**os.environ, "PYTHONPATH": ".", "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": ""}
            if out is not None:
                env["OUT"] = str(out)
            done = subprocess.run(
                [self.device_python, "scripts/device/run.py", *argv],
                cwd=self.device_root,
                env=env,
                capture_output=True,
                text=True,
            )
            return done.returncode, done.stdout + done.stderr
        from scripts.device import run

        argv = [*argv, "--device-dir", str(self.device_dir)]
        if out is not None:
            argv += ["--out", str(out)]
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            code = run.main(argv)
        return code, buffer.getvalue()

    def carry(self, stage: Path) -> int:
        """Copy one stage folder to the device side, as a call's ``carry`` does; returns the call's bytes."""
        shutil.copytree(stage, self.device_dir / stage.name)
        return tree_bytes() + sum(p.stat().st_size for p in stage.rglob("*") if p.is_file())


def make_inputs(work: Path, squad: Path | None = None, paragraphs: int = 40, kind: str = "bert") -> dict[str, Path]:
    """A small SQuAD-format training file (the first ``paragraphs`` of ``squad``, else the built-in sample) and a
    tiny random base built from its words (what ``smoke.yaml`` builds; ``kind="mpnet"``: shaped like
    all-mpnet-base-v2); the dev file is the tree's own."""
    from dphr_haystack.testing import make_tiny_base
    from train.data import builtin_squad

    cpu = work / "cpu"
    cpu.mkdir(parents=True, exist_ok=True)
    if squad is not None:
        with gzip.open(squad, "rt", encoding="utf-8") as handle:
            articles, kept = [], 0
            for article in json.load(handle)["data"]:
                take = article["paragraphs"][: paragraphs - kept]
                articles.append({**article, "paragraphs": take})
                kept += len(take)
                if kept >= paragraphs:
                    break
        data = {"version": "subset", "data": articles}
    else:
        data = builtin_squad()
    train = cpu / "train-subset.json.gz"
    with gzip.open(train, "wt", encoding="utf-8") as handle:
        json.dump(data, handle)
    texts = [p["context"] for a in data["data"] for p in a["paragraphs"]]
    texts += [q["question"] for a in data["data"] for p in a["paragraphs"] for q in p["qas"]]
    texts += [a["title"] for a in data["data"]]
    base = make_tiny_base(cpu / "base", texts, hidden_size=32, layers=2, heads=4, max_words=3000, kind=kind)
    return {"train": train, "dev": REPO_ROOT / TREE_DEV_FILE, "base": base}


def stage_capacity(inputs: dict[str, Path], stages: int = STAGES) -> int:
    """A stage capacity that cuts the tiny pack into about ``stages`` stages (the weights travel as float16)."""
    base = inputs["base"]
    payload = sum(p.stat().st_size for p in base.iterdir() if p.is_file() and p.name != "model.safetensors")
    payload += (base / "model.safetensors").stat().st_size // 2 + inputs["train"].stat().st_size
    return payload // stages + MANIFEST_ROOM


def copy_tree(target: Path) -> None:
    """The working tree as a call sends it (tracked and untracked files git does not ignore)."""
    for path in tree_files():
        if path.is_file() and not path.is_symlink():
            dest = target / path.relative_to(REPO_ROOT)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _steps_after_stop(metrics: Path) -> tuple[int, list[int]]:
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    stop = next(i for i, r in enumerate(records) if "stopped" in r)
    return records[stop]["step"], [r["step"] for r in records[stop + 1 :] if "loss" in r]


def rehearse(
    work: Path,
    device_python: str | None = None,
    squad: Path | None = None,
    smoke: bool = True,
    base_kind: str = "bert",
    adapters: int = 0,
) -> dict[str, Any]:
    """The whole sequence; raises AssertionError naming the first thing that went wrong, else returns a report."""
    started = time.monotonic()
    shutil.rmtree(work, ignore_errors=True)
    inputs = make_inputs(work, squad, kind=base_kind)
    root = work / "device" if device_python else REPO_ROOT
    if device_python:
        copy_tree(root)
    sim = Sim(work, root if device_python else work / "device-side", device_python)
    tree = tree_bytes()
    limit = tree + stage_capacity(inputs) + int(MARGIN_MIB * MIB)
    code = pack.main(
        [
            "--device-dir",
            str(sim.cpu_device_dir),
            "--base",
            str(inputs["base"]),
            "--train",
            str(inputs["train"]),
            "--dev",
            str(inputs["dev"]),
            "--call-limit-mib",
            str(limit / MIB),
            "--margin-mib",
            str(MARGIN_MIB),
            "--recipe",
            RECIPE,
            "--name",
            NAME,
        ]  # fmt: skip
    )
    _expect(code == 0, "pack.py failed")
    manifest = read_json(sim.cpu_device_dir / "manifest.json")
    stages = stage_dirs(sim.cpu_device_dir)
    weights = next(f for f in manifest["files"] if f["path"] == "base/model.safetensors")
    _expect(len(stages) >= 3, f"the tiny pack made {len(stages)} stages, expected >= 3")
    _expect(len({p["stage"] for p in weights["pieces"]}) >= 2, "the base weights were not cut across stages")
    _expect(any("from_tree" in f for f in manifest["files"]), "the tree's dev file was packed again")
    recipe = RECIPE if device_python else str(REPO_ROOT / RECIPE)  # in this process the cwd may be anywhere
    train_cmd = ["train", "--recipe", recipe, "--name", NAME, "--budget-seconds", "300"]
    train_cmd += [x for item in tiny_sets(adapters) for x in ("--set", item)]
    train_cmd += [x for key, value in SCALED.items() for x in (f"--{key.replace('_', '-')}", str(value))]
    scaled = OutLimits(
        shard_mib=SCALED["shard_mib"],
        max_file_bytes=int(SCALED["out_file_mib"] * MIB),
        max_total_bytes=int(SCALED["out_total_mib"] * MIB),
    )
    report: dict[str, Any] = {"stages": [s["bytes"] for s in manifest["stages"]], "tree_bytes": tree}
    for number, stage in enumerate(stages, 1):
        if number == len(stages):  # not a real call: training before the last stage has arrived must name it
            code, text = sim.device(train_cmd, work / "out-lacking")
            _expect(code == 2 and stage.name in text, f"a call without {stage.name} did not name it:\n{text}")
            report["missing_stage_message"] = text.strip().splitlines()[-1]
        size = sim.carry(stage)
        _expect(size <= limit - int(MARGIN_MIB * MIB) + 1, f"call {number} carries {size} bytes > the limit")
        if number < len(stages):
            code, text = sim.device(["check", *(["--smoke"] if number == 1 and smoke else [])])
            sim.log.append({"call": number, "carry": stage.name, "bytes": size, "exit": code})
            _expect(code == 0, f"check call {number} failed:\n{text}")
    outs = []
    for number, extra in ((len(stages), ["--train-minutes", "0.0001"]), (len(stages) + 1, [])):
        out = work / f"out-call{number}"
        code, text = sim.device(train_cmd + extra, out)
        summary = read_json(out / "summary.json") if (out / "summary.json").is_file() else {}
        sim.log.append({"call": number, "exit": code, "status": summary.get("status"), "out": sorted(os.listdir(out))})
        want = 3 if extra else 0
        _expect(code == want, f"training call {number} exited {code}, expected {want}:\n{text}")
        for limits in (OutLimits(), scaled):
            problems = out_problems(out, limits)
            _expect(not problems, f"call {number}'s $OUT breaks {limits}: {problems}")
        outs.append((out, summary))
    (first, first_summary), (second, second_summary) = outs
    _expect(first_summary["exported"] == "rc/checkpoint-1", f"call 1 exported {first_summary['exported']}")
    _expect(second_summary["exported"] == "rc/best", f"call 2 exported {second_summary['exported']}")
    _expect(len(second_summary["calls"]) == 2, "the second call does not list the first")
    trained_with = second_summary["stages"]["rc"].get("train_args") or {}
    _expect(trained_with.get("batch_size") == 4, f"summary.json lacks the rc stage's train_args: {trained_with}")
    left_out = [item["name"] for item in second_summary["export"]["left_out"]]
    # the full tiny model's export fills the scaled $OUT and leaves curves.png out; the adapters' leaves room
    _expect(left_out == ([] if adapters else ["curves.png"]), f"left out: {left_out}")
    stop, after = _steps_after_stop(sim.device_dir / "runs" / NAME / "rc" / "metrics.jsonl")
    _expect(after == list(range(stop + 1, STEPS + 1)), f"resume after step {stop} logged steps {after}")
    device_model = sim.device_dir / "runs" / NAME / "rc" / "final"
    report["restore"] = restore.restore(second, work / "restored", str(inputs["base"]), reference=device_model)
    report["restore_partial"] = restore.restore(first, work / "restored-partial", str(inputs["base"]))
    report.update(
        {
            "calls": sim.log,
            "exported": [first_summary["exported"], second_summary["exported"]],
            "left_out": second_summary["export"]["left_out"],
            "out_files": {p.name: p.stat().st_size for p in sorted(second.iterdir())},
            "resumed_after_step": stop,
            "device_seconds": [first_summary["seconds"], second_summary["seconds"]],
            "seconds": round(time.monotonic() - started, 1),
        }
    )
    return report


def tiny_sets(adapters: int = 0) -> tuple[str, ...]:
    """The recipe overrides of the tiny run; with ``adapters`` its model carries low-rank adapters of that rank and
    the rc stage trains them (``trainable=adapters``)."""
    if not adapters:
        return TINY_SETS
    model = TINY_SETS[0].rstrip("}") + f", adapters: {{rank: {adapters}, alpha: {2 * adapters}}}}}"
    return (model, *TINY_SETS[1:], "rc.train.trainable=adapters")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="scratch folder (replaced)")
    parser.add_argument("--device-python", help="run the device side in subprocesses with this interpreter")
    parser.add_argument("--squad", help="SQuAD .json.gz to take the training subset from (default: built-in)")
    parser.add_argument("--no-smoke", action="store_true")
    parser.add_argument(
        "--base-kind", choices=("bert", "mpnet"), default="bert", help="the tiny base's family (default bert)"
    )
    parser.add_argument("--adapters", type=int, default=0, help="train low-rank adapters of this rank (default: none)")
    args = parser.parse_args(argv)
    squad = Path(args.squad) if args.squad else None
    report = rehearse(
        Path(args.work), args.device_python, squad, not args.no_smoke, base_kind=args.base_kind, adapters=args.adapters
    )
    print(json.dumps(report, indent=1, default=str))
    print("rehearsal passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
