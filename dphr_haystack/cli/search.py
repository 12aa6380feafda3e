"""``dphr search``: phrases, passages or documents for questions, from a saved phrase index.

Each result shows its confidence: for a phrase, P(the answer is right) from the model's calibration; for a passage
or document, its answer's confidence capped by those ranked above it (the score the Haystack retrievers give, see
:mod:`dphr_haystack.documents.results`). Raw scores (inner products) show with ``--raw-scores`` and in ``--json``;
a model without a calibration shows them instead.
"""

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
    search.add_argument(
        "--ranking",
        choices=["confidence", "score"],
        default="confidence",
        help="order the first results by their answer's calibrated confidence (50 phrase answers for the shipped "
        "default, 10 passages or documents; confidence, default; a model without a calibration ranks by score) or by "
        "score alone (score)",
    )
    search.add_argument(
        "--query-precision",
        choices=["int8", "float32"],
        default="int8",
        help="encode questions with an int8 copy of the query side on the CPU (int8, default: about half the "
        "time, the same EM on the shipped model) or in float32",
    )
    search.add_argument(
        "--raw-scores", action="store_true", help="also print the raw phrase scores (always in --json output)"
    )
    search.add_argument("--json", action="store_true", help="print results as JSON lines")
    search.add_argument("query", nargs="+", help="one or more questions")


def run_search(args: argparse.Namespace) -> int:
    """Run ``dphr search``."""
    from ..saved_index import open_searcher
    from ..search import check_unit

    check_unit(args.unit)
    searcher = open_searcher(
        args.index,
        args.model,
        max_answer_length=args.max_answer_length,
        whole_words=not args.partial_words,
        skip_question_copies=not args.keep_question_copies,
        truecase=args.truecase,
        passage_scoring=args.passage_scoring,
        query_precision=args.query_precision,
        ranking=args.ranking,
    )
    results = searcher.search_batch(args.query, unit=args.unit, top_k=args.top_k)
    for query, hits in zip(args.query, results):
        confidences = _confidences(hits)
        if args.json:
            rows = [{**_jsonable(h), "confidence": c} for h, c in zip(hits, confidences, strict=True)]
            print(json.dumps({"query": query, "unit": args.unit, "results": rows}, ensure_ascii=False))
            continue
        print(f"Q: {query}")
        if hits and confidences[0] is None:
            print("  (the model has no calibration: raw phrase scores, no confidence)")
        for rank, (hit, confidence) in enumerate(zip(hits, confidences, strict=True), 1):
            print(f"  {rank:>2}. {_describe(hit, confidence, args.raw_scores)}")
    return 0


def _confidences(hits) -> list[float | None]:
    """Each hit's confidence: a phrase's own; a passage's or document's answer confidence made monotone along the
    ranking (:func:`~dphr_haystack.confidence.ranked_confidences`); None without a calibration."""
    from ..confidence import ranked_confidences
    from ..documents.results import best_phrase
    from ..search import PhraseHit

    phrases = [best_phrase(hit) for hit in hits]
    if not any(p.confidence is not None for p in phrases):
        return [None] * len(hits)
    if all(isinstance(hit, PhraseHit) for hit in hits):
        return [p.confidence for p in phrases]
    return list(ranked_confidences([None if p.copies_question else p.confidence for p in phrases]))


def _jsonable(hit) -> dict:
    data = asdict(hit)
    data.pop("passage_row", None)
    for key in ("best_phrase", "best_passage"):
        if isinstance(data.get(key), dict):
            data[key].pop("passage_row", None)
            if isinstance(data[key].get("best_phrase"), dict):
                data[key]["best_phrase"].pop("passage_row", None)
    return data


def _describe(hit, confidence: float | None, raw: bool) -> str:
    """One result line: the confidence (the raw score without one), the answer, where it is."""
    from ..search import DocumentHit, PassageHit

    score = f"{confidence:.2f}" if confidence is not None else f"[raw {hit.score:.2f}]"
    extra = f"  [raw {hit.score:.2f}]" if raw and confidence is not None else ""
    if isinstance(hit, DocumentHit):
        answer = hit.best_passage.best_phrase
        return f"{score}  document {hit.document_id!r}: {_answer(answer)}{extra}"
    if isinstance(hit, PassageHit):
        snippet = hit.text[:100].replace("\n", " ")
        return f"{score}  {hit.passage_id} ({_answer(hit.best_phrase)}): {snippet}…{extra}"
    title = f"{hit.title}, " if hit.title else ""
    return f"{score}  {hit.text!r}  ({title}{hit.passage_id}, chars {hit.start}-{hit.end}){extra}"


def _answer(phrase) -> str:
    """A passage's answer, or a note that all its phrases copy the question."""
    return "no answer: its phrases repeat the question" if phrase.copies_question else repr(phrase.text)
