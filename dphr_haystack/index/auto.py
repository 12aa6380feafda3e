"""The FAISS structure an index picks for itself (``faiss_factory="auto"``, the default of ``dphr index`` and the
Haystack stores): exact search over the stored codes while the index is small, an IVF scalar-quantized structure
(``IVF<nlist>,SQ8``) above :data:`EXACT_LIMIT` vectors, and above :data:`PQ_LIMIT` OPQ product-quantization codes
(``OPQ<m>,IVF<nlist>,PQ<m>np``, m = d/4: 96 bytes a vector at d=384, a quarter of SQ8's), each IVF structure with
exact re-ranking from the stored vectors (:func:`auto_refine` candidates per wanted token) and its ``nprobe`` chosen
at build time on probe queries so that it returns the tokens exact search returns. The structure is built again when
the index outgrows it (:data:`REBUILD_GROWTH` times the size it was trained for, or past a limit where another kind
is picked); ``PhraseIndex.retune`` (``dphr reindex --index DIR --retune``) chooses ``nprobe`` again by today's rule
without rebuilding.

Probe queries are midpoints of two stored vectors drawn at random (seeded): they lie between the stored vectors
and need no model. They are harder than questions: on the shipped model's SQuAD-open-small index (680,860
vectors, ``IVF2048,SQ8``) nprobe 128 finds 95.5% of 256 probes' exact top-20 tokens (94.9% of the rule's 128)
and 99.1% of the questions' (``python -m benchmarks.index.auto_structure``). So the rule asks
:data:`TARGET_RECALL` = 0.93 of the probes' top :data:`PROBE_K` = 20 tokens, what a phrase answer's first search
takes (the top 10 start and end tokens, and the next 10 its second round would take): there it chooses 128
(64 finds 88%), where the earlier rule (0.99 of the top 256) chose 512 for the same answers (2,645 validation
questions: EM@1 28.85 vs 28.88, one question apart; 300 SQuAD-open-small questions: 35.0 both) at a quarter of
the scan. Recall is measured against exact inner-product search over the decoded stored vectors.

PQ codes rank coarser than SQ8's, so they re-rank at least :data:`PQ_REFINE` = 8 candidates per token, not 4 (and
16 or 32 where fewer lists then reach the target: :data:`PQ_REFINES`): on the
default model's SQuAD-open-small index (713,934 vectors, ``OPQ96,IVF4096,PQ96np``) 4 never reaches a probe
recall of 0.93 (0.907 with every list probed, a 92 ms search), 8 reaches it at nprobe 128 as SQ8 does and answers 600
validation and 600 unseen questions exactly as ``IVF4096,SQ8`` does (EM@1 42.00 / 49.17), with 3.9 instead of 14.1
KB of RAM a passage; OPQ48 codes (48 bytes) do not reach it with 8 (``python -m
benchmarks.index.quantized_structures``, ``python -m benchmarks.memory.index_footprint``). An index past
:data:`PQ_LIMIT` is tuned to a lower probe recall, :data:`PQ_TARGET_RECALL` = 0.85: at 200,598 passages the
questions' answers were the same at half the lists (see the constant). A PQ structure also caps the codes a query
scans (FAISS' ``max_codes``) at the tightest of :data:`SCAN_BUDGETS` times the average of its ``nprobe`` lists that
keeps the target: k-means lists of real text are uneven, and the queries landing among the longest lists made the
slowest searches. Below
:data:`PQ_LIMIT` SQ8 stays: its codes take under 0.8 GB there and it builds faster (356 vs 429 s at 713,934
vectors on 2 cores, OPQ's rotation training the difference).

Probes need no model, but they judge a scan cap harshly: a cap that costs the probes a sixth of their tokens costs
real questions under 1%. An index whose users' questions are known is tuned on them instead
(``PhraseIndex.retune(queries)``, ``dphr reindex --retune --questions FILE``): the same rule on their start and end
query vectors, to :data:`QUESTION_TARGET_RECALL` (``tuned_on`` records which).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .structures import default_nlist, pq_subquantizers

logger = logging.getLogger(__name__)

AUTO = "auto"
# Vectors searched exactly; above, IVF-SQ8 with exact re-ranking. Exact search scans every fp16 code for the start
# and the end query vector: at 60,962 vectors (SQuAD dev, 1,702 passages) a phrase search took 8.0 ms p50 exactly,
# 4.3 ms with IVF1024,SQ8 at the tuned nprobe 64 (the same top answer for all 2,000 questions asked; built and tuned
# in 4.9 s) and 4.1 ms with the IVF512 a store builds as it grows past this limit (99.6% the same top answer, the
# same EM@1): benchmarks/index/exact_limit.py. Around 2^15 vectors the scan costs what list scan and re-ranking do.
EXACT_LIMIT = 32_768
# Vectors above which the codes in RAM are OPQ product-quantization codes (d/PQ_DIMS_PER_CODE bytes a vector)
# instead of SQ8 (d bytes): from 2^21 vectors (~60,000 passages) SQ8 codes would take over 0.8 GB (see above).
PQ_LIMIT = 2**21
PQ_DIMS_PER_CODE = 4  # d/4 sub-quantizers of 8 bits: OPQ96,...,PQ96np at d=384
REBUILD_GROWTH = 4  # an IVF structure is trained again when the index has grown this many times past its build
REFINE = 4  # candidates fetched per wanted token, re-ranked exactly (``refine`` search parameter), SQ8 codes
PQ_REFINE = 8  # the same for PQ codes, coarser than SQ8's: the least of PQ_REFINES
# Refines tried for PQ codes: the one whose tuned nprobe is smallest wins (re-ranking 32·k stored rows reads far
# less than scanning 4x more lists). At 3,957,392 vectors of SQuAD + distractor text (OPQ96,IVF8192,PQ96np) 8 does
# not reach the target even with every list probed (0.849), 16 needs nprobe 1024 (0.934), 32 nprobe 256 (0.950).
PQ_REFINES = (PQ_REFINE, 16, 32)
TARGET_RECALL = 0.93  # of the probes' exact top-PROBE_K tokens (about 0.99 of a question's: see above)
# The same for PQ codes: past PQ_LIMIT the phrase search's time is mostly its list scan and re-ranking, and a question
# keeps nearly all its tokens at a lower probe recall. At 7,349,324 vectors (200,598 passages, OPQ96,IVF8192,PQ96np)
# nprobe 256 / refine 32 held 0.935 of 128 probes' exact top-20 tokens and 0.991 of 800 question vectors' (the start
# and end vectors of 400 validation and unseen SQuAD questions); nprobe 128 / refine 32 held 0.871 and 0.984, gave
# 1,200 questions the same EM@1, acc@1 and acc@5 (F1@1 56.67 against 56.75 on the unseen half) and answered in 0.81
# of the time (p50 34.5 against 42.8 ms; a dense Flat retriever over the same passages 39.4); nprobe 64 lost 3 of
# 600 validation answers (``python -m benchmarks.index.large_corpus --tuning``).
PQ_TARGET_RECALL = 0.85
# PQ structures cap the codes a query scans (FAISS' max_codes, nearest lists first) at the first of these multiples of
# what its nprobe lists hold on average under which the probes keep the target: k-means lists of real text are
# uneven (at 7,306,544 vectors in IVF8192: 897 codes a list on average, 3,302 at the 99th percentile, 15,723 the
# longest), and a question landing among long lists scans 2-3x the median's codes. At 200,598 passages, nprobe 128 /
# refine 32, the probes keep 0.814 / 0.859 / 0.870 of their exact top-20 tokens under 1 / 1.5 / 2x (0.871 uncapped),
# so 1.5x is kept (``python -m benchmarks.index.large_corpus --tuning`` compares them).
SCAN_BUDGETS = (1.0, 1.5, 2.0)
# The recall a structure is tuned to on the questions its users ask (their start and end query vectors,
# ``PhraseIndex.retune(queries=...)``, ``dphr reindex --retune --questions FILE``) instead of probes. Questions keep
# far more of their tokens than probes at the same settings and lose little under a scan cap: at 200,598 passages
# (OPQ96,IVF8192,PQ96np) nprobe 128 / refine 16 held 0.981 of 200 dev questions' exact top-20 tokens (probes 0.838),
# under a cap of 1x its lists' average 0.974 (probes 0.701). Tuned on 400 SQuAD train questions the rule chose nprobe
# 64 / refine 8 / a 1x cap (0.977 of theirs; 0.954 of the dev questions', probes 0.548), which gave 1,200 dev questions
# the same EM@1 and acc@1 as nprobe 128 / refine 16 uncapped at 0.80x the p95 of a dense Flat retriever (33.9 ->
# 17.2 ms; ``python -m benchmarks.index.large_corpus --tuning --settings ...``).
QUESTION_TARGET_RECALL = 0.97
PROBE_QUERIES = 128
PROBE_K = 20
SEED = 29
# What a tuning records in the manifest's ``structure`` (the rest of tune_nprobe's result are search parameters).
# ``scan_budget``: the multiple of its lists' average that a PQ structure's scan cap was chosen at (0: no cap), which
# the cap keeps as the structure grows (``FaissStructure.follow_scan_budget``).
# ``tuned_on``: "probes" (:func:`probe_truth`) or "questions" (:func:`question_truth`).
TUNING_RECORD = ("probe_recall", "probe_queries", "probe_k", "target_recall", "scan_budget", "tuned_on")


def auto_factory(num_vectors: int, dim: int) -> str:
    """The structure ``auto`` picks for ``num_vectors`` vectors of dimension ``dim``."""
    if num_vectors <= EXACT_LIMIT:
        return "Flat"
    nlist = default_nlist(num_vectors)
    if num_vectors > PQ_LIMIT:
        m = pq_subquantizers(dim, PQ_DIMS_PER_CODE)
        return f"OPQ{m},IVF{nlist},PQ{m}np"
    return f"IVF{nlist},SQ8"


def auto_refine(factory: str) -> int:
    """The fewest candidates per wanted token that ``auto`` re-ranks exactly in ``factory``: more for PQ codes."""
    return refine_choices(factory)[0]


def refine_choices(factory: str) -> tuple[int, ...]:
    """The refines :func:`tune_search_params` tries for ``factory``."""
    return PQ_REFINES if _kind(factory) == "PQ" else (REFINE,)


def target_recall(factory: str) -> float:
    """The probe recall ``auto`` tunes ``factory`` to: :data:`PQ_TARGET_RECALL` for PQ codes, else
    :data:`TARGET_RECALL`."""
    return PQ_TARGET_RECALL if _kind(factory) == "PQ" else TARGET_RECALL


def tune_search_params(
    search: Callable[..., np.ndarray],
    stored: np.ndarray,
    decode: Callable[[np.ndarray], np.ndarray],
    nlist: int,
    refines: tuple[int, ...],
    target: float = TARGET_RECALL,
    budget: bool = False,
    probes: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, Any]:
    """:func:`tune_nprobe` for each refine; the tuning that reaches ``target`` with the fewest lists (then the
    fewest candidates) wins; when none reaches it (each probed every list), the fewest candidates. With ``budget``
    (PQ structures: :func:`budgets_scan`) it also caps the codes a query scans (``max_codes``) at the first of
    :data:`SCAN_BUDGETS` times the average scan (:func:`scan_budget`) under which the probes keep ``target`` (that
    multiple as ``scan_budget``), else ``max_codes`` and ``scan_budget`` are 0 (no cap); ``search`` then takes
    ``max_codes`` as a fifth argument. ``probes``: the queries and their exact top rows to tune on (default:
    :func:`probe_truth`; :func:`question_truth` for questions)."""
    probes = probes if probes is not None else probe_truth(stored, decode)
    tunings = [tune_nprobe(search, stored, decode, nlist, refine, target, probes) for refine in refines]
    best = min(tunings, key=lambda t: (t["probe_recall"] < target, t["nprobe"], t["refine"], -t["probe_recall"]))
    if budget:
        (queries, truth), best["max_codes"], best["scan_budget"] = probes, 0, 0.0
        for factor in SCAN_BUDGETS:  # the tightest cap that keeps the target (or, missed anyway, loses nothing)
            cap = scan_budget(best["nprobe"], len(stored), nlist, factor)
            found = search(queries, truth.shape[1], best["nprobe"], best["refine"], cap)
            recall = float(token_recall(truth, found).mean())
            logger.info("auto structure: max_codes=%d gives recall %.4f", cap, recall)
            if recall >= min(target, best["probe_recall"]):
                best["max_codes"], best["probe_recall"], best["scan_budget"] = cap, recall, factor
                break
    return best


def budgets_scan(factory: str) -> bool:
    """Whether ``auto`` caps the codes a query of ``factory`` scans (:data:`SCAN_BUDGETS`): PQ structures."""
    return _kind(factory) == "PQ"


def scan_budget(nprobe: int, num_vectors: int, nlist: int, factor: float = 1.0) -> int:
    """The codes a query may scan (FAISS' ``max_codes``, nearest lists first): ``factor`` times what ``nprobe``
    lists of ``num_vectors`` vectors in ``nlist`` lists hold on average."""
    return math.ceil(factor * nprobe * num_vectors / max(nlist, 1))


def needs_rebuild(manifest: dict[str, Any], num_vectors: int, dim: int) -> bool:
    """Whether an ``auto`` index of ``num_vectors`` vectors has outgrown its structure (grown
    :data:`REBUILD_GROWTH` times, or past a limit where ``auto`` picks another kind of structure)."""
    built_for = int((manifest.get("structure") or {}).get("built_for", 0))
    wanted = auto_factory(num_vectors, dim)
    if wanted == "Flat":
        return False
    if _kind(manifest["faiss_factory"]) != _kind(wanted):
        return True
    return num_vectors > REBUILD_GROWTH * max(built_for, 1)


def _kind(factory: str) -> str:
    """``Flat``, ``SQ8`` or ``PQ``: what ``auto`` switches between."""
    return "Flat" if factory == "Flat" else ("PQ" if ",PQ" in factory else "SQ8")


def probe_queries(stored: np.ndarray, decode: Callable[[np.ndarray], np.ndarray], count: int) -> np.ndarray:
    """Midpoints of random pairs of stored vectors (seeded), as float32."""
    rng = np.random.default_rng(SEED)
    first, second = (np.sort(rng.choice(len(stored), size=count)) for _ in range(2))
    return ((decode(stored[first]) + decode(stored[second])) / 2).astype(np.float32)


def exact_top_rows(
    queries: np.ndarray, stored: np.ndarray, decode: Callable[[np.ndarray], np.ndarray], k: int, chunk: int = 262_144
) -> np.ndarray:
    """Rows of the exact top-``k`` inner products of each query, by a chunked scan of the stored vectors."""
    best_scores = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_rows = np.zeros((len(queries), 0), dtype=np.int64)
    for start in range(0, len(stored), chunk):
        scores = queries @ decode(stored[start : start + chunk]).T
        rows = np.broadcast_to(np.arange(start, start + scores.shape[1]), scores.shape)
        scores = np.concatenate([best_scores, scores], axis=1)
        rows = np.concatenate([best_rows, rows], axis=1)
        keep = np.argsort(-scores, axis=1)[:, :k]
        best_scores, best_rows = np.take_along_axis(scores, keep, 1), np.take_along_axis(rows, keep, 1)
    return best_rows


def probe_truth(stored: np.ndarray, decode: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """:data:`PROBE_QUERIES` probe queries and the rows of their exact top-:data:`PROBE_K` tokens."""
    queries = probe_queries(stored, decode, PROBE_QUERIES)
    return queries, exact_top_rows(queries, stored, decode, min(PROBE_K, len(stored)))


def question_truth(
    queries: np.ndarray, stored: np.ndarray, decode: Callable[[np.ndarray], np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Query vectors of real questions (their start and end vectors) and the rows of their exact top-:data:`PROBE_K`
    tokens: what :func:`tune_search_params` tunes on instead of probes."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    return queries, exact_top_rows(queries, stored, decode, min(PROBE_K, len(stored)))


def token_recall(truth: np.ndarray, found: np.ndarray) -> np.ndarray:
    """Per query, the share of its exact top rows (a row of ``truth``) that a search found (its row of ``found``)."""
    return np.array([len(set(t) & set(f)) / len(t) for t, f in zip(truth, found, strict=True)])


def tune_nprobe(
    search: Callable[[np.ndarray, int, int, int], np.ndarray],
    stored: np.ndarray,
    decode: Callable[[np.ndarray], np.ndarray],
    nlist: int,
    refine: int = REFINE,
    target: float = TARGET_RECALL,
    probes: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, Any]:
    """The smallest ``nprobe`` (powers of two up to ``nlist``) whose top-:data:`PROBE_K` tokens, ``refine``·k
    candidates re-ranked exactly, hold ``target`` (:func:`target_recall`) of exact search's, on
    :data:`PROBE_QUERIES` probe queries.

    Args:
        search: ``search(queries, k, nprobe, refine)`` → rows, the index's search with those parameters.
        stored: The stored vectors; ``decode`` turns rows of them into float32.
        nlist: The structure's number of lists.
        refine: Candidates per wanted token re-ranked exactly (:func:`auto_refine` of the structure).
        probes: :func:`probe_truth` of ``stored``, when the caller has it.
    """
    queries, truth = probes if probes is not None else probe_truth(stored, decode)
    k = truth.shape[1]
    nprobe, recall = 1, 0.0
    while True:
        found = search(queries, k, nprobe, refine)
        recall = float(token_recall(truth, found).mean())
        if recall >= target or nprobe >= nlist:
            break
        nprobe = min(nprobe * 2, nlist)
    logger.info("auto structure: nprobe=%d gives recall %.4f of the exact top-%d tokens", nprobe, recall, k)
    return {
        "nprobe": nprobe,
        "refine": refine,
        "probe_recall": recall,
        "probe_queries": len(queries),
        "probe_k": k,
        "target_recall": target,
    }
