"""Open-domain QA evaluation: question files in, SQuAD-normalised metrics, a searcher or a Haystack pipeline run.

Metrics (per question, then averaged):

* phrase level (systems that return answers): EM@1 and F1@1 of the top answer, EM@k (any of the top-k);
* passage level (systems that return passages/documents): accuracy@k (a gold answer occurs in one of the
  top-k passages), MRR@20 (1/rank of the first such passage, 0 beyond 20) and P@20 (the fraction of the
  top 20 that contain an answer, divided by 20 as in DPR-style tables).

Answers match with SQuAD normalisation (lower case, no punctuation or articles), as whole words inside a
passage; CuratedTREC answers are regular expressions, matched case-insensitively (DrQA/DPR convention).
``answer_match="substring"`` switches passages to Haystack's own criterion (the raw answer string is a
substring of the content), which the tests use to show that our aggregation equals Haystack's eval.
"""

from __future__ import annotations

import ast
import csv
import inspect
import json
import math
import random
import re
import string
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
from tqdm.auto import tqdm

from .._util.io import open_text
from ..build.corpus import squad_passage_id
from ..errors import CorpusFormatError, InvalidParameterError

PASSAGE_KS = (1, 5, 20)
ANSWER_MATCHES = ("squad", "substring")


# ----------------------------------------------------------------------------- answer matching
_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 normalisation: lower case, drop punctuation and articles, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _regex(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern, flags=re.IGNORECASE | re.UNICODE | re.MULTILINE)
    except re.error:
        return None  # DPR skips answer patterns that do not compile; so do we


def exact_match(prediction: str, answers: Sequence[str], regex: bool = False) -> bool:
    """SQuAD exact match against any answer; with ``regex`` the pattern must match at the start."""
    if regex:
        return any(p is not None and p.match(prediction) is not None for p in map(_regex, answers))
    norm = normalize_answer(prediction)
    return any(norm == normalize_answer(a) for a in answers)


def f1_score(prediction: str, answers: Sequence[str], regex: bool = False) -> float:
    """Best token-level F1 over the answers (SQuAD); regex answers have no tokens, so F1 is EM there."""
    if regex:
        return float(exact_match(prediction, answers, regex=True))
    pred = normalize_answer(prediction).split()
    best = 0.0
    for answer in answers:
        gold = normalize_answer(answer).split()
        common = sum((Counter(pred) & Counter(gold)).values())
        if not pred or not gold:
            best = max(best, float(pred == gold))
        elif common:
            precision, recall = common / len(pred), common / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def contains_answer(text: str, answers: Sequence[str], regex: bool = False, answer_match: str = "squad") -> bool:
    """True when ``text`` contains a gold answer (see the module docstring for the criteria)."""
    if regex:
        return any(p is not None and p.search(text) is not None for p in map(_regex, answers))
    if answer_match == "substring":
        return any(a and a in text for a in answers)
    haystack = f" {normalize_answer(text)} "
    return any(norm and f" {norm} " in haystack for norm in map(normalize_answer, answers))


# ----------------------------------------------------------------------------- question files
@dataclass(frozen=True)
class QAExample:
    """An open-domain question. ``title``/``gold_passage_id`` come from SQuAD files and are never used to retrieve."""

    qid: str
    question: str
    answers: tuple[str, ...]
    regex: bool = False
    title: str = ""
    gold_passage_id: str = ""


def _format_of(path: Path) -> str:
    name = path.name.removesuffix(".gz")
    if name.endswith(".csv"):
        return "dpr-csv"
    if name.endswith(".jsonl"):
        return "jsonl"
    if name.endswith(".json"):
        return "json"
    raise CorpusFormatError(
        f"{path}: unknown question file type; expected .json (SQuAD or DensePhrases "
        f"{{data: [{{id, question, answers}}]}}), .jsonl (NQ-open) or DPR .qa.csv, optionally .gz"
    )


def _json_examples(data: Any, path: Path, regex: bool) -> Iterable[QAExample]:
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise CorpusFormatError(f"{path}: expected a JSON object with a 'data' list")
    for a_idx, item in enumerate(items):
        if isinstance(item, dict) and "paragraphs" in item:  # SQuAD: articles → paragraphs → qas
            title = str(item.get("title", ""))
            for p_idx, para in enumerate(item["paragraphs"]):
                for qa in para.get("qas", []):
                    answers = tuple(a["text"] for a in qa.get("answers", []) if a.get("text"))
                    yield QAExample(
                        str(qa.get("id", "")),
                        qa.get("question", ""),
                        answers,
                        regex,
                        title,
                        squad_passage_id(title, a_idx, p_idx),
                    )
        elif isinstance(item, dict) and "question" in item:  # DensePhrases: flat {id, question, answers}
            answers = item.get("answers", item.get("answer", []))
            yield QAExample(str(item.get("id", a_idx)), item["question"], tuple(map(str, answers)), regex)
        else:
            raise CorpusFormatError(f"{path}: data[{a_idx}] is neither a SQuAD article nor a question object")


