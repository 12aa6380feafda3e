"""Keep the shipped model weights from travelling with device calls, and put them back afterwards.

A device call carries the working tree (tracked files and untracked files git does not ignore) and at most 64 MiB
in all. The shipped models' weight shards are tracked and alone exceed it (33 MiB per model), yet no training call
reads them: a recipe trains from the base that ``pack.py`` sends in its stages. ``hide`` takes the shards out of
git's index (the files stay on disk) and ignores them in ``.git/info/exclude``, so they no longer travel; ``restore``
puts both back. Run ``restore`` as soon as the device calls are done: while hidden, ``git status`` shows the shards
as deleted, and a commit made then would delete them from the repository.

Usage (from the repository root)::

    .venv/bin/python scripts/device/travel.py hide      # before pack.py and the device calls
    .venv/bin/python scripts/device/travel.py restore   # after them (also safe to run when nothing is hidden)
    .venv/bin/python scripts/device/travel.py status
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository root is what the imports below need
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.device.kit import REPO_ROOT, KitError, fmt_mib, tree_bytes  # noqa: E402

HIDDEN = ("dphr_haystack/shipped_models/*/model*.safetensors",)
MARK = "# dphr device kit: hidden while device calls run (scripts/device/travel.py restore)"


def _git(root: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise KitError(f"git {' '.join(args)} failed in {root}: {exc}") from exc
    return done.stdout


def _exclude_file(root: Path) -> Path:
    return root / _git(root, "rev-parse", "--git-path", "info/exclude").strip()


def hidden_lines(root: Path = REPO_ROOT) -> list[str]:
    """The exclude lines ``hide`` wrote (empty when nothing is hidden)."""
    path = _exclude_file(root)
    lines = path.read_text().splitlines() if path.is_file() else []
    return [line for line in lines[lines.index(MARK) + 1 :] if line.strip()] if MARK in lines else []


def hide(root: Path = REPO_ROOT, patterns: Sequence[str] = HIDDEN) -> list[str]:
    """Untrack the files matching ``patterns`` (kept on disk) and ignore them; returns their paths."""
    if hidden_lines(root):
        raise KitError("files are hidden already: run `scripts/device/travel.py restore` first")
    files = _git(root, "ls-files", "--cached", "--", *patterns).split()
    if not files:
        raise KitError(f"no tracked file matches {', '.join(patterns)}")
    path = _exclude_file(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    before = path.read_text() if path.is_file() else ""
    lines = [MARK, *(f"/{name}" for name in files)]
    path.write_text(before + ("" if before.endswith("\n") or not before else "\n") + "\n".join(lines) + "\n")
    _git(root, "rm", "-q", "--cached", "--", *files)
    return files


def restore(root: Path = REPO_ROOT) -> list[str]:
    """Track the hidden files again and drop their exclude lines; returns their paths (empty: nothing was hidden)."""
    path = _exclude_file(root)
    lines = path.read_text().splitlines() if path.is_file() else []
    if MARK not in lines:
        return []
    names = [line.lstrip("/") for line in lines[lines.index(MARK) + 1 :] if line.strip()]
    if names:
        _git(root, "reset", "-q", "--", *names)
    path.write_text("".join(f"{line}\n" for line in lines[: lines.index(MARK)]))
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("hide", "restore", "status"))
    args = parser.parse_args(argv)
    try:
        if args.action == "hide":
            files = hide()
            print(f"hidden {len(files)} files; the working tree that travels: {fmt_mib(tree_bytes())}")
            print("run `scripts/device/travel.py restore` once the device calls are done")
        elif args.action == "restore":
            files = restore()
            print(f"restored {len(files)} files" if files else "nothing was hidden")
        else:
            names = hidden_lines()
            print(f"{len(names)} files hidden; the working tree that travels: {fmt_mib(tree_bytes())}")
    except KitError as exc:
        print(f"travel: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
