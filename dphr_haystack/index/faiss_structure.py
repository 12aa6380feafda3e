"""The FAISS structure of a phrase index over its stored vectors: train, add, rebuild, tune, load, save and search.

:mod:`~dphr_haystack.index.structures` makes the FAISS index types, :mod:`~dphr_haystack.index.auto` chooses one
for a size, :mod:`~dphr_haystack.index.backends` places a search on a device; :class:`FaissStructure` holds the one
structure of an index through its life and keeps its file and search parameters in the index's manifest.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from .._util.device import resolve_device
from ..errors import IndexLoadError, InvalidParameterError
from . import auto
from . import structures as index_types
from .backends import FaissSearch, TorchFlatSearch, make_search_backend
from .manifest import MANIFEST, search_params_problem
from .rounds import SearchedRows
from .storage import IndexStorage, is_flat, write_faiss


class FaissStructure:
    """The CPU FAISS structure of an index and the backend its searches run on.

    ``index`` is None for a flat index searched by exact torch top-k over the memory-mapped vectors
    (``flat_search="mmap"``); ``backend`` is None when searches use ``index`` directly on the CPU.
    """

    def __init__(self, storage: IndexStorage, flat_search: str = "faiss") -> None:
        self.storage = storage
        self.index = None
        self.flat_search = flat_search  # or "mmap": exact torch top-k over vectors.bin, no in-RAM FAISS flat
        self.device = "cpu"
        self.backend: FaissSearch | TorchFlatSearch | None = None

    @property
    def factory(self) -> str:
        return self.storage.manifest["faiss_factory"]

    @property
    def search_params(self) -> dict[str, Any]:
        return dict(self.storage.manifest.get("search_params") or {})

    # ----------------------------------------------------------------- building
    def new_index(self):
        """An empty structure of the index's type: for exact types, the one over the stored codes."""
        if is_flat(self.factory):
            return index_types.make_exact_index(self.storage.dim, self.storage.codec)
        return index_types.make_faiss_index(self.storage.dim, self.factory)

    def reset(self) -> None:
        """Start from an empty structure of the index's type."""
        self.index = self.new_index()

    def train_if_needed(self, stored: np.ndarray) -> None:
        """Train an untrained structure on a sized sample of the first stored-dtype vectors added.

        Training on the first batch only is a convenience for small corpora; for large ones build flat (or
        dump shards), then reindex, which samples the whole index (see ``index_types``).
        """
        if self.index is None or self.index.is_trained or len(stored) == 0:
            return
        index_types.train_faiss(self.index, self.factory, stored, self.storage.codec.decode)
        manifest = self.storage.manifest
        manifest["search_params"] = {**index_types.default_search_params(self.index), **self.search_params}
        index_types.apply_search_params(self.index, self.search_params)

    def check_appendable(self) -> None:
        """Raise InvalidParameterError when the structure cannot grow (inverted lists on disk are read-only)."""
        if self.index is not None and index_types.has_ondisk_lists(self.index):
            raise InvalidParameterError(
                "this index keeps its FAISS inverted lists on disk, which are read-only: add to an index with "
                "in-RAM lists (reindex(factory) without on_disk), then reindex(factory, on_disk=True) again"
            )

    def add(self, stored: np.ndarray, chunk: int = 65536) -> None:
        """Add stored-dtype vectors a chunk at a time."""
        if self.index is None:
            return
        codec = self.storage.codec
        if is_flat(self.factory):
            if self.index.ntotal == 0:
                self.index = self.new_index()  # an int8 codec is calibrated on the first vectors added
            index_types.add_exact(self.index, codec, stored, chunk)
            return
        for start in range(0, len(stored), chunk):
            self.index.add(np.ascontiguousarray(codec.decode(stored[start : start + chunk])))
        self.follow_scan_budget()

    def follow_scan_budget(self) -> None:
        """Keep a PQ structure's scan cap (``max_codes``) the multiple of what its probed lists hold on average that
        ``auto`` chose (``scan_budget`` in the manifest's ``structure``) as the structure grows: a cap fixed at the
        build would scan a shrinking share of those lists (an index grows up to 4x before ``auto`` rebuilds it)."""
        factor = float((self.storage.manifest.get("structure") or {}).get("scan_budget") or 0.0)
        params = self.search_params
        if factor <= 0 or not params.get("max_codes") or self.index is None:
            return
        nlist = index_types.ivf_of(self.index).nlist
        cap = auto.scan_budget(int(params["nprobe"]), int(self.index.ntotal), nlist, factor)
        if cap != int(params["max_codes"]):
            self.set_params({"max_codes": cap})

    def rebuild(
        self,
        factory: str,
        on_disk: bool,
        train_size: int | None,
        max_train: int,
        search_params: dict[str, Any] | None,
        progress: bool,
        pq_max_train: int | None,
    ) -> None:
        """Build a structure of type ``factory`` from all stored vectors and record it in the manifest (not
        committed). The new FAISS file gets a new name at the next commit, so the swap is crash-safe."""
        storage, manifest = self.storage, self.storage.manifest
        if on_disk and storage.path is None:
            raise InvalidParameterError(
                "on_disk=True keeps inverted lists in a file: save the index first or pass path"
            )
        index_types.make_faiss_index(storage.dim, factory)  # validates the factory string
        if storage.searched.length == 0 and not is_flat(factory):
            raise InvalidParameterError(f"cannot train FAISS {factory!r} on an empty index: add passages first")
        started = time.perf_counter()
        generation = int(manifest.get("faiss_generation", 0)) + 1
        ivfdata = f"faiss-g{generation}.ivfdata" if on_disk else None
        stored = storage.searched.view()
        if is_flat(factory):
            if on_disk:
                raise InvalidParameterError(
                    "on_disk applies to IVF types; a flat index can be searched memory-mapped "
                    "instead: PhraseIndex.load(path, flat_search='mmap')"
                )
            new = None
            if self.flat_search != "mmap":
                new = index_types.make_exact_index(storage.dim, storage.codec)
                index_types.add_exact(new, storage.codec, stored, progress=progress)
            trained_on = 0
        else:
            new, trained_on = index_types.build_faiss(
                factory,
                storage.dim,
                stored,
                storage.codec.decode,
                max_train=max_train,
                train_size=train_size,
                ivfdata=storage.path / ivfdata if ivfdata else None,
                progress=progress,
                pq_max_train=pq_max_train,
            )
        params = {**(index_types.default_search_params(new) if new is not None else {}), **(search_params or {})}
        if new is not None:
            index_types.apply_search_params(new, params)
        self.index = new
        manifest.update(
            {
                "faiss_factory": factory,
                "faiss_generation": generation,
                "faiss_ivfdata": ivfdata,
                "search_params": params,
                "faiss_file": None if is_flat(factory) else manifest.get("faiss_file"),
                "faiss_build": {
                    "train_vectors": int(trained_on),
                    "seconds": round(time.perf_counter() - started, 3),
                    "on_disk": bool(on_disk),
                },
            }
        )

    def tune_nprobe(self, refine: int | None = None, queries: np.ndarray | None = None) -> dict[str, Any]:
        """``auto``'s search parameters for the built IVF structure (see :func:`auto.tune_search_params`): nprobe
        for ``refine``, or the best of ``auto``'s refines for the structure, and a PQ structure's scan budget; tuned
        on probes, or on ``queries`` (real questions' start and end vectors) to
        :data:`~dphr_haystack.index.auto.QUESTION_TARGET_RECALL`."""
        ivf = index_types.ivf_of(self.index)
        refines = (refine,) if refine else auto.refine_choices(self.factory)
        stored = self.storage.searched.view()
        decode, target = self.storage.codec.decode, auto.target_recall(self.factory)
        budget = auto.budgets_scan(self.factory)
        probes = None
        if queries is not None:
            probes, target = auto.question_truth(queries, stored, decode), auto.QUESTION_TARGET_RECALL
        tuned = auto.tune_search_params(self.probe_search, stored, decode, ivf.nlist, refines, target, budget, probes)
        return {**tuned, "tuned_on": "probes" if probes is None else "questions"}

    def probe_search(self, queries: np.ndarray, k: int, nprobe: int, refine: int, max_codes: int = 0) -> np.ndarray:
        """Rows of a search with ``nprobe`` lists, at most ``max_codes`` codes scanned (0: no cap) and ``refine``·k
        candidates re-ranked exactly (for tuning): rows of the searched vectors."""
        stored = self.storage.searched.view()
        index_types.apply_search_params(self.index, {"nprobe": nprobe, "max_codes": max_codes})
        _, ids = self.index.search(queries, min(k * refine, len(stored)))
        return index_types.refine_exact(queries, ids, k, stored, self.storage.codec.decode)[1]

    # ----------------------------------------------------------------- files
    def file_name(self) -> str:
        """The FAISS file name for the current contents (bumped by a rebuild: a new name, crash-safe)."""
        generation = int(self.storage.manifest.get("faiss_generation", 0))
        storage = self.storage
        return (
            f"faiss-{storage.vectors.length}-{storage.tombstones.length}"
            + (f"-g{generation}" if generation else "")
            + ".index"
        )

    def _has_file(self) -> bool:
        return not is_flat(self.factory) and self.index is not None and self.index.is_trained

    def write_file(self) -> None:
        """Write the trained structure of a non-flat index under a new name and name it in the manifest."""
        if self.storage.path is None or not self._has_file():
            return
        name = self.file_name()
        if name != self.storage.manifest.get("faiss_file"):
            write_faiss(self.index, self.storage.path / name)
            self.storage.manifest["faiss_file"] = name

    def write_copy(self, tmp: Path, manifest: dict[str, Any]) -> None:
        """Write the structure's files into the copy ``tmp`` and name them in its ``manifest``."""
        if is_flat(self.factory) or not self.index.is_trained:
            return
        manifest["faiss_file"] = self.file_name()
        write_faiss(self.index, tmp / manifest["faiss_file"])
        if manifest.get("faiss_ivfdata"):  # on-disk inverted lists: the header names this file, same dir
            assert self.storage.path is not None
            index_types.copy_ivfdata(self.storage.path / manifest["faiss_ivfdata"], tmp / manifest["faiss_ivfdata"])

    def load(self) -> None:
        """Read the structure the manifest names, or rebuild an exact one from the stored vectors."""
        storage, manifest = self.storage, self.storage.manifest
        name = manifest.get("faiss_file")
        if name:
            assert storage.path is not None
            file = storage.path / name
            ivfdata = manifest.get("faiss_ivfdata")
            if ivfdata and not (storage.path / ivfdata).is_file():
                raise IndexLoadError(f"{storage.path / ivfdata} (the on-disk inverted lists of {file}) is missing")
            try:
                self.index = index_types.read_faiss(file, ondisk=bool(ivfdata))
            except (RuntimeError, MemoryError) as exc:  # MemoryError: a header declaring impossible sizes
                raise IndexLoadError(f"cannot read FAISS index {file}: {exc}") from exc
            if self.index.ntotal != storage.searched.length or self.index.d != storage.dim:
                raise IndexLoadError(
                    f"{file}: {self.index.ntotal} vectors of dim {self.index.d}, "
                    f"expected {storage.searched.length} of {storage.dim}"
                )
            try:
                index_types.apply_search_params(self.index, self.search_params)
            except InvalidParameterError as exc:
                raise IndexLoadError(f"{storage.path / MANIFEST}: {exc}") from exc
        elif is_flat(self.factory) and self.flat_search == "mmap":
            self.index = None  # searched by exact torch top-k over the memory-mapped vectors
        else:
            self.reset()
            self.add(storage.searched.view())

    # ----------------------------------------------------------------- search
    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, rows) by inner product for each query vector (FAISS semantics: row -1 = none), among
        equal scores the lower rows (:func:`~dphr_haystack.index.structures.ranked_head`). With key vectors, the
        top-``k`` keys, each as the stored row it stands for."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if self.backend is None and self.index is None:
            self.backend = self.make_backend("cpu")
        searcher = self.backend if self.backend is not None else self.index
        refine = int(self.search_params.get("refine", 1))
        stored = self.storage.searched.view()
        total = max(len(stored), k)
        width = index_types.candidate_count(k, refine, total)
        scores = np.empty((len(queries), width), dtype=np.float32)
        ids = np.empty((len(queries), width), dtype=np.int64)
        pending, fetch = np.arange(len(queries)), index_types.rows_to_fetch(width, total)
        while len(pending):  # a query whose equal scores at the cut run past the rows fetched fetches more
            found = searcher.search(queries[pending], fetch)
            head_scores, head_ids, settled = index_types.ranked_head(*found, width, complete=fetch >= total)
            scores[pending[settled]], ids[pending[settled]] = head_scores[settled], head_ids[settled]
            pending, fetch = pending[~settled], min(fetch * 2, total)
        if refine > 1:
            scores, ids = index_types.refine_exact(queries, ids, k, stored, self.storage.codec.decode)
        return scores, self.storage.stored_rows(ids)

    def search_rows(self, queries: np.ndarray, largest: int) -> SearchedRows | None:
        """One search for up to ``largest`` candidates whose :meth:`SearchedRows.rows
        <dphr_haystack.index.rounds.SearchedRows.rows>` give the rows :meth:`search` returns for any smaller
        k; None when the results depend on k (HNSW) or a backend other than the CPU index searches."""
        if self.backend is not None or self.index is None or not index_types.k_independent(self.index):
            return None
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        refine = int(self.search_params.get("refine", 1))
        stored = self.storage.searched.view()
        searched = SearchedRows(queries, largest, refine, len(stored), stored, self.storage.codec.decode)
        searched.stored_rows = self.storage.stored_rows
        searched.scores, searched.ids = self.index.search(queries, searched.fetched_rows())
        return searched

    def to(self, device: str) -> None:
        """Run searches on ``device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``; see ``PhraseIndex.to``)."""
        self.backend = self.make_backend(resolve_device(device))
        self.device = str(getattr(self.backend, "device", "cpu"))  # None: the CPU FAISS index

    def make_backend(self, device: str) -> FaissSearch | TorchFlatSearch | None:
        """The search backend for ``device``; None when it is the CPU FAISS index itself."""
        backend = make_search_backend(
            self.index,
            is_flat(self.factory),
            self.storage.searched.view,
            self.storage.codec,
            device,
            self.search_params,
            self.flat_search,
        )
        if isinstance(backend, FaissSearch) and backend.index is self.index:
            return None  # plain CPU FAISS: searched directly
        return backend

    def refresh_backend(self, faiss_only: bool = False) -> None:
        """Rebuild the backend after the structure grew (``faiss_only``: only a FAISS copy, e.g. on the GPU, which
        does not see CPU adds)."""
        if self.backend is None or (faiss_only and not isinstance(self.backend, FaissSearch)):
            return
        self.backend = self.make_backend(self.device)

    def set_params(self, params: dict[str, Any]) -> None:
        """Apply search parameters to the structure and record them in the manifest (not committed)."""
        merged = {**self.search_params, **params}
        problem = search_params_problem(merged)
        if problem:
            raise InvalidParameterError(problem)
        if self.index is not None:  # all of them: a tuning's probe searches set some of them on the way
            index_types.apply_search_params(self.index, merged)
        self.storage.manifest["search_params"] = merged
