"""``dphr eval``: score a phrase index or a Haystack YAML pipeline on an open-domain question file.

    dphr eval --index my-index --questions NQ-open.dev.jsonl.gz --out eval/phrase
    dphr eval --pipeline pipelines/bm25.yml --corpus corpus.jsonl --questions dev.json.gz --out eval/bm25
    dphr eval --pipeline pipelines/hybrid_rrf.yml --store saved-store --questions trec.jsonl --set Retriever.model=DIR

Writes ``<system>.predictions.jsonl``, ``<system>.summary.json`` and ``table.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .._util.atomic import write_file_atomic
from .._util.safe_yaml import load_yaml
from ..errors import InvalidParameterError
from ..params import arg_type


def add_eval_parser(sub) -> None:
    """Register the ``eval`` subcommand on the ``dphr`` parser's subparsers."""
    ev = sub.add_parser(
        "eval",
        help="evaluate a phrase index or a Haystack pipeline on a question file",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = ev.add_mutually_exclusive_group(required=True)
    source.add_argument("--index", type=Path, help="a phrase index directory (built by `dphr index`)")
    source.add_argument("--pipeline", type=Path, help="a Haystack YAML query pipeline (bare names: pipelines/)")
    ev.add_argument("--model", type=Path, help="with --index: model directory (default: the one it was built with)")
    ev.add_argument(
        "--corpus",
        type=Path,
        action="append",
        default=[],
        help="with --pipeline: corpus file(s) to index into its store first (repeatable)",
    )
    ev.add_argument("--store", type=Path, help="with --pipeline: a saved PhraseDocumentStore directory to load")
    ev.add_argument("--save-store", type=Path, help="with --pipeline: save the indexed store here for reuse")
    ev.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NODE.PARAM=VALUE",
        help="override a pipeline component param (value parsed as YAML; repeatable)",
    )
    ev.add_argument(
        "--questions", required=True, type=Path, help="SQuAD/DensePhrases JSON, NQ-open JSONL or DPR .qa.csv (.gz ok)"
    )
    ev.add_argument(
        "--limit", type=arg_type("limit"), help="evaluate this many questions (random when --seed is given)"
    )
    ev.add_argument("--seed", type=int, help="sample --limit questions with this seed")
    ev.add_argument(
        "--regex",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="answers are regular expressions (default: yes for CuratedTREC file names)",
    )
    ev.add_argument(
        "--truecase",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --index: truecase all-lowercase questions (default: the model's setting, on for cased "
        "DensePhrases models; in a pipeline, PhraseRetriever's truecase parameter)",
    )
    ev.add_argument("--top-k", type=arg_type("top_k"), default=20)
    ev.add_argument("--answer-match", default="squad", choices=["squad", "substring"])
    ev.add_argument("--name", help="system name in the outputs (default: the index or pipeline file name)")
    ev.add_argument("--out", type=Path, default=Path("eval-out"))
    ev.add_argument("--no-progress", action="store_true")


def parse_overrides(items: list[str]) -> dict[str, dict]:
    """``["Retriever.top_k=5", "Retriever.model=/m"]`` → ``{"Retriever": {"top_k": 5, "model": "/m"}}``."""
    overrides: dict[str, dict] = {}
    for item in items:
        key, sep, value = item.partition("=")
        node, dot, param = key.partition(".")
        if not sep or not dot or not node or not param:
            raise InvalidParameterError(f"--set expects NODE.PARAM=VALUE, got {item!r}")
        overrides.setdefault(node, {})[param] = load_yaml(value, source=f"--set {key}")
    return overrides


def run_eval(args: argparse.Namespace) -> int:
    from ..evaluation import evaluate_pipeline, evaluate_searcher, markdown_table, read_questions

    examples = read_questions(args.questions, regex=args.regex, limit=args.limit, seed=args.seed)
    progress = not args.no_progress
    if args.index is not None:
        if args.corpus or args.store or args.set:
            raise InvalidParameterError("--corpus, --store and --set apply to --pipeline, not --index")
        from ..search import open_searcher

        report = evaluate_searcher(
            open_searcher(args.index, args.model, truecase=args.truecase),
            examples,
            args.top_k,
            system=args.name or args.index.name,
            answer_match=args.answer_match,
            progress=progress,
        )
    else:
        if args.truecase is not None:
            raise InvalidParameterError("--truecase applies to --index; in a pipeline set PhraseRetriever.truecase")
        from ..nodes import corpus_documents, index_corpus, load_pipeline

        overrides = parse_overrides(args.set)
        if args.store is not None:
            overrides.setdefault("DocumentStore", {})["load_path"] = str(args.store)
        pipeline = load_pipeline(args.pipeline, overrides=overrides or None)
        # Also with --store only: retrievers whose phrases/embeddings are missing for some documents get them.
        timings = index_corpus(pipeline, corpus_documents(args.corpus))
        if timings:
            print("indexed: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
        store = pipeline.get_document_store()
        if store is None or store.get_document_count() == 0:
            raise InvalidParameterError("the pipeline's document store is empty: give --corpus or --store")
        if args.save_store is not None:
            store.save(args.save_store)
        report = evaluate_pipeline(
            pipeline,
            examples,
            args.top_k,
            system=args.name or args.pipeline.stem,
            answer_match=args.answer_match,
            progress=progress,
        )
    report.write(args.out)
    table = markdown_table([report])
    write_file_atomic(args.out / "table.md", table + "\n", fsync=False)
    print(table)
    print(f"wrote {args.out}")
    return 0


__all__ = ["add_eval_parser", "parse_overrides", "run_eval"]
