"""Other FAISS structures for a phrase index: :meth:`Reindexing.reindex` (any factory string) and the structure
``auto`` builds for an index's size, from the stored vectors and without re-encoding. A part of
:class:`~dphr_haystack.index.phrase_index.PhraseIndex`; each build is one write transaction (see
:mod:`~dphr_haystack.index.transaction`): should its commit fail, the previous structure stays.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidParameterError
from . import auto
from . import structures as index_types
from .storage import is_flat
from .transaction import writes

logger = logging.getLogger(__name__)


class Reindexing:
    """The reindexing methods of :class:`~dphr_haystack.index.phrase_index.PhraseIndex` (which provides ``writing``,
    ``commit``, ``save``, ``load``, ``structure``, ``manifest``, ``path`` and ``to``)."""

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
            >>> index.reindex(index_types.factory_for("opq-ivf-pq", len(index), index.dim), path="idx-opq")
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
        """Build the structure ``auto`` picks for the current size and tune its ``nprobe`` (see ``auto``); commits.
        Call it inside :meth:`writing`."""
        factory = auto.auto_factory(len(self), self.dim)
        if (self.manifest.get("structure") or {}).get("tuned_on") == "questions":
            logger.warning(
                "%s: the structure tuned on questions is rebuilt for %d vectors and tuned on probes; tune it on "
                "questions again: dphr reindex --index DIR --retune --questions FILE",
                self.path or "the index",
                len(self),
            )
        self._building_auto = True
        try:
            self.reindex(factory, progress=progress)
        finally:
            self._building_auto = False
        structure: dict[str, Any] = {"policy": "auto", "built_for": len(self)}
        self.manifest["structure"] = structure
        if not is_flat(factory):
            self._tune_auto_structure()  # commits
        else:
            self.commit()
        return self

    @writes
    def retune(self, queries: np.ndarray | None = None) -> Any:
        """Choose the search parameters of an ``auto`` IVF structure again by today's rule
        (:func:`~dphr_haystack.index.auto.tune_nprobe`), keeping the structure; commits. An index tuned by an
        earlier rule searches as today's would. ``queries``: the start and end query vectors of questions its users
        ask, tuned on instead of probes (:data:`~dphr_haystack.index.auto.QUESTION_TARGET_RECALL`; a later rebuild
        tunes on probes again, with a warning). Exact and fixed structures are left as they are."""
        if (self.manifest.get("structure") or {}).get("policy") == "auto" and not is_flat(self.faiss_factory):
            if queries is not None and (np.ndim(queries) != 2 or np.shape(queries)[1] != self.dim or not len(queries)):
                raise InvalidParameterError(f"retune queries of shape {np.shape(queries)}: expected (n, {self.dim})")
            self._tune_auto_structure(queries)
        return self

    def _tune_auto_structure(self, queries: np.ndarray | None = None) -> None:
        tuned = self.structure.tune_nprobe(queries=queries)
        self.manifest["structure"].update({key: tuned.pop(key) for key in auto.TUNING_RECORD if key in tuned})
        self.set_search_params(**tuned)  # commits
