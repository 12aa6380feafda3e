"""Phrase dump: passages → filtered token vectors with character offsets, in resumable shards (``index.shards``).

A shard is a directory holding ``vectors.npy`` (float16 or int8, consecutive per passage),
``tokens.npy`` (per stored token: passage, subword position, char start, char end), ``passages.jsonl``
and, written last, ``shard.json`` (counts, codec and the SHA-256 of the other files and of itself). A shard
without an intact ``shard.json`` or whose files do not match it is incomplete and is redone on resume.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from .._util.atomic import write_file_atomic
from .._util.memory import pin_malloc_thresholds, release_free_memory
from ..corpus import CorpusStats, Passage, read_corpus
from ..errors import EmptyCorpusError, IndexLoadError, InvalidParameterError, ModelMismatchError
from ..index.codec import VectorCodec
from ..index.shards import (
    DUMP_FORMAT_VERSION,
    TOKEN_DTYPE,
    PhraseShard,
    ShardPiece,
    complete_shard_meta,
    passage_ids_digest,
    write_shard,
)
from ..model.inputs import count_rows
from ..model.phrase_model import PhraseModel
from ..params import check_param

logger = logging.getLogger(__name__)

# Vectors an int8 codec is calibrated on (the first passages' tokens, as far as this many).
CALIBRATION_VECTORS = 20_000


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
    next (:func:`write_shard`, :func:`~dphr_haystack.encode.add.add_passages`) holds one batch's vectors however
    long a passage is.
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
    check_or_write_dump_settings(out / "dump.json", settings)
    codec: VectorCodec | None = _existing_codec(out) if dtype == "int8" else VectorCodec(dtype)
    shards, encoded, skipped, vectors = [], 0, 0, 0
    bar = tqdm(desc="phrase dump", unit="passage", disable=not progress)
    for shard_no, chunk in enumerate(chunked(itertools.chain([first_passage], passages), shard_size)):
        if shard_no % num_workers != worker:
            continue
        path = out / f"shard-{shard_no:06d}"
        digest = passage_ids_digest(p.id for p in chunk)
        done = complete_shard_meta(path / "shard.json")
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


def check_or_write_dump_settings(path: Path, settings: dict[str, Any]) -> None:
    """Write a dump's settings to ``path`` (``dump.json``), or raise ModelMismatchError when the dump already there
    was made with other settings (model, filter threshold, dtype, shard size or dimension)."""
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
        codec = complete_shard_meta(meta_path).get("codec")
        if isinstance(codec, dict):
            try:
                return VectorCodec(**codec)
            except (TypeError, InvalidParameterError):
                continue
    return None
