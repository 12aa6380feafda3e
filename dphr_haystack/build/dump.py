"""Phrase dump: passages → filtered token vectors with character offsets, in resumable shards.

A shard is a directory holding ``vectors.npy`` (float16 or int8, consecutive per passage),
``tokens.npy`` (per stored token: passage, subword position, char start, char end), ``passages.jsonl``
and, written last, ``shard.json`` (counts, codec and the SHA-256 of the other files and of itself). A shard
without an intact ``shard.json`` or whose files do not match it is incomplete and is redone on resume.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import shutil
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from .._util.atomic import file_sha256, write_file_atomic
from .._util.memory import pin_malloc_thresholds, release_free_memory
from .._util.nofollow import make_temp_dir, open_no_follow, refuse_symlink
from ..errors import EmptyCorpusError, IndexLoadError, InvalidParameterError, ModelMismatchError
from ..index.codec import VectorCodec
from ..index.storage import check_token_offsets
from ..model.inputs import count_rows
from ..model.phrase_model import PhraseModel
from ..params import check_param
from .corpus import CorpusStats, Passage, read_corpus

logger = logging.getLogger(__name__)

# Vectors an int8 codec is calibrated on (the first passages' tokens, as far as this many).
CALIBRATION_VECTORS = 20_000
TOKEN_DTYPE = np.dtype([("passage", "<i8"), ("position", "<i4"), ("char_start", "<i4"), ("char_end", "<i4")])
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
                _verify_shard(path, meta)
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


def encode_shard(
    model: PhraseModel,
    passages: Sequence[Passage],
    codec: VectorCodec,
    filter_threshold: float | None = None,
    batch_size: int = 32,
) -> PhraseShard:
    """Encode passages and keep the tokens whose start or end filter logit exceeds ``filter_threshold``.

    With no threshold every context token is kept. A passage whose tokens are all filtered keeps its
    first token (as DensePhrases does), so every passage stays retrievable. The whole shard is returned in memory:
    :func:`encode_shard_stream` hands it over a piece at a time instead.
    """
    records, pieces = encode_shard_stream(model, passages, codec, filter_threshold, batch_size)
    parts = list(pieces)
    if parts:
        vectors = np.concatenate([piece.vectors for piece in parts])
        tokens = np.concatenate([piece.tokens for piece in parts])
    else:
        vectors = codec.encode(np.zeros((0, model.hidden_size), np.float32))
        tokens = np.zeros(0, TOKEN_DTYPE)
    return PhraseShard(vectors, tokens, records, codec)


def encode_shard_stream(
    model: PhraseModel,
    passages: Sequence[Passage],
    codec: VectorCodec,
    filter_threshold: float | None = None,
    batch_size: int = 32,
) -> tuple[list[dict[str, Any]], Iterator[ShardPiece]]:
    """:func:`encode_shard` with bounded memory: the passage records, and an iterator of the kept tokens' pieces.

    The passages are tokenised at once (for the records' token counts); the pieces are encoded as they are asked
    for, ``batch_size`` windows at a time for a long passage (:meth:`PhraseModel.iter_encoded_pieces`), in passage
    and row order (rows are the context tokens or, with ``passage_stride_mode="step"``, every window's tokens, as
    :meth:`PhraseModel.encode_passages` gives them). A consumer that writes each piece out before asking for the
    next (:func:`write_shard`, ``PhraseIndex.add_passages``) holds one batch's vectors however long a passage is.
    """
    tokenized = model.tokenize_passages([p.text for p in passages], [p.title for p in passages])
    records = [
        {
            "id": passage.id,
            "document_id": passage.document_id,
            "title": passage.title,
            "text": passage.text,
            "meta": dict(passage.meta),
            "num_context_tokens": count_rows(tp, model.config),
        }
        for passage, tp in zip(passages, tokenized)
    ]
    return records, _kept_pieces(model, tokenized, codec, filter_threshold, batch_size)


def _kept_pieces(model: PhraseModel, tokenized, codec: VectorCodec, threshold: float | None, batch_size: int):
    current, kept_any, first = -1, False, None
    for p_idx, piece in model.iter_encoded_pieces(tokenized, batch_size):
        if p_idx != current:
            if first is not None and not kept_any:
                yield first  # every token of the previous passage was filtered out: its first token stays
            current, kept_any, first = p_idx, False, None
        if first is None and len(piece.positions):
            first = _shard_piece(codec, p_idx, piece, np.zeros(1, dtype=np.int64))
        keep = np.arange(len(piece.positions)) if threshold is None else _above(piece.filter_logits, threshold)
        if keep.size:
            kept_any = True
            yield _shard_piece(codec, p_idx, piece, keep)
    if first is not None and not kept_any:
        yield first


def _shard_piece(codec: VectorCodec, p_idx: int, piece, keep: np.ndarray) -> ShardPiece:
    tokens = np.zeros(len(keep), dtype=TOKEN_DTYPE)
    tokens["passage"] = p_idx
    tokens["position"] = piece.positions[keep]
    tokens["char_start"] = piece.char_offsets[keep, 0]
    tokens["char_end"] = piece.char_offsets[keep, 1]
    return ShardPiece(codec.encode(piece.vectors[keep]), tokens)


def _above(filter_logits: np.ndarray, threshold: float) -> np.ndarray:
    return np.nonzero(filter_logits.max(axis=1) > threshold)[0]


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


def chunked(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


@dataclass
class DumpSummary:
    """What a dump run did."""

    shards: list[Path]
    encoded_shards: int
    skipped_shards: int
    passages: int
    skipped_empty: int
    vectors: int


def dump_phrases(
    model: PhraseModel,
    corpus: str | Path | Iterable[Any],
    out_dir: str | Path,
    shard_size: int = 1000,
    filter_threshold: float | None = None,
    dtype: str = "float16",
    batch_size: int = 32,
    progress: bool = True,
    worker: int = 0,
    num_workers: int = 1,
) -> DumpSummary:
    """Encode a corpus into shards under ``out_dir``; re-running skips every complete shard.

    Shard ``i`` holds passages ``[i·shard_size, (i+1)·shard_size)`` of the corpus; worker ``w`` of
    ``num_workers`` encodes the shards with ``i % num_workers == w``, so independent processes (or
    machines) can split one dump. ``dump.json`` records the model fingerprint and settings; resuming
    with another model or other settings fails instead of mixing vectors. Memory stays flat however large
    the corpus: one shard is in memory at a time, and on glibc the process's malloc thresholds are pinned
    (see :mod:`dphr_haystack._util.memory`).
    """
    from tqdm.auto import tqdm

    shard_size, batch_size = check_param("shard_size", shard_size), check_param("batch_size", batch_size)
    num_workers = check_param("num_workers", num_workers)
    worker = check_param("worker", worker, high=num_workers - 1, why=f"workers are numbered 0 to {num_workers - 1}")
    pin_malloc_thresholds()  # a dump's memory stays flat however large the corpus (see _memory.py)
    out = Path(out_dir)
    stats = CorpusStats()
    passages = read_corpus(corpus, stats)
    first_passage = next(passages, None)  # a missing or unreadable corpus fails before out_dir is touched
    if first_passage is None:
        raise EmptyCorpusError(f"the corpus has no passage with text ({stats.skipped_empty} empty ones skipped)")
    out.mkdir(parents=True, exist_ok=True)
    fingerprint = model.phrase_fingerprint()
    settings = {
        "model_fingerprint": fingerprint,
        "filter_threshold": filter_threshold,
        "dtype": dtype,
        "shard_size": shard_size,
        "model_config": model.config.to_dict(),
        "dim": model.hidden_size,
        "format_version": DUMP_FORMAT_VERSION,
    }
    _check_or_write_dump_settings(out / "dump.json", settings)
    codec: VectorCodec | None = _existing_codec(out) if dtype == "int8" else VectorCodec(dtype)
    shards, encoded, skipped, vectors = [], 0, 0, 0
    bar = tqdm(desc="phrase dump", unit="passage", disable=not progress)
    for shard_no, chunk in enumerate(chunked(itertools.chain([first_passage], passages), shard_size)):
        if shard_no % num_workers != worker:
            continue
        path = out / f"shard-{shard_no:06d}"
        digest = passage_ids_digest(p.id for p in chunk)
        done = _complete_shard_meta(path / "shard.json")
        if done.get("passage_ids_sha256") == digest and isinstance(done.get("num_vectors"), int):
            skipped += 1
            vectors += done["num_vectors"]
        else:
            if codec is None:
                codec = VectorCodec.calibrate("int8", calibration_sample(model, chunk, batch_size))
            records, pieces = encode_shard_stream(model, chunk, codec, filter_threshold, batch_size)
            vectors += write_shard(path, records, pieces, codec, model.hidden_size)
            encoded += 1
            del records, pieces
            release_free_memory()  # flat peak memory however many shards (see _memory.py)
        shards.append(path)
        bar.update(len(chunk))
    bar.close()
    return DumpSummary(shards, encoded, skipped, stats.passages, stats.skipped_empty, vectors)


def calibration_sample(
    model: PhraseModel, passages: Sequence[Passage], batch_size: int = 32, limit: int = CALIBRATION_VECTORS
) -> np.ndarray:
    """Float32 vectors of the first passages (at most 64 passages and ``limit`` vectors) to fit an int8 codec on;
    a long passage is encoded only as far as the sample needs."""
    sample = passages[:64]
    tokenized = model.tokenize_passages([p.text for p in sample], [p.title for p in sample])
    parts, total = [], 0
    for _, piece in model.iter_encoded_pieces(tokenized, batch_size):
        parts.append(piece.vectors[: limit - total])
        total += len(parts[-1])
        if total >= limit:
            break
    return np.concatenate(parts) if parts else np.zeros((0, model.hidden_size), np.float32)


def _complete_shard_meta(meta_path: Path) -> dict[str, Any]:
    """A shard's ``shard.json`` when the shard is complete and intact, else {} (the shard is encoded again).

    Resuming therefore reads every finished shard once to check its sums: far cheaper than encoding it.
    """
    try:
        meta = json.loads(meta_path.read_text())
        if not isinstance(meta, dict):
            return {}
        _verify_shard(meta_path.parent, meta)
    except (OSError, ValueError, TypeError, AttributeError, RecursionError):  # IndexLoadError included (an OSError)
        return {}
    return meta


_SHARD_FILES = ("vectors.npy", "tokens.npy", "passages.jsonl")


def _meta_digest(meta: dict[str, Any]) -> str:
    body = {k: v for k, v in meta.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()


def _verify_shard(path: Path, meta: dict[str, Any]) -> None:
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


def _check_or_write_dump_settings(path: Path, settings: dict[str, Any]) -> None:
    if path.is_file():
        try:
            previous = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError) as exc:
            raise IndexLoadError(f"{path} is corrupted ({exc}); remove the dump directory and start again") from exc
        if not isinstance(previous, dict):
            raise IndexLoadError(f"{path} is corrupted (not a JSON object); remove the dump directory and start again")
        for key in ("model_fingerprint", "filter_threshold", "dtype", "shard_size", "dim"):
            if previous.get(key) != settings[key]:
                raise ModelMismatchError(
                    f"{path}: existing dump has {key}={previous.get(key)!r}, this run {settings[key]!r}; "
                    "use another output directory or the same settings"
                )
        return
    write_file_atomic(path, json.dumps(settings, indent=1), fsync=False)


def _existing_codec(out: Path) -> VectorCodec | None:
    for meta_path in sorted(out.glob("shard-*/shard.json")):
        codec = _complete_shard_meta(meta_path).get("codec")
        if isinstance(codec, dict):
            try:
                return VectorCodec(**codec)
            except (TypeError, InvalidParameterError):
                continue
    return None


def list_shards(dump_dir: str | Path) -> list[Path]:
    """Complete shards of a dump directory, in corpus order."""
    return sorted(p.parent for p in Path(dump_dir).glob("shard-*/shard.json"))
