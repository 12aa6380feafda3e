"""Passages in, from SQuAD JSON, JSONL ``{id, title, text}`` or Python objects (streamed, never all in memory)."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._util.io import numbered_lines
from .errors import CorpusFormatError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Passage:
    """One retrievable unit of text. ``document_id`` groups passages into documents (defaults to ``id``)."""

    id: str
    text: str
    title: str = ""
    document_id: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.document_id:
            object.__setattr__(self, "document_id", self.id)


@dataclass
class CorpusStats:
    """What a reader saw: passages yielded and passages skipped for having no text."""

    passages: int = 0
    skipped_empty: int = 0


def squad_passage_id(title: str, article: int, paragraph: int) -> str:
    """The one passage id of a SQuAD paragraph: ``title-article-paragraph`` (``article-…`` when untitled).

    Readers, evaluation questions (their gold passage), training data and benchmarks all use it, so an index
    built from a SQuAD file and the questions of that file agree on ids.
    """
    return f"{title or 'article'}-{article}-{paragraph}"


def squad_paragraphs(data: Mapping[str, Any], path: str | Path = "<data>") -> Iterator[tuple[dict[str, Any], Mapping]]:
    """Each SQuAD paragraph as ``(passage record {id, document_id, title, text}, the paragraph object)``.

    Raises:
        CorpusFormatError: An article or paragraph is not shaped like SQuAD's.
    """
    for a_idx, article in enumerate(data.get("data", [])):
        if not isinstance(article, Mapping) or not isinstance(article.get("paragraphs", []), list):
            raise CorpusFormatError(f"{path}: article {a_idx} is not a SQuAD article {{title, paragraphs: [...]}}")
        title = str(article.get("title", ""))
        for p_idx, paragraph in enumerate(article.get("paragraphs", [])):
            if not isinstance(paragraph, Mapping):
                raise CorpusFormatError(f"{path}: article {a_idx} paragraph {p_idx} is not an object")
            record = {
                "id": squad_passage_id(title, a_idx, p_idx),
                "document_id": title or f"article-{a_idx}",
                "title": title,
                "text": paragraph.get("context", ""),
            }
            yield record, paragraph


def _jsonl_records(lines: Iterator[tuple[int, str]], path: Path) -> Iterator[tuple[str, Any]]:
    for line_no, line in lines:
        if not line.strip():
            continue
        yield f"{path}:{line_no}", _json_object(line, path, line_no)


def _json_object(line: str, path: Path, line_no: int) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise CorpusFormatError(f"{path}:{line_no}: not a JSON object ({exc})") from exc
    if not isinstance(record, dict):
        raise CorpusFormatError(f"{path}:{line_no}: expected a JSON object with id/title/text")
    return record


def read_corpus(source: str | Path | Iterable[Any], stats: CorpusStats | None = None) -> Iterator[Passage]:
    """Stream passages from a file path or from Python objects.

    Files: SQuAD-format JSON (``{"data": [{"title", "paragraphs": [{"context"}]}]}``, passage ids
    ``title-article-paragraph``, document id = title) or JSON lines ``{"id", "title", "text"}`` (optional
    ``document_id``, ``meta``), in UTF-8 (a byte-order mark is accepted); ``.gz`` is read transparently. Objects:
    :class:`Passage`, mappings with the JSONL keys, or plain strings (ids are their position). Passages without
    text are skipped and counted in ``stats.skipped_empty``.

    Raises:
        CorpusFormatError: The file is missing, unreadable (not gzip, truncated, not UTF-8), in neither format, or a
            record is unusable or repeats an earlier passage id; the message names the file and line (JSON lines),
            the SQuAD paragraph or the item.
    """
    stats = stats if stats is not None else CorpusStats()
    if isinstance(source, (str, Path)):
        located: Iterable[tuple[str, Any]] = _read_file(Path(source))
    else:
        located = ((f"record {position}", record) for position, record in enumerate(source))
    seen_ids: set[str] = set()
    for position, (where, record) in enumerate(located):
        passage = _to_passage(record, position, where)
        if not passage.text or not passage.text.strip():
            stats.skipped_empty += 1
            continue
        if passage.id in seen_ids:
            raise CorpusFormatError(f"{where}: duplicate passage id {passage.id!r} (an earlier passage has it)")
        seen_ids.add(passage.id)
        stats.passages += 1
        yield passage
    if stats.skipped_empty:
        logger.warning("skipped %d passages without text", stats.skipped_empty)


def read_corpora(corpora: Iterable[str | Path]) -> list[Passage]:
    """Every passage of one or more corpus files (:func:`read_corpus` formats), for building documents.

    Raises:
        CorpusFormatError: A passage id occurs more than once across the corpora.
    """
    passages = [p for corpus in corpora for p in read_corpus(corpus)]
    counts = Counter(p.id for p in passages)
    repeated = [passage_id for passage_id, n in counts.items() if n > 1]
    if repeated:
        raise CorpusFormatError(
            f"{len(repeated)} passage ids occur more than once across the corpora, e.g. {repeated[:3]}"
        )
    return passages


def _read_file(path: Path) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` of each record of a corpus file; ``where`` names the file and line (or paragraph)."""
    if not path.is_file():
        raise CorpusFormatError(f"corpus file not found: {path}")
    lines = numbered_lines(path, CorpusFormatError)
    head: list[str] = []
    first_line_no = 0
    for line_no, line in lines:
        head.append(line)
        if line.strip():
            first_line_no = line_no
            break
    if not first_line_no:
        return  # no text at all
    try:
        first = json.loads(head[-1])
    except (ValueError, RecursionError):
        first = None
    if isinstance(first, dict) and "data" not in first:  # JSON lines: streamed line by line
        yield f"{path}:{first_line_no}", first
        yield from _jsonl_records(lines, path)
        return
    head.extend(line for _, line in lines)  # one JSON document (SQuAD or a list), read whole
    text = "".join(head)
    del head
    try:
        data = json.loads(text)
    except ValueError as exc:
        where = f"{path}:{exc.lineno}" if isinstance(exc, json.JSONDecodeError) else str(path)
        raise CorpusFormatError(f"{where}: neither SQuAD JSON nor JSON lines ({exc})") from exc
    except RecursionError as exc:
        raise CorpusFormatError(f"{path}: JSON nested too deeply to be a corpus") from exc
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        for record, _ in squad_paragraphs(data, path):
            yield f"{path}: SQuAD paragraph {record['id']!r}", record
    elif isinstance(data, list):
        for item, record in enumerate(data):
            yield f"{path}: item {item}", record
    else:
        raise CorpusFormatError(f'{path}: expected SQuAD JSON ({{"data": [...]}}), a JSON list or JSON lines')


