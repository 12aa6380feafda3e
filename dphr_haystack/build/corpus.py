"""Passages in, from SQuAD JSON, JSONL ``{id, title, text}`` or Python objects (streamed, never all in memory)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .._util.io import open_text
from ..errors import CorpusFormatError

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


def _squad_passages(data: Mapping[str, Any], path: Path) -> Iterator[dict[str, Any]]:
    for record, _ in squad_paragraphs(data, path):
        yield record


def _jsonl_records(handle: IO[str], path: Path) -> Iterator[dict[str, Any]]:
    for line_no, line in enumerate(handle, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise CorpusFormatError(f"{path}:{line_no}: not a JSON object ({exc})") from exc
        if not isinstance(record, dict):
            raise CorpusFormatError(f"{path}:{line_no}: expected a JSON object with id/title/text")
        yield record


def read_corpus(source: str | Path | Iterable[Any], stats: CorpusStats | None = None) -> Iterator[Passage]:
    """Stream passages from a file path or from Python objects.

    Files: SQuAD-format JSON (``{"data": [{"title", "paragraphs": [{"context"}]}]}``, passage ids
    ``title-article-paragraph``, document id = title) or JSON lines ``{"id", "title", "text"}`` (optional
    ``document_id``, ``meta``); ``.gz`` is read transparently. Objects: :class:`Passage`, mappings with the
    JSONL keys, or plain strings (ids are their position). Passages without text are skipped and counted
    in ``stats.skipped_empty``.
    """
    stats = stats if stats is not None else CorpusStats()
    if isinstance(source, (str, Path)):
        records: Iterable[Any] = _read_file(Path(source))
    else:
        records = source
    seen_ids: set[str] = set()
    for position, record in enumerate(records):
        passage = _to_passage(record, position)
        if not passage.text or not passage.text.strip():
            stats.skipped_empty += 1
            continue
        if passage.id in seen_ids:
            raise CorpusFormatError(f"duplicate passage id {passage.id!r} in the corpus")
        seen_ids.add(passage.id)
        stats.passages += 1
        yield passage
    if stats.skipped_empty:
        logger.warning("skipped %d passages without text", stats.skipped_empty)


def _read_file(path: Path) -> Iterator[Any]:
    if not path.is_file():
        raise CorpusFormatError(f"corpus file not found: {path}")
    with open_text(path) as handle:
        first_line = handle.readline()
        while first_line and not first_line.strip():
            first_line = handle.readline()
        if not first_line:
            return
        handle.seek(0)
        try:
            first = json.loads(first_line)
        except ValueError:
            first = None
        if isinstance(first, dict) and "data" not in first:
            yield from _jsonl_records(handle, path)  # JSON lines: streamed line by line
            return
        try:
            data = json.load(handle)
        except ValueError as exc:
            raise CorpusFormatError(f"{path}: neither SQuAD JSON nor JSON lines ({exc})") from exc
        if isinstance(data, dict) and isinstance(data.get("data"), list):
            yield from _squad_passages(data, path)
        elif isinstance(data, list):
            yield from data
        else:
            raise CorpusFormatError(f'{path}: expected SQuAD JSON ({{"data": [...]}}), a JSON list or JSON lines')


def _to_passage(record: Any, position: int) -> Passage:
    if isinstance(record, Passage):
        _check_storable(record, position)
        return record
    if isinstance(record, str):
        passage = Passage(id=str(position), text=record)
        _check_storable(passage, position)
        return passage
    if isinstance(record, Mapping):
        text = record.get("text", record.get("content", record.get("context")))
        if text is not None and not isinstance(text, str):
            raise CorpusFormatError(f"record {position}: text must be a string, got {type(text).__name__}")
        meta = record.get("meta", {}) or {}
        if not isinstance(meta, Mapping):
            raise CorpusFormatError(f"record {position}: meta must be a mapping, got {type(meta).__name__}")
        passage = Passage(
            id=str(record.get("id", position)),
            text=text or "",
            title=str(record.get("title", "") or ""),
            document_id=str(record.get("document_id", "") or ""),
            meta=dict(meta),
        )
        _check_storable(passage, position)
        return passage
    raise CorpusFormatError(f"record {position}: expected Passage, mapping or str, got {type(record).__name__}")


def _check_storable(passage: Passage, position: int) -> None:
    """Raise CorpusFormatError unless the passage can be written as UTF-8 JSON (what an index stores)."""
    for name in ("id", "text", "title", "document_id"):
        if not isinstance(getattr(passage, name), str):
            raise CorpusFormatError(
                f"record {position}: {name} must be a string, got {type(getattr(passage, name)).__name__}"
            )
    if not isinstance(passage.meta, Mapping):
        raise CorpusFormatError(f"record {position}: meta must be a mapping, got {type(passage.meta).__name__}")
    try:
        json.dumps(
            [passage.id, passage.text, passage.title, passage.document_id, dict(passage.meta)], ensure_ascii=False
        ).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:  # non-JSON meta values, lone surrogates in the text
        raise CorpusFormatError(f"record {position} (id {passage.id[:60]!r}) cannot be stored: {exc}") from exc
