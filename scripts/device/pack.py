"""Pack what a GPU training call needs beyond the working tree into numbered stage folders (run here, not there).

The device machine has neither the offline MiniLM base nor ``../shared``; a call carries the working tree plus at
most 64 MiB in all. This writes the ignored folder ``.device/``:

* ``stage-1/``, ``stage-2/``, …: the base (``config.json``, tokenizer files, weights as float16 safetensors) and
  the SQuAD files, cut into pieces so that *working tree + one stage* stays under the call limit with a margin;
  a file the tree already carries byte for byte (the shipped SQuAD dev file) is taken from the tree instead;
* ``manifest.json`` (a copy in every stage): each file's SHA-256, size and pieces, so that ``assemble.py`` on the
  device joins and checks whatever has arrived and names what has not;
* ``plan.json``: the device calls to make, also printed: one call per stage, the last one training.

Usage (from the repository root)::

    .venv/bin/python scripts/device/pack.py                  # MiniLM + SQuAD train/dev, recipe gpu_windows.yaml
    .venv/bin/python scripts/device/pack.py --recipe train/configs/gpu_converge.yaml --name gpu-converge
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: the repository root is what the imports below need
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.device.kit import (  # noqa: E402
    CALL_LIMIT_BYTES,
    DEVICE_DIR,
    MANIFEST,
    MANIFEST_FORMAT,
    MANIFEST_VERSION,
    MIB,
    REPO_ROOT,
    STAGE_PREFIX,
    KitError,
    fmt_mib,
    is_ignored,
    sha256_bytes,
    sha256_file,
    stage_dirs,
    tree_bytes,
    tree_files,
    write_json,
)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
DEFAULT_TRAIN = "../shared/data/squad/train-v1.1-rebuilt.json.gz"
DEFAULT_DEV = "../shared/data/squad/dev-v1.1-public.json.gz"
DEFAULT_RECIPE = "train/configs/gpu_windows.yaml"
DEFAULT_MARGIN_MIB = 4.0
PLAN = "plan.json"


def resolve_input(path: str) -> Path:
    """``path`` as given, else relative to the repository root; KitError when neither exists."""
    for candidate in (Path(path), REPO_ROOT / path):
        if candidate.is_file():
            return candidate.resolve()
    raise KitError(f"input file not found: {path}")


def half_weights(source: Path, target: Path) -> None:
    """Copy a safetensors file with every floating tensor cast to float16 (refusing values float16 cannot hold)."""
    import torch
    from safetensors.torch import load_file, save_file

    state = load_file(str(source))
    half = {}
    for key, tensor in state.items():
        if tensor.is_floating_point():
            cast = tensor.to(torch.float16)
            if not torch.isfinite(cast).all():
                raise KitError(f"{source}: {key} holds values beyond float16's range; pack with --base-dtype float32")
            tensor = cast
        half[key] = tensor.contiguous()
    save_file(half, str(target), metadata={"format": "pt"})


def base_inputs(base: str, work: Path, dtype: str) -> list[dict[str, Any]]:
    """The base model's files the device needs, as ``{path, source[, stored]}`` (weights converted under ``work``)."""
    from dphr_haystack.model.registry import resolve_base

    directory = Path(resolve_base(base))
    if not (directory / "config.json").is_file() or not (directory / "model.safetensors").is_file():
        raise KitError(f"base {base!r} ({directory}) lacks config.json or model.safetensors")
    entries = [{"path": "base/config.json", "source": directory / "config.json"}]
    tokenizer = [name for name in TOKENIZER_FILES if (directory / name).is_file()]
    if "tokenizer.json" not in tokenizer and "vocab.txt" not in tokenizer:
        raise KitError(f"base {base!r} ({directory}) has no tokenizer.json or vocab.txt")
    entries += [{"path": f"base/{name}", "source": directory / name} for name in tokenizer]
    weights = directory / "model.safetensors"
    if dtype == "float16":
        converted = work / "model.float16.safetensors"
        half_weights(weights, converted)
        entries.append({"path": "base/model.safetensors", "source": converted, "stored": "float16"})
    else:
        entries.append({"path": "base/model.safetensors", "source": weights})
    return entries


