"""A phrase dump spread over Ray workers and GPUs: independent resumable shards, then one merged index.

Shard ``i`` holds passages ``[i·shard_size, (i+1)·shard_size)``; worker ``w`` of ``W`` encodes the shards with
``i % W == w`` (:func:`dphr_haystack.encode.dump.dump_phrases`), each written atomically. A worker that dies (its
process killed, its machine lost) is retried by Ray, and a retry, like any re-run, skips the shards that are
complete, so no work is lost or duplicated. The driver keeps ``dump-status.json``: ``running`` while workers
run, ``complete`` with the expected shard count once all are done; :func:`~dphr_haystack.index.merge.merge_dump`
refuses a dump that is not complete and checks the count.

    >>> summary = dump_distributed("models/minilm-phrase", "corpus.jsonl", "dump/", num_workers=8, gpus_per_worker=1)
    >>> index = merge_dump("dump/", "my-index", faiss_factory="OPQ48,IVF4096,PQ48")

On a GPU worker the model runs under bf16 autocast (fp16 where bf16 is unsupported) and vectors are stored in
fp16 (or int8). Ray needs ``pip install "dphr-haystack[distributed]"``; on a multi-machine cluster every worker
must see ``out_dir``, the corpus and the model directory (shared filesystem), or pass the corpus and model as
objects, which Ray ships to the workers.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._util.atomic import write_file_atomic
from ..errors import DistributedDumpError, InvalidParameterError

logger = logging.getLogger(__name__)

RAY_HINT = 'pip install "dphr-haystack[distributed]"'
STATUS_FILE = "dump-status.json"


@dataclass
class WorkerReport:
    """What one worker did, read from ``workers/worker-NNNN.json`` (attempts > 1: it was retried)."""

    worker: int
    attempts: int
    encoded_shards: int
    skipped_shards: int
    vectors: int
    device: str
    host: str
    seconds: float


@dataclass
class DistributedDumpSummary:
    """The result of :func:`dump_distributed`."""

    out_dir: Path
    num_workers: int
    num_shards: int
    passages: int
    vectors: int
    encoded_shards: int
    skipped_shards: int
    seconds: float
    workers: list[WorkerReport] = field(default_factory=list)


def _require_ray():
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - exercised only where ray is missing
        raise ImportError(f"the distributed dump needs Ray. Install it with: {RAY_HINT}") from exc
    return ray


def dump_distributed(
    model: Any,
    corpus: str | Path | Iterable[Any],
    out_dir: str | Path,
    num_workers: int = 2,
    shard_size: int = 1000,
    filter_threshold: float | None = None,
    dtype: str = "float16",
    batch_size: int = 32,
    gpus_per_worker: float = 0.0,
    cpus_per_worker: float = 1.0,
    max_retries: int = 3,
    address: str | None = None,
    ray_init: dict[str, Any] | None = None,
    crash_once: tuple[int, int] | None = None,
) -> DistributedDumpSummary:
    """Dump a corpus into phrase shards with ``num_workers`` Ray tasks; re-running resumes.

    Args:
        model: A phrase model directory (loaded by each worker, on its GPU when ``gpus_per_worker`` > 0) or a
            :class:`~dphr_haystack.model.phrase_model.PhraseModel` (shipped to the workers through Ray's object store).
        corpus: A corpus file every worker can read, or passages (shipped once through the object store).
        out_dir: The dump directory (shared by all workers).
        num_workers: Ray tasks; worker ``w`` encodes shards ``w, w + W, w + 2W, …``.
        gpus_per_worker / cpus_per_worker: Ray resources per task (fractions share a GPU).
        max_retries: How often Ray re-runs a task whose worker process died; a retry resumes its shards.
        address: An existing Ray cluster (``auto`` or ``ray://host:10001``); None starts or reuses a local one.
        ray_init: Extra ``ray.init`` arguments when this call starts Ray (e.g. ``{"num_cpus": 2}``).
        crash_once: Testing aid, ``(worker, n)``: that worker's process exits abruptly, as a killed machine
            would, after writing ``n`` shards on its first attempt, to exercise the retry path.

    Raises:
        DistributedDumpError: A worker still failed after ``max_retries``; complete shards are kept.
    """
    ray = _require_ray()
    from ..index.shards import DUMP_FORMAT_VERSION
    from ..model.phrase_model import PhraseModel
    from .dump import check_or_write_dump_settings

    if num_workers < 1 or shard_size < 1:
        raise InvalidParameterError(f"num_workers and shard_size must be >= 1, got {num_workers} and {shard_size}")
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "workers").mkdir(exist_ok=True)
    local_model = model if isinstance(model, PhraseModel) else PhraseModel.load(model)
    # Written once by the driver, so workers never race on it; a resume with other settings fails here.
    settings = {
        "model_fingerprint": local_model.phrase_fingerprint(),
        "filter_threshold": filter_threshold,
        "dtype": dtype,
        "shard_size": shard_size,
        "model_config": local_model.config.to_dict(),
        "dim": local_model.hidden_size,
        "format_version": DUMP_FORMAT_VERSION,
    }  # as dump_phrases writes it
    check_or_write_dump_settings(out / "dump.json", settings)
    _atomic_json(out / STATUS_FILE, {"state": "running", "num_workers": num_workers, "started": time.time()})
    started_here = False
    if not ray.is_initialized():
        init = {
            "include_dashboard": False,
            "log_to_driver": False,
            **(ray_init or {}),
        }
        ray.init(address=address, **init)
        started_here = True
    started = time.perf_counter()
    try:
        model_ref = ray.put(local_model) if isinstance(model, PhraseModel) else str(Path(model).resolve())
        corpus_ref = str(Path(corpus).resolve()) if isinstance(corpus, (str, Path)) else ray.put(list(corpus))
        task = ray.remote(_dump_worker).options(
            num_cpus=cpus_per_worker, num_gpus=gpus_per_worker, max_retries=max_retries, retry_exceptions=False
        )
        options = {
            "shard_size": shard_size,
            "filter_threshold": filter_threshold,
            "dtype": dtype,
            "batch_size": batch_size,
            "use_gpu": gpus_per_worker > 0,
        }
        refs = {
            w: task.remote(model_ref, corpus_ref, str(out), w, num_workers, options, crash_once)
            for w in range(num_workers)
        }
        results, failures = {}, {}
        for w, ref in refs.items():
            try:
                results[w] = ray.get(ref)
            except Exception as exc:
                failures[w] = exc
        if failures:
            w, exc = next(iter(failures.items()))
            raise DistributedDumpError(
                f"{len(failures)} of {num_workers} dump workers failed after {max_retries} retries (worker {w}: "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); complete shards in {out} "
                "are kept: re-run to resume"
            ) from exc
    finally:
        if started_here:
            ray.shutdown()
    seconds = time.perf_counter() - started
    num_shards = max(r["num_shards"] for r in results.values())
    passages = max(r["passages"] for r in results.values())
    vectors = sum(r["vectors"] for r in results.values())
    complete = {
        "state": "complete",
        "num_shards": num_shards,
        "passages": passages,
        "vectors": vectors,
        "num_workers": num_workers,
        "finished": time.time(),
    }
    _atomic_json(out / STATUS_FILE, complete)
    reports = [read_worker_report(out, w) for w in range(num_workers)]
    return DistributedDumpSummary(
        out,
        num_workers,
        num_shards,
        passages,
        vectors,
        sum(r["encoded_shards"] for r in results.values()),
        sum(r["skipped_shards"] for r in results.values()),
        seconds,
        reports,
    )


def read_worker_report(out_dir: str | Path, worker: int) -> WorkerReport:
    """The status a worker last wrote (attempt count, shards encoded and skipped, device, host)."""
    data = json.loads(_status_file(Path(out_dir), worker).read_text())
    return WorkerReport(
        worker,
        data["attempt"],
        data.get("encoded_shards", 0),
        data.get("skipped_shards", 0),
        data.get("vectors", 0),
        data.get("device", "?"),
        data.get("host", "?"),
        data.get("seconds", 0.0),
    )


def _status_file(out: Path, worker: int) -> Path:
    return out / "workers" / f"worker-{worker:04d}.json"


def _atomic_json(path: Path, payload: dict[str, Any]) -> None:
    write_file_atomic(path, json.dumps(payload, indent=1), fsync=False)  # a fresh temporary name per call


def _dump_worker(
    model_ref: Any,
    corpus: Any,
    out_dir: str,
    worker: int,
    num_workers: int,
    options: dict[str, Any],
    crash_once: tuple[int, int] | None,
) -> dict[str, Any]:
    """One Ray task: encode this worker's shards (skipping complete ones) and report."""
    from .._util.device import resolve_device
    from ..model.phrase_model import PhraseModel
    from .dump import dump_phrases

    out = Path(out_dir)
    status_file = _status_file(out, worker)
    previous = json.loads(status_file.read_text()) if status_file.is_file() else {}
    attempt = int(previous.get("attempt", 0)) + 1
    device = resolve_device("cuda" if options["use_gpu"] else "cpu")
    status = {
        "worker": worker,
        "num_workers": num_workers,
        "attempt": attempt,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "device": device,
        "state": "running",
        "started": time.time(),
    }
    _atomic_json(status_file, status)
    started = time.perf_counter()
    model = PhraseModel.load(model_ref, device=device) if isinstance(model_ref, str) else model_ref.to(device).eval()
    passages: Any = corpus
    if crash_once is not None and crash_once[0] == worker and attempt == 1:
        from ..corpus import read_corpus

        passages = _exit_after(read_corpus(corpus), (worker + crash_once[1] * num_workers) * options["shard_size"])
    summary = dump_phrases(
        model,
        passages,
        out,
        shard_size=options["shard_size"],
        filter_threshold=options["filter_threshold"],
        dtype=options["dtype"],
        batch_size=options["batch_size"],
        progress=False,
        worker=worker,
        num_workers=num_workers,
    )
    result = {
        "num_shards": math.ceil(summary.passages / options["shard_size"]),
        "passages": summary.passages,
        "vectors": summary.vectors,
        "encoded_shards": summary.encoded_shards,
        "skipped_shards": summary.skipped_shards,
    }
    _atomic_json(status_file, {**status, **result, "state": "done", "seconds": time.perf_counter() - started})
    return result


def _exit_after(passages: Iterable[Any], count: int) -> Iterator[Any]:
    """Yield ``count`` passages, then end the process abruptly (no cleanup), as a killed worker would."""
    for position, passage in enumerate(passages):
        if position == count:
            logger.warning("crash_once: worker process %d exits abruptly after %d passages", os.getpid(), count)
            os._exit(17)
        yield passage


def summary_dict(summary: DistributedDumpSummary) -> dict[str, Any]:
    """A JSON-able view of a summary."""
    data = asdict(summary)
    data["out_dir"] = str(summary.out_dir)
    return data
