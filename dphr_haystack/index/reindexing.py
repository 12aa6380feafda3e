"""Other FAISS structures for a phrase index: :meth:`Reindexing.reindex` (any factory string) and the structure
``auto`` builds for an index's size, from the stored vectors and without re-encoding. A part of
:class:`~dphr_haystack.index.phrase_index.PhraseIndex`; each build is one write transaction (see
:mod:`~dphr_haystack.index.transaction`): should its commit fail, the previous structure stays.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
from pathlib import Path
from typing import Any

import numpy as np

from .._util import atomic
from ..errors import InvalidParameterError
from . import auto
from . import structures as index_types
from .storage import is_flat
from .transaction import writes

logger = logging.getLogger(__name__)

# The start and end query vectors an ``auto`` structure was tuned on (``retune(queries)``), kept beside its files so
# that a rebuild tunes on them again; the structure's record names their count and SHA-256 (a file that does not
# match is never read).
TUNING_QUERIES = "tuning_queries.npy"


class Reindexing:
    """The reindexing methods of :class:`~dphr_haystack.index.phrase_index.PhraseIndex` (which provides ``writing``,
    ``commit``, ``save``, ``load``, ``structure``, ``manifest``, ``path``, ``num_searched_vectors`` and ``to``)."""

    @writes
    def reindex(
        self,
        faiss_factory: str,
        path: str | Path | None = None,
        on_disk: bool = False,
        train_size: int | None = None,
        max_train: int = index_types.DEFAULT_MAX_TRAIN,
        search_params: dict[str, Any] | None = None,
        progress: bool = True,
        pq_max_train: int | None = None,
    ) -> Any:
        """Build another FAISS structure (any factory string) from the stored vectors, without re-encoding.

        In place when ``path`` is None, else on a copy written to ``path`` (this index stays as it is); returns
        the reindexed index. Training samples all stored vectors (``index_types.training_sample_size``, or
        ``train_size``). ``on_disk`` (IVF types, indexes on disk) writes the inverted lists to an
        ``.ivfdata`` file that searches memory-map, so the structure never has to fit in RAM; ``pq_max_train``
        caps OPQ/PQ codebook training points (see ``index_types.make_faiss_index``). The swap is atomic: the new
        FAISS file is written under a new name before the manifest points to it.

        ``faiss_factory="auto"`` lets the index choose and tune its structure for its size from then on (see
        :mod:`~dphr_haystack.index.auto`); any other factory is kept whatever the size.

        Example:
            >>> factory = index_types.factory_for("opq-ivf-pq", index.num_searched_vectors, index.dim)
            >>> index.reindex(factory, path="idx-opq")
        """
        if faiss_factory == auto.AUTO and path is None:
            return self.build_auto_structure(progress)
        if path is not None:
            self.save(path)
            copy = type(self).load(path, verify=False, flat_search="mmap")
            return copy.reindex(
                faiss_factory, None, on_disk, train_size, max_train, search_params, progress, pq_max_train
            )
        old_file, old_ivfdata = self.manifest.get("faiss_file"), self.manifest.get("faiss_ivfdata")
        self.structure.rebuild(faiss_factory, on_disk, train_size, max_train, search_params, progress, pq_max_train)
        if not self._building_auto:
            self.manifest["structure"] = {"policy": "fixed"}
        self.commit()  # writes the new FAISS file under a new name, then the manifest
        if self.path is not None:
            for stale in (old_file, old_ivfdata):
                if stale and stale not in (self.manifest.get("faiss_file"), self.manifest.get("faiss_ivfdata")):
                    with contextlib.suppress(OSError):  # committed: what is left is a stale file, no failure
                        (self.path / stale).unlink(missing_ok=True)
        self.structure.backend = None
        if self.structure.device != "cpu":
            self.to(self.structure.device)
        return self

    _building_auto = False

    def build_auto_structure(self, progress: bool = True) -> Any:
        """Build the structure ``auto`` picks for the current size and tune its ``nprobe`` (see ``auto``), on the
        questions' vectors it keeps when it was tuned on questions (:meth:`retune`), else on probes; commits. Call it
        inside :meth:`writing`."""
        factory = auto.auto_factory(self.num_searched_vectors, self.dim)
        previous = self.manifest.get("structure") or {}
        queries = self.tuning_queries()
        if queries is None and previous.get("tuned_on") == "questions":
            logger.warning(
                "%s: the structure tuned on questions is rebuilt for %d vectors and tuned on probes (the questions' "
                "vectors are not kept beside it); tune it on questions again: dphr reindex --index DIR --retune "
                "--questions FILE",
                self.path or "the index",
                self.num_searched_vectors,
            )
        self._building_auto = True
        try:
            self.reindex(factory, progress=progress)
        finally:
            self._building_auto = False
        structure: dict[str, Any] = {"policy": "auto", "built_for": self.num_searched_vectors}
        if queries is not None:
            structure["tuning_queries"] = previous["tuning_queries"]
        self.manifest["structure"] = structure
        if not is_flat(factory):
            self._tune_auto_structure(queries)  # commits
        else:
            self.commit()
        return self

    @writes
    def retune(self, queries: np.ndarray | None = None) -> Any:
        """Choose the search parameters of an ``auto`` IVF structure again by today's rule
        (:func:`~dphr_haystack.index.auto.tune_nprobe`), keeping the structure; commits. An index tuned by an
        earlier rule searches as today's would. ``queries``: the start and end query vectors of questions its users
        ask, tuned on instead of probes (:data:`~dphr_haystack.index.auto.QUESTION_TARGET_RECALL`) and kept beside
        the index (:data:`TUNING_QUERIES`), so that a rebuild for a larger size tunes on them again; without them it
        tunes on probes and forgets any kept. Exact and fixed structures are left as they are."""
        if (self.manifest.get("structure") or {}).get("policy") == "auto" and not is_flat(self.faiss_factory):
            if queries is not None and (np.ndim(queries) != 2 or np.shape(queries)[1] != self.dim or not len(queries)):
                raise InvalidParameterError(f"retune queries of shape {np.shape(queries)}: expected (n, {self.dim})")
            if queries is not None:
                queries = np.ascontiguousarray(queries, dtype=np.float32)
                self.manifest["structure"]["tuning_queries"] = self._keep_tuning_queries(queries)
            else:
                self.manifest["structure"].pop("tuning_queries", None)
            self._tune_auto_structure(queries)
        return self

    def tuning_queries(self) -> np.ndarray | None:
        """The query vectors the ``auto`` structure was tuned on and keeps (:meth:`retune`); None when it was tuned on
        probes, or its kept file is missing or does not match its record."""
        kept = self._kept_tuning_queries()
        if kept is None:
            return None
        try:
            queries = np.load(io.BytesIO(kept), allow_pickle=False)
        except ValueError:
            return None
        record = self.manifest["structure"]["tuning_queries"]
        return queries if queries.shape == (record.get("count"), self.dim) else None

    _tuning_queries: bytes | None = None  # an index without a directory keeps them in memory

    def _kept_tuning_queries(self) -> bytes | None:
        """The ``.npy`` bytes of the kept tuning queries when they match the structure's record, else None."""
        record = (self.manifest.get("structure") or {}).get("tuning_queries")
        if not isinstance(record, dict):
            return None
        try:
            kept = (self.path / TUNING_QUERIES).read_bytes() if self.path is not None else self._tuning_queries
        except OSError:
            return None
        return kept if kept is not None and hashlib.sha256(kept).hexdigest() == record.get("sha256") else None

    def _keep_tuning_queries(self, queries: np.ndarray) -> dict[str, Any]:
        """Keep ``queries`` beside the index (in memory for one without a directory); their record."""
        buffer = io.BytesIO()
        np.save(buffer, queries, allow_pickle=False)
        kept = buffer.getvalue()
        if self.path is None:
            self._tuning_queries = kept
        else:
            atomic.write_file_atomic(self.path / TUNING_QUERIES, kept)
        return {"count": len(queries), "sha256": hashlib.sha256(kept).hexdigest()}

    def _write_structure_copy(self, tmp: Path, manifest: dict[str, Any]) -> None:
        """The structure's files in a copy, with the query vectors it keeps for its tuning (:meth:`retune`)."""
        self.structure.write_copy(tmp, manifest)
        kept = self._kept_tuning_queries()
        if kept is not None:
            (tmp / TUNING_QUERIES).write_bytes(kept)  # the copy's files are fsynced before its manifest
        else:
            (manifest.get("structure") or {}).pop("tuning_queries", None)

    def _tune_auto_structure(self, queries: np.ndarray | None = None) -> None:
        tuned = self.structure.tune_nprobe(queries=queries)
        self.manifest["structure"].update({key: tuned.pop(key) for key in auto.TUNING_RECORD if key in tuned})
        self.set_search_params(**tuned)  # commits