def find_in_tree(source: Path, digest: str, files: Sequence[Path]) -> str | None:
    """The working-tree path holding exactly ``source``'s bytes (it travels anyway), or None."""
    size = source.stat().st_size
    for path in files:
        if path.is_file() and not path.is_symlink() and path.stat().st_size == size and sha256_file(path) == digest:
            return path.relative_to(REPO_ROOT).as_posix()
    return None


def split_into_stages(entries: list[dict[str, Any]], capacity: int) -> int:
    """Give every carried entry its ``pieces`` (stage, offset, bytes): stages filled in order, evenly, each at most
    ``capacity`` bytes; returns the number of stages."""
    carried = [e for e in entries if "from_tree" not in e]
    total = sum(e["bytes"] for e in carried)
    stages = max(1, math.ceil(total / capacity))
    target = math.ceil(total / stages)
    stage, used = 1, 0
    for number, entry in enumerate(carried):
        slug = entry["path"].replace("/", "__")
        offset, pieces = 0, []
        while offset < entry["bytes"] or not pieces:
            if used >= target and stage < stages:
                stage, used = stage + 1, 0
            size = min(entry["bytes"] - offset, target - used if stage < stages else entry["bytes"] - offset)
            pieces.append(
                {"name": f"{number:02d}-{slug}.{len(pieces):03d}", "stage": stage, "offset": offset, "bytes": size}
            )
            offset += size
            used += size
        entry["pieces"] = pieces
    return stages


def write_stages(entries: list[dict[str, Any]], device_dir: Path) -> None:
    """Cut each carried file into its pieces under ``stage-N/`` and record each piece's SHA-256."""
    for entry in entries:
        if "from_tree" in entry:
            continue
        with open(entry["source"], "rb") as handle:
            for piece in entry["pieces"]:
                handle.seek(piece["offset"])
                data = handle.read(piece["bytes"])
                if len(data) != piece["bytes"]:
                    raise KitError(f"{entry['source']} changed while being packed")
                folder = device_dir / f"{STAGE_PREFIX}{piece['stage']}"
                folder.mkdir(parents=True, exist_ok=True)
                (folder / piece["name"]).write_bytes(data)
                piece["sha256"] = sha256_bytes(data)


def call_plan(stages: int, recipe: str, name: str, budget_seconds: int) -> list[dict[str, Any]]:
    """The device calls: each stage but the last with a short check (the first also a tiny GPU smoke run), the
    last stage with the training call, then the same training call again only if it stopped on its budget."""
    prefix = "PYTHONUNBUFFERED=1 PYTHONPATH=. python3 scripts/device/run.py"
    train = f"{prefix} train --recipe {recipe} --name {name} --budget-seconds {budget_seconds}"
    calls = []
    for number in range(1, stages):
        smoke = " --smoke" if number == 1 else ""
        calls.append(
            {
                "call": number,
                "carry": [f"{DEVICE_DIR}/{STAGE_PREFIX}{number}"],
                "timeout_s": 240 if smoke else 120,
                "command": f"{prefix} check{smoke}",
                "when": "first" if number == 1 else "at once after the previous call returns (warm for 30 s only)",
            }
        )
    calls.append(
        {
            "call": stages,
            "carry": [f"{DEVICE_DIR}/{STAGE_PREFIX}{stages}"],
            "timeout_s": 600,
            "command": train,
            "when": "at once after the previous call returns" if stages > 1 else "first",
        }
    )
    calls.append(
        {
            "call": stages + 1,
            "carry": [],
            "timeout_s": 600,
            "command": train,
            "when": f"only if call {stages} exited 3 (stopped by its time budget), at once, while the machine is "
            f"warm; otherwise restore call {stages}'s checkpoint as it is",
        }
    )
    return calls


