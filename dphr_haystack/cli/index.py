"""``dphr index``: encode a corpus into a phrase index, resumably.

dphr index --corpus squad-dev --out squad-index        # the SQuAD dev paragraphs shipped with the package
dphr index --corpus corpus.jsonl --out my-index        # SQuAD JSON or JSON lines {id, title, text}; .gz ok
dphr index --corpus docs/ --out docs-index             # a folder of .txt/.md files, split into passages
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

from ..model.config import effective_filter_threshold, parse_threshold_arg
from ..model.registry import DEFAULT_MODEL, model_reference
from ..params import arg_type


def add_index_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``dphr index``."""
    index = sub.add_parser("index", help="encode a corpus into a phrase index (resumable)")
    index.add_argument(
        "--model",
        type=Path,
        default=Path(DEFAULT_MODEL),
        help=f"model directory or shipped name (default: {DEFAULT_MODEL}, trained, offline)",
    )
    index.add_argument(
        "--corpus",
        required=True,
        type=Path,
        help="SQuAD JSON or JSON lines {id, title, text} (.gz ok); a folder of .txt/.md files (read recursively, "
        "split into passages of at most ~150 words); or squad-dev, the SQuAD dev paragraphs shipped with the package",
    )
    index.add_argument("--out", required=True, type=Path)
    index.add_argument(
        "--filter-threshold",
        type=parse_threshold_arg,
        default=None,
        help="keep tokens whose filter logit exceeds T; 'none' keeps every token "
        "(default: the model's filter_threshold, chosen by the filter training stage; a resumed index keeps its own)",
    )
    index.add_argument(
        "--faiss-factory",
        default=None,
        help="any FAISS index_factory string (default auto: exact while small, then a structure chosen for the size; "
        "a resumed index keeps its own)",
    )
    index.add_argument(
        "--dtype",
        default=None,
        choices=["float16", "int8"],
        help="stored vectors (default float16; a resumed index keeps its own)",
    )
    index.add_argument(
        "--key-vectors",
        type=arg_type("key_vectors"),
        default=None,
        metavar="B",
        help="for large corpora: FAISS searches B k-means centroids of each passage's vectors instead of every "
        "vector, and searches read the passages they hit whole (8: a quarter of the structure's RAM, within 1 EM "
        "point); default: every vector (a resumed index keeps its own)",
    )
    index.add_argument("--batch-size", type=arg_type("batch_size"), default=32)
    index.add_argument(
        "--chunk-size", type=arg_type("chunk_size"), default=512, help="passages per commit (the unit of resumption)"
    )
    index.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    index.add_argument("--no-progress", action="store_true")


def run_index(args: argparse.Namespace) -> int:
    """Run ``dphr index``."""
    from .._util.device import resolve_device
    from .._util.memory import pin_malloc_thresholds
    from ..corpus import CorpusStats, read_corpus
    from ..encode.add import add_passages
    from ..errors import EmptyCorpusError
    from ..index.manifest import MANIFEST
    from ..index.phrase_index import PhraseIndex
    from ..model.loading import load_model

    pin_malloc_thresholds()  # this process only indexes: keep its memory flat (benchmarks/memory/indexing.py)
    model = load_model(args.model).to(resolve_device(args.device))
    started = time.perf_counter()
    # The corpus is opened and its first passage read before --out is touched: a mistyped or unreadable corpus
    # fails here and leaves no directory (and no manifest) whose settings a later run would take over.
    stats = CorpusStats()
    passages = read_corpus(args.corpus, stats)
    first = next(passages, None)
    resuming = (args.out / MANIFEST).is_file()
    if first is None and not resuming:
        raise EmptyCorpusError(
            f"{args.corpus}: the corpus has no passage with text ({stats.skipped_empty} empty ones skipped"
            + (f", {stats.skipped_files} binary or non-UTF-8 files skipped)" if stats.skipped_files else ")")
        )
    corpus = itertools.chain([first], passages) if first is not None else iter(())
    # flat_search="mmap": indexing never searches, so a flat index keeps no in-RAM FAISS copy of its vectors and
    # memory stays flat however large the corpus (benchmarks/memory/indexing.py).
    if resuming:
        index = PhraseIndex.load(args.out, model=model, flat_search="mmap")
        # conflicts: SettingsConflictError
        index.check_settings(args.dtype, args.filter_threshold, args.faiss_factory, args.key_vectors)
        print(f"resuming {args.out}: {index.num_passages} passages already indexed")
        duplicates = "skip"
    else:
        threshold = effective_filter_threshold(args.filter_threshold, model.config)
        PhraseIndex.create(
            model,
            path=args.out,
            faiss_factory=args.faiss_factory or "auto",
            filter_threshold=threshold,
            dtype=args.dtype or "float16",
            model_path=model_reference(args.model),
            key_vectors=args.key_vectors,
        )
        index = PhraseIndex.load(args.out, model=model, flat_search="mmap")
        duplicates = "fail"
    add_passages(
        index,
        model,
        corpus,
        batch_size=args.batch_size,
        chunk_size=args.chunk_size,
        duplicates=duplicates,
        progress=not args.no_progress,
    )
    elapsed = time.perf_counter() - started
    if stats.files or stats.skipped_files:
        print(f"read {stats.files} text files; skipped {stats.skipped_files} binary or non-UTF-8 files")
    keys = f", {index.num_searched_vectors} key vectors searched" if index.key_vectors else ""
    print(
        f"indexed {index.num_passages} passages ({len(index)} phrase vectors, "
        f"{len(index) / max(index.num_passages, 1):.1f} per passage{keys}) in {elapsed:.1f}s; "
        f"skipped {stats.skipped_empty} without text -> {args.out}"
    )
    return 0
