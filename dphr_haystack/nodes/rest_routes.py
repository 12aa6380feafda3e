"""The REST app's ``/query`` and ``/file-upload`` endpoints, checked versions of Haystack's own.

``/query`` refuses an empty query and ``params`` that name no node or global parameter of the query pipeline, or
a parameter the named node does not take (InvalidQueryError / InvalidParameterError: 400), then runs Haystack's
own endpoint. ``/file-upload`` takes the same form as Haystack's; it refuses a file name that is not one plain
name (UnsafePathError), an empty file (EmptyCorpusError), ``meta`` or ``additional_params`` that are not JSON
objects (InvalidParameterError), and a UTF-8 text file with a passage (text between blank lines) longer than
``DPHR_MAX_UPLOAD_PASSAGE_CHARS`` characters (413, before anything is encoded); a file it saved is removed again
when the upload fails, and after indexing unless ``keep_files``. Imported by :mod:`.rest_api` once Haystack's
app and pipelines exist.
"""

from __future__ import annotations

import inspect
import json
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

from fastapi import Depends, File, Form, HTTPException, UploadFile
from haystack import Pipeline
from haystack.nodes import BaseConverter, PreProcessor
from rest_api.config import FILE_UPLOAD_PATH
from rest_api.controller import search
from rest_api.controller.file_upload import FileConverterParams, PreprocessorParams
from rest_api.schema import QueryRequest
from rest_api.utils import get_pipelines

from .._util.nofollow import open_no_follow
from ..errors import EmptyCorpusError, InputTooLargeError, InvalidParameterError, InvalidQueryError, UnsafePathError
from .rest_guards import env_limit

MAX_PASSAGE_CHARS_ENV = "DPHR_MAX_UPLOAD_PASSAGE_CHARS"
DEFAULT_MAX_PASSAGE_CHARS = 50_000
MAX_NAME_BYTES = 200  # with the 33-character unique prefix, within every file system's 255-byte name limit
_GLOBAL_PARAMS = frozenset({"debug", "add_isolated_node_eval"})  # taken by every node (Haystack's own rule)
_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")


# ----------------------------------------------------------------- /query
def check_query_params(pipeline: Pipeline, params: dict[str, Any]) -> None:
    """Refuse ``params`` Haystack would fail on inside the run: an unknown node or global parameter, a node's
    parameters that are not an object, or a parameter the node's ``run`` does not take."""
    nodes = {name: pipeline.get_node(name) for name in pipeline.graph.nodes}
    takes = {name: set(inspect.signature(node.run).parameters) for name, node in nodes.items() if node is not None}
    for key, value in params.items():
        if key in nodes:
            if not isinstance(value, dict):
                raise InvalidParameterError(f"params[{key!r}] must be an object of {key}'s parameters")
            unknown = sorted(set(value) - takes.get(key, set()) - _GLOBAL_PARAMS)
            if unknown:
                valid = ", ".join(sorted(takes.get(key, set()) - {"query", "self"}))
                raise InvalidParameterError(f"{key} takes no parameter {', '.join(unknown)} (it takes {valid})")
        elif key not in _GLOBAL_PARAMS and not any(key in names for names in takes.values()):
            raise InvalidParameterError(
                f"params: {key!r} is neither a node of the query pipeline ({', '.join(sorted(nodes))}) "
                "nor a parameter any of its nodes takes"
            )


def query(request: QueryRequest):  # noqa: ANN201  (FastAPI reads the response model from the route)
    """Haystack's ``/query``, with the query and its ``params`` checked first."""
    if not request.query.strip():
        raise InvalidQueryError("the query is empty")
    pipeline = get_pipelines().get("query_pipeline")
    if pipeline is None:
        raise HTTPException(status_code=501, detail="Query Pipeline is not configured.")
    check_query_params(pipeline, request.params or {})
    return search.query(request)


