"""Per-question results, the aggregated report and its markdown table, and running a Haystack 1.x pipeline over
the questions (a :class:`~dphr_haystack.search.PhraseSearcher` is run by :mod:`.searcher`)."""

from __future__ import annotations

import inspect
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from .._util.atomic import write_file_atomic
from .._util.nofollow import open_no_follow
from ..answers import ANSWER_MATCHES, contains_answer, exact_match, f1_score
from ..errors import InvalidParameterError
from .metrics import first_hit, passage_ks, ranking_depth, ranking_metrics
from .questions import QAExample


# ----------------------------------------------------------------------------- results
@dataclass
class QuestionResult:
    """What one system returned for one question, and how it scored."""

    qid: str
    question: str
    answers: list[str]
    predictions: list[dict[str, Any]] = field(default_factory=list)  # {text, score, passage_id}
    passages: list[dict[str, Any]] = field(default_factory=list)  # {id, score, has_answer}
    seconds: float = 0.0

    def first_hit(self) -> int:
        """1-based rank of the first passage containing an answer; 0 when none does."""
        return first_hit(p["has_answer"] for p in self.passages)


@dataclass
class EvalReport:
    """A system's per-question results and averaged metrics."""

    system: str
    results: list[QuestionResult]
    top_k: int
    settings: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, float] = field(default_factory=dict)
    has_answers: bool = False
    has_passages: bool = False

    def __post_init__(self) -> None:
        if not self.summary:
            self.summary = summarize(
                self.results, self.top_k, self.has_answers, self.has_passages, self.settings.get("regex", False)
            )

    def write(self, out_dir: str | Path) -> Path:
        """``<system>.predictions.jsonl`` (one line per question) and ``<system>.summary.json``; returns the dir."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        safe = report_stem(self.system)
        with open_no_follow(out / f"{safe}.predictions.jsonl", "w", encoding="utf-8") as handle:
            for result in self.results:
                handle.write(json.dumps(asdict(result), ensure_ascii=False) + "\n")
        payload = {
            "system": self.system,
            "questions": len(self.results),
            "top_k": self.top_k,
            "settings": self.settings,
            "metrics": self.summary,
        }
        write_file_atomic(out / f"{safe}.summary.json", json.dumps(payload, indent=2), fsync=False)
        return out


def report_stem(system: str) -> str:
    """The file-name stem of a system's report files: ``<stem>.predictions.jsonl`` and ``<stem>.summary.json``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", system)


def read_results(path: str | Path) -> list[QuestionResult]:
    """The per-question results of a ``<system>.predictions.jsonl`` written by :meth:`EvalReport.write`."""
    with Path(path).open(encoding="utf-8") as handle:
        return [QuestionResult(**json.loads(line)) for line in handle if line.strip()]


def question_metrics(
    results: Sequence[QuestionResult],
    top_k: int,
    has_answers: bool,
    has_passages: bool,
    regex: bool = False,
    ks: Sequence[int] | None = None,
) -> dict[str, np.ndarray]:
    """Each metric that :func:`summarize` averages, per question in ``results`` order (hits as 1.0 / 0.0).

    The names follow what an evaluation of the top ``top_k`` results measures: ``phrase_em@<top_k>``,
    ``passage_acc@k`` for each of ``ks`` (default :func:`~.metrics.passage_ks`: 1, 5 and 20 as far as ``top_k``
    reaches, and ``top_k``), ``mrr@<d>`` and ``p@<d>`` with d = :func:`~.metrics.ranking_depth` (20, or ``top_k``
    when smaller)."""
    out: dict[str, np.ndarray] = {}
    if has_answers:
        em1, f11, emk = [], [], []
        for r in results:
            texts = [p["text"] for p in r.predictions]
            em1.append(bool(texts) and exact_match(texts[0], r.answers, regex))
            f11.append(f1_score(texts[0], r.answers, regex) if texts else 0.0)
            emk.append(any(exact_match(t, r.answers, regex) for t in texts[:top_k]))
        out["phrase_em@1"] = np.array(em1, dtype=float)
        out["phrase_f1@1"] = np.array(f11, dtype=float)
        out[f"phrase_em@{top_k}"] = np.array(emk, dtype=float)
    if has_passages:
        flags = [[p["has_answer"] for p in r.passages] for r in results]
        out.update(ranking_metrics(flags, passage_ks(top_k) if ks is None else ks, ranking_depth(top_k)))
    return out


