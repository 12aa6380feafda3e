"""Building a phrase index from vectors already encoded, nothing encoded again: a phrase dump (serial,
multi-process or Ray) merged into one index (:func:`merge_dump`), or another index's passages with other key vectors
(:func:`copy_with_key_vectors`)."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .._util.atomic import replace_directory
from .._util.lock import WriterLock, directory_entries
from .._util.nofollow import make_temp_dir, refuse_symlink
from ..errors import IndexLoadError, InvalidParameterError, ModelMismatchError
from ..index.shards import PhraseShard, ShardPiece, list_shards
from .auto import AUTO, needs_rebuild
from .codec import VectorCodec
from .keys import rows_of_passages
from .phrase_index import PhraseIndex
from .storage import is_flat, remove_uncommitted_files

logger = logging.getLogger(__name__)


def merge_dump(
    dump_dir: str | Path,
    path: str | Path | None = None,
    faiss_factory: str = AUTO,
    model=None,
    model_path: str | None = None,
    on_disk: bool = False,
    flat_search: str = "faiss",
    progress: bool = True,
    **reindex_options: Any,
) -> PhraseIndex:
    """Merge the shards of a phrase dump (serial, multi-process or Ray) into one index, in corpus order.

    Every shard must be present: a distributed dump must be ``complete`` in ``dump-status.json``, which
    gives the shard count; otherwise gaps in the shard numbers are detected. Vectors are appended once, the
    manifest committed once, then the FAISS structure is built from all of them (:meth:`PhraseIndex.reindex`).
    With ``path``, the index is built in a temporary sibling directory and renamed into place.

    Example:
        >>> index = merge_dump("dump/", "my-index", faiss_factory="OPQ48,IVF4096,PQ48")
    """
    from tqdm.auto import tqdm

    dump_dir = Path(dump_dir)
    settings, shards = _read_dump(dump_dir)
    if model is not None and model.phrase_fingerprint() != settings["model_fingerprint"]:
        raise ModelMismatchError(f"{dump_dir}: the dump was made with another phrase encoder than the given model")
    first = _read_json(shards[0] / "shard.json")

    def create(target: Path | None) -> PhraseIndex:
        return PhraseIndex.create_for_encoder(
            int(settings["dim"]),
            settings["model_fingerprint"],
            dict(settings["model_config"]),
            target,
            faiss_factory="Flat",
            filter_threshold=settings.get("filter_threshold"),
            dtype=settings.get("dtype", "float16"),
            model_path=model_path,
            codec=VectorCodec(**first["codec"]),
        )

    def fill(index: PhraseIndex) -> None:
        for shard_dir in tqdm(shards, desc="merging shards", unit="shard", disable=not progress):
            index.append_shard(PhraseShard.load(shard_dir), merging=True)

    return build_index(path, create, fill, faiss_factory, on_disk, flat_search, progress, **reindex_options)


def copy_with_key_vectors(
    index: PhraseIndex,
    path: str | Path,
    key_vectors: int | None,
    faiss_factory: str = AUTO,
    progress: bool = True,
    **reindex_options: Any,
) -> PhraseIndex:
    """A new index at ``path`` (must not exist or be empty) of ``index``'s live passages and their stored vectors,
    nothing encoded again, whose FAISS structure searches ``key_vectors`` key vectors a passage
    (:mod:`~dphr_haystack.index.keys`; None: every stored vector) in ``faiss_factory`` (``auto``: chosen for its
    size). Deleted passages are left out. Built in a temporary sibling directory and renamed into place.

    Example:
        >>> copy_with_key_vectors(PhraseIndex.load("my-index"), "my-index-keys", key_vectors=8)
    """
    from tqdm.auto import tqdm

    def create(target: Path | None) -> PhraseIndex:
        return PhraseIndex.create_for_encoder(
            index.dim,
            index.model_fingerprint,
            dict(index.manifest["model_config"]),
            target,
            faiss_factory="Flat",
            filter_threshold=index.filter_threshold,
            dtype=index.codec.dtype,
            model_path=index.manifest.get("model_path"),
            codec=index.codec if index.storage.codec_calibrated else None,  # an empty int8 index: calibrated later
            key_vectors=key_vectors,
        )

    def fill(new: PhraseIndex) -> None:
        chunks = tqdm(passage_chunks(index), desc="copying passages", unit="chunk", disable=not progress)
        for records, piece in chunks:
            new.append_stream(records, [piece], index.codec, merging=True)

    return build_index(path, create, fill, faiss_factory, False, "faiss", progress, **reindex_options)


def passage_chunks(index: PhraseIndex, chunk: int = 512) -> Iterator[tuple[list[dict[str, Any]], ShardPiece]]:
    """The live passages of ``index`` ``chunk`` at a time, each chunk's records with a piece of their stored vectors
    and tokens (token passage rows counted from the chunk's first passage), as :meth:`PhraseIndex.append_stream`
    takes them."""
    live = np.flatnonzero(~index.deleted)
    stored = index.storage.vectors.view()
    for begin in range(0, len(live), chunk):
        rows = live[begin : begin + chunk]
        count = index.num_tokens[rows]
        token_rows = rows_of_passages(index.first_token[rows], count)
        tokens = index.tokens[token_rows].copy()
        tokens["passage"] = np.repeat(np.arange(len(rows)), count)
        yield [index.passages[r] for r in rows], ShardPiece(stored[token_rows], tokens)


def build_index(
    path: str | Path | None,
    create: Callable[[Path | None], PhraseIndex],
    fill: Callable[[PhraseIndex], None],
    faiss_factory: str,
    on_disk: bool,
    flat_search: str,
    progress: bool,
    **reindex_options: Any,
) -> PhraseIndex:
    """An index made by ``create(directory)`` (empty, flat) and ``fill(index)`` (appends while merging: nothing
    committed, no FAISS structure), committed once, then given its FAISS structure ``faiss_factory`` from all its
    vectors; with ``path``, built in a temporary sibling directory and renamed into place."""

    def build(target: Path | None) -> PhraseIndex:
        index = create(target)
        index.structure.index, index.structure.flat_search = None, "mmap"  # built once, from all vectors
        fill(index)
        index.structure.flat_search = flat_search
        if faiss_factory == AUTO:
            index.manifest["structure"] = {"policy": "auto", "built_for": index.num_searched_vectors}
            index.commit()
            if needs_rebuild(index.manifest, index.num_searched_vectors, index.dim):
                index.build_auto_structure(progress)
            else:
                index.structure.load()
            return index
        index.commit()
        if is_flat(faiss_factory):
            index.structure.load()
        else:
            index.reindex(faiss_factory, on_disk=on_disk, progress=progress, **reindex_options)
        return index

    if path is None:
        return build(None)
    path = refuse_symlink(Path(path))
    lock = WriterLock(path)
    with lock.hold():  # another writer of ``path`` (a second merge, an add) waits or fails
        remove_uncommitted_files(path)  # a create killed before its first commit leaves only these
        if directory_entries(path):
            raise InvalidParameterError(f"{path} exists and is not empty; choose another path")
        building = make_temp_dir(path, "building")
        try:
            build(building)
            lock.lock_replacement(building)  # the index swapped in stays locked until the merge lets go
            replace_directory(building, path)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
    return PhraseIndex.load(path, flat_search=flat_search)


def _read_dump(dump_dir: Path) -> tuple[dict[str, Any], list[Path]]:
    """A dump's settings and its complete shards, checked for gaps (and against dump-complete.json)."""
    settings_file = dump_dir / "dump.json"
    if not settings_file.is_file():
        raise IndexLoadError(f"{settings_file} not found: not a phrase dump directory")
    settings = _read_json(settings_file)
    shards = list_shards(dump_dir)
    numbers = [int(p.name.split("-")[1]) for p in shards]
    status_file = dump_dir / "dump-status.json"  # written by dphr_haystack.encode.distributed
    status = _read_json(status_file) if status_file.is_file() else {}
    if status and status.get("state") != "complete":
        raise IndexLoadError(
            f"{dump_dir}: the distributed dump is {status.get('state')!r}, not complete; "
            "re-run it (complete shards are kept) before merging"
        )
    expected = status.get("num_shards")
    wanted = range(expected) if expected is not None else range(max(numbers, default=-1) + 1)
    missing = sorted(set(wanted) - set(numbers))
    if missing or not shards:
        raise IndexLoadError(
            f"{dump_dir}: shards {missing[:5] or 'all'} missing or incomplete; re-run the dump "
            "(complete shards are kept) before merging"
        )
    if expected is None:
        logger.info("%s has no dump-status.json: trailing shards cannot be checked", dump_dir)
    return settings, [p for p, n in zip(shards, numbers) if n in wanted]


def _read_json(file: Path) -> dict[str, Any]:
    """A dump's JSON object file, or IndexLoadError naming it."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise IndexLoadError(f"{file} is corrupted: {type(exc).__name__}: {exc}") from exc
    if not isinstance(data, dict):
        raise IndexLoadError(f"{file} is corrupted: not a JSON object")
    return data
