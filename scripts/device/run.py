"""The device machine's side of a training run: assemble the stages, train within a wall-clock budget, export.

Usage (on the device machine, from the repository root; ``pack.py`` prints the exact calls)::

    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 scripts/device/run.py check [--smoke]
    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 scripts/device/run.py train --recipe train/configs/gpu_windows.yaml \\
        --name gpu-windows --budget-seconds 550

``check`` prints the machine (GPU, versions, disk) and which stages have arrived; ``--smoke`` also trains a tiny
model on the built-in sample through the same path (a stop on the time budget, a resume, the export).

``train``:

1. assembles the stages (:mod:`assemble`), failing with the missing stages named;
2. runs the recipe's stages with ``model.base``, ``data.train`` and ``data.dev`` pointed at ``.device/assembled``
   and ``output_dir`` at ``.device/runs/<name>`` (kept while the machine stays warm), each training stage with
   ``train.max_minutes`` set to what is left of ``--budget-seconds`` after the load and export reserves: a stage
   that runs out writes a checkpoint, and the same command resumes from it;
3. exports the last trained model (``best``/``final``, or the latest checkpoint when stopped) into ``$OUT``
   (:mod:`export`) with ``summary.json``: status, steps, wall times of this call and the earlier ones, the export.

Exit status: 0 complete; 3 stopped by the time budget (a checkpoint exported; run again to resume); 2 pieces
missing; 4 ``$OUT`` limits; 1 failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

if __package__ in (None, ""):  # run as a file: the repository root is what the imports below need
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.device.assemble import assemble, status  # noqa: E402
from scripts.device.export import ExportLimitError, export_model  # noqa: E402
from scripts.device.kit import (  # noqa: E402
    DEVICE_DIR,
    MIB,
    KitError,
    MissingPiecesError,
    OutLimits,
    fmt_mib,
    out_problems,
    read_json,
    write_json,
)

TRAINING_STAGES = ("reader", "rc", "hn", "filter", "qsft")
STATE = "kit_state.json"
EXIT = {"complete": 0, "failed": 1, "missing": 2, "stopped": 3, "limits": 4}


def device_info() -> dict[str, Any]:
    """Python, torch, transformers, numpy, the GPU (name, bf16), whether FAISS is importable, CPUs."""
    import importlib.util
    import platform

    import numpy
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": numpy.__version__,
        "cuda": cuda,
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "bf16": bool(cuda and torch.cuda.is_bf16_supported()),
        "faiss": importlib.util.find_spec("faiss") is not None,
        "cpus": os.cpu_count(),
    }


def faiss_stages(recipe: Any) -> list[str]:
    """The recipe's stages that build a phrase index (FAISS): not runnable on a machine without it."""
    found = []
    for stage in recipe.stages:
        if stage in ("mine", "qsft", "validate") or (stage == "filter" and recipe.filter.thresholds):
            found.append(stage)
        elif stage in ("rc", "hn") and getattr(recipe, stage).select_on:
            found.append(f"{stage} (select_on: {getattr(recipe, stage).select_on})")
    return found


def last_record(metrics: Path) -> dict[str, Any]:
    """The last line of a ``metrics.jsonl`` with a step (empty when there is none yet)."""
    if not metrics.is_file():
        return {}
    for line in reversed(metrics.read_text(encoding="utf-8").splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "step" in record:
            return record
    return {}


class Heartbeat(threading.Thread):
    """Prints the elapsed time and the current stage's last logged step every ``every`` seconds."""

    def __init__(self, run_dir: Path, started: float, every: float = 60.0) -> None:
        super().__init__(daemon=True)
        self.run_dir, self.started, self.every = run_dir, started, every
        self.stage: str | None = None
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.every):
            if self.stage is None:
                continue
            record = last_record(self.run_dir / self.stage / "metrics.jsonl")
            shown = {k: round(v, 4) for k, v in record.items() if k in ("step", "loss", "samples_per_s")}
            print(f"[{time.monotonic() - self.started:6.0f} s] {self.stage} {shown}", flush=True)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def latest_checkpoint(stage_dir: Path) -> Path | None:
    done = [p for p in stage_dir.glob("checkpoint-*") if (p / "model").is_dir() and p.name.split("-")[1].isdigit()]
    return max(done, key=lambda p: int(p.name.split("-")[1])) / "model" if done else None


