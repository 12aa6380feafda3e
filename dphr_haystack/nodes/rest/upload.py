"""``POST /file-upload``: Haystack 1.x's upload form, indexing files with the served indexing pipeline.

The form: ``files`` (one or more), ``meta`` (a JSON object given to every file's documents, which also get
``name``, the file name), ``additional_params`` (a JSON object of the indexing pipeline's ``params``), the
converter's ``remove_numeric_tables`` / ``valid_languages`` and the PreProcessor's ``clean_*`` / ``split_*``
fields; ``?keep_files=true`` keeps the files in ``FILE_UPLOAD_PATH`` after indexing. The answer is
``{"files", "documents_added", "documents_total", "file_reports"}``, one report per file: how it was read
(``encoding``), its ``passages``, the ``documents_added`` of them, those ``already_stored`` and those ``repeated``
(the same passage earlier in the upload), with ``notes`` saying why a passage was not added.

Everything that can refuse an upload is checked before anything is encoded (:mod:`.upload_checks`): file names
(UnsafePathError, 400), empty files (400), files that are not text (415), the form's JSON and parameters (400), and
passages over ``DPHR_MAX_UPLOAD_PASSAGE_CHARS`` characters (413, in the text and after the PreProcessor); one
refused file refuses the upload. Accepted files are indexed by :mod:`.upload_indexing`: a passage repeated in the
upload is stored once, a passage already stored is left as stored, with its meta (delete it first to replace it).
A file saved for an upload is removed again unless ``keep_files``; uploads run one at a time.
"""

from __future__ import annotations

import shutil
import threading
import uuid
from pathlib import Path
from typing import Any

from fastapi import FastAPI, File, Form, HTTPException, UploadFile
from haystack import Pipeline
from haystack.nodes import BaseConverter, TextConverter

from ..._util.nofollow import open_no_follow
from ...errors import NotTextError, UnsafePathError
from .schema import UploadResponse
from .served import ServedPipelines
from .upload_checks import (
    check_passage_lengths,
    check_text_type,
    decode_upload,
    json_object,
    upload_params,
)
from .upload_indexing import FileReport, indexing_stages, run_in_stages, run_whole

MAX_NAME_BYTES = 200  # with the 33-character unique prefix, within every file system's 255-byte name limit


class UploadReport(UploadResponse):
    file_reports: list[FileReport]


def check_upload_name(name: str | None) -> str:
    """An uploaded file's name when it is one plain file name (no directory part, not ``.`` or ``..``)."""
    if not name or name in (".", "..") or any(char in name for char in "/\\\x00"):
        raise UnsafePathError(f"upload file name {name!r:.80} is not a plain file name")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise UnsafePathError(f"upload file name {name[:40]!r}... is over {MAX_NAME_BYTES} bytes")
    return name


def _save(upload: UploadFile, name: str, folder: Path) -> Path:
    path = folder / f"{uuid.uuid4().hex}_{name}"
    with open_no_follow(path, "wb") as handle:
        shutil.copyfileobj(upload.file, handle)
    return path


def _form_params(**fields: Any) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if value is not None}


def _text_converters(pipeline: Pipeline) -> list[BaseConverter] | None:
    """The pipeline's converters when all of them read text (the server then decodes uploads), else None."""
    converters = pipeline.get_nodes_by_class(BaseConverter)
    return converters if converters and all(isinstance(c, TextConverter) for c in converters) else None


def add_upload_route(app: FastAPI, served: ServedPipelines, folder: Path, max_passage_chars: int) -> None:
    """Add ``POST /file-upload`` (see the module docstring) to ``app``."""
    one_at_a_time = threading.Lock()
    stages = indexing_stages(served.indexing) if served.indexing is not None else None

    @app.post("/file-upload", response_model=UploadReport, tags=["file-upload"])
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
        saved: list[Path] = []
        converted: list[Path] = []
        indexed = False
        try:
            meta_form = json_object("meta", meta)
            converter_form = _form_params(remove_numeric_tables=remove_numeric_tables, valid_languages=valid_languages)
            splitter_form = _form_params(
                clean_whitespace=clean_whitespace,
                clean_empty_lines=clean_empty_lines,
                clean_header_footer=clean_header_footer,
                split_by=split_by,
                split_length=split_length,
                split_overlap=split_overlap,
                split_respect_sentence_boundary=split_respect_sentence_boundary,
            )
            params = upload_params(
                pipeline, json_object("additional_params", additional_params), converter_form, splitter_form
            )
            text_converters = _text_converters(pipeline)
            reports: list[FileReport] = []
            inputs: list[Path] = []
            for upload in files:
                reports.append(
                    _receive(upload, folder, text_converters is not None, max_passage_chars, saved, converted)
                )
                inputs.append(converted[-1] if reports[-1].encoding else saved[-1])
            metas = [{**meta_form, "name": report.file} for report in reports]
            for converter in text_converters or []:
                params[converter.name] = {**params.get(converter.name, {}), "encoding": "utf-8"}
            store = pipeline.get_document_store() or served.document_store
            if stages is not None and store is not None:
                after, added = run_in_stages(
                    stages, store, inputs, metas, params, reports, max_passage_chars, one_at_a_time
                )
            else:
                after, added = run_whole(pipeline, store, inputs, metas, params, reports, one_at_a_time)
            indexed = True
        except NotTextError as exc:
            raise HTTPException(status_code=415, detail=f"{type(exc).__name__}: {exc}") from exc
        finally:
            for path in converted if indexed and keep_files else saved + converted:
                path.unlink(missing_ok=True)
        return {
            "files": [u.filename or "" for u in files],
            "documents_added": added,
            "documents_total": after,
            "file_reports": reports,
        }


def _receive(
    upload: UploadFile, folder: Path, decode: bool, limit: int, saved: list[Path], converted: list[Path]
) -> FileReport:
    """Save one uploaded file (appended to ``saved``) and check it; with ``decode``, its text is read and written
    as UTF-8 beside it (appended to ``converted``) for the converter."""
    try:
        name = check_upload_name(upload.filename)
        if decode:
            check_text_type(name, upload.content_type)
        saved.append(_save(upload, name, folder))
    finally:
        upload.file.close()
    if not decode:
        _check_other_file(saved[-1], name, limit)
        return FileReport(file=name)
    text = decode_upload(saved[-1].read_bytes(), name)
    check_passage_lengths(text.text, name, limit)
    converted.append(saved[-1].with_name(saved[-1].name + ".utf-8"))
    with open_no_follow(converted[-1], "wb") as handle:
        handle.write(text.text.encode("utf-8"))
    return FileReport(file=name, encoding=text.encoding, notes=text.notes)


def _check_other_file(path: Path, name: str, limit: int) -> None:
    """A file left to a converter other than TextConverter: refused when empty or, as UTF-8, over the bound."""
    data = path.read_bytes()
    if not data.strip():
        decode_upload(data, name)  # raises EmptyCorpusError
    try:
        check_passage_lengths(data.decode("utf-8"), name, limit)
    except UnicodeDecodeError:
        return


__all__ = [
    "MAX_NAME_BYTES",
    "UploadReport",
    "add_upload_route",
    "check_upload_name",
    "json_object",
]