def summarize(
    results: Sequence[QuestionResult], top_k: int, has_answers: bool, has_passages: bool, regex: bool = False
) -> dict[str, float]:
    """Average the per-question metrics (see the module docstring); also the mean seconds per question."""
    if not results:
        return {}
    out: dict[str, float] = {"questions": float(len(results))}
    for name, values in question_metrics(results, top_k, has_answers, has_passages, regex).items():
        out[name] = float(np.mean(values))
    out["ms_per_question"] = 1000 * float(np.mean([r.seconds for r in results]))
    return out


def check_evaluation(examples: Sequence[QAExample], top_k: int, answer_match: str) -> None:
    """Raise InvalidParameterError for no questions, ``top_k`` < 1 or an unknown ``answer_match``."""
    _check_examples(examples, top_k)
    _check_answer_match(answer_match)


def question_result(
    example: QAExample,
    answers: Iterable[tuple[str, Any, str | None]],
    documents: Iterable[tuple[str, Any, str]],
    seconds: float,
    top_k: int,
    answer_match: str = "squad",
) -> QuestionResult:
    """One question's result from a system's output, whatever its framework.

    Args:
        example: The question and its gold answers.
        answers: ``(text, score, passage id)`` of the returned answers, best first; empty texts are dropped.
        documents: ``(id, score, content)`` of the returned passages, best first; the first ``top_k`` are scored
            (a document without content holds no answer).
        seconds: Time the system took for this question.
    """
    return QuestionResult(
        example.qid,
        example.question,
        list(example.answers),
        [{"text": text, "score": _finite(score), "passage_id": pid} for text, score, pid in answers if text],
        [
            {
                "id": doc_id,
                "score": _finite(score),
                "has_answer": contains_answer(
                    "" if content is None else content, example.answers, example.regex, answer_match
                ),
            }
            for doc_id, score, content in list(documents)[:top_k]
        ],
        seconds,
    )


def _check_answer_match(answer_match: str) -> None:
    if answer_match not in ANSWER_MATCHES:
        raise InvalidParameterError(f"answer_match must be one of {ANSWER_MATCHES}, got {answer_match!r}")


def _check_examples(examples: Sequence[QAExample], top_k: int) -> None:
    if not examples:
        raise InvalidParameterError("no questions to evaluate")
    if top_k < 1:
        raise InvalidParameterError(f"top_k must be >= 1, got {top_k}")


# ----------------------------------------------------------------------------- Haystack 1.x pipelines
def pipeline_top_k_params(pipeline, top_k: int) -> dict[str, dict[str, Any]]:
    """``params`` that make every node of a Haystack pipeline return ``top_k`` results.

    Nodes whose ``run`` takes ``top_k`` (retrievers, readers) get it; joins taking ``top_k_join`` get that,
    so a join configured for 10 results cannot cap a top-20 evaluation.
    """
    params: dict[str, dict[str, Any]] = {}
    for name in pipeline.graph.nodes:
        component = pipeline.graph.nodes[name].get("component")
        if component is None:
            continue
        accepted = inspect.signature(component.run).parameters
        node_params = {key: top_k for key in ("top_k", "top_k_join") if key in accepted}
        if node_params:
            params[name] = node_params
    return params


def evaluate_pipeline(
    pipeline,
    examples: Sequence[QAExample],
    top_k: int = 20,
    system: str = "pipeline",
    params: dict[str, dict[str, Any]] | None = None,
    answer_match: str = "squad",
    progress: bool = True,
    on_result: Callable[[QuestionResult], None] | None = None,
) -> EvalReport:
    """Run a Haystack query pipeline on every question and score its ``answers`` and ``documents``.

    Args:
        pipeline: A Haystack 1.x query pipeline (e.g. from :func:`dphr_haystack.nodes.load_pipeline`).
        params: Per-node params; by default :func:`pipeline_top_k_params` (every node asked for ``top_k``).
        on_result: Called with each question's result (e.g. to stream predictions to disk).
    """
    check_evaluation(examples, top_k, answer_match)
    params = pipeline_top_k_params(pipeline, top_k) if params is None else params
    seen = {"answers": False, "documents": False}

    def run(question: str) -> tuple[Iterable, Iterable]:
        output = pipeline.run(query=question, params=params)
        seen["answers"] |= "answers" in output
        seen["documents"] |= "documents" in output
        answers = output.get("answers") or []
        documents = output.get("documents") or []
        return (
            ((a.answer, a.score, (a.document_ids or [None])[0]) for a in answers),
            ((d.id, d.score, d.content) for d in documents),
        )

    results = score_questions(examples, run, system, top_k, answer_match, progress, on_result)
    return eval_report(system, results, examples, top_k, answer_match, seen["answers"], seen["documents"])


