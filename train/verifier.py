"""Fit a phrase model's answer verification: P(the top answer is right) once a reader has read it.

    python -m train.verifier --model dphr_haystack/shipped_models/dphr-minilm-squad-distilled \\
        --reader dphr-minilm-squad-reader --dev-index DIR [--open-index DIR] (--out DIR | --in-place) \\
        [--questions 800] [--reader-precision float32|bfloat16] [--report FILE]
    python -m train.verifier --export-reader runs/reader/final --to dphr_haystack/shipped_models/NAME [--dtype int8]

The answerability (``python -m train.answerability``) judges the top answer from the search alone. A verification
(:mod:`dphr_haystack.verification`) lets a question-answering reader read the top answer in its passage and is a
logistic regression of "the top answer is right" on the answerability's confidence (as log-odds) and the reader's
view of the span (start + end logit, log-probability among the window's spans, gap to its best span), fitted on the
cases the answerability is fitted on (:func:`train.answerability_cases.all_cases`: questions of the held-out validation
articles over 5, 50, 500, 1,702 and, with ``--open-index``, 20,598 passages, with and without their article; a
case without its answer weighing :data:`~train.answerability.UNANSWERABLE_WEIGHT`). It is stored in the calibration
of the model's ``dphr_config.json`` beside the answerability, naming its reader; ``verify.json`` reports the fit.
When the calibration has a holds-answer (P(the corpus holds an answer)), the verification gets one too: a logistic
regression of "the corpus holds the answer" on that probability (as log-odds) and the same view, every case weighing
1, near misses, questions over their article alone and questions about invented names added as the holds-answer's
fit adds them (``--near-miss-weight``, ``--article-weight``, ``--invented-name-weight``;
:class:`~dphr_haystack.model.calibration.VerifiedHoldsAnswer`), and its ``no_answer_threshold``, chosen on the
fit's cases as the holds-answer's is (:func:`train.answerability.choose_threshold`), the one a verified search places
"no answer" by unless it passes its own.

``--export-reader`` writes a reader directory (a ``transformers`` question-answering model, e.g. the one
``train/configs/cpu_reader.yaml`` trains) in the compact weight format (int8 matrices by default; SHA-256 sums), as
the shipped reader is stored.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from dphr_haystack import PhraseIndex, PhraseModel
from dphr_haystack.confidence import QUERY_FEATURES, Calibration
from dphr_haystack.fitting import auroc, expected_calibration_error, fit_verification, fit_verified_holds
from dphr_haystack.model.calibration import (
    CORPUS_FEATURE,
    READER_PRECISIONS,
    READER_VIEW_FEATURES,
    Verification,
    VerifiedHoldsAnswer,
)
from dphr_haystack.search_options import NO_ANSWER_THRESHOLD, PhraseSearchOptions, no_answer_threshold
from dphr_haystack.verification import SpanReader, reader_dir, reader_reference

from .answerability import (
    UNANSWERABLE_WEIGHT,
    VALIDATION_ARTICLES,
    VERIFIED_HOLDS_L2,
    VERIFIED_INVENTED_NAME_WEIGHT,
    QueryTable,
    add_holds_case_weights,
    concatenate,
    dev_index,
    gather,
    near_miss_table,
    threshold_sweep,
)
from .answerability_cases import all_cases, squad_questions
from .calibrate import DEFAULT_DEV, write_calibrated

READER_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
MAX_SHARD_MB = 16.0


def verification_inputs(table: QueryTable, calibration: Calibration, holds: bool = False) -> np.ndarray:
    """The verification features of each case of ``table`` (gathered with a reader): the answerability's P(right)
    as log-odds and the reader's view (with ``holds``: the holds-answer's P(the corpus holds an answer) as log-odds,
    the reader's view and whether the corpus writes every name of the question, NaN for a question without names);
    rows without a top answer are NaN."""
    if table.views is None:
        raise ValueError("the table was gathered without a reader")
    p = (calibration.holds_answer if holds else calibration.answerability).query_probability(table.features)
    p = np.clip(p, 1e-6, 1 - 1e-6)
    logit = np.log(p / (1 - p))
    logit[np.isnan(table.features[:, 0])] = np.nan
    names = [table.features[:, QUERY_FEATURES.index(CORPUS_FEATURE)]] if holds else []
    return np.column_stack([logit, table.views, *names])


def verified_probability(verification: Verification | VerifiedHoldsAnswer, inputs: np.ndarray) -> np.ndarray:
    """P(right) (P(the corpus holds an answer), for a :class:`VerifiedHoldsAnswer`) of each case: the
    verification's where the reader read the top answer, else the search's own (no view), 0.0 without a top
    answer."""
    p = verification.probability(inputs)
    no_view = np.isnan(inputs[:, 1])
    base = 1.0 / (1.0 + np.exp(-np.nan_to_num(inputs[:, 0], nan=-50.0)))
    return np.where(no_view, base, p) * ~np.isnan(inputs[:, 0])


def fit(
    table: QueryTable, calibration: Calibration, reader: str, unanswerable_weight: float = UNANSWERABLE_WEIGHT
) -> Verification:
    """The verification fitted on the cases of ``table`` that have a top answer the reader read."""
    inputs = verification_inputs(table, calibration)
    known = ~np.isnan(inputs).any(axis=1)
    weights = np.array([1.0 if c.answerable else unanswerable_weight for c in table.cases])
    return fit_verification(inputs[known], table.correct[known], reader, weights=weights[known])


def fit_holds(table: QueryTable, calibration: Calibration) -> VerifiedHoldsAnswer:
    """The verification's holds-answer fitted on the cases of ``table`` that have a top answer the reader read, on
    whether their corpus holds the answer (each case weighing its own weight, as the calibration's holds-answer is
    fitted)."""
    inputs = verification_inputs(table, calibration, holds=True)
    known = ~np.isnan(inputs[:, : 1 + len(READER_VIEW_FEATURES)]).any(axis=1)  # a question without names counts
    weights = np.array([c.weight for c in table.cases])
    return fit_verified_holds(inputs[known], table.holds[known], l2=VERIFIED_HOLDS_L2, weights=weights[known])


def report(
    table: QueryTable,
    before: np.ndarray,
    after: np.ndarray,
    labels: tuple[str, str] = ("answerability", "verified"),
    thresholds: tuple[float, float] = (NO_ANSWER_THRESHOLD, NO_ANSWER_THRESHOLD),
) -> dict[str, Any]:
    """Per corpus, before (the answerability) and after (the verification): AUROC answerable vs not, AUROC right vs
    wrong and ECE of the answerable cases; the share of unanswerable cases below each one's threshold and of right
    ones."""
    out: dict[str, Any] = {}
    answerable = table.holds
    for corpus in dict.fromkeys(c.corpus for c in table.cases):
        yes, no = table.rows(corpus, True), table.rows(corpus, False)
        rows = np.concatenate([yes, no])
        out[corpus] = {
            label: {
                "auroc_answerable": auroc(p[rows], answerable[rows]),
                "auroc_right_vs_wrong": auroc(p[yes], table.correct[yes]),
                "ece_answerable": expected_calibration_error(p[yes], table.correct[yes]),
            }
            for label, p in zip(labels, (before, after), strict=True)
        }
    for label, p, threshold in zip(labels, (before, after), thresholds, strict=True):
        below = p < threshold
        out[f"at_threshold_{label}"] = {
            "threshold": threshold,
            "no_answer_share": float(below[~answerable].mean()),
            "right_lost_share": float(below[table.correct].mean()),
        }
    return out


def export_reader(source: str | Path, to: Path, dtype: str = "int8") -> dict[str, Any]:
    """Write the question-answering model in ``source`` to ``to`` in the compact weight format (``dtype``), with
    its config and tokenizer files; returns the weight summary."""
    from dphr_haystack.model.weights import read_weights, write_weights

    source = reader_dir(source)
    to.mkdir(parents=True, exist_ok=True)
    for name in READER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, to / name)
    state = {k: v for k, v in read_weights(source).items() if not k.endswith("position_ids")}
    return write_weights(state, to, dtype=dtype, max_shard_mb=MAX_SHARD_MB)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export-reader", help="write this reader directory in the compact format (with --to)")
    parser.add_argument("--to", type=Path, help="where --export-reader writes")
    parser.add_argument("--dtype", default="int8", help="weights of the exported reader (int8, float16, float32)")
    parser.add_argument("--model", help="a phrase model directory whose calibration has an answerability")
    parser.add_argument("--reader", default="dphr-minilm-squad-reader", help="a reader directory or shipped name")
    parser.add_argument(
        "--reader-precision",
        choices=READER_PRECISIONS,
        default="float32",
        help="how the reader computes, here and in every verified search (default float32; bfloat16: autocast on the "
        "CPU: 1.4-1.8x faster reads where the CPU has bfloat16 instructions)",
    )
    parser.add_argument("--dev-index", type=Path, help="the dev-public phrase index (built if missing)")
    parser.add_argument("--open-index", type=Path, help="an open-domain phrase index holding the dev paragraphs")
    parser.add_argument("--dev", type=Path, default=DEFAULT_DEV, help="SQuAD dev-public (its validation articles)")
    parser.add_argument("--out", type=Path, help="write the model with its verification here (a copy)")
    parser.add_argument("--in-place", action="store_true", help="write into --model itself")
    parser.add_argument("--questions", type=int, default=800, help="at most this many validation questions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    add_holds_case_weights(parser, VERIFIED_INVENTED_NAME_WEIGHT)
    parser.add_argument("--report", type=Path, help="the fit report (default: verify.json in the model)")
    args = parser.parse_args(argv)
    if args.export_reader:
        if not args.to:
            parser.error("--export-reader needs --to DIR")
        json.dump(export_reader(args.export_reader, args.to, args.dtype), sys.stdout, indent=2)
        print()
        return 0
    if not args.model or not args.dev_index:
        parser.error("--model and --dev-index are needed to fit a verification")
    if bool(args.out) == bool(args.in_place):
        parser.error("give one of --out DIR or --in-place")
    import torch

    torch.set_num_threads(args.threads)
    model = PhraseModel.load(args.model)
    calibration = Calibration.from_dict(model.config.calibration or {})
    if calibration.answerability is None:
        parser.error(f"{args.model} has no answerability: run python -m train.answerability first")
    reader = SpanReader(args.reader, precision=args.reader_precision)
    questions = squad_questions(args.dev, slice(0, VALIDATION_ARTICLES))
    questions = random.Random(args.seed).sample(questions, min(args.questions, len(questions)))
    dev = dev_index(model, args.dev_index, args.dev)
    open_index = PhraseIndex.load(args.open_index, model=model) if args.open_index else None
    cases = all_cases(dev, questions, args.seed, open_index)
    indexes = {"dev": dev, "open": open_index}
    plain = replace(calibration, answerability=None, verification=None)
    table = concatenate([gather(indexes[k], model, plain, found, reader=reader) for k, found in cases.items()])
    verification = replace(
        fit(table, calibration, reader_reference(args.reader)), reader_precision=args.reader_precision
    )
    inputs = verification_inputs(table, calibration)
    found = ~np.isnan(table.features[:, 0])
    before = np.nan_to_num(calibration.answerability.query_probability(table.features)) * found
    fitted = {
        "questions": len(questions),
        "cases": len(table.cases),
        "reader": verification.reader,
        "reader_precision": verification.reader_precision,
        "threshold": NO_ANSWER_THRESHOLD,
        "fit": report(table, before, verified_probability(verification, inputs)),
    }
    if calibration.holds_answer is not None:  # and P(the corpus holds an answer) once read, near misses too
        near = near_miss_table(
            indexes,
            model,
            plain,
            questions,
            args.near_miss_weight,
            reader,
            args.article_weight,
            (cases, args.invented_name_weight),
        )
        both = concatenate([table, near]) if near is not None else table
        verification = replace(verification, holds_answer=fit_holds(both, calibration))
        holds = verified_probability(verification.holds_answer, verification_inputs(both, calibration, holds=True))
        sweep = threshold_sweep(table, holds[: len(table.cases)])  # the sizes' own cases, as the holds-answer's
        threshold = sweep["chosen_threshold"]
        verification = replace(verification, no_answer_threshold=threshold)
        fitted["near_miss_weight"] = args.near_miss_weight
        fitted["article_weight"] = args.article_weight
        fitted["invented_name_weight"] = args.invented_name_weight
        fitted["holds_answer_fit"] = report(
            both,
            np.nan_to_num(calibration.holds_answer.query_probability(both.features)) * ~np.isnan(both.features[:, 0]),
            holds,
            ("holds_answer", "verified"),
            (
                no_answer_threshold(PhraseSearchOptions(), calibration),
                NO_ANSWER_THRESHOLD if threshold is None else threshold,
            ),
        )
        fitted.update(sweep)
    out = Path(args.model) if args.in_place else args.out
    write_calibrated(Path(args.model), out, replace(calibration, verification=verification).to_dict())
    (args.report or out / "verify.json").write_text(json.dumps(fitted, indent=2) + "\n")
    json.dump(fitted, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
