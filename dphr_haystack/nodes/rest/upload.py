"""``POST /file-upload``: Haystack 1.x's upload form, indexing files with the served indexing pipeline.

The form: ``files`` (one or more), ``meta`` (a JSON object given to every file's documents, which also get
``name``, the file name), ``additional_params`` (a JSON object of the indexing pipeline's ``params``), the
converter's ``remove_numeric_tables`` / ``valid_languages`` and the PreProcessor's ``clean_*`` / ``split_*``
fields; ``?keep_files=true`` keeps the files in ``FILE_UPLOAD_PATH`` after indexing. The answer is
``{"files", "documents_added", "documents_total"}``.

Refused before anything is indexed: a file name that is not one plain name (UnsafePathError, 400), an empty file
(EmptyCorpusError, 400), ``meta`` or ``additional_params`` that are not JSON objects (InvalidParameterError, 400),
and a UTF-8 text file with a passage (text between blank lines) longer than ``DPHR_MAX_UPLOAD_PASSAGE_CHARS``
characters (413: encoding one such passage takes minutes and gigabytes). A file saved for a failed upload is
removed again. Uploads run one at a time (the store writes one at a time anyway).
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import uuid
from pathlib import Path
from typing import Any

from fastapi import FastAPI, File, Form, HTTPException, UploadFile
from haystack.nodes import BaseConverter, PreProcessor

from ..._util.nofollow import open_no_follow
from ...errors import EmptyCorpusError, InputTooLargeError, InvalidParameterError, UnsafePathError
from .schema import UploadResponse
from .served import ServedPipelines
from .settings import MAX_PASSAGE_CHARS_ENV

MAX_NAME_BYTES = 200  # with the 33-character unique prefix, within every file system's 255-byte name limit
_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")


def check_upload_name(name: str | None) -> str:
    """An uploaded file's name when it is one plain file name (no directory part, not ``.`` or ``..``)."""
    if not name or name in (".", "..") or any(char in name for char in "/\\\x00"):
        raise UnsafePathError(f"upload file name {name!r:.80} is not a plain file name")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise UnsafePathError(f"upload file name {name[:40]!r}... is over {MAX_NAME_BYTES} bytes")
    return name


def json_object(field: str, text: str | None) -> dict[str, Any]:
    """The JSON object a form field holds ({} for null or nothing)."""
    try:
        value = json.loads(text or "null")
    except ValueError as exc:
        raise InvalidParameterError(f"{field} is not JSON: {exc}") from exc
    if value is not None and not isinstance(value, dict):
        raise InvalidParameterError(f"{field} must be a JSON object or null, not {type(value).__name__}")
    return value or {}


def check_passages(path: Path, name: str, limit: int) -> None:
    """Refuse an empty file, and a UTF-8 text file with a passage (text between blank lines) over ``limit``
    characters. Other files are left to their converter."""
    data = path.read_bytes()
    if not data.strip():
        raise EmptyCorpusError(f"uploaded file {name!r} is empty")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    longest = max(len(passage) for passage in _BLANK_LINE.split(text.replace("\r\n", "\n")))
    if longest > limit:
        raise InputTooLargeError(
            f"{name!r} has a passage of {longest} characters, over the server's {MAX_PASSAGE_CHARS_ENV}={limit} "
            "(separate passages by blank lines)"
        )


def _save(upload: UploadFile, folder: Path) -> Path:
    name = check_upload_name(upload.filename)
    path = folder / f"{uuid.uuid4().hex}_{name}"
    with open_no_follow(path, "wb") as handle:
        shutil.copyfileobj(upload.file, handle)
    return path


def _form_params(**fields: Any) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if value is not None}


def add_upload_route(app: FastAPI, served: ServedPipelines, folder: Path, max_passage_chars: int) -> None:
    """Add ``POST /file-upload`` (see the module docstring) to ``app``."""
    one_at_a_time = threading.Lock()

    @app.post("/file-upload", response_model=UploadResponse, tags=["file-upload"])
    def upload_file(
        files: list[UploadFile] = File(...),  # noqa: B008  (FastAPI's way of declaring form parts)
        meta: str | None = Form("null"),  # noqa: B008
        additional_params: str | None = Form("null"),  # noqa: B008
        remove_numeric_tables: bool | None = Form(None),  # noqa: B008
        valid_languages: list[str] | None = Form(None),  # noqa: B008
        clean_whitespace: bool | None = Form(None),  # noqa: B008
        clean_empty_lines: bool | None = Form(None),  # noqa: B008
        clean_header_footer: bool | None = Form(None),  # noqa: B008
        split_by: str | None = Form(None),  # noqa: B008
        split_length: int | None = Form(None),  # noqa: B008
        split_overlap: int | None = Form(None),  # noqa: B008
        split_respect_sentence_boundary: bool | None = Form(None),  # noqa: B008
        keep_files: bool = False,
    ) -> dict[str, Any]:
        """Index uploaded files with the indexing pipeline (see the module docstring)."""
        pipeline = served.indexing
        if pipeline is None:
            raise HTTPException(status_code=501, detail="the pipeline file declares no indexing pipeline")
        converter_params = _form_params(remove_numeric_tables=remove_numeric_tables, valid_languages=valid_languages)
        splitter_params = _form_params(
            clean_whitespace=clean_whitespace,
            clean_empty_lines=clean_empty_lines,
            clean_header_footer=clean_header_footer,
            split_by=split_by,
            split_length=split_length,
            split_overlap=split_overlap,
            split_respect_sentence_boundary=split_respect_sentence_boundary,
        )
        saved: list[Path] = []
        indexed = False
        try:
            meta_form = json_object("meta", meta)
            params = json_object("additional_params", additional_params)
            metas = []
            for upload in files:
                try:
                    saved.append(_save(upload, folder))
                finally:
                    upload.file.close()
                check_passages(saved[-1], upload.filename or "", max_passage_chars)
                metas.append({**meta_form, "name": upload.filename})
            for node in pipeline.get_nodes_by_class(BaseConverter):
                params[node.name] = {**params.get(node.name, {}), **converter_params}
            for node in pipeline.get_nodes_by_class(PreProcessor):
                params[node.name] = {**params.get(node.name, {}), **splitter_params}
            store = pipeline.get_document_store() or served.document_store
            with one_at_a_time:
                before = store.get_document_count() if store is not None else 0
                pipeline.run(file_paths=saved, meta=metas, params=params)
                after = store.get_document_count() if store is not None else 0
            indexed = True
        finally:
            if not (indexed and keep_files):
                for path in saved:
                    path.unlink(missing_ok=True)
        return {
            "files": [u.filename or "" for u in files],
            "documents_added": after - before,
            "documents_total": after,
        }


__all__ = ["MAX_NAME_BYTES", "add_upload_route", "check_passages", "check_upload_name", "json_object"]
