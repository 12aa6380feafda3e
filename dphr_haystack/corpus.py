"""Passages in, from SQuAD JSON, JSONL ``{id, title, text}``, a folder of text files, a shipped dataset's name or
Python objects (streamed, never all in memory)."""

from __future__ import annotations

import json
import logging
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._util.io import numbered_lines
from .datasets import resolve_data_file, shipped_dataset_names
from .errors import CorpusFormatError, EmptyCorpusError

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
    """What a reader saw: passages yielded, passages skipped for having no text and, for a folder, the text files
    read and those skipped as binary or not UTF-8."""

    passages: int = 0
    skipped_empty: int = 0
    files: int = 0
    skipped_files: int = 0


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
    """Stream passages from a file, a folder, a shipped dataset's name or Python objects.

    Files: SQuAD-format JSON (``{"data": [{"title", "paragraphs": [{"context"}]}]}``, passage ids
    ``title-article-paragraph``, document id = title) or JSON lines ``{"id", "title", "text"}`` (optional
    ``document_id``, ``meta``; Haystack's serialised documents ``{"id", "content", "meta": {"title"}}`` keep their
    title and ``document_id`` from ``meta``), or a JSON list of such records, in UTF-8 (a byte-order mark is
    accepted); ``.gz`` is read transparently. A folder: its ``.txt`` and ``.md`` files (:func:`read_text_folder`).
    A name of :func:`~dphr_haystack.datasets.shipped_dataset_names` (``squad-dev``) reads that shipped file.
    Objects: :class:`Passage`, mappings with the JSONL keys, or plain strings (ids are their position). Passages
    without text are skipped and counted in ``stats.skipped_empty``.

    Raises:
        CorpusFormatError: The file is missing, unreadable (not gzip, truncated, not UTF-8), in neither format, or a
            record is unusable or repeats an earlier passage id; the message names the file and line (JSON lines),
            the SQuAD paragraph or the item.
        EmptyCorpusError: A folder holds no ``.txt`` or ``.md`` file.
    """
    stats = stats if stats is not None else CorpusStats()
    if isinstance(source, (str, Path)):
        path = resolve_data_file(source)
        located: Iterable[tuple[str, Any]] = read_text_folder(path, stats) if path.is_dir() else _read_file(path)
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
        raise CorpusFormatError(
            f"corpus file not found: {path} (give a SQuAD JSON or JSON lines file, a folder of .txt/.md files, or a "
            f"shipped corpus: {', '.join(shipped_dataset_names())})"
        )
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
        passage = Passage(  # Haystack's serialised documents carry the title and group in meta
            id=str(record.get("id", position)),
            text=text or "",
            title=str(record.get("title") or meta.get("title") or ""),
            document_id=str(record.get("document_id") or meta.get("document_id") or ""),
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


# ----------------------------------------------------------------------------- folders of text files
TEXT_SUFFIXES = (".txt", ".md", ".markdown")
MARKDOWN_SUFFIXES = (".md", ".markdown")
MAX_PASSAGE_WORDS = 150
_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_ATX = re.compile(r" {0,3}(#{1,6})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*")  # a heading line: its level and its text
_LINK = re.compile(r"!?\[([^\]\n]*)\]\([^)\n]*\)")
_CODE = re.compile(r"`+([^`\n]+?)`+")
_BOLD = re.compile(r"\*\*(\S(?:.*?\S)?)\*\*")
_FENCE = re.compile(r" {0,3}(?:```|~~~)")
_FRONT_MATTER = re.compile(r"---[ \t]*\n(.*?\n)---[ \t]*(?:\n|$)", re.DOTALL)
_FRONT_TITLE = re.compile(r"^title:[ \t]*(.+?)[ \t]*$", re.MULTILINE)


def text_files(folder: Path) -> list[Path]:
    """The ``.txt`` and ``.md`` files under ``folder``, recursively, ordered by their relative paths; hidden files
    and folders (names starting with a dot) are left out, symbolic links to folders are not followed."""
    found: list[Path] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found.extend(Path(root) / f for f in files if not f.startswith(".") and f.lower().endswith(TEXT_SUFFIXES))
    return sorted(found, key=lambda p: p.relative_to(folder).parts)


def read_text_folder(folder: str | Path, stats: CorpusStats | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, passage record)`` of every passage of the ``.txt`` and ``.md`` files of a folder.

    Files are read in :func:`text_files` order and split by :func:`split_passages`. A passage's id is the file's
    path relative to ``folder`` and its number in the file (``guide/install.md#0``), its document id that path,
    its title the file's first ``# heading`` (Markdown; else a front-matter ``title:``) or the file name without
    its extension, and its ``meta`` ``{"name": relative path}``. Binary files and files that are not UTF-8 are
    skipped and counted in ``stats.skipped_files`` (one warning names a few of them).

    Raises:
        EmptyCorpusError: The folder holds no ``.txt`` or ``.md`` file.
        CorpusFormatError: A file cannot be read.
    """
    folder = Path(folder)
    stats = stats if stats is not None else CorpusStats()
    files = text_files(folder)
    if not files:
        raise EmptyCorpusError(
            f"{folder}: no .txt or .md files in this folder or below it (hidden files and folders are skipped)"
        )
    skipped: list[str] = []
    for path in files:
        relative = path.relative_to(folder).as_posix()
        text = _decode_text(path)
        if text is None:
            skipped.append(relative)
            stats.skipped_files += 1
            continue
        stats.files += 1
        markdown = path.suffix.lower() in MARKDOWN_SUFFIXES
        title = ""
        if markdown:
            text, title = _front_matter(text)
            title = markdown_title(text) or title
        for number, passage in enumerate(split_passages(text, markdown=markdown)):
            record = {
                "id": f"{relative}#{number}",
                "document_id": relative,
                "title": title or path.stem,
                "text": passage,
                "meta": {"name": relative},
            }
            yield f"{path}: passage {number}", record
    if skipped:
        logger.warning("skipped %d files that are binary or not UTF-8 text, e.g. %s", len(skipped), skipped[:3])


def split_passages(text: str, max_words: int = MAX_PASSAGE_WORDS, markdown: bool = False) -> list[str]:
    """``text`` as passages of at most ``max_words`` words, cut at blank lines, then at sentence ends.

    Paragraphs (text between blank lines) are packed together while the passage stays within ``max_words``; a
    longer paragraph is cut at sentence ends (``.``, ``!`` or ``?`` and a space), and a longer sentence every
    ``max_words`` words. Paragraphs of one passage are joined by a blank line, sentences of one paragraph by a
    space. With ``markdown`` the text is read as Markdown (:func:`markdown_blocks`): a heading starts a new passage.

    Example:
        >>> split_passages("One two.\\n\\nThree four five. Six.", max_words=3)
        ['One two.', 'Three four five.', 'Six.']
    """
    if markdown:
        blocks = markdown_blocks(text)
    else:
        blocks = [(block.strip(), False) for block in _BLANK_LINE.split(text) if block.strip()]
    passages: list[str] = []
    current: list[list[str]] = []  # paragraphs of the passage being built, each a list of sentences
    count = 0
    for block, new_section in blocks:
        new_paragraph = True
        for piece in _pieces(block, max_words):
            words = len(piece.split())
            if current and (new_section or count + words > max_words):
                passages.append(_join(current))
                current, count = [], 0
            if new_paragraph or not current:
                current.append([piece])
            else:
                current[-1].append(piece)
            count += words
            new_section = new_paragraph = False
    if current:
        passages.append(_join(current))
    return passages


def markdown_blocks(text: str) -> list[tuple[str, bool]]:
    """The paragraphs of a Markdown text as plain text, each with whether it starts with a heading.

    A heading keeps its words without the ``#`` marks; links and images keep their text, inline code and bold
    lose their marks. Fenced code blocks (between ``` or ~~~ lines) stay one block, as written, without the fence
    lines.
    """
    blocks: list[tuple[str, bool]] = []
    lines: list[str] = []
    heading = fenced = False
    for line in [*text.split("\n"), ""]:
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            lines.append(line)
            continue
        match = _ATX.fullmatch(line.rstrip())
        if match or not line.strip():  # a heading or a blank line ends the block before it
            block = "\n".join(lines).strip()
            if block:
                blocks.append((block, heading))
            lines, heading = [], match is not None
            if match is None:
                continue
            line = match.group(2)
        lines.append(_BOLD.sub(r"\1", _CODE.sub(r"\1", _LINK.sub(r"\1", line))))
    return blocks


def markdown_title(text: str) -> str:
    """The text of the first level-1 ``# heading`` of a Markdown text (not inside a fenced code block), or ""."""
    fenced = False
    for line in text.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and (match := _ATX.fullmatch(line.rstrip())) and match.group(1) == "#":
            return match.group(2).strip()
    return ""


def _front_matter(text: str) -> tuple[str, str]:
    """A Markdown text without its leading YAML front matter (``---`` lines), and the ``title:`` it gave ("")."""
    match = _FRONT_MATTER.match(text)
    if match is None:
        return text, ""
    title = _FRONT_TITLE.search(match.group(1))
    return text[match.end() :], title.group(1).strip("\"' ") if title else ""


def _pieces(block: str, max_words: int) -> list[str]:
    """A paragraph as itself when short enough, else as its sentences, each cut every ``max_words`` words."""
    if len(block.split()) <= max_words:
        return [block]
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(block):
        words = sentence.split()
        pieces.extend(" ".join(words[i : i + max_words]) for i in range(0, len(words), max_words))
    return pieces


def _join(paragraphs: list[list[str]]) -> str:
    return "\n\n".join(" ".join(sentences) for sentences in paragraphs)


def _decode_text(path: Path) -> str | None:
    """A file's text with ``\\n`` line ends (a byte-order mark dropped), or None for a binary or non-UTF-8 file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CorpusFormatError(f"{path}: cannot read the file ({exc})") from exc
    if b"\0" in data:
        return None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    return text.replace("\r\n", "\n").replace("\r", "\n")
