"""Question files: SQuAD JSON, DensePhrases JSON, NQ-open JSONL and CuratedTREC CSV to :class:`QAExample`."""

from __future__ import annotations

import ast
import csv
import json
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .._util.io import open_text
from ..corpus import squad_passage_id
from ..datasets import resolve_data_file, shipped_dataset_names
from ..errors import CorpusFormatError


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
            ``{question, answer}`` or a DPR ``.qa.csv`` (tab-separated, answers as a list literal); ``.gz`` ok. A
            shipped dataset's name (``squad-dev``, see :mod:`dphr_haystack.datasets`) reads its checked file.
        regex: Answers are regular expressions; by default True for files named like CuratedTREC.
        limit: Keep this many questions: the first ones, or a random sample when ``seed`` is given.
        exclude_titles: SQuAD article titles whose questions are left out (e.g. a held-out validation split).
        seed: Sample ``limit`` questions with this seed instead of taking the first ones.

    Questions without any answer or with an empty text are skipped.

    Raises:
        FileNotFoundError: No such file (nor shipped dataset).
        CorpusFormatError: The file is not in one of these formats, or a shipped dataset's file is damaged.
    """
    path = resolve_data_file(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"question file not found: {path} (or give a shipped dataset: {', '.join(shipped_dataset_names())})"
        )
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