def model_to_export(run_dir: Path, recipe: Any, stages: dict[str, Any]) -> tuple[Path | None, str]:
    """The model a CPU should get: the stopped stage's latest checkpoint, else the last trained stage's best/final."""
    for stage, record in stages.items():
        if record["status"] in ("stopped", "failed"):
            checkpoint = latest_checkpoint(run_dir / stage)
            if checkpoint is not None:
                return checkpoint, f"{stage}/{checkpoint.parent.name}"
            break
    for stage in reversed([s for s in recipe.stages if s in TRAINING_STAGES]):
        for name in ("best", "final"):
            if (run_dir / stage / name / "dphr_config.json").is_file():
                return run_dir / stage / name, f"{stage}/{name}"
    return None, "none"


def train_stages(recipe: Any, run_dir: Path, args: argparse.Namespace, deadline: float, beat: Heartbeat) -> dict:
    """Run the recipe's stages not completed by an earlier call, each within what is left of the budget."""
    from train.recipes import Context, run_stage
    from train.trainer import TimeBudgetReached

    state_file = run_dir / STATE
    state = read_json(state_file) if state_file.is_file() else {"calls": [], "complete": []}
    records: dict[str, Any] = {}
    ctx = Context(recipe)
    for stage in recipe.stages:
        if stage in state["complete"]:
            records[stage] = {"status": "complete", "seconds": 0.0, "note": "completed by an earlier call"}
            continue
        if stage in TRAINING_STAGES:
            left = deadline - time.monotonic() - args.load_reserve - args.export_reserve
            if left < 1.0:
                records[stage] = {"status": "stopped", "seconds": 0.0, "note": "not started: no time left"}
                break
            if args.train_minutes is not None:
                left = min(left, 60 * args.train_minutes)
            section = getattr(recipe, stage)
            section.train["max_minutes"] = left / 60
            section.train["progress"] = bool(args.progress)
        beat.stage = stage
        started = time.monotonic()
        try:
            result = run_stage(recipe, stage, ctx)
        except TimeBudgetReached as exc:
            records[stage] = {"status": "stopped", "seconds": time.monotonic() - started, "note": str(exc)}
            break
        except Exception as exc:  # reported in summary.json; the latest checkpoint still comes back
            traceback.print_exc()
            records[stage] = {"status": "failed", "seconds": time.monotonic() - started, "note": repr(exc)}
            break
        records[stage] = {"status": "complete", "seconds": time.monotonic() - started, "result": _jsonable(result)}
        state["complete"].append(stage)
        write_json(state_file, state)
    for stage, record in records.items():
        record["max_minutes"] = getattr(recipe, stage).train.get("max_minutes") if stage in TRAINING_STAGES else None
        record["last_logged"] = last_record(run_dir / stage / "metrics.jsonl")
        args_file = run_dir / stage / "train_args.json"  # the stage's trainer arguments travel in summary.json
        record["train_args"] = read_json(args_file) if args_file.is_file() else None
    return records


