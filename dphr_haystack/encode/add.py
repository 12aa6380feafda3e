"""Encoding passages straight into a phrase index: the dump's encoding (:mod:`~dphr_haystack.encode.dump`) appended
to a :class:`~dphr_haystack.index.phrase_index.PhraseIndex` chunk by chunk, each chunk one write transaction."""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Sized
from pathlib import Path
from typing import Any

from .._util.memory import release_free_memory
from ..corpus import CorpusStats, Passage, read_corpus
from ..errors import EmptyCorpusError, InvalidParameterError, ModelMismatchError
from ..index.codec import VectorCodec
from ..index.phrase_index import PhraseIndex
from ..params import check_choice, check_param
from .dump import calibration_sample, chunked, encode_shard, encode_shard_stream

DUPLICATE_POLICIES = ("fail", "skip", "overwrite")


def add_passages(
    index: PhraseIndex,
    model,
    corpus: str | Path | Iterable[Any],
    batch_size: int = 32,
    chunk_size: int = 512,
    duplicates: str = "fail",
    progress: bool = True,
) -> CorpusStats:
    """Encode passages with ``model`` and add them to ``index``, committing every ``chunk_size`` passages.

    ``duplicates`` decides what an id already in the index does: ``fail`` (raise), ``skip`` (keep the
    stored one) or ``overwrite`` (delete the stored one, add the new one). Passages without text are
    skipped and counted in the returned stats. Other writers of the index interleave between chunks.

    Example:
        >>> index = PhraseIndex.create(model)
        >>> stats = add_passages(index, model, "corpus.jsonl")
    """
    from tqdm.auto import tqdm

    check_choice("duplicates", duplicates, DUPLICATE_POLICIES)
    batch_size, chunk_size = check_param("batch_size", batch_size), check_param("chunk_size", chunk_size)
    if model.phrase_fingerprint() != index.model_fingerprint:
        raise ModelMismatchError(
            "add_passages: the model's phrase encoder differs from the one this index was built with"
        )
    stats = CorpusStats()
    total = len(corpus) if isinstance(corpus, Sized) and not isinstance(corpus, str) else None  # a list: a total
    bar = tqdm(total=total, desc="indexing phrases", unit="passage", disable=not progress)
    for chunk in chunked(read_corpus(corpus, stats), chunk_size):
        with index.writing():  # one transaction per chunk: other writers interleave between chunks
            kept = apply_duplicate_policy(index, chunk, duplicates)
            if kept:
                ensure_codec(index, model, kept, batch_size)
                add_encoded(index, model, kept, batch_size)
        if kept:
            release_free_memory()  # flat peak memory however many chunks (see _util/memory.py)
        bar.update(len(chunk))
    bar.close()
    if stats.passages == 0 and index.num_passages == 0:
        raise EmptyCorpusError(f"the corpus has no passage with text ({stats.skipped_empty} empty ones skipped)")
    return stats


def apply_duplicate_policy(index: PhraseIndex, chunk: list[Passage], policy: str) -> list[Passage]:
    """The passages of ``chunk`` to add under a ``duplicates`` policy (``overwrite`` deletes the stored ones in the
    chunk's write transaction: the deletion commits with the add, or neither does)."""
    clashes = [p.id for p in chunk if index.passage_row(p.id) is not None]
    if not clashes:
        return chunk
    if policy == "fail":
        raise InvalidParameterError(f"passage ids already in the index: {clashes[:5]} (duplicates='fail')")
    if policy == "skip":
        return [p for p in chunk if index.passage_row(p.id) is None]
    index.delete_passages(clashes, commit=False)  # committed with the chunk's add, or rolled back with it
    return chunk


def ensure_codec(index: PhraseIndex, model, chunk: Sequence[Passage], batch_size: int) -> None:
    """Fit an int8 index's codec on the first passages it is given (nothing once it is calibrated)."""
    if index.storage.codec_calibrated:
        return
    index.storage.set_codec(VectorCodec.calibrate(index.codec.dtype, calibration_sample(model, chunk, batch_size)))


def add_encoded(index: PhraseIndex, model, passages: Sequence[Passage], batch_size: int) -> None:
    """Encode passages and append them in one commit. On disk their pieces are appended as they are encoded
    (:func:`~dphr_haystack.encode.dump.encode_shard_stream`), so memory stays bounded however long a passage is;
    in memory the index holds every vector anyway."""
    if index.path is None:
        index.add_shard(encode_shard(model, passages, index.codec, index.filter_threshold, batch_size))
        return
    records, pieces = encode_shard_stream(model, passages, index.codec, index.filter_threshold, batch_size)
    index.append_stream(records, pieces, index.codec)