def score_questions(
    examples: Sequence[QAExample],
    run: Callable[[str], tuple[Iterable, Iterable]],
    system: str,
    top_k: int,
    answer_match: str,
    progress: bool = True,
    on_result: Callable[[QuestionResult], None] | None = None,
) -> list[QuestionResult]:
    """Time ``run(question)`` on every question and score what it returns: its answers as (text, score, document
    id) and its documents as (id, score, content) tuples (the part shared by the Haystack 1.x and 2.x layers)."""
    results: list[QuestionResult] = []
    for ex in tqdm(examples, desc=f"eval {system}", unit="q", disable=not progress):
        start = time.perf_counter()
        answers, documents = run(ex.question)
        seconds = time.perf_counter() - start
        result = question_result(ex, answers, documents, seconds, top_k, answer_match)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def eval_report(
    system: str,
    results: list[QuestionResult],
    examples: Sequence[QAExample],
    top_k: int,
    answer_match: str,
    has_answers: bool,
    has_passages: bool,
) -> EvalReport:
    """The :class:`EvalReport` of scored questions (a searcher's or a pipeline's)."""
    regex = any(ex.regex for ex in examples)
    return EvalReport(
        system,
        results,
        top_k,
        {"top_k": top_k, "answer_match": answer_match, "regex": regex},
        has_answers=has_answers,
        has_passages=has_passages,
    )


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


# ----------------------------------------------------------------------------- tables
TABLE_COLUMNS = (
    "phrase_em@1",
    "phrase_f1@1",
    "phrase_em@20",
    "passage_acc@1",
    "passage_acc@5",
    "passage_acc@20",
    "mrr@20",
    "p@20",
    "ms_per_question",
)
_COLUMN_ORDER = ("phrase_em@1", "phrase_f1@1", "phrase_em@", "passage_acc@", "mrr@", "p@", "ms_per_question")


def table_columns(reports: Sequence[EvalReport]) -> list[str]:
    """The metrics of ``reports``' summaries, each once, in table order: phrase EM@1, F1@1 and EM@k, passage
    accuracy@k, MRR and P (k ascending within each), milliseconds per question. Names carry the depths each
    report evaluated (``passage_acc@5`` and ``mrr@5`` for a top-5 evaluation, never ``passage_acc@20``)."""

    def order(name: str) -> tuple[int, int]:
        for rank, prefix in enumerate(_COLUMN_ORDER):
            if name == prefix or (prefix.endswith("@") and name.startswith(prefix)):
                depth = name.rpartition("@")[2]
                return rank, int(depth) if depth.isdigit() else 0
        return len(_COLUMN_ORDER), 0

    names = {name for report in reports for name in report.summary if name != "questions"}
    return sorted(names, key=lambda name: (*order(name), name))


def markdown_table(reports: Sequence[EvalReport], columns: Sequence[str] | None = None) -> str:
    """One row per system; metrics a system does not produce show as '–'. Accuracies in percent.

    ``columns``: the metrics to show (default :func:`table_columns`: every metric the reports measured, labelled
    with the depths they were evaluated at)."""
    columns = table_columns(reports) if columns is None else list(columns)
    header = "| system | questions | " + " | ".join(columns) + " |"
    rule = "|---|---:|" + "---:|" * len(columns)
    rows = [header, rule]
    for report in reports:
        cells = []
        for col in columns:
            value = report.summary.get(col)
            if value is None:
                cells.append("–")
            elif col == "ms_per_question":
                cells.append(f"{value:.1f}")
            else:
                cells.append(f"{100 * value:.1f}")
        rows.append(f"| {report.system} | {len(report.results)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)
