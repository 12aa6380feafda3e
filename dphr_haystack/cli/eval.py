"""``dphr eval``: score a phrase index or a Haystack YAML pipeline on an open-domain question file.

    dphr eval --index my-index --questions NQ-open.dev.jsonl.gz --out eval/phrase
    dphr eval --pipeline pipelines/bm25.yml --corpus corpus.jsonl --questions dev.json.gz --out eval/bm25
    dphr eval --pipeline phrase_qa.yml --corpus corpus.jsonl --store my-store --questions dev.json.gz
    dphr eval --pipeline hybrid_rrf.yml --store my-index --questions trec.jsonl   # an index built by `dphr index`

``--store DIR`` is reused across runs: a store directory (created when missing, from ``--corpus``) commits its
documents, phrases and embeddings as they are indexed, so the next run opens it and encodes only what is missing;
a phrase index directory built by ``dphr index`` gives the documents (its passages) and their phrases as they are.
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
    ev.add_argument(
        "--store",
        type=Path,
        help="with --pipeline: a store directory reused across runs (created when missing; documents, phrases and "
        "embeddings are committed there as they are indexed, so a later run encodes only what is missing), or a "
        "phrase index directory built by `dphr index` (its passages are the documents, its phrases are used as they "
        "are, the directory is not written)",
    )
    ev.add_argument("--save-store", type=Path, help="with --pipeline: also save the indexed store here (a snapshot)")
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


def store_source(store: Path, has_corpus: bool) -> dict[str, str]:
    """The ``PhraseDocumentStore`` parameter that opens ``--store``: ``phrase_index`` for a phrase index directory
    (``dphr index --out``), else ``path``, a store directory shared across runs (created when missing).

    Raises:
        InvalidParameterError: ``store`` is missing and there is no corpus to build it from, is not a directory, or
            is a directory holding something else than a store or a phrase index.
    """
    from .._util.lock import directory_entries
    from ..index.manifest import MANIFEST
    from ..nodes.persistence import is_store

    if (store / MANIFEST).is_file() and not is_store(store):
        return {"phrase_index": str(store)}
    if store.exists() and not store.is_dir():
        raise InvalidParameterError(f"--store {store} is not a directory")
    if not store.exists() or not directory_entries(store):
        if not has_corpus:
            raise InvalidParameterError(
                f"--store {store} holds no store yet: give --corpus to build it there (it is then reused by later "
                "runs), or a phrase index directory built by `dphr index`"
            )
    elif not is_store(store):
        raise InvalidParameterError(
            f"--store {store} is neither a store directory nor a phrase index ({MANIFEST}): choose a new directory "
            "for the store"
        )
    return {"path": str(store)}


def index_stored(pipeline, documents: list, store: Path | None) -> dict:
    """``index_corpus`` with the model of a reused ``--store`` named when a retriever's model differs from it."""
    from ..errors import ModelMismatchError
    from ..nodes import index_corpus

    try:
        return index_corpus(pipeline, documents)
    except ModelMismatchError as exc:
        phrase_index = getattr(pipeline.get_document_store(), "get_phrase_index", lambda: None)()
        if store is None or phrase_index is None:
            raise
        built_with = phrase_index.manifest.get("model_path") or "another model"
        raise ModelMismatchError(
            f"--store {store} holds phrases encoded by {built_with}: evaluate with that model (--set "
            f"Retriever.model=...) or give another --store ({exc})"
        ) from exc


def _same_path(first: Path, second: Path | None) -> bool:
    return second is not None and first.resolve() == second.resolve()


def run_eval(args: argparse.Namespace) -> int:
    from ..evaluation import evaluate_pipeline, evaluate_searcher, markdown_table, read_questions

    examples = read_questions(args.questions, regex=args.regex, limit=args.limit, seed=args.seed)
    progress = not args.no_progress
    if args.index is not None:
        if args.corpus or args.store or args.set:
            raise InvalidParameterError("--corpus, --store and --set apply to --pipeline, not --index")
        from ..saved_index import open_searcher

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
        from ..nodes import corpus_documents, load_pipeline

        overrides = parse_overrides(args.set)
        if args.store is not None:
            overrides.setdefault("DocumentStore", {}).update(store_source(args.store, bool(args.corpus)))
        pipeline = load_pipeline(args.pipeline, overrides=overrides or None)
        # Also with --store only: retrievers whose phrases/embeddings are missing for some documents get them.
        timings = index_stored(pipeline, corpus_documents(args.corpus), args.store)
        if timings:
            print("indexed: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
        store = pipeline.get_document_store()
        if store is None or store.get_document_count() == 0:
            raise InvalidParameterError("the pipeline's document store is empty: give --corpus or --store")
        if args.store is not None and hasattr(store, "get_phrase_document_count"):
            print(
                f"store {args.store}: {store.get_document_count()} documents, "
                f"{store.get_phrase_document_count()} with phrases"
            )
        if args.save_store is not None and not _same_path(args.save_store, args.store):
            store.save(args.save_store)  # (--store itself is committed as it goes)
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


__all__ = ["add_eval_parser", "index_stored", "parse_overrides", "run_eval", "store_source"]
