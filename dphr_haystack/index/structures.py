"""FAISS structures for phrase indexes: named index types, training-sample sizes, search parameters, builds.

Every type is a FAISS ``index_factory`` string over inner product; span scoring always reads the exact
stored vectors (``vectors.bin``), so a quantized structure only changes which start/end tokens are found.

==============  ====================================  ==================================================
type            factory (d = 384, nlist = 1024)        bytes per vector in the FAISS structure
==============  ====================================  ==================================================
flat            ``Flat``                              the stored codes: 2·d (fp16), d (int8), 4·d (fp32);
                                                      rebuilt in RAM on load, or searched memory-mapped
ivf-flat        ``IVF1024,Flat``                      4·d + 8 (id)
ivf-sq8         ``IVF1024,SQ8``                       d + 8
ivf-sq4         ``IVF1024,SQ4``                       d/2 + 8
opq-ivf-pq      ``OPQ48,IVF1024,PQ48np``               m + 8 (m = d/8 sub-quantizers of 8 bits,
                                                      DensePhrases' OPQ96 at d=768)
hnsw            ``HNSW32,Flat``                       4·d + 8·32·~1.2 (graph links)
==============  ====================================  ==================================================

**nlist** defaults to the power of two nearest 4·√n (FAISS' guideline: 4·√n to 16·√n lists), at most n/39 so
the coarse k-means gets its 39 points per centroid, and at most 65536.

**Training sample** (:func:`training_sample_size`): k-means needs at least 39 points per centroid (FAISS warns
below that) and ignores more than 256 per centroid (it subsamples), so an IVF type trains on
``clip(64·nlist, 39·nlist, 256·nlist)`` vectors; PQ/OPQ codebooks (256 centroids per sub-quantizer) need at
least 39·256 = 9,984 (``PQmxb``: 39·2^b). The sample is capped at ``max_train`` (default 1,000,000 vectors =
1.5 GB of float32 at
d = 384) and at the number of stored vectors; rows are drawn uniformly at random (seed 29, as DensePhrases).

**Search parameters** (:func:`default_search_params`): ``nprobe = clip(nlist/16, 1, 256)`` lists per query
(DensePhrases probes 256 of 1M lists); HNSW ``efSearch = 128``. Both are stored in the index manifest and
can be changed with :meth:`PhraseIndex.set_search_params`, as can ``refine=R`` (ours): fetch R·k candidates
from a quantized structure and keep the k best by exact inner product with the stored vectors
(:func:`refine_exact`).

**Larger than RAM**: ``build_faiss(..., ivfdata=...)`` / ``PhraseIndex.reindex(..., on_disk=True)`` keep IVF
inverted lists in a memory-mapped ``OnDiskInvertedLists`` file (built block by block, merged on disk).
"""

from __future__ import annotations

import logging
import math
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from .._util.atomic import write_file_atomic
from .._util.lazy import require
from .._util.nofollow import open_no_follow, refuse_symlink
from ..errors import InvalidParameterError

logger = logging.getLogger(__name__)

INDEX_TYPES = ("flat", "ivf-flat", "ivf-sq8", "ivf-sq4", "opq-ivf-pq", "hnsw")
MIN_POINTS_PER_CENTROID = 39
MAX_POINTS_PER_CENTROID = 256
OPQ_ITERATIONS = 10  # DensePhrases trains OPQMatrix with niter=10 (FAISS' default is 50)
DEFAULT_MAX_TRAIN = 1_000_000
DPHR_SEARCH_PARAMS = ("refine",)  # search parameters applied by dphr, not FAISS
TRAIN_SEED = 29