def _to_passage(record: Any, position: int, where: str) -> Passage:
    if isinstance(record, Passage):
        _check_storable(record, where)
        return record
    if isinstance(record, str):
        passage = Passage(id=str(position), text=record)
        _check_storable(passage, where)
        return passage
    if isinstance(record, Mapping):
        text = record.get("text", record.get("content", record.get("context")))
        if text is not None and not isinstance(text, str):
            raise CorpusFormatError(f"{where}: text must be a string, got {type(text).__name__}")
        meta = record.get("meta", {}) or {}
        if not isinstance(meta, Mapping):
            raise CorpusFormatError(f"{where}: meta must be a mapping, got {type(meta).__name__}")
        passage = Passage(
            id=str(record.get("id", position)),
            text=text or "",
            title=str(record.get("title", "") or ""),
            document_id=str(record.get("document_id", "") or ""),
            meta=dict(meta),
        )
        _check_storable(passage, where)
        return passage
    raise CorpusFormatError(f"{where}: expected Passage, mapping or str, got {type(record).__name__}")


def _check_storable(passage: Passage, where: str) -> None:
    """Raise CorpusFormatError unless the passage can be written as UTF-8 JSON (what an index stores)."""
    for name in ("id", "text", "title", "document_id"):
        if not isinstance(getattr(passage, name), str):
            raise CorpusFormatError(f"{where}: {name} must be a string, got {type(getattr(passage, name)).__name__}")
    if not isinstance(passage.meta, Mapping):
        raise CorpusFormatError(f"{where}: meta must be a mapping, got {type(passage.meta).__name__}")
    try:
        json.dumps(
            [passage.id, passage.text, passage.title, passage.document_id, dict(passage.meta)], ensure_ascii=False
        ).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:  # non-JSON meta values, lone surrogates in the text
        raise CorpusFormatError(f"{where} (id {passage.id[:60]!r}) cannot be stored: {exc}") from exc
