"""What ``/file-upload`` checks before it indexes anything: the form's JSON fields, the parameters for the indexing
pipeline's nodes, and that each uploaded file is text (and in which encoding).

* Text: an uploaded file is read as UTF-8 (a byte-order mark dropped); when it is not UTF-8, as Windows-1252
  (cp1252, Latin-1's printable characters and more), and the upload's report says so. A file with NUL bytes,
  control characters in more than 1% of its characters, bytes of neither encoding, a binary content type
  (``image/*``, ``application/pdf``...) or a known binary extension (``.png``, ``.pdf``, ``.zip``...) is refused
  with :class:`NotTextError` (415), naming the file. Characters are never dropped. (This holds where every
  converter of the indexing pipeline is a TextConverter, as in the shipped one; other converters get the files as
  uploaded.)
* Parameters: ``additional_params`` names nodes of the indexing pipeline only, each with a JSON object of the
  parameters an upload uses: a converter's ``remove_numeric_tables`` / ``valid_languages`` / ``known_ligatures`` /
  ``id_hash_keys``, a PreProcessor's ``clean_*`` / ``remove_substrings`` / ``split_*`` / ``id_hash_keys``. A
  retriever or a document store takes none (``top_k`` or ``filters`` mean nothing to an upload, which only encodes
  and writes), nor does any node take ``encoding`` (the server decodes uploads itself). Split values are checked
  against the PreProcessor's own: ``split_by`` one of word, sentence, passage, page; ``split_length`` from 1 to
  100,000; ``0 <= split_overlap < split_length``; ``split_respect_sentence_boundary`` only with ``split_by: word``.
  Every refusal is InvalidParameterError (400) naming the parameter.
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from haystack import Pipeline
from haystack.document_stores import BaseDocumentStore
from haystack.nodes import BaseConverter, BaseRetriever, PreProcessor

from ...errors import EmptyCorpusError, InputTooLargeError, InvalidParameterError, NotTextError
from .settings import MAX_PASSAGE_CHARS_ENV

MAX_META_DEPTH = 16
MAX_SPLIT_LENGTH = 100_000  # units per passage; far past any passage an upload may hold
MAX_CONTROL_SHARE = 0.01
SPLIT_UNITS = ("word", "sentence", "passage", "page")  # "token" needs a tokenizer, which a form cannot give
BINARY_SUFFIXES = frozenset(
    ".png .jpg .jpeg .gif .bmp .tif .tiff .webp .ico .heic .pdf .zip .gz .tgz .bz2 .xz .7z .rar .tar .zst .doc "
    ".docx .xls .xlsx .ppt .pptx .odt .ods .odp .epub .exe .dll .so .dylib .bin .class .jar .pyc .o .a .wasm "
    ".mp3 .mp4 .m4a .wav .flac .ogg .avi .mov .mkv .webm .ttf .otf .woff .woff2 .sqlite .sqlite3 .db .npy .npz "
    ".pt .pth .safetensors .onnx .parquet .pkl .pickle".split()
)
BINARY_TYPE_PREFIXES = ("image/", "audio/", "video/", "font/")
BINARY_TYPES = frozenset(
    "application/pdf application/zip application/gzip application/x-gzip application/x-tar "
    "application/x-7z-compressed application/x-rar-compressed application/x-bzip2 application/x-xz "
    "application/msword application/vnd.ms-excel "
    "application/vnd.ms-powerpoint application/x-executable application/x-sharedlib application/java-archive "
    "application/wasm application/x-sqlite3".split()
)
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")
_SERVER_DECODES = "the server decodes uploads itself (UTF-8, else Windows-1252)"
_PARAMS_BY_KIND: dict[type, frozenset[str]] = {
    BaseConverter: frozenset({"remove_numeric_tables", "valid_languages", "known_ligatures", "id_hash_keys"}),
    PreProcessor: frozenset(
        {
            "clean_whitespace",
            "clean_header_footer",
            "clean_empty_lines",
            "remove_substrings",
            "split_by",
            "split_length",
            "split_overlap",
            "split_respect_sentence_boundary",
            "id_hash_keys",
        }
    ),
    BaseRetriever: frozenset(),
    BaseDocumentStore: frozenset(),
}
_INPUTS = frozenset({"root_node", "query", "queries", "file_paths", "documents", "labels", "meta", "params", "debug"})
_BOOLS = ("clean_whitespace", "clean_header_footer", "clean_empty_lines", "split_respect_sentence_boundary")


@dataclass
class UploadedText:
    """An uploaded file's text, the encoding it was read in, and what the upload's report says about it."""

    text: str
    encoding: str
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- form fields
def _depth(value: Any) -> int:
    """How deeply ``value`` nests lists and objects (iteratively: a deep value never recurses)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in item)
    return deepest


