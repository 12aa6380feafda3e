"""``dphr search``: phrases, passages or documents for questions, from a saved phrase index."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from ..params import arg_type


def add_search_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``dphr search``."""
    search = sub.add_parser("search", help="search a phrase index")
    search.add_argument("--index", required=True, type=Path)
    search.add_argument("--model", type=Path, help="model directory (default: the one the index was built with)")
    search.add_argument("--unit", default="phrase", help="phrase, passage or document")
    search.add_argument("--top-k", type=arg_type("top_k"), default=10)
    search.add_argument(
        "--max-answer-length",
        type=arg_type("max_answer_length"),
        default=None,
        help="longest phrase in subwords, at most the model's passage window (default: the model's)",
    )
    search.add_argument(
        "--partial-words",
        action="store_true",
        help="let phrases start or end inside a word (by default they span whole words)",
    )
    search.add_argument(
        "--keep-question-copies",
        action="store_true",
        help="allow phrase answers the question itself contains (skipped by default)",
    )
    search.add_argument(
        "--passage-scoring",
        choices=["max", "logsumexp"],
        default="max",
        help="passages and documents score their best phrase (max, default) or all of their phrases (logsumexp)",
    )
    search.add_argument(
        "--truecase",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="truecase all-lowercase questions (default: the model's setting, on for cased DensePhrases models)",
    )
    search.add_argument("--json", action="store_true", help="print results as JSON lines")
    search.add_argument("query", nargs="+", help="one or more questions")


def run_search(args: argparse.Namespace) -> int:
    """Run ``dphr search``."""
    from ..search import check_unit, open_searcher

    check_unit(args.unit)
    searcher = open_searcher(
        args.index,
        args.model,
        max_answer_length=args.max_answer_length,
        whole_words=not args.partial_words,
        skip_question_copies=not args.keep_question_copies,
        truecase=args.truecase,
        passage_scoring=args.passage_scoring,
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
    confidence = f", confidence {hit.confidence:.2f}" if hit.confidence is not None else ""
    return f"[{hit.score:.2f}] {hit.text!r}  ({hit.passage_id}, chars {hit.start}-{hit.end}{confidence})"
