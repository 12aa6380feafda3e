"""PhraseIndex: stored token vectors + their metadata + a FAISS index, in a self-describing directory.

Layout of an index directory::

    manifest.json     format version, model fingerprint and config, dim, codec, filter threshold,
                      FAISS factory, counts, byte lengths and SHA-256 of the metadata files
    vectors.bin       token vectors (float16 / int8), row = FAISS id, consecutive per passage
    tokens.bin        per token: passage, subword position, char start, char end
    passages.jsonl    one record per passage: id, document_id, title, text, meta
    tombstones.bin    passage rows deleted (int64)
    faiss-N.index     the trained FAISS index (only for non-flat types; flat ones are rebuilt from vectors)

Files are append-only and the manifest records how much of each is valid, so an add commits by
appending, then atomically replacing ``manifest.json``; a crash before that leaves the previous state.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._lazy import require
from .codec import VectorCodec
from .corpus import CorpusStats, Passage, read_corpus
from .dump import TOKEN_DTYPE, PhraseShard, chunked, encode_shard
from .errors import EmptyCorpusError, IndexLoadError, InvalidParameterError, ModelMismatchError

logger = logging.getLogger(__name__)

INDEX_FORMAT = "dphr-phrase-index"
INDEX_FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DUPLICATE_POLICIES = ("fail", "skip", "overwrite")
_FILES = {"vectors": "vectors.bin", "tokens": "tokens.bin", "passages": "passages.jsonl", "tombstones": "tombstones.bin"}


def _is_flat(factory: str) -> bool:
    return factory.replace(" ", "") in ("Flat", "IDMap,Flat")


class _Column:
    """An append-only array, in memory or in a raw file whose valid length the manifest records."""

    def __init__(self, dtype: np.dtype, width: int | None, path: Path | None = None, length: int = 0) -> None:
        self.dtype, self.width, self.path, self.length = np.dtype(dtype), width, path, length
        self._parts: list[np.ndarray] = []
        self._cache: np.ndarray | None = None

    @property
    def row_bytes(self) -> int:
        return self.dtype.itemsize * (self.width or 1)

    def append(self, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values, dtype=self.dtype)
        if self.path is None:
            self._parts.append(values.copy())
        else:
            with self.path.open("r+b" if self.path.exists() else "wb") as handle:
                handle.truncate(self.length * self.row_bytes)  # drop bytes of an append that never committed
                handle.seek(self.length * self.row_bytes)
                handle.write(values.tobytes())
                handle.flush()
                os.fsync(handle.fileno())
        self.length += len(values)
        self._cache = None

    def view(self) -> np.ndarray:
        if self._cache is not None:
            return self._cache
        shape = (self.length, self.width) if self.width else (self.length,)
        if self.length == 0:
            self._cache = np.zeros(shape, dtype=self.dtype)
        elif self.path is None:
            self._cache = np.concatenate(self._parts) if len(self._parts) > 1 else self._parts[0]
            self._parts = [self._cache]
        else:
            self._cache = np.memmap(self.path, dtype=self.dtype, mode="r", shape=shape)
        return self._cache

    def write_to(self, path: Path) -> None:
        with path.open("wb") as handle:
            view = self.view()
            for start in range(0, len(view), 1 << 20):
                handle.write(np.ascontiguousarray(view[start: start + (1 << 20)]).tobytes())


class PhraseIndex:
    """Phrase vectors of a corpus, searchable by maximum inner product.

    Example:
        >>> index = PhraseIndex.create(model)                      # in memory, flat inner product
        >>> index.add_passages("corpus.jsonl")
        >>> index.save("my-index")
        >>> index = PhraseIndex.load("my-index", model=model)      # checks the model fingerprint
    """

    def __init__(self, manifest: dict[str, Any], path: Path | None) -> None:
        self.manifest = manifest
        self.path = path
        self.codec = VectorCodec(**manifest["codec"])
        self.dim = int(manifest["dim"])
        cols = manifest.get("counts", {})
        file = (lambda key: path / _FILES[key]) if path is not None else (lambda key: None)
        self._vectors = _Column(self.codec.numpy_dtype, self.dim, file("vectors"), cols.get("vectors", 0))
        self._tokens = _Column(TOKEN_DTYPE, None, file("tokens"), cols.get("vectors", 0))
        self._tombstones = _Column(np.int64, None, file("tombstones"), cols.get("tombstones", 0))
        self.passages: list[dict[str, Any]] = []
        self._first_token = np.zeros(0, np.int64)
        self._num_tokens = np.zeros(0, np.int64)
        self.deleted = np.zeros(0, dtype=bool)
        self._live_by_id: dict[str, int] = {}
        self._faiss = None
        self._passage_bytes = int(manifest.get("passages_bytes", 0))

    # ----------------------------------------------------------------- creation and loading
    @classmethod
    def create(cls, model, path: str | Path | None = None, faiss_factory: str = "Flat",
               filter_threshold: float | None = None, dtype: str = "float16", model_path: str | None = None,
               codec: VectorCodec | None = None) -> PhraseIndex:
        """A new, empty index for ``model``'s phrase vectors; on disk at ``path`` (must not exist) or in memory."""
        faiss = require("faiss")
        try:
            probe = faiss.index_factory(model.hidden_size, faiss_factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as exc:
            raise InvalidParameterError(f"invalid FAISS factory string {faiss_factory!r}: {exc}") from exc
        del probe
        manifest = {
            "format": INDEX_FORMAT, "format_version": INDEX_FORMAT_VERSION,
            "model_fingerprint": model.phrase_fingerprint(), "model_path": model_path,
            "model_config": model.config.to_dict(), "dim": model.hidden_size,
            "codec": (codec or VectorCodec(dtype)).to_dict(), "codec_calibrated": codec is not None or dtype != "int8",
            "filter_threshold": filter_threshold, "faiss_factory": faiss_factory, "metric": "inner_product",
            "counts": {"vectors": 0, "passages": 0, "tombstones": 0}, "passages_bytes": 0, "faiss_file": None,
            "checksums": {}, "created": time.time(),
        }
        if path is not None:
            path = Path(path)
            if path.exists() and any(path.iterdir()):
                raise InvalidParameterError(f"{path} exists and is not empty; load it or choose another path")
            path.mkdir(parents=True, exist_ok=True)
        index = cls(manifest, path)
        index._faiss = faiss.index_factory(index.dim, faiss_factory, faiss.METRIC_INNER_PRODUCT)
        if path is not None:
            index._commit()
        return index

    @classmethod
    def load(cls, path: str | Path, model=None, verify: bool = True) -> PhraseIndex:
        """Open an index directory. With ``model``, its phrase fingerprint must match the index's."""
        path = Path(path)
        manifest_path = path / MANIFEST
        if not manifest_path.is_file():
            raise IndexLoadError(f"{manifest_path} not found: not a phrase index directory")
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, ValueError) as exc:
            raise IndexLoadError(f"{manifest_path} is corrupted: {exc}") from exc
        if not isinstance(manifest, dict) or manifest.get("format") != INDEX_FORMAT:
            raise IndexLoadError(f"{manifest_path}: not a {INDEX_FORMAT} manifest")
        if manifest.get("format_version") != INDEX_FORMAT_VERSION:
            raise IndexLoadError(
                f"{manifest_path}: index format version {manifest.get('format_version')!r}; "
                f"this library reads version {INDEX_FORMAT_VERSION}: rebuild the index"
            )
        if model is not None and model.phrase_fingerprint() != manifest["model_fingerprint"]:
            raise ModelMismatchError(
                f"{manifest_path}: the index was built with another phrase encoder (fingerprint "
                f"{manifest['model_fingerprint'][:12]}…, given model {model.phrase_fingerprint()[:12]}…)"
            )
        index = cls(manifest, path)
        index._check_files(verify)
        index._read_passages()
        tomb = index._tombstones.view()
        index.deleted[tomb] = True
        for pid, row in list(index._live_by_id.items()):
            if index.deleted[row]:
                del index._live_by_id[pid]
        index._load_faiss()
        return index

    def _check_files(self, verify: bool) -> None:
        assert self.path is not None
        counts = self.manifest["counts"]
        expected = {"vectors": counts["vectors"] * self._vectors.row_bytes,
                    "tokens": counts["vectors"] * self._tokens.row_bytes,
                    "passages": self._passage_bytes, "tombstones": counts["tombstones"] * 8}
        for key, size in expected.items():
            file = self.path / _FILES[key]
            actual = file.stat().st_size if file.exists() else 0
            if actual < size:
                raise IndexLoadError(f"{file} is truncated: {actual} bytes, manifest says {size}")
        if verify:
            for key, digest in self.manifest.get("checksums", {}).items():
                file = self.path / _FILES[key]
                if _sha256_prefix(file, expected[key]) != digest:
                    raise IndexLoadError(f"{file} is corrupted: its checksum does not match {MANIFEST}")

    def _read_passages(self) -> None:
        assert self.path is not None
        file = self.path / _FILES["passages"]
        with file.open("rb") as handle:
            data = handle.read(self._passage_bytes)
        records = []
        for line_no, line in enumerate(data.splitlines(), 1):
            try:
                records.append(json.loads(line))
            except ValueError as exc:
                raise IndexLoadError(f"{file}:{line_no} is corrupted: {exc}") from exc
        if len(records) != self.manifest["counts"]["passages"]:
            raise IndexLoadError(f"{file}: {len(records)} passages, manifest says {self.manifest['counts']['passages']}")
        counts = np.bincount(self._tokens.view()["passage"], minlength=len(records)) if len(self) else np.zeros(len(records))
        self._register_passages(records, counts[: len(records)])

    def _load_faiss(self) -> None:
        faiss = require("faiss")
        name = self.manifest.get("faiss_file")
        if name:
            file = self.path / name
            try:
                self._faiss = faiss.read_index(str(file))
            except RuntimeError as exc:
                raise IndexLoadError(f"cannot read FAISS index {file}: {exc}") from exc
            if self._faiss.ntotal != len(self) or self._faiss.d != self.dim:
                raise IndexLoadError(f"{file}: {self._faiss.ntotal} vectors of dim {self._faiss.d}, expected {len(self)} of {self.dim}")
        else:
            self._faiss = faiss.index_factory(self.dim, self.faiss_factory, faiss.METRIC_INNER_PRODUCT)
            self._faiss_add(self._vectors.view())

    # ----------------------------------------------------------------- properties
    def __len__(self) -> int:
        """Number of stored token vectors (deleted passages included until compaction)."""
        return self._vectors.length

    @property
    def num_passages(self) -> int:
        return len(self.passages)

    @property
    def num_live_passages(self) -> int:
        return int((~self.deleted).sum())

    @property
    def faiss_factory(self) -> str:
        return self.manifest["faiss_factory"]

    @property
    def filter_threshold(self) -> float | None:
        return self.manifest["filter_threshold"]

    @property
    def model_fingerprint(self) -> str:
        return self.manifest["model_fingerprint"]

    @property
    def faiss_index(self):
        return self._faiss

    @property
    def tokens(self) -> np.ndarray:
        return self._tokens.view()

    @property
    def first_token(self) -> np.ndarray:
        return self._first_token

    @property
    def num_tokens(self) -> np.ndarray:
        return self._num_tokens

    def vectors(self, rows: np.ndarray | slice | None = None) -> np.ndarray:
        """Decoded float32 vectors of the given rows (all rows when None)."""
        view = self._vectors.view()
        return self.codec.decode(view if rows is None else view[rows])

    def passage_row(self, passage_id: str) -> int | None:
        """Row of the live passage with this id, or None."""
        return self._live_by_id.get(passage_id)

    def live_passage_ids(self) -> list[str]:
        return list(self._live_by_id)

    # ----------------------------------------------------------------- writing
    def add_passages(self, corpus: str | Path | Iterable[Any], model, batch_size: int = 32, chunk_size: int = 512,
                     duplicates: str = "fail", progress: bool = True) -> CorpusStats:
        """Encode passages and add them, committing every ``chunk_size`` passages.

        ``duplicates`` decides what an id already in the index does: ``fail`` (raise), ``skip`` (keep the
        stored one) or ``overwrite`` (delete the stored one, add the new one). Passages without text are
        skipped and counted in the returned stats.
        """
        from tqdm.auto import tqdm

        if duplicates not in DUPLICATE_POLICIES:
            raise InvalidParameterError(f"duplicates={duplicates!r}; valid: {', '.join(DUPLICATE_POLICIES)}")
        if model.phrase_fingerprint() != self.model_fingerprint:
            raise ModelMismatchError("add_passages: the model's phrase encoder differs from the one this index was built with")
        stats = CorpusStats()
        bar = tqdm(desc="indexing phrases", unit="passage", disable=not progress)
        for chunk in chunked(read_corpus(corpus, stats), chunk_size):
            chunk = self._apply_duplicate_policy(chunk, duplicates)
            if chunk:
                self._ensure_codec(model, chunk, batch_size)
                self.add_shard(encode_shard(model, chunk, self.codec, self.filter_threshold, batch_size))
            bar.update(len(chunk))
        bar.close()
        if stats.passages == 0 and self.num_passages == 0:
            raise EmptyCorpusError(f"the corpus has no passage with text ({stats.skipped_empty} empty ones skipped)")
        return stats

    def _apply_duplicate_policy(self, chunk: list[Passage], policy: str) -> list[Passage]:
        clashes = [p.id for p in chunk if p.id in self._live_by_id]
        if not clashes:
            return chunk
        if policy == "fail":
            raise InvalidParameterError(f"passage ids already in the index: {clashes[:5]} (duplicates='fail')")
        if policy == "skip":
            return [p for p in chunk if p.id not in self._live_by_id]
        self.delete_passages(clashes)
        return chunk

    def _ensure_codec(self, model, chunk: Sequence[Passage], batch_size: int) -> None:
        if self.manifest.get("codec_calibrated", True):
            return
        sample = model.encode_passages([p.text for p in chunk[:64]], [p.title for p in chunk[:64]], batch_size)
        self.codec = VectorCodec.calibrate(self.codec.dtype, np.concatenate([e.vectors for e in sample]))
        self.manifest["codec"] = self.codec.to_dict()
        self.manifest["codec_calibrated"] = True

    def add_shard(self, shard: PhraseShard) -> None:
        """Append a dumped shard (its vectors re-coded if its codec differs) and commit."""
        ids = [r["id"] for r in shard.passages]
        clashes = [pid for pid in ids if pid in self._live_by_id]
        if clashes or len(set(ids)) != len(ids):
            raise InvalidParameterError(f"duplicate passage ids: {(clashes or ids)[:5]}")
        if shard.vectors.shape[1:] != (self.dim,):
            raise ModelMismatchError(f"shard vectors have dim {shard.vectors.shape[1:]}, index {self.dim}")
        if not self.manifest.get("codec_calibrated", True):
            self.codec = VectorCodec.calibrate(self.codec.dtype, shard.codec.decode(shard.vectors[:20000]))
            self.manifest["codec"], self.manifest["codec_calibrated"] = self.codec.to_dict(), True
        stored = shard.vectors if shard.codec == self.codec else self.codec.encode(shard.codec.decode(shard.vectors))
        tokens = np.array(shard.tokens, dtype=TOKEN_DTYPE, copy=True)
        tokens["passage"] += self.num_passages
        records = [{k: r[k] for k in ("id", "document_id", "title", "text", "meta") if k in r} for r in shard.passages]
        self._train_faiss_if_needed(self.codec.decode(stored))
        self._vectors.append(stored)
        self._tokens.append(tokens)
        self._faiss_add(stored)
        self._append_passages(records, tokens)
        self._commit()

    def _append_passages(self, records: list[dict[str, Any]], tokens: np.ndarray) -> None:
        if self.path is not None:
            file = self.path / _FILES["passages"]
            payload = b"".join(json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n" for r in records)
            with file.open("r+b" if file.exists() else "wb") as handle:
                handle.truncate(self._passage_bytes)
                handle.seek(self._passage_bytes)
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            self._passage_bytes += len(payload)
        self._register_passages(records, np.bincount(tokens["passage"] - (self.num_passages), minlength=len(records)))

    def _register_passages(self, records: list[dict[str, Any]], counts: np.ndarray) -> None:
        """Track new passage records whose stored tokens (``counts`` each) end the vector file."""
        start = len(self.passages)
        counts = np.asarray(counts, dtype=np.int64)
        base = len(self) - int(counts.sum())
        firsts = base + np.concatenate([[0], np.cumsum(counts)[:-1]]) if len(counts) else counts
        self.passages.extend(records)
        self._first_token = np.concatenate([self._first_token, firsts.astype(np.int64)])
        self._num_tokens = np.concatenate([self._num_tokens, counts])
        self.deleted = np.concatenate([self.deleted, np.zeros(len(records), dtype=bool)])
        for offset, record in enumerate(records):
            self._live_by_id[record["id"]] = start + offset

    def delete_passages(self, passage_ids: Iterable[str]) -> int:
        """Tombstone the live passages with these ids; their phrases vanish from results. Returns the count."""
        rows = sorted({self._live_by_id[pid] for pid in passage_ids if pid in self._live_by_id})
        return self._delete_rows(rows)

    def delete_documents(self, document_ids: Iterable[str]) -> int:
        """Tombstone every live passage of these documents."""
        wanted = set(document_ids)
        rows = [row for row in self._live_by_id.values() if self.passages[row]["document_id"] in wanted]
        return self._delete_rows(sorted(rows))

    def _delete_rows(self, rows: list[int]) -> int:
        if not rows:
            return 0
        self._tombstones.append(np.asarray(rows, dtype=np.int64))
        self.deleted[rows] = True
        for row in rows:
            self._live_by_id.pop(self.passages[row]["id"], None)
        self._commit()
        return len(rows)

    # ----------------------------------------------------------------- FAISS
    def _train_faiss_if_needed(self, vectors: np.ndarray, max_train: int = 200_000, seed: int = 29) -> None:
        if self._faiss.is_trained or len(vectors) == 0:
            return
        rng = np.random.default_rng(seed)
        sample = vectors if len(vectors) <= max_train else vectors[np.sort(rng.choice(len(vectors), max_train, replace=False))]
        try:
            self._faiss.train(np.ascontiguousarray(sample, dtype=np.float32))
        except RuntimeError as exc:
            raise InvalidParameterError(
                f"training FAISS {self.faiss_factory!r} on the first {len(vectors)} vectors failed ({exc}); "
                "add more passages in the first batch or use 'Flat'"
            ) from exc

    def _faiss_add(self, stored: np.ndarray, chunk: int = 65536) -> None:
        """Add stored-dtype vectors to FAISS (decoded to float32 a chunk at a time)."""
        for start in range(0, len(stored), chunk):
            self._faiss.add(np.ascontiguousarray(self.codec.decode(stored[start: start + chunk])))

    # ----------------------------------------------------------------- persistence
    def _commit(self) -> None:
        """Make the in-place state durable: write the FAISS file if any, then replace the manifest."""
        if self.path is None:
            self._update_manifest_counts()
            return
        old_faiss = self.manifest.get("faiss_file")
        if not _is_flat(self.faiss_factory) and self._faiss is not None and self._faiss.is_trained:
            name = f"faiss-{len(self)}-{self._tombstones.length}.index"
            if name != old_faiss:
                _write_faiss(self._faiss, self.path / name)
                self.manifest["faiss_file"] = name
        self._update_manifest_counts()
        self.manifest["checksums"] = {
            key: _sha256_prefix(self.path / _FILES[key], size)
            for key, size in (("tokens", self._tokens.length * self._tokens.row_bytes),
                              ("passages", self._passage_bytes), ("tombstones", self._tombstones.length * 8))
        }
        _atomic_write_text(self.path / MANIFEST, json.dumps(self.manifest, indent=1))
        if old_faiss and old_faiss != self.manifest.get("faiss_file"):
            (self.path / old_faiss).unlink(missing_ok=True)

    def _update_manifest_counts(self) -> None:
        self.manifest["counts"] = {"vectors": len(self), "passages": self.num_passages, "tombstones": self._tombstones.length}
        self.manifest["passages_bytes"] = self._passage_bytes
        self.manifest["updated"] = time.time()

    def save(self, path: str | Path) -> None:
        """Write a complete copy to ``path`` atomically (temporary directory, then rename)."""
        path = Path(path).resolve()
        if self.path is not None and path == self.path.resolve():
            self._commit()
            return
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self._vectors.write_to(tmp / _FILES["vectors"])
        self._tokens.write_to(tmp / _FILES["tokens"])
        self._tombstones.write_to(tmp / _FILES["tombstones"])
        payload = b"".join(json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n" for r in self.passages)
        (tmp / _FILES["passages"]).write_bytes(payload)
        manifest = json.loads(json.dumps(self.manifest))
        manifest["passages_bytes"] = len(payload)
        manifest["counts"] = {"vectors": len(self), "passages": self.num_passages, "tombstones": self._tombstones.length}
        manifest["faiss_file"] = None
        if not _is_flat(self.faiss_factory) and self._faiss.is_trained:
            manifest["faiss_file"] = f"faiss-{len(self)}-{self._tombstones.length}.index"
            _write_faiss(self._faiss, tmp / manifest["faiss_file"])
        manifest["checksums"] = {key: _sha256_prefix(tmp / _FILES[key], None) for key in ("tokens", "passages", "tombstones")}
        for file in tmp.iterdir():
            _fsync_file(file)
        _atomic_write_text(tmp / MANIFEST, json.dumps(manifest, indent=1))
        replace_directory(tmp, path)


def _write_faiss(index, file: Path) -> None:
    faiss = require("faiss")
    tmp = file.with_name(file.name + ".tmp")
    faiss.write_index(index, str(tmp))
    _fsync_file(tmp)
    os.replace(tmp, file)


def _sha256_prefix(file: Path, size: int | None) -> str:
    digest = hashlib.sha256()
    if not file.exists():
        return digest.hexdigest()
    remaining = file.stat().st_size if size is None else size
    with file.open("rb") as handle:
        while remaining > 0:
            block = handle.read(min(remaining, 1 << 22))
            if not block:
                break
            digest.update(block)
            remaining -= len(block)
    return digest.hexdigest()


def _fsync_file(file: Path) -> None:
    with file.open("rb") as handle:
        os.fsync(handle.fileno())


def _atomic_write_text(file: Path, text: str) -> None:
    tmp = file.with_name(file.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, file)


def replace_directory(new: Path, target: Path) -> None:
    """Move ``new`` to ``target``; an existing ``target`` is swapped out first and removed after."""
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(new, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(new, target)
