"""Rebuild a full model directory from a training call's returned files and this machine's base (run here).

The call brings back the trained tensors as float16 shards, the model's other files in ``model_files.json``, the
probe vectors and ``summary.json``. This checks every returned file against the summary's sizes and SHA-256,
takes the tensors the shards left out (the frozen word embeddings) from this machine's base, exactly as the base
holds them, after checking that they are the tensors the device trained with (the same SHA-256, or the same after
the float16 round trip the pack applied), writes ``dphr_config.json`` (``base_model`` set to ``--base``), the
encoder config, the tokenizer and one float32 ``model.safetensors``, loads the result with ``PhraseModel.load``
and compares its probe vectors with the device's. The directory also gets ``device_run.json`` (the call's summary
with this check) and ``metrics.jsonl`` when they came back.

Usage (from the repository root)::

    .venv/bin/python scripts/device/restore.py --files <files_at> --out runs/gpu-windows [--base minilm]
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: the repository root is what the imports below need
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dphr_haystack.errors import DphrError  # noqa: E402
from scripts.device.export import MODEL_FILES, PROBE, SUMMARY  # noqa: E402
from scripts.device.kit import KitError, read_json, sha256_file, write_json  # noqa: E402
from scripts.device.probe import compare, load_probe, probe_vectors  # noqa: E402

MIN_COSINE = 0.999
MAX_REL_DIFF = 0.02


def check_returned(files: Path) -> dict[str, Any]:
    """The call's summary, once every file it lists is here with its size and SHA-256."""
    if not (files / SUMMARY).is_file():
        raise KitError(f"{files / SUMMARY} not found: not the files of a training call")
    summary = read_json(files / SUMMARY)
    listed = summary.get("export", {}).get("files", {})
    if not listed:
        raise KitError(f"{files}: the call exported no model ({summary.get('status')}: see {SUMMARY})")
    for name, info in listed.items():
        path = files / name
        if not path.is_file():
            raise KitError(f"{path} is missing (the call wrote it: was it fetched?)")
        if path.stat().st_size != info["bytes"] or sha256_file(path) != info["sha256"]:
            raise KitError(f"{path} differs from what the call wrote (size or SHA-256)")
    return summary


def trained_tensors(files: Path, index: dict[str, Any], shards: list[str]) -> dict[str, Any]:
    """The shards' tensors in float32 (``read_weights`` checks each shard's SHA-256 against the index)."""
    from dphr_haystack.model.weights import WEIGHTS_INDEX_FILE, read_weights

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in shards:
            shutil.copyfile(files / name, folder / name)
        (folder / WEIGHTS_INDEX_FILE).write_text(json.dumps({**index, "from_base": {}}))
        return read_weights(folder)


def frozen_tensors(index: dict[str, Any], base: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The left-out tensors from ``base`` as it holds them, each checked against the device's SHA-256: exactly,
    or after a float16 round trip (a base packed in float16). Returns the tensors and how each matched."""
    import torch

    from dphr_haystack.model.weights import read_base_state, tensor_sha256

    state = read_base_state(base)
    tensors, matched = {}, {}
    for key, ref in index.get("from_base", {}).items():
        tensor = state.get(ref["base_key"])
        if tensor is None:
            raise KitError(f"{key}: the base {base!r} has no {ref['base_key']}")
        if tensor_sha256(tensor) == ref["sha256"]:
            matched[key] = "exact"
        elif tensor.is_floating_point() and tensor_sha256(tensor.to(torch.float16).to(tensor.dtype)) == ref["sha256"]:
            matched[key] = "float16 round trip"
        else:
            raise KitError(f"{key}: the base {base!r} is not the one the device trained with (SHA-256 differs)")
        tensors[key] = tensor.clone()  # two encoders may take the same base tensor: one copy each
    return tensors, matched


def restore(files: Path, out: Path, base: str = "minilm", reference: Path | None = None) -> dict[str, Any]:
    """Write the full model directory ``out`` and check it; returns the check (raises KitError on a failure)."""
    from dphr_haystack.model.phrase_model import PhraseModel
    from dphr_haystack.model.weights import WEIGHTS_INDEX_FILE, write_weights

    summary = check_returned(files)
    bundle = read_json(files / MODEL_FILES)["files"]
    index = json.loads(bundle[WEIGHTS_INDEX_FILE]["data"])
    shards = sorted(set(index["weight_map"].values()))
    missing = [name for name in shards if not (files / name).is_file()]
    if missing:
        raise KitError(f"shards missing from {files}: {missing}")
    state = trained_tensors(files, index, shards)
    frozen, matched = frozen_tensors(index, base)
    state.update(frozen)
    if out.exists() and any(out.iterdir()):
        if not (out / "device_run.json").is_file():
            raise KitError(f"{out} exists and is not a model this script restored: choose another --out")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, item in bundle.items():
        if name == WEIGHTS_INDEX_FILE:
            continue
        data = item["data"].encode("utf-8") if item["encoding"] == "utf-8" else base64.b64decode(item["data"])
        if name == "dphr_config.json":
            config = json.loads(data)
            config["base_model"] = base
            data = json.dumps(config, indent=2).encode("utf-8")
        (out / name).write_bytes(data)
    write_weights({k: v.contiguous() for k, v in state.items()}, out)
    model = PhraseModel.load(out)
    check: dict[str, Any] = {
        "out": str(out),
        "status": summary.get("status"),
        "exported": summary.get("exported"),
        "trained_tensors": len(state) - len(frozen),
        "from_base": matched,
    }
    if (files / PROBE).is_file():
        check["probe"] = compare(probe_vectors(model), load_probe(files / PROBE))
    if reference is not None:
        check["reference"] = compare(probe_vectors(model), probe_vectors(PhraseModel.load(reference)))
    for name in ("probe", "reference"):
        if name in check and not (
            check[name]["min_cosine"] >= MIN_COSINE and check[name]["max_rel_diff"] <= MAX_REL_DIFF
        ):
            raise KitError(
                f"the rebuilt model's vectors differ from the {name}'s: min cosine {check[name]['min_cosine']:.6f} "
                f"(>= {MIN_COSINE}), max relative difference {check[name]['max_rel_diff']:.4g} (<= {MAX_REL_DIFF})"
            )
    if "probe" not in check:
        check["warning"] = f"no {PROBE} came back: the rebuilt model was loaded, not compared"
    if summary.get("status") != "complete":
        check["warning"] = f"the call ended {summary.get('status')}: this is {summary.get('exported')}, mid-schedule"
    write_json(out / "device_run.json", {**summary, "restore": check})
    if (files / "metrics.jsonl").is_file():
        shutil.copyfile(files / "metrics.jsonl", out / "metrics.jsonl")
    return check


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", required=True, help="the folder the call's $OUT files were fetched into")
    parser.add_argument("--out", required=True, help="the model directory to write (replaced)")
    parser.add_argument("--base", default="minilm", help="this machine's copy of the base the device trained from")
    parser.add_argument("--reference", help="also compare with this model directory (e.g. the device's own)")
    args = parser.parse_args(argv)
    try:
        check = restore(Path(args.files), Path(args.out), args.base, Path(args.reference) if args.reference else None)
    except DphrError as exc:  # KitError, or ModelLoadError from a damaged shard
        print(f"restore: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(check, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
