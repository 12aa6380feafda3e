"""Where phrase search runs: device choice, exact torch top-k search, GPU FAISS, and the CPU fallback.

* The device choice (:func:`resolve_device`, :class:`DeviceFallbackWarning`) lives in
  :mod:`dphr_haystack._util.device`, shared with the CLI and the Haystack nodes; it is re-exported here.
* :class:`TorchFlatSearch` is exact maximum-inner-product search by ``matmul`` + ``topk`` over the stored
  vectors, streamed in row chunks: on the CPU straight from the memory-mapped ``vectors.bin`` (no FAISS
  structure in RAM at all), on a GPU from a resident fp16/int8 copy (bf16/fp16 matmul, fp32 accumulation).
* :func:`faiss_to_gpu` moves a FAISS index to a GPU when the installed faiss has GPU support.
* :func:`make_search_backend` picks among them for an index type and device, falling back with a warning.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .._util.device import DeviceFallbackWarning, cuda_available, resolve_device, warn_cpu_fallback
from .._util.lazy import require
from .codec import VectorCodec

logger = logging.getLogger(__name__)

MISSING_SCORE = np.float32(np.finfo(np.float32).min)  # what FAISS returns for missing neighbours (id -1)

__all__ = [
    "MISSING_SCORE",
    "DeviceFallbackWarning",
    "FaissSearch",
    "TorchFlatSearch",
    "cuda_available",
    "faiss_has_gpu",
    "faiss_to_gpu",
    "make_search_backend",
    "resolve_device",
]


def faiss_has_gpu() -> bool:
    """Whether the installed faiss is a GPU build and sees at least one GPU."""
    faiss = require("faiss")
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


class TorchFlatSearch:
    """Exact inner-product top-k with torch over stored vectors, streamed ``chunk_rows`` rows at a time.

    Args:
        vectors: Returns the current stored array (n, d) in the codec's dtype (a memmap is fine); called on
            every search, so rows appended to the index are searched without a rebuild.
        codec: How stored rows decode to float32 (float16 / int8 with offset and scale / float32).
        device: ``cpu`` or ``cuda[:N]`` (resolve it first with :func:`resolve_device`).
        resident: Keep a copy of the stored vectors on the device (default: True on CUDA, False on the CPU,
            where the memory map is read chunk by chunk and pages stay evictable).
        chunk_rows: Rows decoded and multiplied per step (default: 8,192 on the CPU, where a chunk decoded to
            float32 stays in cache — measured 3x faster than 262,144 — and 262,144 on a GPU).

    Example:
        >>> search = TorchFlatSearch(lambda: index_vectors, VectorCodec("float16"))
        >>> scores, ids = search.search(queries, k=10)      # like faiss.IndexFlatIP.search
    """

    def __init__(
        self,
        vectors: Callable[[], np.ndarray],
        codec: VectorCodec,
        device: str = "cpu",
        resident: bool | None = None,
        chunk_rows: int | None = None,
    ) -> None:
        torch = require("torch")
        self._vectors = vectors
        self.codec = codec
        self.device = torch.device(device)
        self.resident = (self.device.type == "cuda") if resident is None else resident
        self.chunk_rows = int(chunk_rows or (1 << 18 if self.device.type == "cuda" else 1 << 13))
        self._on_device: Any = None  # resident copy (stored dtype), grown as the index grows

    @property
    def ntotal(self) -> int:
        return len(self._vectors())

    @property
    def compute_dtype(self):
        torch = require("torch")
        if self.device.type != "cuda":
            return torch.float32
        return (
            torch.bfloat16
            if self.codec.dtype == "int8" and torch.cuda.is_bf16_supported()
            else (torch.float16 if self.codec.dtype != "float32" else torch.float32)
        )

    def _stored_tensor(self, stored: np.ndarray, start: int, stop: int):
        torch = require("torch")
        if self.resident:
            if self._on_device is None or len(self._on_device) < len(stored):
                have = 0 if self._on_device is None else len(self._on_device)
                new = torch.from_numpy(np.array(stored[have:])).to(self.device)
                self._on_device = new if self._on_device is None else torch.cat([self._on_device, new])
            return self._on_device[start:stop]
        block = stored[start:stop]
        if not block.flags.writeable:  # a read-only memory map: torch warns, but only reads it
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                return torch.from_numpy(block).to(self.device)
        return torch.from_numpy(block).to(self.device)

    def _decode(self, block):
        torch = require("torch")
        dtype = self.compute_dtype
        if self.codec.dtype == "int8":
            return (block.to(torch.float32) / self.codec.scale + self.codec.offset).to(dtype)
        return block.to(dtype)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, ids) per query row, best first; missing neighbours get id -1 (as FAISS)."""
        torch = require("torch")
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        stored = self._vectors()
        n_q, total = len(queries), len(stored)
        scores_out = np.full((n_q, k), MISSING_SCORE, dtype=np.float32)
        ids_out = np.full((n_q, k), -1, dtype=np.int64)
        if n_q == 0 or total == 0 or k < 1:
            return scores_out, ids_out
        q = torch.from_numpy(queries).to(self.device).to(self.compute_dtype)
        part_scores, part_ids, held = [], [], 0
        with torch.inference_mode():
            for start in range(0, total, self.chunk_rows):
                stop = min(start + self.chunk_rows, total)
                block = self._decode(self._stored_tensor(stored, start, stop))  # (rows, d)
                scores = (q @ block.T).float()  # (n_q, rows), fp32
                s, i = torch.topk(scores, min(k, stop - start), dim=1)
                part_scores.append(s)
                part_ids.append(i + start)
                held += s.shape[1]
                if held > 8 * k or stop == total:  # merge the chunk winners every ~8 chunks
                    merged_s, merged_i = torch.cat(part_scores, dim=1), torch.cat(part_ids, dim=1)
                    top_s, order = torch.topk(merged_s, min(k, merged_s.shape[1]), dim=1)
                    part_scores, part_ids = [top_s], [torch.gather(merged_i, 1, order)]
                    held = top_s.shape[1]
        best_scores, best_ids = part_scores[0], part_ids[0]
        found = best_scores.shape[1]
        scores_out[:, :found] = best_scores.cpu().numpy()
        ids_out[:, :found] = best_ids.cpu().numpy()
        return scores_out, ids_out