def _jsonl_examples(handle: IO[str], path: Path, regex: bool) -> Iterable[QAExample]:
    for line_no, line in enumerate(handle, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            answers = record.get("answer", record.get("answers"))
            question = record["question"]
        except (ValueError, KeyError, AttributeError) as exc:
            raise CorpusFormatError(f"{path}:{line_no}: expected {{question, answer: [...]}} ({exc})") from exc
        answers = [answers] if isinstance(answers, str) else list(answers or [])
        yield QAExample(str(record.get("id", line_no - 1)), question, tuple(map(str, answers)), regex)


def _csv_examples(handle: IO[str], path: Path, regex: bool) -> Iterable[QAExample]:
    for line_no, row in enumerate(csv.reader(handle, delimiter="\t"), 1):
        if not row:
            continue
        try:
            answers = ast.literal_eval(row[1])  # literals only: nothing is executed
        except (IndexError, ValueError, SyntaxError) as exc:
            raise CorpusFormatError(f"{path}:{line_no}: expected 'question<TAB>[answers]' ({exc})") from exc
        yield QAExample(str(line_no - 1), row[0], tuple(map(str, answers)), regex)


def read_questions(
    path: str | Path,
    regex: bool | None = None,
    limit: int | None = None,
    exclude_titles: Iterable[str] = (),
    seed: int | None = None,
) -> list[QAExample]:
    """Read an open-domain question file.

    Args:
        path: SQuAD JSON, DensePhrases JSON ``{data: [{id, question, answers}]}``, NQ-open JSONL
            ``{question, answer}`` or a DPR ``.qa.csv`` (tab-separated, answers as a list literal); ``.gz`` ok.
        regex: Answers are regular expressions; by default True for files named like CuratedTREC.
        limit: Keep this many questions: the first ones, or a random sample when ``seed`` is given.
        exclude_titles: SQuAD article titles whose questions are left out (e.g. a held-out validation split).
        seed: Sample ``limit`` questions with this seed instead of taking the first ones.

    Questions without any answer or with an empty text are skipped.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"question file not found: {path}")
    regex = "trec" in path.name.lower() if regex is None else regex
    kind = _format_of(path)
    with open_text(path) as handle:
        if kind == "json":
            try:
                data = json.load(handle)
            except ValueError as exc:
                raise CorpusFormatError(f"{path}: not valid JSON ({exc})") from exc
            examples = list(_json_examples(data, path, regex))
        elif kind == "jsonl":
            examples = list(_jsonl_examples(handle, path, regex))
        else:
            examples = list(_csv_examples(handle, path, regex))
    excluded = set(exclude_titles)
    examples = [ex for ex in examples if ex.answers and ex.question.strip() and ex.title not in excluded]
    if limit is not None and len(examples) > limit:
        examples = random.Random(seed).sample(examples, limit) if seed is not None else examples[:limit]
    return examples


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
        return next((rank for rank, p in enumerate(self.passages, 1) if p["has_answer"]), 0)


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
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.system)
        with (out / f"{safe}.predictions.jsonl").open("w", encoding="utf-8") as handle:
            for result in self.results:
                handle.write(json.dumps(asdict(result), ensure_ascii=False) + "\n")
        payload = {
            "system": self.system,
            "questions": len(self.results),
            "top_k": self.top_k,
            "settings": self.settings,
            "metrics": self.summary,
        }
        (out / f"{safe}.summary.json").write_text(json.dumps(payload, indent=2))
        return out


def summarize(
    results: Sequence[QuestionResult], top_k: int, has_answers: bool, has_passages: bool, regex: bool = False
) -> dict[str, float]:
    """Average the per-question metrics (see the module docstring); also the mean seconds per question."""
    if not results:
        return {}
    out: dict[str, float] = {"questions": float(len(results))}
    if has_answers:
        em1, f11, emk = [], [], []
        for r in results:
            texts = [p["text"] for p in r.predictions]
            em1.append(bool(texts) and exact_match(texts[0], r.answers, regex))
            f11.append(f1_score(texts[0], r.answers, regex) if texts else 0.0)
            emk.append(any(exact_match(t, r.answers, regex) for t in texts[:top_k]))
        out["phrase_em@1"], out["phrase_f1@1"] = float(np.mean(em1)), float(np.mean(f11))
        out[f"phrase_em@{top_k}"] = float(np.mean(emk))
    if has_passages:
        firsts = np.array([r.first_hit() for r in results])
        for k in PASSAGE_KS:
            out[f"passage_acc@{k}"] = float(np.mean((firsts > 0) & (firsts <= k)))
        out["mrr@20"] = float(np.mean(np.where((firsts > 0) & (firsts <= 20), 1.0 / np.maximum(firsts, 1), 0.0)))
        out["p@20"] = float(np.mean([sum(p["has_answer"] for p in r.passages[:20]) / 20 for r in results]))
    out["ms_per_question"] = 1000 * float(np.mean([r.seconds for r in results]))
    return out


def _check_answer_match(answer_match: str) -> None:
    if answer_match not in ANSWER_MATCHES:
        raise InvalidParameterError(f"answer_match must be one of {ANSWER_MATCHES}, got {answer_match!r}")


def _check_examples(examples: Sequence[QAExample], top_k: int) -> None:
    if not examples:
        raise InvalidParameterError("no questions to evaluate")
    if top_k < 1:
        raise InvalidParameterError(f"top_k must be >= 1, got {top_k}")


def _batches(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


# ----------------------------------------------------------------------------- systems
def evaluate_searcher(
    searcher,
    examples: Sequence[QAExample],
    top_k: int = 20,
    batch_size: int = 32,
    system: str = "phrase-index",
    answer_match: str = "squad",
    progress: bool = True,
) -> EvalReport:
    """Phrase answers and phrase-ranked passages of a :class:`~dphr_haystack.search.PhraseSearcher`.

    Queries are encoded once per batch; the same vectors serve the phrase and the passage search.
    """
    _check_examples(examples, top_k)
    _check_answer_match(answer_match)
    results: list[QuestionResult] = []
    bar = tqdm(total=len(examples), desc=f"eval {system}", unit="q", disable=not progress)
    for batch in _batches(examples, batch_size):
        start = time.perf_counter()
        q_start, q_end = searcher.model.encode_queries([ex.question for ex in batch])
        phrases = searcher.search_vectors(q_start, q_end, unit="phrase", top_k=top_k)
        passages = searcher.search_vectors(q_start, q_end, unit="passage", top_k=top_k)
        per_question = (time.perf_counter() - start) / len(batch)
        for ex, ph, ps in zip(batch, phrases, passages, strict=True):
            results.append(
                QuestionResult(
                    ex.qid,
                    ex.question,
                    list(ex.answers),
                    [{"text": h.text, "score": h.score, "passage_id": h.passage_id} for h in ph],
                    [
                        {
                            "id": h.passage_id,
                            "score": h.score,
                            "has_answer": contains_answer(h.text, ex.answers, ex.regex, answer_match),
                        }
                        for h in ps
                    ],
                    per_question,
                )
            )
        bar.update(len(batch))
    bar.close()
    regex = any(ex.regex for ex in examples)
    return EvalReport(
        system,
        results,
        top_k,
        {"top_k": top_k, "answer_match": answer_match, "regex": regex},
        has_answers=True,
        has_passages=True,
    )


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
    _check_examples(examples, top_k)
    _check_answer_match(answer_match)
    params = pipeline_top_k_params(pipeline, top_k) if params is None else params
    results: list[QuestionResult] = []
    has_answers = has_passages = False
    for ex in tqdm(examples, desc=f"eval {system}", unit="q", disable=not progress):
        start = time.perf_counter()
        output = pipeline.run(query=ex.question, params=params)
        seconds = time.perf_counter() - start
        answers = output.get("answers") or []
        documents = output.get("documents") or []
        has_answers |= "answers" in output
        has_passages |= "documents" in output
        result = QuestionResult(
            ex.qid,
            ex.question,
            list(ex.answers),
            [
                {"text": a.answer, "score": _finite(a.score), "passage_id": (a.document_ids or [None])[0]}
                for a in answers
                if a.answer
            ],
            [
                {
                    "id": d.id,
                    "score": _finite(d.score),
                    "has_answer": contains_answer(d.content, ex.answers, ex.regex, answer_match),
                }
                for d in documents[:top_k]
            ],
            seconds,
        )
        results.append(result)
        if on_result is not None:
            on_result(result)
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
    "passage_acc@1",
    "passage_acc@5",
    "passage_acc@20",
    "mrr@20",
    "p@20",
    "ms_per_question",
)


def markdown_table(reports: Sequence[EvalReport], columns: Sequence[str] = TABLE_COLUMNS) -> str:
    """One row per system; metrics a system does not produce show as '–'. Accuracies in percent."""
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


__all__ = [
    "ANSWER_MATCHES",
    "EvalReport",
    "PASSAGE_KS",
    "QAExample",
    "QuestionResult",
    "TABLE_COLUMNS",
    "contains_answer",
    "evaluate_pipeline",
    "evaluate_searcher",
    "exact_match",
    "f1_score",
    "markdown_table",
    "normalize_answer",
    "pipeline_top_k_params",
    "read_questions",
    "summarize",
]
