"""Encoding the pending phrases of a Haystack 2 :class:`~dphr_haystack.haystack2.PhraseDocumentStore`.

The pending passages are read under the store's write lock; each chunk is then encoded outside it (other writers
and searches go on meanwhile) and committed under it, with only the passages whose document is still stored as it
was encoded and has no phrases yet.
"""

from __future__ import annotations

from .._util.memory import release_free_memory
from ..corpus import Passage
from ..documents.index_settings import warn_if_index_keeps_others
from ..documents.passages import unencoded_passages
from ..documents.retrieval import check_phrase_model
from ..encode.dump import chunked, encode_shard
from ..index.codec import VectorCodec
from ..index.phrase_index import PhraseIndex
from ..index.shards import PhraseShard
from ..model.phrase_model import PhraseModel
from .syncing import StoreSync

MODEL_MISMATCH = (
    "this store's phrases were encoded by another phrase model: use that model, or a new store "
    "(or delete_all_documents and write them again)"
)


def check_model(index: PhraseIndex, model: PhraseModel) -> None:
    """ModelMismatchError unless ``index`` holds ``model``'s phrases."""
    check_phrase_model(index, model, MODEL_MISMATCH)


def update_phrases(
    sync: StoreSync,
    model: PhraseModel,
    settings: tuple[str, str, int | None],
    batch_size: int,
    chunk_size: int,
    progress: bool,
) -> int:
    """Encode the store's pending documents a chunk at a time; returns how many were committed. ``settings``:
    the FAISS factory, phrase dtype and key vectors a passage of a new index."""
    from tqdm.auto import tqdm

    if not _pending(sync, model, locked=False):  # nothing to encode: no writer lock taken (a read-only store too)
        return 0
    records = _pending(sync, model, locked=True)
    if sync.index is not None:
        asked = {"phrase_dtype": settings[1], "phrase_key_vectors": settings[2]}
        warn_if_index_keeps_others(sync.index, asked, "of this store")
    encoded = 0
    bar = tqdm(total=len(records), desc="indexing phrases", unit="doc", disable=not (progress and records))
    for chunk in chunked(records, chunk_size):
        codec, threshold = _encoding(sync.index, model, settings[1])
        shard = encode_shard(model, [Passage(**p) for p in chunk], codec, threshold, batch_size)  # lock free
        with sync.writing():
            encoded += _commit_chunk(sync, model, chunk, shard, settings)
        del shard
        release_free_memory()  # flat peak memory however many chunks
        bar.update(len(chunk))
    bar.close()
    return encoded


def _pending(sync: StoreSync, model: PhraseModel, locked: bool) -> list[dict[str, str]]:
    """The passages without phrases (read under the writer lock when ``locked``, else as a read)."""
    if not locked:
        sync.follow()
    with sync.writing() if locked else sync.lock:
        if sync.index is not None:
            check_model(sync.index, model)
        return unencoded_passages(sync.index, sync.store.storage, sync.passage_of)


def _encoding(index: PhraseIndex | None, model: PhraseModel, dtype: str) -> tuple[VectorCodec, float | None]:
    """The codec and filter threshold a chunk is encoded with (float32 for an int8 index not calibrated yet: the
    index calibrates on it)."""
    if index is None:
        return VectorCodec("float32" if dtype == "int8" else dtype), model.config.filter_threshold
    calibrated = index.storage.codec_calibrated
    return (index.codec if calibrated else VectorCodec("float32")), index.filter_threshold


def _commit_chunk(
    sync: StoreSync,
    model: PhraseModel,
    chunk: list[dict[str, str]],
    shard: PhraseShard,
    settings: tuple[str, str, int | None],
) -> int:
    """Add the chunk's phrases of documents unchanged since they were read (the write lock held)."""
    current = [i for i, passage in enumerate(chunk) if sync.passage_of(passage["id"]) == passage]
    if not current:
        return 0
    if sync.index is None:
        sync.create_index(model, *settings)
    else:
        check_model(sync.index, model)
    index = sync.writable_index()
    assert index is not None
    keep = [i for i in current if index.passage_row(chunk[i]["id"]) is None]
    if keep:
        index.add_shard(shard.subset(keep))
        sync.phrases_changed = True
    return len(keep)


__all__ = ["check_model", "update_phrases"]