def default_nlist(num_vectors: int) -> int:
    """Power of two nearest 4·√n, at most n/39 (k-means points per centroid) and 65536; at least 1."""
    if num_vectors < 1:
        return 1
    target = 4.0 * math.sqrt(num_vectors)
    nlist = 2 ** round(math.log2(max(target, 1.0)))
    cap = max(1, num_vectors // MIN_POINTS_PER_CENTROID)
    while nlist > cap:
        nlist //= 2
    return int(min(max(nlist, 1), 65536))


def pq_subquantizers(dim: int, dims_per_code: int = 8) -> int:
    """Number of PQ sub-quantizers: d/8 (8 dims per byte, DensePhrases' 96 at d=768), a divisor of d."""
    m = max(1, dim // dims_per_code)
    while dim % m:
        m -= 1
    return m


def factory_for(
    kind: str, num_vectors: int, dim: int, nlist: int | None = None, pq_m: int | None = None, hnsw_m: int = 32
) -> str:
    """The FAISS factory string of a named index type for ``num_vectors`` vectors of dimension ``dim``.

    Example:
        >>> factory_for("opq-ivf-pq", 3_000_000, 768)
        'OPQ96,IVF8192,PQ96np'
    """
    if kind not in INDEX_TYPES:
        raise InvalidParameterError(f"unknown index type {kind!r}; valid: {', '.join(INDEX_TYPES)}")
    nlist = nlist or default_nlist(num_vectors)
    if kind == "flat":
        return "Flat"
    if kind == "hnsw":
        return f"HNSW{hnsw_m},Flat"
    if kind == "opq-ivf-pq":
        m = pq_m or pq_subquantizers(dim)
        return f"OPQ{m},IVF{nlist},PQ{m}np"  # np: no polysemous training (unused by our search; DensePhrases' too)
    return {"ivf-flat": f"IVF{nlist},Flat", "ivf-sq8": f"IVF{nlist},SQ8", "ivf-sq4": f"IVF{nlist},SQ4"}[kind]


def make_faiss_index(dim: int, factory: str, pq_max_train: int | None = None):
    """An empty inner-product FAISS index (OPQ rotations train ``OPQ_ITERATIONS`` rounds); errors on bad strings.

    ``pq_max_train`` caps the points OPQ and PQ codebooks train on (FAISS: 65,536 = 256 per centroid); PQ
    k-means over 8-dimensional sub-vectors is slow on CPUs, so a cap of ~20k (still > 39·256) saves minutes.
    """
    faiss = require("faiss")
    try:
        index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        raise InvalidParameterError(f"invalid FAISS factory string {factory!r}: {exc}") from exc
    if isinstance(index, faiss.IndexPreTransform):
        for position in range(index.chain.size()):
            transform = faiss.downcast_VectorTransform(index.chain.at(position))
            if isinstance(transform, faiss.OPQMatrix):
                transform.niter = OPQ_ITERATIONS
                if pq_max_train:
                    transform.max_train_points = int(pq_max_train)
    inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexPreTransform) else index
    pq = getattr(inner, "pq", None)
    if pq_max_train and pq is not None:
        pq.cp.max_points_per_centroid = max(MIN_POINTS_PER_CENTROID, int(pq_max_train) // pq.ksub)
    return index


def ivf_of(index) -> Any | None:
    """The IndexIVF inside ``index`` (through pre-transforms such as OPQ), or None."""
    faiss = require("faiss")
    try:
        return faiss.extract_index_ivf(index)
    except (RuntimeError, AttributeError):
        return None


def k_independent(index) -> bool:
    """Whether ``index`` ranks the same scored rows whatever k is asked for, so that its top-k for a smaller k is
    the head of its top-k for a larger one (up to equal scores at the cut): exhaustive structures, and IVF (a fixed
    nprobe scans the same lists whatever k), but not HNSW (its beam widens with k)."""
    faiss = require("faiss")
    inner = faiss.downcast_index(index.index if isinstance(index, faiss.IndexPreTransform) else index)
    return isinstance(inner, (faiss.IndexIVF, faiss.IndexFlatCodes))


def _pq_centroids(factory: str) -> int:
    """Centroids per PQ sub-quantizer codebook (2^nbits; ``PQ48`` = 8 bits), 0 without PQ."""
    match = re.search(r"(?:^|,)PQ\d+(?:x(\d+))?", factory.replace(" ", ""))
    if match is None:
        return 0
    return 2 ** int(match.group(1) or 8)


def training_sample_size(factory: str, nlist: int | None, num_vectors: int, max_train: int = DEFAULT_MAX_TRAIN) -> int:
    """How many vectors to train a FAISS structure on (see the module docstring for the rule)."""
    if nlist:
        want = min(max(64 * nlist, MIN_POINTS_PER_CENTROID * nlist), MAX_POINTS_PER_CENTROID * nlist)
    else:
        want = 10_000  # scalar quantizers / OPQ without IVF only need value ranges or small codebooks
    want = max(want, MIN_POINTS_PER_CENTROID * _pq_centroids(factory))
    return int(min(num_vectors, max_train, want))


def minimum_training_size(factory: str, nlist: int | None) -> int:
    """Below this many training vectors FAISS k-means degrades (it warns) or fails."""
    need = MIN_POINTS_PER_CENTROID * nlist if nlist else 1
    return max(need, MIN_POINTS_PER_CENTROID * _pq_centroids(factory))


# Exact search over the stored codes, without a float32 copy: float16 vectors in FAISS' fp16 scalar quantizer (the
# same values, half the memory of IndexFlatIP), int8 codes in its uniform 8-bit quantizer set to decode exactly as
# the codec does (a quarter). benchmarks/index/exact_structures.py, 10^6 vectors: 3.8x (fp16) and 3.4x (int8) faster
# than IndexFlatIP for one query, the same rows.
EXACT_STRUCTURES = {"float32": "Flat", "float16": "SQfp16"}


def make_exact_index(dim: int, codec):
    """The exact inner-product structure that holds ``codec``'s stored vectors at their stored size."""
    if codec.dtype != "int8":
        return make_faiss_index(dim, EXACT_STRUCTURES[codec.dtype])
    faiss = require("faiss")
    index = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_8bit_uniform, faiss.METRIC_INNER_PRODUCT)
    # code c (= stored int8 + 128) decodes to vmin + (c + 0.5) * vdiff / 255 = offset + (c - 128) / scale
    trained = np.array([codec.offset - 128.5 / codec.scale, 255.0 / codec.scale], dtype=np.float32)
    faiss.copy_array_to_vector(trained, index.sq.trained)
    index.is_trained = True
    return index


def add_exact(index, codec, stored: np.ndarray, chunk: int = 65536, progress: bool = False) -> None:
    """Add stored rows to a :func:`make_exact_index` structure: int8 and float16 codes as they are (the same codes
    FAISS makes from the decoded vectors), float32 vectors as they are."""
    from tqdm.auto import tqdm

    faiss = require("faiss")
    inner = faiss.downcast_index(index)
    half_codes = (
        codec.dtype == "float16"
        and isinstance(inner, faiss.IndexScalarQuantizer)
        and inner.sq.qtype == faiss.ScalarQuantizer.QT_fp16
    )
    bar = tqdm(total=len(stored), desc="adding to FAISS", unit="vec", disable=not progress, leave=False)
    for start in range(0, len(stored), chunk):
        block = stored[start : start + chunk]
        if codec.dtype == "int8":
            index.add_sa_codes(np.ascontiguousarray((block.astype(np.int16) + 128).astype(np.uint8)))
        elif half_codes:  # SQfp16 codes are the stored half floats themselves: no decode to float32 and back
            index.add_sa_codes(np.ascontiguousarray(block, dtype=np.float16).view(np.uint8))
        else:
            index.add(np.ascontiguousarray(codec.decode(block)))
        bar.update(len(block))
    bar.close()


def default_search_params(index) -> dict[str, int]:
    """nprobe for IVF types (nlist/16, within 1..256), efSearch for HNSW; empty for exact types."""
    faiss = require("faiss")
    ivf = ivf_of(index)
    if ivf is not None:
        return {"nprobe": int(min(max(ivf.nlist // 16, 1), 256, ivf.nlist))}
    inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexPreTransform) else index
    if isinstance(inner, faiss.IndexHNSW):
        return {"efSearch": 128}
    return {}


def apply_search_params(index, params: dict[str, Any] | None) -> None:
    """Set ``nprobe`` / ``efSearch`` (…) through FAISS' ParameterSpace, which reaches through pre-transforms.

    ``refine`` is ours, not FAISS': see :func:`refine_exact`.
    """
    if not params:
        return
    faiss = require("faiss")
    space = faiss.GpuParameterSpace() if type(index).__name__.startswith("Gpu") else faiss.ParameterSpace()
    for name, value in params.items():
        if name in DPHR_SEARCH_PARAMS:
            if int(value) < 1:
                raise InvalidParameterError(f"search parameter {name} must be >= 1, got {value!r}")
            continue
        try:
            space.set_index_parameter(index, name, float(value) if isinstance(value, float) else int(value))
        except RuntimeError as exc:
            raise InvalidParameterError(
                f"search parameter {name}={value!r} does not apply to this index: {exc}"
            ) from exc


def total_order(scores: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Per query, the positions of its results best first: by score, and among equal scores the lower row first
    (missing rows, -1, last), so that which of equal-scored rows a search keeps never depends on the order FAISS
    met them in."""
    missing = ids < 0
    keys = (np.where(missing, np.iinfo(np.int64).max, ids), -np.where(missing, -np.inf, scores))
    return np.lexsort(keys, axis=-1)


def candidate_count(k: int, refine: int, total: int) -> int:
    """How many candidates a search for ``k`` rows keeps from the FAISS structure: k, or refine·k to re-rank exactly
    (at most every one of its ``total`` rows, at least k)."""
    return k if refine <= 1 else min(k * refine, max(total, k))


def rows_to_fetch(width: int, total: int) -> int:
    """Rows to ask the FAISS structure for to keep ``width`` of them: a few more, to see where the equal scores at
    the cut end (at most every row, at least ``width``)."""
    return min(width + max(16, width // 8), max(total, width))


def ranked_head(
    scores: np.ndarray, ids: np.ndarray, k: int, complete: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The top ``k`` of each query's results in :func:`total_order` (scores, rows), and per query whether the
    results settle it: their last row scores below the k-th (so no row they miss could tie with it), they ran out
    of rows (-1), or they hold every row of the index (``complete``). A search's settled top-k is then the head of
    its top-2k: a smaller k never needs a search of its own."""
    unordered = np.flatnonzero((scores[:, 1:] >= scores[:, :-1]).any(axis=1))  # FAISS ranks by score alone
    if len(unordered):
        scores, ids = scores.copy(), ids.copy()
        order = total_order(scores[unordered], ids[unordered])
        scores[unordered] = np.take_along_axis(scores[unordered], order, axis=1)
        ids[unordered] = np.take_along_axis(ids[unordered], order, axis=1)
    if complete or k >= ids.shape[1]:
        settled = np.ones(len(ids), dtype=bool)
    else:
        settled = (ids[:, -1] < 0) | (ids[:, k - 1] < 0) | (scores[:, -1] < scores[:, k - 1])
    return scores[:, :k], ids[:, :k], settled


def refine_exact(
    queries: np.ndarray, ids: np.ndarray, k: int, stored: np.ndarray, decode: Callable[[np.ndarray], np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Re-rank candidate rows by their exact inner product with the stored vectors; keep the best ``k`` (equal
    scores: the lower row first, :func:`total_order`), so the same candidates give the same rows in any order.

    With ``search_params["refine"] = r`` a quantized structure returns r·k candidates per query, re-scored from
    ``vectors.bin`` (r·k rows per query, read from the memory map): FAISS' ``IndexRefineFlat`` without a
    second copy of the vectors, since the index stores them anyway for span scoring.
    """
    n_q = len(queries)
    safe = np.where(ids >= 0, ids, 0)
    rows, inverse = np.unique(safe, return_inverse=True)
    vectors = np.asarray(decode(stored[rows]), dtype=np.float32)  # (unique rows, d)
    cand = vectors[inverse.reshape(ids.shape)]  # (n_q, candidates, d)
    scores = np.einsum("qcd,qd->qc", cand, queries.astype(np.float32))
    scores[ids < 0] = -np.inf
    keep = min(k, ids.shape[1])
    order = total_order(scores, ids)[:, :keep]
    out_ids = np.full((n_q, k), -1, dtype=np.int64)
    out_scores = np.full((n_q, k), np.finfo(np.float32).min, dtype=np.float32)
    out_ids[:, :keep] = np.take_along_axis(ids, order, axis=1)
    out_scores[:, :keep] = np.take_along_axis(scores, order, axis=1)
    out_ids[~np.isfinite(out_scores)] = -1
    out_scores[~np.isfinite(out_scores)] = np.finfo(np.float32).min
    return out_scores, out_ids


def sample_rows(num_vectors: int, size: int, seed: int = TRAIN_SEED) -> np.ndarray:
    """Sorted row numbers of a uniform sample without replacement (all rows when size >= n)."""
    if size >= num_vectors:
        return np.arange(num_vectors)
    return np.sort(np.random.default_rng(seed).choice(num_vectors, size, replace=False))


def train_faiss(
    index,
    factory: str,
    stored: np.ndarray,
    decode: Callable[[np.ndarray], np.ndarray],
    max_train: int = DEFAULT_MAX_TRAIN,
    train_size: int | None = None,
) -> int:
    """Train ``index`` on a sized sample of ``stored`` rows (decoded to float32); returns the sample size."""
    if index.is_trained or len(stored) == 0:
        return 0
    ivf = ivf_of(index)
    nlist = ivf.nlist if ivf is not None else None
    size = min(train_size or training_sample_size(factory, nlist, len(stored), max_train), len(stored))
    need = minimum_training_size(factory, nlist)
    if size < need:
        logger.warning(
            "training FAISS %r on %d vectors; it needs at least %d for good clusters (39 per IVF list, "
            "39·256 for PQ codebooks): add more vectors before training or lower nlist",
            factory,
            size,
            need,
        )
    rows = sample_rows(len(stored), size)
    sample = np.ascontiguousarray(decode(stored[rows]), dtype=np.float32)
    try:
        index.train(sample)
    except RuntimeError as exc:
        raise InvalidParameterError(
            f"training FAISS {factory!r} on {size} vectors failed ({exc}); add more vectors or choose a smaller nlist"
        ) from exc
    return size


def add_in_chunks(
    index,
    stored: np.ndarray,
    decode: Callable[[np.ndarray], np.ndarray],
    first_id: int = 0,
    chunk: int = 65536,
    with_ids: bool = False,
    progress: bool = False,
) -> None:
    """Add stored rows to ``index`` a chunk at a time (decoded to float32), optionally with explicit ids."""
    from tqdm.auto import tqdm

    bar = tqdm(total=len(stored), desc="adding to FAISS", unit="vec", disable=not progress, leave=False)
    for start in range(0, len(stored), chunk):
        block = np.ascontiguousarray(decode(stored[start : start + chunk]), dtype=np.float32)
        if with_ids:
            index.add_with_ids(block, np.arange(first_id + start, first_id + start + len(block), dtype=np.int64))
        else:
            index.add(block)
        bar.update(len(block))
    bar.close()


def build_faiss(
    factory: str,
    dim: int,
    stored: np.ndarray,
    decode: Callable[[np.ndarray], np.ndarray],
    max_train: int = DEFAULT_MAX_TRAIN,
    train_size: int | None = None,
    ivfdata: Path | None = None,
    block_rows: int = 1 << 21,
    progress: bool = False,
    pq_max_train: int | None = None,
) -> tuple[Any, int]:
    """Train and fill a FAISS structure from stored vectors (row i gets id i); returns it and its training size.

    With ``ivfdata`` (IVF types only) the inverted lists are written to that file as FAISS
    ``OnDiskInvertedLists`` and memory-mapped: the vectors are added ``block_rows`` at a time to empty
    copies of the trained index, each block written to a temporary file, and the blocks merged on disk,
    so neither the build nor a search holds all codes in RAM.
    """
    faiss = require("faiss")
    index = make_faiss_index(dim, factory, pq_max_train=pq_max_train)
    trained_on = train_faiss(index, factory, stored, decode, max_train, train_size)
    if ivfdata is None:
        add_in_chunks(index, stored, decode, progress=progress)
        return index, trained_on
    if ivf_of(index) is None:
        raise InvalidParameterError(f"on-disk inverted lists need an IVF index type; {factory!r} has none")
    from faiss.contrib.ondisk import merge_ondisk

    ivfdata = refuse_symlink(ivfdata)  # FAISS opens it by name: a symbolic link there is refused first
    blocks: list[str] = []
    try:
        for start in range(0, len(stored), block_rows):
            part = faiss.clone_index(index)
            add_in_chunks(
                part, stored[start : start + block_rows], decode, first_id=start, with_ids=True, progress=progress
            )
            name = str(ivfdata.with_name(f"{ivfdata.name}.block-{len(blocks)}"))
            write_file_atomic(Path(name), lambda tmp, part=part: write_faiss_file(part, tmp), fsync=False)
            blocks.append(name)
            del part
        ivfdata.unlink(missing_ok=True)
        if blocks:
            merge_ondisk(index, blocks, str(ivfdata))
        else:
            empty = faiss.OnDiskInvertedLists(ivf_of(index).nlist, ivf_of(index).code_size, str(ivfdata))
            ivf_of(index).replace_invlists(empty, True)
            empty.this.disown()
    finally:
        for name in blocks:
            Path(name).unlink(missing_ok=True)
    return index, trained_on


def move_lists_to_disk(index, ivfdata: Path) -> None:
    """Move an in-RAM IVF index's inverted lists into an ``OnDiskInvertedLists`` file (memory-mapped after)."""
    faiss = require("faiss")
    ivf = ivf_of(index)
    if ivf is None:
        raise InvalidParameterError("only IVF indexes have inverted lists to move to disk")
    ondisk = faiss.OnDiskInvertedLists(ivf.nlist, ivf.code_size, str(refuse_symlink(ivfdata)))
    sources = faiss.InvertedListsPtrVector()
    sources.push_back(ivf.invlists)
    ondisk.merge_from_multiple(sources.data(), sources.size(), False, False)
    ivf.replace_invlists(ondisk, True)
    ondisk.this.disown()


def has_ondisk_lists(index) -> bool:
    """Whether the index keeps its inverted lists in an on-disk (memory-mapped) file."""
    faiss = require("faiss")
    ivf = ivf_of(index)
    return ivf is not None and isinstance(faiss.downcast_InvertedLists(ivf.invlists), faiss.OnDiskInvertedLists)


WRITE_BLOCK = 1 << 20  # bytes FAISS hands to each Python write


def write_faiss_to(index, handle: IO[bytes]) -> None:
    """Write a FAISS index into an open binary file through Python writes, a block at a time.

    FAISS's own file writer uses C stdio: a full disk raises an untyped RuntimeError, or goes unnoticed when only
    the final ``fclose`` fails. Through ``handle`` the failure is Python's OSError with its errno (ENOSPC)."""
    faiss = require("faiss")
    failed: list[OSError] = []

    def write(data: bytes) -> int:
        try:
            return handle.write(data)
        except OSError as exc:
            failed.append(exc)
            raise

    try:
        faiss.write_index(index, faiss.PyCallbackIOWriter(write, WRITE_BLOCK))
    except RuntimeError:
        if failed:  # FAISS reported our write's OSError as its own error
            raise failed[0] from None
        raise


def write_faiss_file(index, file: Path) -> None:
    """Write a FAISS index to ``file`` (opened without following a symbolic link) with :func:`write_faiss_to`."""
    with open_no_follow(file, "wb") as handle:
        write_faiss_to(index, handle)


def read_faiss(file: Path, ondisk: bool = False):
    """Read a FAISS index file; with ``ondisk``, its inverted lists are memory-mapped from the same directory."""
    faiss = require("faiss")
    return faiss.read_index(str(file), faiss.IO_FLAG_ONDISK_SAME_DIR if ondisk else 0)


def copy_ivfdata(src: Path, dst: Path) -> None:
    """Copy an inverted-list data file (sparse-aware copy of a possibly large file)."""
    write_file_atomic(dst, lambda tmp: shutil.copyfile(src, tmp), fsync=False)


def structure_bytes(index) -> int:
    """Bytes of the serialized FAISS structure (what ``write_index`` writes; on-disk lists excluded)."""
    faiss = require("faiss")
    return int(faiss.serialize_index(index).nbytes)
