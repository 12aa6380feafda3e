"""Join the pieces of whatever stage folders have arrived into ``.device/assembled/`` (run on the device machine).

Every piece and every joined file is checked against the SHA-256 its manifest records; weights packed as float16
are widened back to float32 safetensors (transformers 5 would otherwise load, and train, the base in float16). A
file the working tree already carries is copied from the tree and checked the same way. When pieces are missing
the error names them and the stage folders that hold them; nothing is half-written. A second run on the same
machine checks the assembled files and does nothing else.

Usage (from the repository root, where ``.device/`` is)::

    PYTHONPATH=. python3 scripts/device/assemble.py            # assemble, or fail naming what is missing
    PYTHONPATH=. python3 scripts/device/assemble.py --status   # report what has arrived, assemble nothing
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: the repository root is what the imports below need
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.device.kit import (  # noqa: E402
    ASSEMBLED,
    ASSEMBLED_STATE,
    DEVICE_DIR,
    REPO_ROOT,
    STAGE_PREFIX,
    CorruptPieceError,
    KitError,
    MissingPiecesError,
    fmt_mib,
    load_manifest,
    read_json,
    sha256_bytes,
    sha256_file,
    stage_dirs,
    write_json,
)


def _piece_path(device_dir: Path, piece: dict[str, Any]) -> Path:
    return device_dir / f"{STAGE_PREFIX}{piece['stage']}" / piece["name"]


def status(device_dir: Path, root: Path = REPO_ROOT) -> dict[str, Any]:
    """What has arrived: stages present and missing, and per file whether all of its pieces (or its tree copy) are
    here with the right size. Sizes only: :func:`assemble` checks the hashes."""
    manifest = load_manifest(device_dir)
    present = {p.name for p in stage_dirs(device_dir)}
    wanted = [s["name"] for s in manifest["stages"]]
    files = {}
    for entry in manifest["files"]:
        if "from_tree" in entry:
            source = root / entry["from_tree"]
            ok = source.is_file() and source.stat().st_size == entry["bytes"]
            files[entry["path"]] = {"ready": ok, "missing": [] if ok else [f"tree file {entry['from_tree']}"]}
            continue
        missing = [
            f"{p['name']} ({STAGE_PREFIX}{p['stage']})"
            for p in entry["pieces"]
            if not _piece_path(device_dir, p).is_file() or _piece_path(device_dir, p).stat().st_size != p["bytes"]
        ]
        files[entry["path"]] = {"ready": not missing, "missing": missing}
    return {
        "pack_id": manifest["pack_id"],
        "stages_present": [name for name in wanted if name in present],
        "stages_missing": [name for name in wanted if name not in present],
        "files": files,
        "complete": all(f["ready"] for f in files.values()),
    }


def _check_assembled(out: Path, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The state of an earlier assembly of the same pack whose files are all still intact, else None."""
    state_file = out / ASSEMBLED_STATE
    if not state_file.is_file():
        return None
    state = read_json(state_file)
    if state.get("pack_id") != manifest["pack_id"]:
        return None
    for entry in manifest["files"]:
        target = out / entry["path"]
        if not target.is_file() or sha256_file(target) != state["files"].get(entry["path"]):
            return None
    return state


def _widen(joined: Path, target: Path) -> None:
    """float16 safetensors → float32 safetensors (the dtype the base was trained in, and transformers loads in)."""
    import torch
    from safetensors.torch import load_file, save_file

    state = load_file(str(joined))
    wide = {k: (v.to(torch.float32) if v.is_floating_point() else v).contiguous() for k, v in state.items()}
    save_file(wide, str(target), metadata={"format": "pt"})


def _assemble_file(device_dir: Path, out: Path, entry: dict[str, Any], root: Path) -> str:
    """Join (or copy from the tree), check and place one file; returns the SHA-256 of the placed file."""
    target = out / entry["path"]
    target.parent.mkdir(parents=True, exist_ok=True)
    joined = target.with_name(f".{target.name}.joining")
    try:
        if "from_tree" in entry:
            shutil.copyfile(root / entry["from_tree"], joined)
        else:
            with open(joined, "wb") as handle:
                for piece in entry["pieces"]:
                    path = _piece_path(device_dir, piece)
                    data = path.read_bytes()
                    if len(data) != piece["bytes"] or sha256_bytes(data) != piece["sha256"]:
                        raise CorruptPieceError(f"{path} is damaged (size or SHA-256 differs from the manifest)")
                    handle.write(data)
        if sha256_file(joined) != entry["sha256"]:
            raise CorruptPieceError(f"{entry['path']}: the joined file's SHA-256 differs from the manifest")
        if entry.get("stored") == "float16":
            _widen(joined, target)
            joined.unlink()
        else:
            os.replace(joined, target)
    finally:
        joined.unlink(missing_ok=True)
    return sha256_file(target)


def assemble(device_dir: Path, root: Path = REPO_ROOT) -> dict[str, Any]:
    """Assemble every file of the pack under ``device_dir/assembled``; returns what was done and how long it took.

    Raises:
        MissingPiecesError: Pieces (or a tree file) are not here: the message names them and their stages.
        CorruptPieceError: A piece or a joined file has another SHA-256 than the manifest's.
    """
    started = time.perf_counter()
    manifest = load_manifest(device_dir)
    out = device_dir / ASSEMBLED
    earlier = _check_assembled(out, manifest)
    if earlier is not None:
        return {**earlier, "reused": True, "seconds": time.perf_counter() - started}
    report = status(device_dir, root)
    if not report["complete"]:
        missing = [f"{path}: {', '.join(f['missing'])}" for path, f in report["files"].items() if not f["ready"]]
        carry = ", ".join(f"{DEVICE_DIR}/{name}" for name in report["stages_missing"]) or "(stages are present)"
        raise MissingPiecesError(
            f"pack {manifest['pack_id']}: missing {', '.join(report['stages_missing']) or 'pieces'} "
            f"(carry {carry}); incomplete files: " + "; ".join(missing)
        )
    (out / ASSEMBLED_STATE).unlink(missing_ok=True)
    hashes = {entry["path"]: _assemble_file(device_dir, out, entry, root) for entry in manifest["files"]}
    state = {
        "pack_id": manifest["pack_id"],
        "base_source": manifest["base"]["source"],
        "base_weights": manifest["base"]["weights"],
        "base": str((out / manifest["base"]["dir"]).resolve()),
        "data": {role: str((out / path).resolve()) for role, path in manifest["data"].items()},
        "files": hashes,
        "bytes": sum((out / path).stat().st_size for path in hashes),
    }
    write_json(out / ASSEMBLED_STATE, state)
    return {**state, "reused": False, "seconds": time.perf_counter() - started}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device-dir", default=DEVICE_DIR)
    parser.add_argument("--status", action="store_true", help="report what has arrived; assemble nothing")
    args = parser.parse_args(argv)
    device_dir = Path(args.device_dir)
    try:
        if args.status:
            report = status(device_dir)
            print(json.dumps({k: v for k, v in report.items() if k != "files"}, indent=1))
            for path, info in report["files"].items():
                print(f"  {path}: {'ready' if info['ready'] else 'missing ' + ', '.join(info['missing'])}")
            return 0
        report = assemble(device_dir)
    except MissingPiecesError as exc:
        print(f"assemble: {exc}", file=sys.stderr)
        return 2
    except KitError as exc:
        print(f"assemble: {exc}", file=sys.stderr)
        return 3
    how = "already assembled, checked" if report["reused"] else "assembled"
    print(f"{how}: {len(report['files'])} files, {fmt_mib(report['bytes'])} in {report['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
