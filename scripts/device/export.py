"""Export what a CPU needs to rebuild a trained model into ``$OUT``, within what ``$OUT`` can bring back.

The trained tensors go as float16 safetensors shards of at most 15 MiB (``PhraseModel.save`` with
``omit_base_weights``: tensors still equal to the base's, the frozen word embeddings, are left out and recorded by
key and SHA-256); every other file of the saved model directory (configs, weight index, tokenizer) goes as text in
one ``model_files.json``; then, while the limits allow, ``probe.safetensors`` (see :mod:`probe`),
``metrics.jsonl`` and ``curves.png``. The plan is checked against the limits before anything is written to
``$OUT``; what is left out, and why, is part of the report that ``summary.json`` carries.
"""

from __future__ import annotations

import base64
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.device.kit import MIB, NAME, KitError, OutLimits, fmt_mib, sha256_file
from scripts.device.probe import probe_vectors, save_probe

MODEL_FILES = "model_files.json"
PROBE = "probe.safetensors"
SUMMARY = "summary.json"
SUMMARY_RESERVE = 1 * MIB  # planned room for summary.json, written last


class ExportLimitError(KitError):
    """The files a CPU needs cannot come back through ``$OUT`` within its limits."""


@dataclass
class OutFile:
    """A file planned for ``$OUT``; optional ones go first, lowest ``priority`` first, when limits are hit."""

    name: str
    path: Path
    required: bool
    priority: int = 0
    max_bytes: int | None = None

    @property
    def size(self) -> int:
        return self.path.stat().st_size


def plan_out(
    files: list[OutFile], limits: OutLimits, existing: dict[str, int] | None = None
) -> tuple[list[OutFile], list[dict[str, str]]]:
    """Which of ``files`` go to ``$OUT`` (plus ``existing`` files already there and the summary written last).

    Returns the kept files and ``{name, why}`` for each left out.

    Raises:
        ExportLimitError: The required files alone break a limit.
    """
    existing = existing or {}
    kept, left_out = [], []
    for item in files:
        cap = min(limits.max_file_bytes, item.max_bytes or limits.max_file_bytes)
        why = None
        if not NAME.fullmatch(item.name):
            why = "name outside [A-Za-z0-9._-]"
        elif item.name in existing or item.name == SUMMARY:
            why = "name already taken in $OUT"
        elif item.size > cap:
            why = f"{fmt_mib(item.size)} > {fmt_mib(cap)} per file"
        if why is None:
            kept.append(item)
        elif item.required:
            raise ExportLimitError(f"{item.name}: {why}")
        else:
            left_out.append({"name": item.name, "why": why})

    def breaks() -> str | None:
        count = len(existing) + len(kept) + 1  # + summary.json
        total = sum(existing.values()) + sum(f.size for f in kept) + min(SUMMARY_RESERVE, limits.max_file_bytes)
        if count > limits.max_files:
            return f"{count} files > {limits.max_files}"
        if total > limits.max_total_bytes:
            return f"{fmt_mib(total)} > {fmt_mib(limits.max_total_bytes)} in all"
        return None

    while (why := breaks()) is not None:
        optional = [f for f in kept if not f.required]
        if not optional:
            raise ExportLimitError(f"the required files alone break the $OUT limits: {why}")
        drop = min(optional, key=lambda f: f.priority)
        kept.remove(drop)
        left_out.append({"name": drop.name, "why": why})
    return kept, left_out


def bundle_model_files(model_dir: Path, target: Path, skip: set[str]) -> list[str]:
    """Every file of ``model_dir`` but ``skip`` as ``{name: {encoding, data}}`` JSON (UTF-8 text, else base64)."""
    bundle = {}
    for path in sorted(model_dir.iterdir()):
        if path.name in skip or not path.is_file():
            continue
        raw = path.read_bytes()
        try:
            bundle[path.name] = {"encoding": "utf-8", "data": raw.decode("utf-8")}
        except UnicodeDecodeError:
            bundle[path.name] = {"encoding": "base64", "data": base64.b64encode(raw).decode("ascii")}
    target.write_text(json.dumps({"format": "dphr-device-export", "files": bundle}, indent=1), encoding="utf-8")
    return sorted(bundle)


def export_model(
    model_dir: Path,
    work: Path,
    out_dir: Path,
    extras: dict[str, Path],
    limits: OutLimits | None = None,
) -> dict[str, Any]:
    """Write the shards, ``model_files.json`` and what of ``extras`` ({name: path}: ``metrics.jsonl`` priority 2,
    anything else 1) fits, plus ``probe.safetensors`` (priority 3), into ``out_dir``; returns the export report
    (``summary.json`` is the caller's to write).
    """
    from dphr_haystack.model.phrase_model import PhraseModel
    from dphr_haystack.model.weights import WEIGHTS_INDEX_FILE

    started = time.perf_counter()
    limits = limits or OutLimits()
    model = PhraseModel.load(model_dir)
    shutil.rmtree(work, ignore_errors=True)
    staging = work / "model"
    staging.mkdir(parents=True)
    written = model.save(staging, weights_dtype="float16", max_shard_mb=limits.shard_mib, omit_base_weights=True)
    shards = [name for name in written["files"] if name != WEIGHTS_INDEX_FILE]
    index = json.loads((staging / WEIGHTS_INDEX_FILE).read_text())
    bundled = bundle_model_files(staging, work / MODEL_FILES, skip=set(shards))
    save_probe(probe_vectors(model), work / PROBE)
    shard_cap = int(limits.shard_mib * MIB)
    planned = [OutFile(name, staging / name, True, max_bytes=shard_cap) for name in shards]
    planned.append(OutFile(MODEL_FILES, work / MODEL_FILES, True))
    planned.append(OutFile(PROBE, work / PROBE, False, priority=3))
    planned += [
        OutFile(name, path, False, priority=2 if name == "metrics.jsonl" else 1)
        for name, path in extras.items()
        if path.is_file()
    ]
    out_dir.mkdir(parents=True, exist_ok=True)
    existing = {p.name: p.stat().st_size for p in out_dir.iterdir() if p.is_file() and p.name != SUMMARY}
    kept, left_out = plan_out(planned, limits, existing)
    left_out += [
        {"name": name, "why": "not written by this run"} for name, path in extras.items() if not path.is_file()
    ]
    files = {}
    for item in kept:  # the plan holds: now write
        shutil.copyfile(item.path, out_dir / item.name)
        files[item.name] = {"bytes": item.size, "sha256": sha256_file(out_dir / item.name)}
    frozen = sorted(index.get("from_base", {}))
    return {
        "model_dir": str(model_dir),
        "weights_dtype": "float16",
        "shards": shards,
        "bundled": bundled,
        "from_base": frozen,
        "from_base_sha256": {key: ref["sha256"] for key, ref in index.get("from_base", {}).items()},
        "word_embeddings_left_out": all(k in frozen for k in model.state_dict() if "word_embeddings" in k),
        "trained_bytes": written["bytes"],
        "files": files,
        "left_out": left_out,
        "limits": limits.as_dict(),
        "seconds": time.perf_counter() - started,
    }