class FaissSearch:
    """A FAISS index (CPU or GPU clone) behind the same ``search(queries, k)`` call as TorchFlatSearch."""

    def __init__(self, index, device: str = "cpu") -> None:
        self.index = index
        self.device = device

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(np.ascontiguousarray(queries, dtype=np.float32), k)


def faiss_to_gpu(index, device: str = "cuda", fp16: bool = True):
    """A GPU copy of a CPU FAISS index (faiss-gpu); raises RuntimeError when this index type has no GPU version."""
    faiss = require("faiss")
    if not faiss_has_gpu():
        raise RuntimeError("the installed faiss has no GPU support (pip install 'dphr-haystack[faiss-gpu]')")
    ordinal = int(device.split(":", 1)[1]) if ":" in device else 0
    resources = faiss.StandardGpuResources()
    options = faiss.GpuClonerOptions()
    options.useFloat16 = fp16
    gpu_index = faiss.index_cpu_to_gpu(resources, ordinal, index, options)
    gpu_index.referenced_objects = [resources]  # keep the resources alive as long as the index
    return gpu_index


def make_search_backend(
    faiss_index,
    is_flat: bool,
    vectors: Callable[[], np.ndarray],
    codec: VectorCodec,
    device: str = "cpu",
    search_params: dict[str, Any] | None = None,
    flat_search: str = "faiss",
) -> FaissSearch | TorchFlatSearch:
    """The token search for an index: GPU FAISS, else torch on the GPU (flat), else CPU FAISS or torch.

    On a CUDA device: faiss-gpu when installed and it supports the index type; otherwise flat indexes use
    :class:`TorchFlatSearch` on the GPU and other types stay on the CPU with a :class:`DeviceFallbackWarning`.
    On the CPU: the FAISS index, or TorchFlatSearch over the memory-mapped vectors when ``flat_search="mmap"``
    (or when a flat index has no in-RAM FAISS structure).
    """
    from .structures import apply_search_params

    device = resolve_device(device)
    if device.startswith("cuda"):
        if faiss_index is not None and faiss_has_gpu() and not is_flat:  # flat: exact torch over the stored codes
            try:
                gpu_index = faiss_to_gpu(faiss_index, device)
                # a GPU IVF scans its lists in parallel, without a cap on the codes a query scans
                apply_search_params(gpu_index, {k: v for k, v in (search_params or {}).items() if k != "max_codes"})
                return FaissSearch(gpu_index, device)
            except RuntimeError as exc:
                warn_cpu_fallback(f"FAISS cannot run this index type on the GPU ({exc})")
                return FaissSearch(faiss_index, "cpu")
        if is_flat:
            return TorchFlatSearch(vectors, codec, device)
        warn_cpu_fallback(
            "faiss-gpu is not installed, so this quantized/graph index cannot search on the GPU "
            "(pip install 'dphr-haystack[faiss-gpu]'; flat indexes use torch on the GPU without it)"
        )
        return FaissSearch(faiss_index, "cpu")
    if is_flat and (flat_search == "mmap" or faiss_index is None):
        return TorchFlatSearch(vectors, codec, "cpu")
    return FaissSearch(faiss_index, "cpu")
