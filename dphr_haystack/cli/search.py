"""``dphr search``: phrases, passages or documents for questions, from a saved phrase index.

Each result shows its confidence: for a phrase, P(the answer is right) from the model's calibration; for a passage
or document, its answer's confidence capped by those ranked above it (the score the Haystack retrievers give, see
:mod:`dphr_haystack.documents.results`). Raw scores (inner products) show with ``--raw-scores`` and in ``--json``;
a model without a calibration shows them instead.

``--no-answer`` also says how likely it is that the corpus holds no answer: a line ``no answer in this corpus
(p=0.93)``, where p = 1 − P(the corpus holds an answer) (the calibration's ``holds_answer``; without one, the top
answer's confidence; 1.0 when nothing is found), printed before the results when that probability is below
``--no-answer-threshold`` (default: the threshold the model documents for the search, its verification's with
``--verify``; :func:`~dphr_haystack.search_options.no_answer_threshold`) and after them otherwise, as the Haystack
retrievers place their "no answer" (:func:`~dphr_haystack.documents.results.with_no_answer`). In ``--json`` each line
then gains ``"no_answer": {"score": p, "top_confidence": c or null, "holds_answer": h or null, "first": true|false}``
(``first``: it comes before the results; ``"unwritten_names"`` too, and the line says "no passage writes 'Calder'",
when the question names what no passage writes); without ``--no-answer`` the output is as before. It needs a model with
a calibration.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from ..params import QUERY_PRECISIONS, arg_type
from ..search_options import (
    DEFAULT_SEARCH_OPTIONS,
    NO_ANSWER_THRESHOLD,
    PASSAGE_SCORINGS,
    RANKINGS,
    UNITS,
    PhraseSearchOptions,
    no_answer_threshold,
)


def add_search_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``dphr search``: each search option is a flag whose destination is the option's name in
    :class:`~dphr_haystack.search_options.PhraseSearchOptions`, with its default (``--threads`` comes with every
    query command)."""
    default = DEFAULT_SEARCH_OPTIONS
    search = sub.add_parser("search", help="search a phrase index")
    search.add_argument("--index", required=True, type=Path)
    search.add_argument("--model", type=Path, help="model directory (default: the one the index was built with)")
    search.add_argument(
        "--unit",
        default=default.unit,
        help=f"{', '.join(UNITS)}: passages by their best phrase, phrase answers or documents "
        f"(default: {default.unit})",
    )
    search.add_argument("--top-k", type=arg_type("top_k"), default=default.top_k)
    search.add_argument(
        "--max-answer-length",
        type=arg_type("max_answer_length"),
        default=default.max_answer_length,
        help="longest phrase in subwords, at most the model's passage window (default: the model's)",
    )
    search.add_argument(
        "--partial-words",
        dest="whole_words",
        action="store_false",
        default=default.whole_words,
        help="let phrases start or end inside a word (by default they span whole words)",
    )
    search.add_argument(
        "--keep-question-copies",
        dest="skip_question_copies",
        action="store_false",
        default=default.skip_question_copies,
        help="allow phrase answers the question itself contains (skipped by default)",
    )
    search.add_argument(
        "--passage-scoring",
        choices=PASSAGE_SCORINGS,
        default=default.passage_scoring,
        help="passages and documents score their best phrase (max, default) or all of their phrases (logsumexp)",
    )
    search.add_argument(
        "--truecase",
        action=argparse.BooleanOptionalAction,
        default=default.truecase,
        help="truecase all-lowercase questions (default: the model's setting, on for cased DensePhrases models)",
    )
    search.add_argument(
        "--ranking",
        choices=RANKINGS,
        default=default.ranking,
        help="order the first results by their answer's calibrated confidence (50 phrase answers for the shipped "
        "default, 10 passages or documents; confidence, default; a model without a calibration ranks by score) or by "
        "score alone (score)",
    )
    search.add_argument(
        "--query-precision",
        choices=QUERY_PRECISIONS,
        default=default.query_precision,
        help="encode questions with an int8 copy of the query side on the CPU (int8, default: about half the "
        "time, the same EM on the shipped model) or in float32",
    )
    search.add_argument(
        "--batch-size",
        type=arg_type("batch_size"),
        default=default.batch_size,
        help=f"questions encoded at once (default: {default.batch_size})",
    )
    search.add_argument(
        "--raw-scores", action="store_true", help="also print the raw phrase scores (always in --json output)"
    )
    search.add_argument(
        "--no-answer",
        action="store_true",
        default=default.no_answer,
        help='also say "no answer in this corpus" with its probability (1 - P(the corpus holds an answer), the '
        "model's estimate; without one, the top answer's confidence): first when that probability is below "
        "--no-answer-threshold, last otherwise; in --json as "
        '"no_answer": {"score", "top_confidence", "holds_answer", "first"} (needs a model with a calibration)',
    )
    search.add_argument(
        "--no-answer-threshold",
        type=_no_answer_threshold,
        default=None,
        metavar="P",
        help='with --no-answer: P(the corpus holds an answer) below which "no answer" comes first, from 0 to 1 '
        "(default: the one the model's calibration names for the search, with --verify its verification's, chosen "
        "where it was fitted; a model that names none: NO_ANSWER_THRESHOLD of dphr_haystack.search_options, "
        f"{NO_ANSWER_THRESHOLD})",
    )
    search.add_argument(
        "--verify",
        action="store_true",
        default=default.verify,
        help="let a question-answering reader read each question's top answer in its passage: the confidences (and "
        "--no-answer) weigh what it sees (one reader pass a question, ~26 ms on two CPU threads; needs a model whose "
        "calibration has a verification, as the shipped default's does)",
    )
    search.add_argument("--json", action="store_true", help="print results as JSON lines")
    search.add_argument("query", nargs="+", help="one or more questions")


