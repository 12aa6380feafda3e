"""What the device kit's scripts share: the lent machine's limits, the stage manifest, hashing, ``$OUT`` checks.

Standard library only (plus :mod:`dphr_haystack.errors`), so that ``assemble.py`` runs before anything else on the
device machine. The limits are the device tool's: a call carries at most 64 MiB (the working tree plus the carried
paths), and ``$OUT`` brings back at most 8 files, 16 MiB each, 64 MiB together, no more than 2 folders down.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dphr_haystack._util.atomic import file_sha256, write_file_atomic
from dphr_haystack._util.io import read_json
from dphr_haystack.errors import DphrError

MIB = 2**20
REPO_ROOT = Path(__file__).resolve().parents[2]
DEVICE_DIR = ".device"
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "dphr-device-kit"
MANIFEST_VERSION = 1
STAGE_PREFIX = "stage-"
ASSEMBLED = "assembled"
ASSEMBLED_STATE = "assembled.json"
CALL_LIMIT_BYTES = 64 * MIB
NAME = re.compile(r"[A-Za-z0-9._-]+")


class KitError(DphrError, RuntimeError):
    """The device kit cannot go on (a missing or damaged piece, a limit exceeded, a bad argument)."""


class MissingPiecesError(KitError):
    """Stage folders that the manifest lists have not been carried to this machine (yet)."""


class CorruptPieceError(KitError):
    """A piece or an assembled file does not have the SHA-256 the manifest records."""


@dataclass(frozen=True)
class OutLimits:
    """What ``$OUT`` may hold: file count, bytes per file and in all, folder depth; weight shards' size."""

    max_files: int = 8
    max_file_bytes: int = 16 * MIB
    max_total_bytes: int = 64 * MIB
    max_depth: int = 2
    shard_mib: float = 15.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def sha256_file(path: Path) -> str:
    """SHA-256 of a file's bytes (the package's own, read in 4 MiB blocks)."""
    return file_sha256(path)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON through a temporary file and a rename (the package's atomic write)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(path, json.dumps(data, indent=1, sort_keys=False, default=str) + "\n")


def stage_dirs(device_dir: Path) -> list[Path]:
    """The ``stage-N`` folders present under ``device_dir``, by number."""
    found = [p for p in device_dir.glob(f"{STAGE_PREFIX}*") if p.is_dir() and p.name[len(STAGE_PREFIX) :].isdigit()]
    return sorted(found, key=lambda p: int(p.name[len(STAGE_PREFIX) :]))


def load_manifest(device_dir: Path) -> dict[str, Any]:
    """The pack's manifest, from ``device_dir`` itself or from any stage folder present (each holds a copy).

    Raises:
        MissingPiecesError: No stage folder (and no manifest) is here.
        KitError: Two stage folders come from different packs.
    """
    candidates = [device_dir / MANIFEST] + [stage / MANIFEST for stage in stage_dirs(device_dir)]
    manifests = {path: read_json(path) for path in candidates if path.is_file()}
    if not manifests:
        raise MissingPiecesError(
            f"no stage folder with a {MANIFEST} under {device_dir}: run scripts/device/pack.py here and carry "
            f"{DEVICE_DIR}/{STAGE_PREFIX}1 …"
        )
    packs = {path: m.get("pack_id") for path, m in manifests.items()}
    if len(set(packs.values())) > 1:
        listed = ", ".join(f"{path.parent.name}: {pack}" for path, pack in packs.items())
        raise KitError(f"stage folders from different packs ({listed}): pack again and carry every stage again")
    manifest = next(iter(manifests.values()))
    if manifest.get("format") != MANIFEST_FORMAT or manifest.get("version") != MANIFEST_VERSION:
        raise KitError(f"{next(iter(manifests))} is not a {MANIFEST_FORMAT} v{MANIFEST_VERSION} manifest")
    return manifest


def tree_files(root: Path = REPO_ROOT) -> list[Path]:
    """What travels with every call: tracked files and untracked files git does not ignore, plus ``shared/``."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise KitError(f"cannot list the working tree with git in {root}: {exc}") from exc
    files = {root / name for name in listed.decode("utf-8", "surrogateescape").split("\0") if name}
    shared = root / "shared"
    if shared.is_dir():  # travels whether or not git ignores it
        files.update(p for p in shared.rglob("*") if p.is_file() or p.is_symlink())
    return sorted(files)


def tree_bytes(root: Path = REPO_ROOT) -> int:
    """Bytes of :func:`tree_files` (a link counts as itself; files listed but deleted count 0)."""
    return sum(os.lstat(p).st_size for p in tree_files(root) if os.path.lexists(p))


def is_ignored(path: Path, root: Path = REPO_ROOT) -> bool:
    """Whether git ignores ``path`` (an ignored path travels only when a call carries it)."""
    probe = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=root, capture_output=True)
    return probe.returncode == 0


def out_problems(out_dir: Path, limits: OutLimits = OutLimits()) -> list[str]:
    """Every way the files under ``out_dir`` break the ``$OUT`` limits (an empty list: all of it comes back)."""
    problems: list[str] = []
    files = [p for p in sorted(out_dir.rglob("*")) if not p.is_dir()]
    total = 0
    for path in files:
        rel = path.relative_to(out_dir)
        if path.is_symlink() or not path.is_file():
            problems.append(f"{rel}: not a plain file")
            continue
        size = path.stat().st_size
        total += size
        if size > limits.max_file_bytes:
            problems.append(f"{rel}: {size / MIB:.2f} MiB > {limits.max_file_bytes / MIB:.2f} MiB")
        if len(rel.parts) - 1 > limits.max_depth:
            problems.append(f"{rel}: more than {limits.max_depth} folders down")
        bad = [part for part in rel.parts if not NAME.fullmatch(part)]
        if bad:
            problems.append(f"{rel}: name outside [A-Za-z0-9._-]")
    if len(files) > limits.max_files:
        problems.append(f"{len(files)} files > {limits.max_files}")
    if total > limits.max_total_bytes:
        problems.append(f"{total / MIB:.2f} MiB in all > {limits.max_total_bytes / MIB:.2f} MiB")
    return problems


def fmt_mib(size: int) -> str:
    return f"{size / MIB:.2f} MiB"
