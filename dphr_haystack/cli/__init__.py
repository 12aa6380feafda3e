"""``dphr``: create phrase models, index corpora and search phrase indexes from the shell.

dphr model init --base minilm --out models/minilm-phrase
dphr index --corpus corpus.jsonl --out my-index              # the shipped dphr-minilm-squad model
dphr search --index my-index --unit passage --top-k 5 "Who wrote Hamlet?"
dphr eval --index my-index --questions NQ-open.dev.jsonl.gz --out eval-out
dphr dump --model models/minilm-phrase --corpus corpus.jsonl --out dump --ray --num-workers 4
dphr merge --dump dump --out my-index --type ivf-sq8; dphr reindex --index my-index --out idx-pq --type opq-ivf-pq
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from ..errors import DphrError
from ..model.config import PhraseModelConfig, effective_filter_threshold, parse_threshold_arg
from ..model.registry import DEFAULT_MODEL, model_reference
from ..model.weights import STORAGE_DTYPES
from ..search import UNITS
from .eval import add_eval_parser, run_eval
from .scale import add_scale_parsers, run_scale_command

logger = logging.getLogger("dphr")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dphr", description="Dense phrase retrieval: models, indexes, search.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", required=True)

    model = sub.add_parser("model", help="phrase model utilities").add_subparsers(dest="model_command", required=True)
    init = model.add_parser("init", help="create an untrained phrase model from a BERT-family base")
    init.add_argument(
        "--base", required=True, help="base model directory or hub name; 'minilm' = offline all-MiniLM-L6-v2"
    )
    init.add_argument("--out", required=True, type=Path)
    init.add_argument("--max-passage-length", type=int, default=PhraseModelConfig.max_passage_length)
    init.add_argument(
        "--passage-stride",
        type=int,
        default=None,
        help="overlap of long-passage windows (default: min(128, max length / 4))",
    )
    init.add_argument("--seed", type=int, default=0)
    imp = model.add_parser(
        "import-densephrases", help="convert a DensePhrases checkpoint (config.json + pytorch_model.bin)"
    )
    imp.add_argument("--checkpoint", required=True, type=Path)
    imp.add_argument("--tokenizer", help="tokenizer directory (DensePhrases checkpoints ship none)")
    imp.add_argument("--out", required=True, type=Path)
    export = model.add_parser(
        "export", help="re-save a phrase model compactly (float16, bounded shards, no base tensors)"
    )
    export.add_argument("--model", required=True, type=Path)
    export.add_argument("--out", required=True, type=Path)
    export.add_argument(
        "--weights-dtype",
        default="float16",
        choices=list(STORAGE_DTYPES),
        help="int8-phrase: phrase encoder int8, query side float16",
    )
    export.add_argument("--max-shard-mb", type=float, default=15.0, help="largest weight file, MiB (default 15)")
    export.add_argument(
        "--omit-base-weights",
        action="store_true",
        help="leave out tensors identical to the base model's (read from the installed base on load)",
    )

    index = sub.add_parser("index", help="encode a corpus into a phrase index (resumable)")
    index.add_argument(
        "--model",
        type=Path,
        default=Path(DEFAULT_MODEL),
        help=f"model directory or shipped name (default: {DEFAULT_MODEL}, trained, offline)",
    )
    index.add_argument("--corpus", required=True, type=Path, help="SQuAD JSON or JSON lines {id, title, text}; .gz ok")
    index.add_argument("--out", required=True, type=Path)
    index.add_argument(
        "--filter-threshold",
        type=parse_threshold_arg,
        default=None,
        help="keep tokens whose filter logit exceeds T; 'none' keeps every token "
        "(default: the model's filter_threshold, chosen by the filter training stage)",
    )
    index.add_argument("--faiss-factory", default="Flat", help="any FAISS index_factory string (default Flat)")
    index.add_argument("--dtype", default="float16", choices=["float16", "int8"])
    index.add_argument("--batch-size", type=int, default=32)
    index.add_argument("--chunk-size", type=int, default=512, help="passages per commit (the unit of resumption)")
    index.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    index.add_argument("--no-progress", action="store_true")

    search = sub.add_parser("search", help="search a phrase index")
    search.add_argument("--index", required=True, type=Path)
    search.add_argument("--model", type=Path, help="model directory (default: the one the index was built with)")
    search.add_argument("--unit", default="phrase", help=f"one of {', '.join(UNITS)}")
    search.add_argument("--top-k", type=int, default=10)
    search.add_argument("--max-answer-length", type=int, default=None)
    search.add_argument(
        "--partial-words",
        action="store_true",
        help="let phrases start or end inside a word (by default they span whole words)",
    )
    search.add_argument("--json", action="store_true", help="print results as JSON lines")
    search.add_argument("query", nargs="+", help="one or more questions")
    add_eval_parser(sub)
    add_scale_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        if args.command == "model":
            return _model(args)
        if args.command == "index":
            return _index(args)
        if args.command == "eval":
            return run_eval(args)
        if args.command in ("dump", "merge", "reindex"):
            return run_scale_command(args)
        return _search(args)
    except DphrError as exc:
        print(f"dphr: error: {exc}", file=sys.stderr)
        return 2


def _model(args: argparse.Namespace) -> int:
    from ..model.phrase_model import PhraseModel, load_model

    if args.model_command == "export":
        written = load_model(args.model).save(
            args.out,
            weights_dtype=args.weights_dtype,
            max_shard_mb=args.max_shard_mb,
            omit_base_weights=args.omit_base_weights,
        )
        model = PhraseModel.load(args.out)
        print(
            f"saved phrase model to {args.out}: {len(written['files'])} weight files, "
            f"{written['bytes'] / 2**20:.1f} MiB, "
            f"{written['from_base']} tensors from the base model (fingerprint {model.phrase_fingerprint()[:12]})"
        )
        return 0
    if args.model_command == "init":
        stride = args.passage_stride if args.passage_stride is not None else min(128, args.max_passage_length // 4)
        config = PhraseModelConfig(max_passage_length=args.max_passage_length, passage_stride=stride)
        model = PhraseModel.from_base(args.base, config, seed=args.seed)
    else:
        model = PhraseModel.from_densephrases(args.checkpoint, tokenizer=args.tokenizer)
    model.save(args.out)
    print(f"saved phrase model to {args.out} (fingerprint {model.phrase_fingerprint()[:12]})")
    return 0


def _index(args: argparse.Namespace) -> int:
    from .._util.device import resolve_device
    from .._util.memory import pin_malloc_thresholds
    from ..index.phrase_index import MANIFEST, PhraseIndex
    from ..model.phrase_model import load_model

    pin_malloc_thresholds()  # this process only indexes: keep its memory flat (benchmarks/bench_memory.py)
    model = load_model(args.model).to(resolve_device(args.device))
    started = time.perf_counter()
    # flat_search="mmap": indexing never searches, so a flat index keeps no in-RAM FAISS copy of its vectors and
    # memory stays flat however large the corpus (benchmarks/bench_memory.py).
    if (args.out / MANIFEST).is_file():
        index = PhraseIndex.load(args.out, model=model, flat_search="mmap")
        print(f"resuming {args.out}: {index.num_passages} passages already indexed")
        duplicates = "skip"
    else:
        threshold = effective_filter_threshold(args.filter_threshold, model.config)
        PhraseIndex.create(
            model,
            path=args.out,
            faiss_factory=args.faiss_factory,
            filter_threshold=threshold,
            dtype=args.dtype,
            model_path=model_reference(args.model),
        )
        index = PhraseIndex.load(args.out, model=model, flat_search="mmap")
        duplicates = "fail"
    stats = index.add_passages(
        args.corpus,
        model,
        batch_size=args.batch_size,
        chunk_size=args.chunk_size,
        duplicates=duplicates,
        progress=not args.no_progress,
    )
    elapsed = time.perf_counter() - started
    print(
        f"indexed {index.num_passages} passages ({len(index)} phrase vectors, "
        f"{len(index) / max(index.num_passages, 1):.1f} per passage) in {elapsed:.1f}s; "
        f"skipped {stats.skipped_empty} without text -> {args.out}"
    )
    return 0


def _search(args: argparse.Namespace) -> int:
    from ..search import check_unit, open_searcher

    check_unit(args.unit)
    searcher = open_searcher(
        args.index, args.model, max_answer_length=args.max_answer_length, whole_words=not args.partial_words
    )
    results = searcher.search_batch(args.query, unit=args.unit, top_k=args.top_k)
    for query, hits in zip(args.query, results):
        if args.json:
            print(
                json.dumps(
                    {"query": query, "unit": args.unit, "results": [_jsonable(h) for h in hits]}, ensure_ascii=False
                )
            )
            continue
        print(f"Q: {query}")
        for rank, hit in enumerate(hits, 1):
            print(f"  {rank:>2}. {_describe(hit)}")
    return 0


def _jsonable(hit) -> dict:
    data = asdict(hit)
    data.pop("passage_row", None)
    for key in ("best_phrase", "best_passage"):
        if isinstance(data.get(key), dict):
            data[key].pop("passage_row", None)
            if isinstance(data[key].get("best_phrase"), dict):
                data[key]["best_phrase"].pop("passage_row", None)
    return data


def _describe(hit) -> str:
    from ..search import DocumentHit, PassageHit

    if isinstance(hit, DocumentHit):
        return f"[{hit.score:.2f}] document {hit.document_id!r}: {hit.best_passage.best_phrase.text!r}"
    if isinstance(hit, PassageHit):
        snippet = hit.text[:100].replace("\n", " ")
        return f"[{hit.score:.2f}] {hit.passage_id} ({hit.best_phrase.text!r}): {snippet}…"
    return f"[{hit.score:.2f}] {hit.text!r}  ({hit.passage_id}, chars {hit.start}-{hit.end})"


if __name__ == "__main__":
    sys.exit(main())