def run_train(args: argparse.Namespace) -> int:
    """The ``train`` command (see the module docstring)."""
    started = time.monotonic()
    deadline = started + args.budget_seconds
    out_dir = Path(args.out or os.environ.get("OUT") or "")
    if not str(out_dir) or str(out_dir) == ".":
        print("run: no $OUT (pass --out DIR)", file=sys.stderr)
        return EXIT["failed"]
    device_dir = Path(args.device_dir)
    run_dir = (device_dir / "runs" / args.name).resolve()
    limits = OutLimits(
        shard_mib=args.shard_mib,
        max_file_bytes=int(args.out_file_mib * MIB),
        max_total_bytes=int(args.out_total_mib * MIB),
    )
    summary: dict[str, Any] = {"name": args.name, "recipe": args.recipe, "sets": args.set, "status": "failed"}
    seconds: dict[str, Any] = {}
    try:
        assembled = assemble(device_dir)
    except MissingPiecesError as exc:
        print(f"run: {exc}", file=sys.stderr)
        return EXIT["missing"]
    seconds["assemble"] = assembled["seconds"]
    print(
        f"assembled {len(assembled['files'])} files ({'checked' if assembled['reused'] else 'joined'}) "
        f"in {assembled['seconds']:.1f} s",
        flush=True,
    )
    from train.curves import plot_curves
    from train.recipes import load_recipe

    overrides: dict[str, Any] = {
        "model.base": assembled["base"],
        **{f"data.{role}": path for role, path in assembled["data"].items()},
        "output_dir": str(run_dir),
    }
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise KitError(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key] = yaml.safe_load(value)
    recipe = load_recipe(args.recipe, overrides)
    info = device_info()
    blocked = [] if info["faiss"] else faiss_stages(recipe)
    if blocked:
        raise KitError(
            f"stages {blocked} build phrase indexes, and FAISS is not installed here: list only the "
            "others (--set 'stages=[rc]', select_on: null); validate on the CPU afterwards"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    state_file = run_dir / STATE
    calls = (read_json(state_file) if state_file.is_file() else {}).get("calls", [])
    beat = Heartbeat(run_dir, started)
    beat.start()
    try:
        stages = train_stages(recipe, run_dir, args, deadline, beat)
    finally:
        beat.done.set()
    seconds["stages"] = {stage: r["seconds"] for stage, r in stages.items()}
    outcome = "complete" if stages and all(r["status"] == "complete" for r in stages.values()) else "stopped"
    if any(r["status"] == "failed" for r in stages.values()):
        outcome = "failed"
    model_dir, exported = model_to_export(run_dir, recipe, stages)
    export_started = time.monotonic()
    report: dict[str, Any] = {"left_out": [], "files": {}}
    code = EXIT[outcome]
    if model_dir is not None:
        last = next(reversed(stages))
        work = run_dir / "export"
        plot = plot_curves(run_dir / last / "metrics.jsonl", run_dir / f"{last}-curves.png")
        extras = {"metrics.jsonl": run_dir / last / "metrics.jsonl"}
        if plot is not None:
            extras["curves.png"] = Path(plot)
        try:
            report = export_model(model_dir, work, out_dir, extras, limits)
        except ExportLimitError as exc:
            print(f"run: {exc}", file=sys.stderr)
            report["error"] = str(exc)
            code = EXIT["limits"]
        except Exception as exc:  # still write summary.json: it says what happened
            traceback.print_exc()
            report["error"] = repr(exc)
            code = EXIT["failed"]
    seconds["export"] = time.monotonic() - export_started
    seconds["total"] = time.monotonic() - started
    this_call = {"call": len(calls) + 1, "status": outcome, "exported": exported, "seconds": seconds}
    calls.append(this_call)
    state = read_json(state_file) if state_file.is_file() else {"complete": []}
    write_json(state_file, {**state, "calls": calls})
    summary.update(
        {
            "status": outcome,
            "exported": exported,
            "stages": stages,
            "seconds": seconds,
            "budget": {
                "budget_seconds": args.budget_seconds,
                "load_reserve": args.load_reserve,
                "export_reserve": args.export_reserve,
                "train_minutes": args.train_minutes,
            },
            "calls": calls,
            "device": info,
            "pack": {k: assembled[k] for k in ("pack_id", "base_source", "base_weights", "files")},
            "export": report,
        }
    )
    write_json(out_dir / "summary.json", summary)
    problems = out_problems(out_dir, limits)
    print(
        f"{outcome}: exported {exported}; {len(report['files'])} files + summary.json, "
        f"{fmt_mib(sum(f['bytes'] for f in report['files'].values()))}; left out "
        f"{[item['name'] for item in report['left_out']] or 'nothing'}; {seconds['total']:.0f} s in all",
        flush=True,
    )
    if problems:
        print("run: $OUT breaks its limits: " + "; ".join(problems), file=sys.stderr)
        return EXIT["limits"]
    return code


def run_check(args: argparse.Namespace) -> int:
    """The ``check`` command: the machine, what has arrived, and with ``--smoke`` a tiny run of the whole path."""
    print(json.dumps(device_info(), indent=1), flush=True)
    usage = shutil.disk_usage(".")
    print(f"disk: {usage.free / 2**30:.1f} GiB free", flush=True)
    try:
        report = status(Path(args.device_dir))
        print(f"pack {report['pack_id']}: present {report['stages_present']}, missing {report['stages_missing']}")
    except KitError as exc:
        print(f"stages: {exc}")
    if not args.smoke:
        return 0
    from scripts.device.smoke import smoke

    result = smoke(Path(args.device_dir) / "smoke")
    print(json.dumps(result, indent=1), flush=True)
    return 0 if result["ok"] else EXIT["failed"]


def run_reader_part(args: argparse.Namespace) -> int:
    """The ``reader`` command: part ``--part`` of the trained reader into ``$OUT`` (:mod:`reader_back`)."""
    from scripts.device.reader_back import copy_part, reader_dir, write_pieces

    out_dir = Path(args.out or os.environ.get("OUT") or "")
    if not str(out_dir) or str(out_dir) == ".":
        print("run: no $OUT (pass --out DIR)", file=sys.stderr)
        return EXIT["failed"]
    run_dir = (Path(args.device_dir) / "runs" / args.name).resolve()
    started = time.monotonic()
    listing = write_pieces(reader_dir(run_dir), run_dir / "reader-back")
    names = copy_part(run_dir / "reader-back", args.part, out_dir)
    print(
        f"reader part {args.part} of {listing['parts']}: {names} "
        f"({listing['tar_bytes'] / MIB:.1f} MiB in all, {time.monotonic() - started:.1f} s)"
    )
    problems = out_problems(out_dir, OutLimits())
    if problems:
        print("run: $OUT breaks its limits: " + "; ".join(problems), file=sys.stderr)
        return EXIT["limits"]
    return 0


def run_encode_speed(args: argparse.Namespace) -> int:
    """The ``encode-speed`` command: time the trained model's phrase encoding here (:mod:`encode_speed`)."""
    from scripts.device.encode_speed import encode_speed

    out_dir = Path(args.out or os.environ.get("OUT") or ".")
    run_dir = (Path(args.device_dir) / "runs" / args.name).resolve()
    recipe = yaml.safe_load(Path(args.recipe).read_text())
    stages = [s for s in recipe["stages"] if s in TRAINING_STAGES and s != "reader"]
    model_dir = next(
        (run_dir / s / n for s in reversed(stages) for n in ("best", "final") if (run_dir / s / n).is_dir()), None
    )
    if model_dir is None:
        print(f"run: {run_dir} holds no trained phrase model", file=sys.stderr)
        return EXIT["failed"]
    dev = assemble(Path(args.device_dir))["data"]["dev"]
    result = encode_speed(model_dir, Path(dev), args.passages)
    print(json.dumps(result, indent=1))
    write_json(out_dir / "encode_speed.json", result)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="the machine and the stages that have arrived")
    check.add_argument("--smoke", action="store_true", help="also a tiny run: train, budget stop, resume, export")
    check.add_argument("--device-dir", default=DEVICE_DIR)
    train = sub.add_parser("train", help="assemble, train within the budget, export into $OUT")
    train.add_argument("--recipe", required=True, help="recipe YAML (its base and data paths are replaced)")
    train.add_argument("--name", required=True, help="run name: .device/runs/<name>")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override")
    train.add_argument("--budget-seconds", type=float, default=550.0, help="this command's wall-clock budget")
    train.add_argument("--load-reserve", type=float, default=45.0, help="seconds kept for loading data per stage")
    train.add_argument("--export-reserve", type=float, default=30.0, help="seconds kept for the export")
    train.add_argument("--train-minutes", type=float, help="cap every stage's max_minutes (rehearsals)")
    train.add_argument("--progress", action="store_true", help="progress bars (off: the call's output is short)")
    train.add_argument("--device-dir", default=DEVICE_DIR)
    train.add_argument("--out", help="where the files go back (default: $OUT)")
    train.add_argument("--shard-mib", type=float, default=15.0, help="weight shard size")
    train.add_argument("--out-file-mib", type=float, default=16.0, help="$OUT's limit per file")
    train.add_argument("--out-total-mib", type=float, default=64.0, help="$OUT's limit in all")
    reader = sub.add_parser("reader", help="part PART of the trained reader into $OUT (int8, 60 MiB a part)")
    reader.add_argument("--name", required=True, help="run name: .device/runs/<name>")
    reader.add_argument("--part", type=int, default=1, help="which part (1-based; the first says how many)")
    reader.add_argument("--device-dir", default=DEVICE_DIR)
    reader.add_argument("--out", help="where the files go back (default: $OUT)")
    speed = sub.add_parser("encode-speed", help="time the trained phrase model's encoding on this GPU")
    speed.add_argument("--name", required=True, help="run name: .device/runs/<name>")
    speed.add_argument("--recipe", required=True, help="the run's recipe (which stage's model is the last)")
    speed.add_argument("--passages", type=int, default=2000, help="SQuAD dev paragraphs to encode")
    speed.add_argument("--device-dir", default=DEVICE_DIR)
    speed.add_argument("--out", help="where encode_speed.json goes (default: $OUT)")
    args = parser.parse_args(argv)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    commands = {"check": run_check, "reader": run_reader_part, "encode-speed": run_encode_speed}
    try:
        return commands.get(args.command, run_train)(args)
    except KitError as exc:
        print(f"run: {exc}", file=sys.stderr)
        return EXIT["failed"]


if __name__ == "__main__":
    sys.exit(main())