# ----------------------------------------------------------------- /file-upload
def check_upload_name(name: str | None) -> str:
    """An uploaded file's name when it is one plain file name (no directory part, not ``.`` or ``..``)."""
    if not name or name in (".", "..") or any(char in name for char in "/\\\x00"):
        raise UnsafePathError(f"upload file name {name!r:.80} is not a plain file name")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise UnsafePathError(f"upload file name {name[:40]!r}... is over {MAX_NAME_BYTES} bytes")
    return name


def _json_object(field: str, text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "null")
    except ValueError as exc:
        raise InvalidParameterError(f"{field} is not JSON: {exc}") from exc
    if value is not None and not isinstance(value, dict):
        raise InvalidParameterError(f"{field} must be a JSON object or null, not {type(value).__name__}")
    return value or {}


def check_passages(path: Path, name: str, limit: int) -> None:
    """Refuse an empty file, and a UTF-8 text file with a passage (text between blank lines) over ``limit``
    characters: encoding one such passage takes minutes and gigabytes. Other files are left to their converter."""
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


def upload_file(
    files: list[UploadFile] = File(...),  # noqa: B008  (FastAPI's way of declaring form parts)
    meta: str | None = Form("null"),  # JSON object: meta of every file
    additional_params: str | None = Form("null"),  # JSON object: params of the indexing pipeline's run
    fileconverter_params: FileConverterParams = Depends(FileConverterParams.as_form),  # noqa: B008
    preprocessor_params: PreprocessorParams = Depends(PreprocessorParams.as_form),  # noqa: B008
    keep_files: bool | None = False,
) -> None:
    """Index uploaded files with the indexing pipeline (Haystack's form; see the module docstring)."""
    pipeline = get_pipelines().get("indexing_pipeline")
    if pipeline is None:
        raise HTTPException(status_code=501, detail="Indexing Pipeline is not configured.")
    limit = env_limit(MAX_PASSAGE_CHARS_ENV, DEFAULT_MAX_PASSAGE_CHARS)
    saved: list[Path] = []
    indexed = False
    try:
        meta_form = _json_object("meta", meta)
        params = _json_object("additional_params", additional_params)
        folder = Path(FILE_UPLOAD_PATH)
        metas = []
        for upload in files:
            try:
                saved.append(_save(upload, folder))
            finally:
                upload.file.close()
            check_passages(saved[-1], upload.filename or "", limit)
            metas.append({**meta_form, "name": upload.filename})
        converter_params = {k: v for k, v in fileconverter_params.dict().items() if v is not None}
        splitter_params = {k: v for k, v in preprocessor_params.dict().items() if v is not None}
        for node in pipeline.get_nodes_by_class(BaseConverter):
            params[node.name] = {**params.get(node.name, {}), **converter_params}
        for node in pipeline.get_nodes_by_class(PreProcessor):
            params[node.name] = {**params.get(node.name, {}), **splitter_params}
        pipeline.run(file_paths=saved, meta=metas, params=params)
        indexed = True
    finally:
        if not (indexed and keep_files):
            for path in saved:
                path.unlink(missing_ok=True)


def install_routes(app: Any) -> None:
    """Replace Haystack's ``/query`` and ``/file-upload`` routes of ``app`` by the checked ones."""
    from fastapi.routing import APIRoute
    from rest_api.schema import QueryResponse

    replaced = {("/query", "POST"), ("/file-upload", "POST")}
    app.router.routes[:] = [
        route
        for route in app.router.routes
        if not (isinstance(route, APIRoute) and any((route.path, m) in replaced for m in route.methods))
    ]
    app.add_api_route(
        "/query",
        query,
        methods=["POST"],
        response_model=QueryResponse,
        response_model_exclude_none=True,
        tags=["search"],
        operation_id="query",
    )
    app.add_api_route("/file-upload", upload_file, methods=["POST"], tags=["file-upload"], operation_id="upload_file")


__all__ = [
    "DEFAULT_MAX_PASSAGE_CHARS",
    "MAX_PASSAGE_CHARS_ENV",
    "check_passages",
    "check_query_params",
    "check_upload_name",
    "install_routes",
    "query",
    "upload_file",
]