def search_options(args: argparse.Namespace) -> PhraseSearchOptions:
    """The search options of ``dphr search``'s arguments (those not given take the options' defaults)."""
    return PhraseSearchOptions.from_params({name: value for name, value in vars(args).items() if value is not None})


def _no_answer_threshold(text: str) -> float:
    """The ``--no-answer-threshold`` argument: a number from 0 to 1 (argparse reports anything else)."""
    from ..errors import InvalidParameterError
    from ..search_options import check_no_answer_threshold

    try:
        return check_no_answer_threshold(float(text))
    except (ValueError, InvalidParameterError):
        raise argparse.ArgumentTypeError(f"no_answer_threshold={text!r}; valid: a number from 0 to 1") from None


def run_search(args: argparse.Namespace) -> int:
    """Run ``dphr search``."""
    from ..errors import InvalidParameterError
    from ..saved_index import open_searcher

    if args.no_answer_threshold is not None and not args.no_answer:
        raise InvalidParameterError("--no-answer-threshold places the no-answer line: give --no-answer too")
    options = search_options(args)
    no_answer = options.no_answer
    searcher = open_searcher(args.index, args.model, options)
    if no_answer and searcher.calibration is None:
        raise InvalidParameterError(
            "--no-answer needs answer confidences, and this model has no calibration "
            "(python -m train.calibrate adds one; the shipped models have one)"
        )
    threshold = no_answer_threshold(options, searcher.calibration)
    results = searcher.search_batch(args.query)
    for query, hits in zip(args.query, results):
        confidences = _confidences(hits)
        marker = _no_answer(hits, threshold) if no_answer else None
        if args.json:
            rows = [{**_jsonable(h), "confidence": c} for h, c in zip(hits, confidences, strict=True)]
            line = {"query": query, "unit": options.unit, "results": rows}
            if marker is not None:
                line["no_answer"] = marker
            print(json.dumps(line, ensure_ascii=False))
            continue
        print(f"Q: {query}")
        if hits and confidences[0] is None:
            print("  (the model has no calibration: raw phrase scores, no confidence)")
        if marker is not None and marker["first"]:
            print(f"  {_describe_no_answer(marker)}")
        for rank, (hit, confidence) in enumerate(zip(hits, confidences, strict=True), 1):
            print(f"  {rank:>2}. {_describe(hit, confidence, args.raw_scores)}")
        if marker is not None and not marker["first"]:
            print(f"  {_describe_no_answer(marker)}")
    return 0


def _no_answer(hits, threshold: float) -> dict:
    """The "no answer" of ranked hits, as the Haystack retrievers place theirs: ``{"score": 1 − P(the corpus holds an
    answer), "top_confidence": the top answer's confidence (None: no answer), "holds_answer": that probability
    (None: the calibration gives none, the top answer's confidence stands for it), "first": whether it comes
    first}``, and ``"unwritten_names"`` when the question names what no passage writes."""
    from ..documents.results import NoAnswer, retrieved, with_no_answer

    _, answers = retrieved([(hit, None) for hit in hits], lambda _: None, True)
    placed = with_no_answer(answers, threshold)
    first = isinstance(placed[0], NoAnswer)
    marker = placed[0] if first else placed[-1]
    assert isinstance(marker, NoAnswer)
    out = {
        "score": marker.score,
        "top_confidence": marker.top_confidence,
        "holds_answer": marker.holds_answer,
        "first": first,
    }
    if marker.unwritten_names:  # the question's names no passage writes
        out["unwritten_names"] = list(marker.unwritten_names)
    return out


def _describe_no_answer(marker: dict) -> str:
    """The no-answer line: its probability, what it was weighed against, and the names no passage writes."""
    top, holds = marker["top_confidence"], marker["holds_answer"]
    why = "nothing found" if top is None else f"top answer's confidence {top:.2f}"
    why = why if holds is None else f"P(the corpus holds an answer) {holds:.2f}, {why}"
    if marker.get("unwritten_names"):
        why += "; no passage writes " + ", ".join(repr(name) for name in marker["unwritten_names"])
    return f"--  no answer in this corpus (p={marker['score']:.2f}; {why})"


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