def pack(
    device_dir: Path,
    base: str,
    train: str,
    dev: str,
    base_dtype: str = "float16",
    call_limit: int = CALL_LIMIT_BYTES,
    margin: int = int(DEFAULT_MARGIN_MIB * MIB),
    stage_bytes: int | None = None,
    tree: int | None = None,
) -> dict[str, Any]:
    """Write the stage folders and the manifest under ``device_dir``; returns the manifest."""
    if device_dir.resolve().is_relative_to(REPO_ROOT) and not is_ignored(device_dir / MANIFEST):
        raise KitError(f"{device_dir} is not ignored by git: it would travel with every call (add /{DEVICE_DIR}/)")
    files = tree_files()
    tree = tree_bytes() if tree is None else tree
    capacity = stage_bytes if stage_bytes is not None else call_limit - tree - margin
    if capacity < 4096:
        raise KitError(
            f"the working tree ({fmt_mib(tree)}) leaves {fmt_mib(max(0, call_limit - tree))} of the "
            f"{fmt_mib(call_limit)} call limit, too little for a stage with a {fmt_mib(margin)} margin (the shipped "
            "model weights need not travel: `scripts/device/travel.py hide`, and `restore` after the calls)"
        )
    for old in stage_dirs(device_dir):
        shutil.rmtree(old)
    work = device_dir / ".work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        entries = base_inputs(base, work, base_dtype)
        data = {"train": resolve_input(train), "dev": resolve_input(dev)}
        entries += [{"path": f"data/{src.name}", "source": src, "role": role} for role, src in data.items()]
        for entry in entries:
            entry["bytes"] = entry["source"].stat().st_size
            entry["sha256"] = sha256_file(entry["source"])
            in_tree = (
                find_in_tree(entry["source"], entry["sha256"], files) if entry["path"].startswith("data/") else None
            )
            if in_tree:
                entry["from_tree"] = in_tree
        reserve = 0
        while True:  # every stage holds a copy of the manifest: leave room for it
            if capacity - reserve < 4096:
                raise KitError(f"a stage capacity of {capacity} bytes leaves no room for pieces and the manifest")
            stages = split_into_stages(entries, capacity - reserve)
            for entry in entries:  # placeholders of the right length, for the size estimate
                for piece in entry.get("pieces", []):
                    piece.setdefault("sha256", "0" * 64)
            size = len(json.dumps(_manifest(entries, base, base_dtype, stages), indent=1)) + 1024
            if size <= reserve:
                break
            reserve = size
        write_stages(entries, device_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    manifest = _manifest(entries, base, base_dtype, stages)
    for stage in stage_dirs(device_dir):
        write_json(stage / MANIFEST, manifest)
    measured = []
    for stage in stage_dirs(device_dir):
        size = sum(p.stat().st_size for p in stage.iterdir() if p.is_file())
        measured.append({"name": stage.name, "bytes": size, "call_bytes": tree + size})
    manifest.update(
        {
            "tree_bytes": tree,
            "call_limit_bytes": call_limit,
            "margin_bytes": margin,
            "stage_capacity_bytes": capacity,
            "stages": measured,
        }
    )
    write_json(device_dir / MANIFEST, manifest)
    over = [s["name"] for s in measured if s["bytes"] > capacity]
    if over:
        raise KitError(f"stages {over} exceed the stage capacity ({capacity} bytes)")
    return manifest


def _manifest(entries: list[dict[str, Any]], base: str, base_dtype: str, stages: int) -> dict[str, Any]:
    """The manifest every stage carries (sizes on disk are added to the copy kept here)."""
    records = [{k: v for k, v in e.items() if k not in ("source", "role")} for e in entries]
    layout = [
        (e["path"], e["sha256"], [(p["stage"], p["offset"], p["bytes"]) for p in e.get("pieces", [])]) for e in records
    ]
    pieces: dict[int, int] = {}
    for entry in records:
        for piece in entry.get("pieces", []):
            pieces[piece["stage"]] = pieces.get(piece["stage"], 0) + piece["bytes"]
    return {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "pack_id": sha256_bytes(repr(layout).encode())[:16],
        "base": {"source": base, "dir": "base", "weights": base_dtype},
        "data": {e["role"]: e["path"] for e in entries if "role" in e},
        "stages": [{"name": f"{STAGE_PREFIX}{n}", "pieces_bytes": pieces.get(n, 0)} for n in range(1, stages + 1)],
        "files": records,
    }


def describe(manifest: dict[str, Any], calls: list[dict[str, Any]]) -> str:
    """The pack and the call sequence, for a person."""
    limit = manifest["call_limit_bytes"]
    lines = [
        f"working tree (git ls-files + untracked, not ignored): {fmt_mib(manifest['tree_bytes'])}; call limit "
        f"{fmt_mib(limit)}; stage capacity {fmt_mib(manifest['stage_capacity_bytes'])}",
    ]
    for stage in manifest["stages"]:
        lines.append(
            f"  {stage['name']}: {fmt_mib(stage['bytes'])}; tree + stage {fmt_mib(stage['call_bytes'])} "
            f"(margin {fmt_mib(limit - stage['call_bytes'])})"
        )
    for entry in manifest["files"]:
        where = (
            f"from the tree ({entry['from_tree']})"
            if "from_tree" in entry
            else ", ".join(f"{STAGE_PREFIX}{n}" for n in sorted({p["stage"] for p in entry["pieces"]}))
            + f", {len(entry['pieces'])} piece(s)"
        )
        stored = f" [{entry['stored']}]" if "stored" in entry else ""
        lines.append(f"  {entry['path']}{stored}: {fmt_mib(entry['bytes'])}, {where}")
    lines.append("device calls (run each at once after the previous one: the machine goes back after 30 s idle):")
    for call in calls:
        lines.append(f"  {call['call']}. [{call['when']}] timeout_s={call['timeout_s']} carry={call['carry']}")
        lines.append(f"     {call['command']}")
    lines.append(
        "then give_back, and here: .venv/bin/python scripts/device/restore.py --files <files_at> "
        "--out runs/<name>/rc/best   (the rc stage's model, where `python -m train validate` looks)"
    )
    lines.append("and `scripts/device/travel.py restore` if `travel.py hide` kept the shipped weights home")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device-dir", default=str(REPO_ROOT / DEVICE_DIR), help="where the stages go")
    parser.add_argument("--base", default="minilm", help="base model: minilm or a directory")
    parser.add_argument("--base-dtype", choices=("float16", "float32"), default="float16")
    parser.add_argument("--train", default=DEFAULT_TRAIN, help="SQuAD-format training file")
    parser.add_argument("--dev", default=DEFAULT_DEV, help="SQuAD-format dev file")
    parser.add_argument("--recipe", default=DEFAULT_RECIPE, help="the recipe the training call runs")
    parser.add_argument("--name", default="gpu-windows", help="the run's name (.device/runs/<name> there)")
    parser.add_argument("--budget-seconds", type=int, default=550, help="the training call's own time budget")
    parser.add_argument("--call-limit-mib", type=float, default=CALL_LIMIT_BYTES / MIB)
    parser.add_argument("--margin-mib", type=float, default=DEFAULT_MARGIN_MIB, help="room left in every call")
    parser.add_argument("--stage-mib", type=float, help="stage capacity, instead of limit - tree - margin")
    parser.add_argument("--tree-bytes", type=int, help="working-tree size to plan with, instead of measuring it")
    args = parser.parse_args(argv)
    try:
        device_dir = Path(args.device_dir)
        manifest = pack(
            device_dir,
            args.base,
            args.train,
            args.dev,
            base_dtype=args.base_dtype,
            call_limit=int(args.call_limit_mib * MIB),
            margin=int(args.margin_mib * MIB),
            stage_bytes=int(args.stage_mib * MIB) if args.stage_mib else None,
            tree=args.tree_bytes,
        )
    except KitError as exc:
        print(f"pack: {exc}", file=sys.stderr)
        return 2
    calls = call_plan(len(manifest["stages"]), args.recipe, args.name, args.budget_seconds)
    write_json(device_dir / PLAN, {"pack_id": manifest["pack_id"], "calls": calls})
    print(describe(manifest, calls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
