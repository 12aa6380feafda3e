"""``dphr dump`` / ``dphr merge`` / ``dphr reindex``: sharded (optionally Ray-distributed) dumps and index types.

dphr dump --model models/minilm-phrase --corpus corpus.jsonl --out dump/ --ray --num-workers 4 --gpus-per-worker 1
dphr merge --dump dump/ --out my-index --type opq-ivf-pq
dphr reindex --index my-index --out my-index-sq8 --type ivf-sq8 --on-disk
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InvalidParameterError
from ..index.structures import INDEX_TYPES
from ..model.config import PhraseModelConfig, effective_filter_threshold, parse_threshold_arg
from ..model.registry import DEFAULT_MODEL
from ..params import arg_type

if TYPE_CHECKING:
    import numpy as np

QUESTION_LIMIT = 400  # questions `dphr reindex --retune --questions` tunes on (800 start and end vectors)


def add_scale_parsers(sub: argparse._SubParsersAction) -> None:
    """Register the ``dump``, ``merge`` and ``reindex`` subcommands."""
    dump = sub.add_parser("dump", help="encode a corpus into resumable phrase shards (one process, or Ray workers)")
    dump.add_argument(
        "--model",
        type=Path,
        default=Path(DEFAULT_MODEL),
        help=f"model directory or shipped name (default: {DEFAULT_MODEL})",
    )
    dump.add_argument("--corpus", required=True, type=Path, help="SQuAD JSON or JSON lines {id, title, text}; .gz ok")
    dump.add_argument("--out", required=True, type=Path, help="dump directory (re-running resumes)")
    dump.add_argument(
        "--shard-size",
        type=arg_type("shard_size"),
        default=1000,
        help="passages per shard (the unit of work and resume)",
    )
    dump.add_argument(
        "--filter-threshold",
        type=parse_threshold_arg,
        default=None,
        help="keep tokens whose filter logit exceeds T; 'none' keeps every token (default: the model's)",
    )
    dump.add_argument("--dtype", default="float16", choices=["float16", "int8"])
    dump.add_argument("--batch-size", type=arg_type("batch_size"), default=32)
    dump.add_argument("--device", default="auto", help="auto, cpu, cuda (without --ray); CUDA encodes under bf16")
    dump.add_argument(
        "--worker", type=arg_type("worker"), default=0, help="without --ray: this process's worker number"
    )
    dump.add_argument(
        "--num-workers",
        type=arg_type("num_workers"),
        default=1,
        help="workers splitting the shards (Ray tasks with --ray)",
    )
    dump.add_argument(
        "--ray", action="store_true", help="run the workers as Ray tasks (pip install 'dphr-haystack[distributed]')"
    )
    dump.add_argument(
        "--ray-address", default=None, help="existing Ray cluster (auto, ray://host:10001); default: local"
    )
    dump.add_argument("--gpus-per-worker", type=arg_type("gpus_per_worker"), default=0.0)
    dump.add_argument("--cpus-per-worker", type=arg_type("cpus_per_worker"), default=1.0)
    dump.add_argument(
        "--max-retries", type=arg_type("max_retries"), default=3, help="Ray re-runs of a worker whose process died"
    )
    dump.add_argument("--no-progress", action="store_true")

    merge = sub.add_parser("merge", help="merge a complete phrase dump into one index")
    merge.add_argument("--dump", required=True, type=Path)
    merge.add_argument("--out", required=True, type=Path)
    _add_structure_args(merge)
    merge.add_argument(
        "--model",
        "--model-path",
        dest="model_path",
        default=None,
        help="model directory to record in the index, for dphr search (--model-path: its former name, still read)",
    )

    reindex = sub.add_parser("reindex", help="build another FAISS structure from an index's stored vectors")
    reindex.add_argument("--index", required=True, type=Path)
    reindex.add_argument("--out", type=Path, default=None, help="write a reindexed copy here (default: in place)")
    reindex.add_argument(
        "--retune",
        action="store_true",
        help="keep the automatic structure and choose its nprobe again by today's rule (in place; seconds)",
    )
    reindex.add_argument(
        "--questions",
        type=Path,
        default=None,
        help="with --retune: tune on questions your users ask instead of probes: a text file, one question a line, "
        "or a question file dphr eval reads (.gz ok; up to --question-limit sampled); their vectors are kept beside "
        "the index, so a rebuild for a larger size tunes on them again",
    )
    reindex.add_argument(
        "--question-limit",
        type=arg_type("limit"),
        default=QUESTION_LIMIT,
        help=f"questions --questions tunes on (default: {QUESTION_LIMIT})",
    )
    reindex.add_argument(
        "--model", type=Path, default=None, help="with --questions: the model to encode them (default: the index's)"
    )
    reindex.add_argument(
        "--key-vectors",
        type=arg_type("key_vectors", none=0),  # none: every vector searched again
        default=None,
        metavar="B",
        help="with --out: a copy whose FAISS structure searches B k-means centroids of each passage's vectors "
        "instead of every vector ('none': every vector again), deleted passages left out, nothing encoded again",
    )
    _add_structure_args(reindex)


def _add_structure_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--type", choices=INDEX_TYPES, default=None, help="named index type (nlist chosen from the size)"
    )
    group.add_argument(
        "--faiss-factory", default=None, help="any FAISS index_factory string (default: auto, chosen for the size)"
    )
    parser.add_argument(
        "--nlist", type=arg_type("nlist"), default=None, help="IVF lists for --type (default: ~4·sqrt(n))"
    )
    parser.add_argument("--on-disk", action="store_true", help="IVF: keep inverted lists on disk, memory-mapped")
    parser.add_argument(
        "--train-size", type=arg_type("train_size"), default=None, help="training vectors (default: sized from nlist)"
    )
    parser.add_argument("--nprobe", type=arg_type("nprobe"), default=None)
    parser.add_argument("--ef-search", type=arg_type("ef_search"), default=None)


def run_scale_command(args: argparse.Namespace) -> int:
    """Run ``dump``, ``merge`` or ``reindex``; returns the exit status."""
    if args.command == "dump":
        return _dump(args)
    if args.command == "merge":
        return _merge(args)
    return _reindex(args)


def _search_params(args: argparse.Namespace) -> dict[str, int]:
    params = {}
    if args.nprobe is not None:
        params["nprobe"] = args.nprobe
    if args.ef_search is not None:
        params["efSearch"] = args.ef_search
    return params


def _factory(args: argparse.Namespace, num_vectors: int, dim: int) -> str:
    from ..index.structures import factory_for

    if args.faiss_factory and args.nlist is not None:
        raise InvalidParameterError("--nlist sizes a --type; a --faiss-factory string names its own lists")
    if args.faiss_factory:
        return args.faiss_factory
    if args.type is None:  # auto: chosen and tuned for the size (dphr_haystack.index.auto), nothing of these read
        flags = ("--nlist", "--train-size", "--nprobe", "--ef-search", "--on-disk")
        values = (args.nlist, args.train_size, args.nprobe, args.ef_search, args.on_disk)
        given = [flag for flag, value in zip(flags, values, strict=True) if value]
        if given:
            raise InvalidParameterError(
                f"the default structure (auto) is chosen and tuned for the index's size: {', '.join(given)} "
                "need --type or --faiss-factory"
            )
        return "auto"
    return factory_for(args.type, num_vectors, dim, nlist=args.nlist)


def _dump(args: argparse.Namespace) -> int:
    from ..model.config import CONFIG_FILE

    started = time.perf_counter()
    config_file = args.model / CONFIG_FILE  # absent for a DensePhrases checkpoint: no threshold of its own
    config = PhraseModelConfig.load(config_file) if config_file.is_file() else PhraseModelConfig()
    threshold = effective_filter_threshold(args.filter_threshold, config)
    if args.ray:
        from ..encode.distributed import dump_distributed, summary_dict

        summary = dump_distributed(
            args.model,
            args.corpus,
            args.out,
            num_workers=args.num_workers,
            shard_size=args.shard_size,
            filter_threshold=threshold,
            dtype=args.dtype,
            batch_size=args.batch_size,
            gpus_per_worker=args.gpus_per_worker,
            cpus_per_worker=args.cpus_per_worker,
            max_retries=args.max_retries,
            address=args.ray_address,
        )
        print(json.dumps({k: v for k, v in summary_dict(summary).items() if k != "workers"}))
        print(
            f"dumped {summary.num_shards} shards ({summary.encoded_shards} encoded, {summary.skipped_shards} "
            f"already complete) with {args.num_workers} Ray workers in {summary.seconds:.1f}s -> {args.out}"
        )
        return 0
    from .._util.device import resolve_device
    from ..encode.dump import dump_phrases
    from ..model.loading import load_model

    model = load_model(args.model).to(resolve_device(args.device))
    summary = dump_phrases(
        model,
        args.corpus,
        args.out,
        shard_size=args.shard_size,
        filter_threshold=threshold,
        dtype=args.dtype,
        batch_size=args.batch_size,
        progress=not args.no_progress,
        worker=args.worker,
        num_workers=args.num_workers,
    )
    print(
        f"worker {args.worker}/{args.num_workers}: {summary.encoded_shards} shards encoded, {summary.skipped_shards} "
        f"already complete, {summary.vectors} vectors in {time.perf_counter() - started:.1f}s -> {args.out}"
    )
    return 0


def _merge(args: argparse.Namespace) -> int:
    from ..index.merge import merge_dump
    from ..index.shards import list_shards

    started = time.perf_counter()
    settings = json.loads((args.dump / "dump.json").read_text()) if (args.dump / "dump.json").is_file() else {}
    num_vectors = sum(json.loads((s / "shard.json").read_text())["num_vectors"] for s in list_shards(args.dump))
    factory = _factory(args, num_vectors, int(settings.get("dim", 1)))
    index = merge_dump(
        args.dump,
        args.out,
        faiss_factory=factory,
        model_path=args.model_path,
        on_disk=args.on_disk,
        train_size=args.train_size,
        search_params=_search_params(args) or None,
    )
    print(
        f"merged {index.num_passages} passages ({len(index)} vectors) into {args.out} [{factory}] in "
        f"{time.perf_counter() - started:.1f}s"
    )
    return 0


def _reindex(args: argparse.Namespace) -> int:
    from ..index.phrase_index import PhraseIndex

    started = time.perf_counter()
    if args.retune:
        return _retune(args, started)
    if args.key_vectors is not None:
        return _copy_with_key_vectors(args, started)
    if args.questions is not None or args.model is not None:
        raise InvalidParameterError("--questions and --model choose what --retune tunes on: add --retune")
    index = PhraseIndex.load(args.index, flat_search="mmap")
    factory = _factory(args, index.num_searched_vectors, index.dim)  # the key vectors, when FAISS holds those
    result = index.reindex(
        factory,
        path=args.out,
        on_disk=args.on_disk,
        train_size=args.train_size,
        search_params=_search_params(args) or None,
    )
    build = result.manifest.get("faiss_build", {})
    print(
        f"reindexed {len(result)} vectors as {factory} (trained on {build.get('train_vectors', 0)}, search "
        f"params {result.search_params}) in {time.perf_counter() - started:.1f}s -> {args.out or args.index}"
    )
    return 0


def _copy_with_key_vectors(args: argparse.Namespace, started: float) -> int:
    from ..index.keys import searched_count
    from ..index.merge import copy_with_key_vectors
    from ..index.phrase_index import PhraseIndex

    if args.out is None or args.on_disk or args.questions is not None or args.model is not None:
        raise InvalidParameterError(
            "--key-vectors writes a copy of the stored vectors: give --out DIR, without --on-disk, --questions or "
            "--model"
        )
    index = PhraseIndex.load(args.index, flat_search="mmap")
    to_search = searched_count(index.num_tokens[~index.deleted], args.key_vectors or None)  # the copy's FAISS rows
    factory = _factory(args, to_search, index.dim)
    options = {"train_size": args.train_size, "search_params": _search_params(args) or None}
    copy = copy_with_key_vectors(index, args.out, args.key_vectors or None, factory, **options)
    searched = f"{copy.num_searched_vectors} key vectors" if copy.key_vectors else "every vector"
    print(
        f"copied {copy.num_passages} passages ({len(copy)} vectors; FAISS {copy.faiss_factory} searches {searched}) "
        f"in {time.perf_counter() - started:.1f}s -> {args.out}"
    )
    return 0


def _retune(args: argparse.Namespace, started: float) -> int:
    from ..index.phrase_index import PhraseIndex

    chosen = [
        flag
        for flag, value in (
            ("--out", args.out),
            ("--type", args.type),
            ("--faiss-factory", args.faiss_factory),
            ("--nprobe", args.nprobe),
            ("--ef-search", args.ef_search),
            ("--on-disk", args.on_disk),
            ("--nlist", args.nlist),
            ("--train-size", args.train_size),
            ("--key-vectors", args.key_vectors is not None),
        )
        if value
    ]
    if chosen:
        raise InvalidParameterError(f"--retune keeps the structure in place: drop {', '.join(chosen)}")
    index = PhraseIndex.load(args.index, flat_search="mmap")
    before = dict(index.search_params)
    if not index.auto_structure or not index.search_params.get("nprobe"):
        print(f"{args.index}: nothing to tune ({index.faiss_factory}, search params {before} kept)")
        return 0
    queries = _question_vectors(args, index) if args.questions is not None else None
    index.retune(queries)
    tuned = index.manifest["structure"]
    on = f"{len(queries) // 2} questions (kept beside the index)" if queries is not None else "probes"
    print(
        f"retuned {index.faiss_factory} ({len(index)} vectors) on {on}: search params {before} -> "
        f"{index.search_params} (recall {tuned.get('probe_recall', 0.0):.3f} of their exact top tokens) in "
        f"{time.perf_counter() - started:.1f}s"
    )
    return 0


def _question_vectors(args: argparse.Namespace, index) -> np.ndarray:
    """The start and end query vectors (int8 queries, as searched by default) of up to ``--question-limit``
    questions of ``--questions``, sampled with seed 0, encoded by ``--model`` or the model the index records."""
    import random

    import numpy as np

    from ..errors import ModelLoadError, ModelMismatchError
    from ..model.loading import load_model

    questions = read_question_texts(args.questions)
    if not questions:
        raise InvalidParameterError(f"--questions {args.questions}: no questions in it")
    if len(questions) > args.question_limit:
        questions = random.Random(0).sample(questions, args.question_limit)
    model_dir = args.model or index.manifest.get("model_path")
    if not model_dir:
        raise ModelLoadError(f"{args.index} does not record its model: pass --model DIR to encode the questions")
    model = load_model(model_dir)
    if model.phrase_fingerprint() != index.model_fingerprint:
        raise ModelMismatchError(f"{model_dir}: phrase encoder differs from the one {args.index} was built with")
    q_start, q_end = model.encode_queries(questions, batch_size=64, precision="int8")
    return np.concatenate([q_start, q_end])


def read_question_texts(path: Path) -> list[str]:
    """The questions of a text file (one a line, blank lines skipped) or of a question file ``dphr eval`` reads;
    ``.gz`` ok."""
    from .._util.io import open_text
    from ..evaluation.questions import read_questions

    if path.name.removesuffix(".gz").endswith(".txt"):
        if not path.is_file():
            raise FileNotFoundError(f"--questions {path}: no such file")
        with open_text(path) as handle:
            return [line.strip() for line in handle if line.strip()]
    return [example.question for example in read_questions(path)]