def json_object(name: str, text: str | None) -> dict[str, Any]:
    """The JSON object a form field holds ({} for null or nothing), nested at most ``MAX_META_DEPTH`` deep."""
    try:
        value = json.loads(text or "null")
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise InvalidParameterError(f"{name} is not JSON: {reason}") from exc
    if value is not None and not isinstance(value, dict):
        raise InvalidParameterError(f"{name} must be a JSON object or null, not {type(value).__name__}")
    if _depth(value) > MAX_META_DEPTH:
        raise InvalidParameterError(f"{name} nests objects or lists more than {MAX_META_DEPTH} deep")
    return value or {}


# ----------------------------------------------------------------------------- files
def check_text_type(name: str, content_type: str | None) -> None:
    """Refuse a file whose extension or declared content type is a binary format (NotTextError)."""
    suffix = PurePath(name).suffix.lower()
    declared = (content_type or "").split(";")[0].strip().lower()
    if declared in BINARY_TYPES or declared.startswith(BINARY_TYPE_PREFIXES):
        raise NotTextError(f"{name!r} is not text (content type {declared}); upload UTF-8 text files")
    if suffix in BINARY_SUFFIXES:
        raise NotTextError(f"{name!r} is not text (a {suffix} file); upload UTF-8 text files")


def decode_upload(data: bytes, name: str) -> UploadedText:
    """An uploaded file's text: UTF-8 (a byte-order mark dropped), else Windows-1252 with a note saying so.

    Raises:
        EmptyCorpusError: The file holds no text.
        NotTextError: NUL bytes, too many control characters, or bytes of neither encoding.
    """
    if b"\0" in data:
        raise NotTextError(f"{name!r} is not text (it holds NUL bytes: a binary file?); upload UTF-8 text files")
    notes: list[str] = []
    try:
        text, encoding = data.decode("utf-8-sig"), "utf-8"
    except UnicodeDecodeError as exc:
        where = f"byte 0x{data[exc.start]:02x} at offset {exc.start}"
        try:
            text, encoding = data.decode("cp1252"), "cp1252"
        except UnicodeDecodeError as again:
            raise NotTextError(
                f"{name!r} is neither UTF-8 text (invalid {where}) nor Windows-1252 text (undefined byte "
                f"0x{data[again.start]:02x} at offset {again.start}); save it as UTF-8"
            ) from again
        notes.append(f"not UTF-8 (invalid {where}): read as Windows-1252 (cp1252, which includes Latin-1)")
    if not text.strip():
        raise EmptyCorpusError(f"uploaded file {name!r} is empty")
    controls = len(_CONTROL.findall(text))
    if controls > MAX_CONTROL_SHARE * len(text):
        raise NotTextError(f"{name!r} is not text ({controls} control characters in {len(text)}): a binary file?")
    return UploadedText(text, encoding, notes)


def check_passage_lengths(text: str, name: str, limit: int) -> None:
    """Refuse (413) a text with a passage (text between blank lines) over ``limit`` characters."""
    longest = max(len(passage) for passage in _BLANK_LINE.split(text.replace("\r\n", "\n")))
    if longest > limit:
        raise InputTooLargeError(
            f"{name!r} has a passage of {longest} characters, over the server's {MAX_PASSAGE_CHARS_ENV}={limit} "
            "(separate passages by blank lines)"
        )


