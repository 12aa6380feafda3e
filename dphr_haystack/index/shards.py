"""Shard format: the stored token vectors and token rows of a run of passages, written by the dump, read by the index.

A shard is a directory holding ``vectors.npy`` (float16 or int8, consecutive per passage),
``tokens.npy`` (per stored token: passage, subword position, char start, char end), ``passages.jsonl``
and, written last, ``shard.json`` (counts, codec and the SHA-256 of the other files and of itself). A shard
without an intact ``shard.json`` or whose files do not match it is incomplete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._util.atomic import file_sha256
from .._util.nofollow import make_temp_dir, open_no_follow, refuse_symlink
from ..errors import IndexLoadError
from .codec import VectorCodec
from .storage import TOKEN_DTYPE, check_token_offsets

DUMP_FORMAT_VERSION = 1


@dataclass
class PhraseShard:
    """Stored token vectors of a run of passages. ``tokens['passage']`` indexes ``passages`` (local)."""

    vectors: np.ndarray  # (n, d) stored dtype
    tokens: np.ndarray  # (n,) TOKEN_DTYPE
    passages: list[dict[str, Any]]  # id, document_id, title, text, meta, num_context_tokens
    codec: VectorCodec = field(default_factory=VectorCodec)

    def __len__(self) -> int:
        return len(self.tokens)

    def subset(self, keep: list[int]) -> PhraseShard:
        """The passages at positions ``keep`` (ascending) of the shard, with their tokens and vectors."""
        if len(keep) == len(self.passages):
            return self
        position = np.full(len(self.passages), -1, dtype=np.int64)
        position[keep] = np.arange(len(keep))
        rows = position[self.tokens["passage"]] >= 0
        tokens = self.tokens[rows].copy()
        tokens["passage"] = position[tokens["passage"]]
        return PhraseShard(self.vectors[rows], tokens, [self.passages[i] for i in keep], self.codec)

    def save(self, path: str | Path) -> None:
        """Write the shard atomically: a fresh temporary directory renamed into place (a symbolic link at ``path``
        is refused)."""
        write_shard(path, self.passages, [ShardPiece(self.vectors, self.tokens)], self.codec, self.vectors.shape[1])

    @classmethod
    def load(cls, path: str | Path, verify: bool = True) -> PhraseShard:
        """Read a shard; with ``verify``, its files must match the SHA-256 sums in ``shard.json``."""
        path = Path(path)
        meta_path = path / "shard.json"
        try:
            meta = json.loads(meta_path.read_text())
            if not isinstance(meta, dict):
                raise ValueError(f"{meta_path} is not a JSON object")
            if meta.get("format_version") != DUMP_FORMAT_VERSION:
                raise IndexLoadError(
                    f"{meta_path}: dump format {meta.get('format_version')!r}, expected {DUMP_FORMAT_VERSION}"
                )
            if verify:
                verify_shard(path, meta)
            # allow_pickle=False: a .npy holding objects (a pickle) is refused, never unpickled
            vectors = np.load(path / "vectors.npy", mmap_mode="r", allow_pickle=False)
            tokens = np.load(path / "tokens.npy", allow_pickle=False)
            with (path / "passages.jsonl").open(encoding="utf-8") as handle:
                passages = [json.loads(line) for line in handle]
            codec = VectorCodec(**meta["codec"])
            counts_match = len(vectors) == meta["num_vectors"] == len(tokens) and len(passages) == meta["num_passages"]
        except IndexLoadError:
            raise
        except (OSError, ValueError, KeyError, TypeError, EOFError, RecursionError) as exc:  # DphrError's included
            raise IndexLoadError(f"incomplete or corrupted shard {path}: {exc}") from exc
        if not counts_match:
            raise IndexLoadError(f"{path}: shard files disagree with {meta_path} (truncated?)")
        if vectors.ndim != 2 or tokens.dtype != TOKEN_DTYPE or vectors.dtype != codec.numpy_dtype:
            raise IndexLoadError(
                f"{path}: vectors {vectors.dtype}{vectors.shape} / tokens {tokens.dtype} are not "
                f"what a {codec.dtype} shard holds"
            )
        if not all(
            isinstance(r, dict) and isinstance(r.get("id"), str) and isinstance(r.get("text"), str) for r in passages
        ):
            raise IndexLoadError(f"{path / 'passages.jsonl'}: every line must be a passage object with an id and text")
        if len(tokens) and (tokens["passage"].min() < 0 or tokens["passage"].max() >= len(passages)):
            raise IndexLoadError(f"{path / 'tokens.npy'}: token rows point outside the shard's passages")
        lengths = np.fromiter((len(r["text"]) for r in passages), dtype=np.int64, count=len(passages))
        check_token_offsets(tokens, lengths, path / "tokens.npy")
        return cls(vectors, tokens, passages, codec)


def passage_ids_digest(ids: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for pid in ids:
        digest.update(pid.encode("utf-8") + b"\0")
    return digest.hexdigest()


@dataclass
class ShardPiece:
    """Stored vectors and token rows of a run of consecutive kept tokens of one passage (``tokens['passage']``: the
    passage's index in its shard)."""

    vectors: np.ndarray  # (k, d) stored dtype
    tokens: np.ndarray  # (k,) TOKEN_DTYPE


def write_shard(
    path: str | Path, records: list[dict[str, Any]], pieces: Iterable[ShardPiece], codec: VectorCodec, dim: int
) -> int:
    """Write a shard atomically (a fresh temporary directory renamed into place; a symbolic link at ``path`` is
    refused) from its records and pieces, each piece appended to the files as it comes, so a shard never needs to
    fit in memory. Returns the number of vectors."""
    path = refuse_symlink(Path(path))
    tmp = make_temp_dir(path)
    try:
        with (
            NpyWriter(tmp / "vectors.npy", codec.numpy_dtype, (dim,)) as vectors,
            NpyWriter(tmp / "tokens.npy", TOKEN_DTYPE, ()) as tokens,
        ):
            for piece in pieces:
                vectors.write(piece.vectors)
                tokens.write(piece.tokens)
        with open_no_follow(tmp / "passages.jsonl", "x", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        meta = {
            "format_version": DUMP_FORMAT_VERSION,
            "num_vectors": vectors.rows,
            "num_passages": len(records),
            "codec": codec.to_dict(),
            "passage_ids_sha256": passage_ids_digest(r["id"] for r in records),
            "files_sha256": {name: file_sha256(tmp / name) for name in _SHARD_FILES},
        }
        meta["sha256"] = _meta_digest(meta)
        with open_no_follow(tmp / "shard.json", "x", encoding="utf-8") as handle:
            handle.write(json.dumps(meta, indent=1))
        shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return vectors.rows


class NpyWriter:
    """A ``.npy`` file written a block of rows at a time (the row count need not be known in advance).

    Its header is first written for the largest possible row count and rewritten, padded to the same length, with
    the real count on close; ``np.load`` reads the file as if ``np.save`` had written it.
    """

    _MAX_ROWS = 10**15

    def __init__(self, path: Path, dtype: np.dtype, row_shape: tuple[int, ...]) -> None:
        self.path, self.dtype, self.row_shape, self.rows = path, np.dtype(dtype), tuple(row_shape), 0
        self._header_size = len(_npy_header(self.dtype, (self._MAX_ROWS, *self.row_shape)))
        self._handle = open_no_follow(path, "xb")  # a fresh file: a symbolic link (or anything) there is refused
        self._handle.write(b" " * self._header_size)

    def write(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=self.dtype)
        if block.shape[1:] != self.row_shape:
            raise ValueError(f"{self.path}: rows of shape {block.shape[1:]}, expected {self.row_shape}")
        self._handle.write(block.reshape(-1).view(np.uint8).data)
        self.rows += len(block)

    def close(self) -> None:
        if self._handle.closed:
            return
        self._handle.seek(0)
        self._handle.write(_npy_header(self.dtype, (self.rows, *self.row_shape), self._header_size))
        self._handle.close()

    def __enter__(self) -> NpyWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _npy_header(dtype: np.dtype, shape: tuple[int, ...], size: int | None = None) -> bytes:
    """The ``.npy`` (format 1.0) header of a C-order array; padded to ``size`` bytes when given (else to 64)."""
    text = repr({"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape})
    total = size if size is not None else -(-(10 + len(text) + 1) // 64) * 64
    body = text + " " * (total - 10 - len(text) - 1) + "\n"
    if len(body) + 10 != total or len(body) > 0xFFFF:
        raise ValueError(f"an .npy header of {len(text)} characters does not fit {total} bytes")
    return np.lib.format.magic(1, 0) + struct.pack("<H", len(body)) + body.encode("latin1")


def read_npy_blocks(path: str | Path, block_rows: int = 65536) -> Iterator[np.ndarray]:
    """The rows of a ``.npy`` file, ``block_rows`` at a time, read with plain file reads (no memory map, no pickle).

    Raises:
        IndexLoadError: The file is not a C-order ``.npy`` of plain values, or is shorter than its header says.
    """
    path = Path(path)
    with path.open("rb") as handle:
        try:
            version = np.lib.format.read_magic(handle)
            read_header = (
                np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            )
            shape, fortran_order, dtype = read_header(handle)
        except ValueError as exc:
            raise IndexLoadError(f"{path} is not a readable .npy file: {exc}") from exc
        if fortran_order or dtype.hasobject or not shape:
            raise IndexLoadError(f"{path}: expected a C-order array of plain values")
        row_items = int(np.prod(shape[1:], dtype=np.int64))
        done = 0
        while done < shape[0]:
            count = min(block_rows, shape[0] - done)
            buffer = bytearray(count * row_items * dtype.itemsize)
            if handle.readinto(buffer) != len(buffer):
                raise IndexLoadError(f"{path} is truncated: its header promises {shape[0]} rows")
            yield np.frombuffer(buffer, dtype=dtype).reshape((count, *shape[1:]))
            done += count


def complete_shard_meta(meta_path: Path) -> dict[str, Any]:
    """A shard's ``shard.json`` when the shard is complete and intact, else {} (the shard is encoded again).

    Resuming therefore reads every finished shard once to check its sums: far cheaper than encoding it.
    """
    try:
        meta = json.loads(meta_path.read_text())
        if not isinstance(meta, dict):
            return {}
        verify_shard(meta_path.parent, meta)
    except (OSError, ValueError, TypeError, AttributeError, RecursionError):  # IndexLoadError included (an OSError)
        return {}
    return meta


_SHARD_FILES = ("vectors.npy", "tokens.npy", "passages.jsonl")


def _meta_digest(meta: dict[str, Any]) -> str:
    body = {k: v for k, v in meta.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()


def verify_shard(path: Path, meta: dict[str, Any]) -> None:
    """Raise IndexLoadError unless ``shard.json`` and the shard's files match their recorded SHA-256 sums."""
    if meta.get("sha256") != _meta_digest(meta):
        raise IndexLoadError(
            f"{path / 'shard.json'} is corrupted (or from a dump without checksums): "
            "delete the shard directory and resume the dump to encode it again"
        )
    sums = meta.get("files_sha256")
    if not isinstance(sums, dict) or set(sums) != set(_SHARD_FILES):
        raise IndexLoadError(f"{path / 'shard.json'} lists no checksums for {', '.join(_SHARD_FILES)}")
    for name in _SHARD_FILES:
        if not (path / name).is_file() or file_sha256(path / name) != sums[name]:
            raise IndexLoadError(
                f"{path / name} is missing or corrupted (checksum mismatch): delete "
                f"{path} and resume the dump to encode it again"
            )


def list_shards(dump_dir: str | Path) -> list[Path]:
    """Complete shards of a dump directory, in corpus order."""
    return sorted(p.parent for p in Path(dump_dir).glob("shard-*/shard.json"))
