"""Bring a reader trained on the device back, in as many calls as ``$OUT``'s limits need (device side and here).

A base-size reader's weights do not fit one call's ``$OUT`` (all-mpnet-base-v2: 438 MB in float32). The device side
writes the reader once in the compact weight format (int8 matrices, SHA-256 sums; what the shipped MiniLM reader
uses), packs that directory in one tar file, cuts it into pieces of at most 15 MiB and lists them with their SHA-256
in ``reader_pieces.json``; each ``part`` call then copies the next four pieces (60 MiB) and the list to ``$OUT``.
Here, ``join`` checks every piece, joins them, checks the whole tar's SHA-256 and unpacks the reader, which
``FARMReader``, ``TransformersExtractiveReader`` and :class:`dphr_haystack.verification.SpanReader` load as it is.

Usage::

    # on the device, after the training call (each part is one call; the first says how many there are)
    PYTHONPATH=. python3 scripts/device/run.py reader --name gpu-distill-mpnet --part 1
    # here, once every part's files are in one folder
    .venv/bin/python scripts/device/reader_back.py join --files DIR --out runs/gpu-distill-mpnet/reader-int8
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: the repository root is what the imports below need
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.device.kit import MIB, KitError, read_json, sha256_file, write_json  # noqa: E402

PIECES = "reader_pieces.json"
PIECE_BYTES = 15 * MIB
PIECES_PER_PART = 4
READER_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "dphr_windows.json",
)


def reader_dir(run_dir: Path) -> Path:
    """The reader stage's saved reader in a run directory."""
    for name in ("best", "final"):
        if (run_dir / "reader" / name / "config.json").is_file():
            return run_dir / "reader" / name
    raise KitError(f"{run_dir / 'reader'} holds no trained reader (best/ or final/): run the reader stage first")


def write_pieces(source: Path, work: Path, dtype: str = "int8") -> dict[str, Any]:
    """The reader in ``source`` as compact weights, tarred and cut into pieces under ``work`` (done once)."""
    from dphr_haystack.model.weights import read_weights, write_weights

    listing = work / PIECES
    if listing.is_file():
        return read_json(listing)
    shutil.rmtree(work, ignore_errors=True)
    compact = work / "reader"
    compact.mkdir(parents=True)
    for name in READER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, compact / name)
    state = {k: v for k, v in read_weights(source).items() if not k.endswith("position_ids")}
    weights = write_weights(state, compact, dtype=dtype, max_shard_mb=16.0)
    bundle = work / "reader.tar"
    with tarfile.open(bundle, "w") as tar:
        tar.add(compact, arcname="reader")
    pieces = []
    with bundle.open("rb") as handle:
        while chunk := handle.read(PIECE_BYTES):
            piece = work / f"reader.tar.{len(pieces):03d}"
            piece.write_bytes(chunk)
            pieces.append({"name": piece.name, "bytes": len(chunk), "sha256": sha256_file(piece)})
    listing_data = {
        "source": str(source),
        "dtype": dtype,
        "tar_bytes": bundle.stat().st_size,
        "tar_sha256": sha256_file(bundle),
        "pieces": pieces,
        "parts": -(-len(pieces) // PIECES_PER_PART),
        "weights": {k: v for k, v in weights.items() if k in ("bytes", "files")},
    }
    bundle.unlink()
    write_json(listing, listing_data)
    return listing_data


def copy_part(work: Path, part: int, out: Path) -> list[str]:
    """Copy part ``part`` (1-based) of the pieces and the list to ``out``; returns the pieces' names."""
    listing = read_json(work / PIECES)
    if not 1 <= part <= listing["parts"]:
        raise KitError(f"part {part}: the reader comes back in parts 1 to {listing['parts']}")
    chosen = listing["pieces"][(part - 1) * PIECES_PER_PART : part * PIECES_PER_PART]
    out.mkdir(parents=True, exist_ok=True)
    for piece in chosen:
        shutil.copyfile(work / piece["name"], out / piece["name"])
    shutil.copyfile(work / PIECES, out / PIECES)
    return [piece["name"] for piece in chosen]


def join(files: Sequence[Path], out: Path) -> dict[str, Any]:
    """Check and join the pieces found in ``files`` (folders), unpack the reader to ``out``; returns the list."""
    listings = [folder / PIECES for folder in files if (folder / PIECES).is_file()]
    if not listings:
        raise KitError(f"no {PIECES} in {[str(f) for f in files]}: not the files of a reader part")
    listing = read_json(listings[0])
    found: dict[str, Path] = {}
    for folder in files:
        for piece in listing["pieces"]:
            if (folder / piece["name"]).is_file():
                found.setdefault(piece["name"], folder / piece["name"])
    missing = [p["name"] for p in listing["pieces"] if p["name"] not in found]
    if missing:
        raise KitError(f"pieces missing: {missing} (parts 1 to {listing['parts']} must all come back)")
    with tempfile.TemporaryDirectory(dir=out.parent if out.parent.exists() else None) as tmp:
        bundle = Path(tmp) / "reader.tar"
        with bundle.open("wb") as joined:
            for piece in listing["pieces"]:
                path = found[piece["name"]]
                if path.stat().st_size != piece["bytes"] or sha256_file(path) != piece["sha256"]:
                    raise KitError(f"{path} differs from what the device wrote (size or SHA-256)")
                joined.write(path.read_bytes())
        if sha256_file(bundle) != listing["tar_sha256"]:
            raise KitError("the joined reader's SHA-256 differs from the device's")
        with tarfile.open(bundle) as tar:
            tar.extractall(tmp, filter="data")
        shutil.rmtree(out, ignore_errors=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(Path(tmp) / "reader"), out)
    write_json(out / "device_pieces.json", listing)
    return listing


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    joined = sub.add_parser("join", help="join the returned pieces into a reader directory (here)")
    joined.add_argument("--files", nargs="+", required=True, help="folders holding the returned parts' files")
    joined.add_argument("--out", required=True, help="the reader directory to write")
    args = parser.parse_args(argv)
    try:
        listing = join([Path(f) for f in args.files], Path(args.out))
    except KitError as exc:
        print(f"reader_back: {exc}", file=sys.stderr)
        return 1
    print(f"{args.out}: {len(listing['pieces'])} pieces, {listing['tar_bytes'] / MIB:.1f} MiB, SHA-256 checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