# ----------------------------------------------------------------------------- parameters
def _allowed(node: Any) -> frozenset[str]:
    for kind, names in _PARAMS_BY_KIND.items():
        if isinstance(node, kind):
            return names
    return frozenset(inspect.signature(node.run).parameters) - _INPUTS - {"encoding"}


def _check_type(node: str, name: str, value: Any) -> None:
    def fail(expected: str) -> None:
        raise InvalidParameterError(f"{node}.{name} must be {expected}, not {json.dumps(value)[:60]}")

    if name in _BOOLS or name == "remove_numeric_tables":
        if not isinstance(value, bool):
            fail("true or false")
    elif name in ("split_length", "split_overlap"):
        if isinstance(value, bool) or not isinstance(value, int):
            fail("a whole number")
    elif name in ("valid_languages", "remove_substrings", "id_hash_keys"):
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            fail("a list of strings")
    elif name == "known_ligatures":
        if not isinstance(value, dict) or not all(isinstance(item, str) for item in value.values()):
            fail("an object of strings")


def _check_splits(name: str, node: PreProcessor, given: dict[str, Any]) -> None:
    """The split a PreProcessor would make with ``given`` over its own settings, refused when it cannot work."""
    split_by = given.get("split_by", node.split_by)
    length = given.get("split_length", node.split_length)
    overlap = given.get("split_overlap", node.split_overlap) or 0
    if split_by is not None and split_by not in SPLIT_UNITS:
        raise InvalidParameterError(f"{name}.split_by {split_by!r} is not one of {', '.join(SPLIT_UNITS)}")
    if split_by is not None and (length is None or not 1 <= length <= MAX_SPLIT_LENGTH):
        raise InvalidParameterError(f"{name}.split_length must be from 1 to {MAX_SPLIT_LENGTH:,}, not {length}")
    if split_by is not None and not 0 <= overlap < length:
        raise InvalidParameterError(
            f"{name}.split_overlap must be at least 0 and below split_length ({length}), not {overlap}"
        )
    if given.get("split_respect_sentence_boundary", node.split_respect_sentence_boundary) and split_by != "word":
        raise InvalidParameterError(
            f"{name}.split_respect_sentence_boundary works with split_by word only, not {split_by!r}"
        )


def upload_params(
    pipeline: Pipeline, params: dict[str, Any], converter: dict[str, Any], splitter: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """The checked ``params`` of an upload (see the module docstring): ``additional_params`` with the form's
    converter and PreProcessor fields over it, each node's under its name."""
    nodes = {name: pipeline.get_node(name) for name in pipeline.graph.nodes if name != pipeline.root_node}
    checked: dict[str, dict[str, Any]] = {}
    for name, given in params.items():
        if name not in nodes:
            raise InvalidParameterError(
                f"additional_params: {name!r} is not a node of the indexing pipeline (its nodes: "
                f"{', '.join(nodes)}); give parameters as {{node name: {{parameter: value}}}}"
            )
        if not isinstance(given, dict):
            raise InvalidParameterError(f"additional_params.{name} must be a JSON object, not {type(given).__name__}")
        checked[name] = dict(given)
    for name, node in nodes.items():
        form = converter if isinstance(node, BaseConverter) else splitter if isinstance(node, PreProcessor) else {}
        if form:
            checked[name] = {**checked.get(name, {}), **form}
    for name, given in checked.items():
        allowed = _allowed(nodes[name])
        for key, value in given.items():
            if key not in allowed:
                why = _SERVER_DECODES if key == "encoding" else "it means nothing to an upload"
                takes = ", ".join(sorted(allowed)) or "none"
                raise InvalidParameterError(
                    f"{name}.{key} is not an upload parameter ({why}); {name} takes {takes} in an upload"
                )
            _check_type(name, key, value)
        if isinstance(nodes[name], PreProcessor):
            _check_splits(name, nodes[name], given)
    return checked


__all__ = [
    "BINARY_SUFFIXES",
    "MAX_META_DEPTH",
    "UploadedText",
    "check_passage_lengths",
    "check_text_type",
    "decode_upload",
    "json_object",
    "upload_params",
]
