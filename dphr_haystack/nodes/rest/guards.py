"""What stands between the REST app and a hostile request: a bound on the body, and JSON errors.

Every error answer is ``{"errors": [message]}`` (Haystack's REST error shape), never a traceback:

* :class:`RestGuard` (ASGI middleware) refuses a request body over ``max_body_bytes`` with 413 (from the declared
  ``Content-Length`` at once, else as the body arrives, before it is parsed or spooled), and turns an exception that
  escapes an endpoint into an error answer: a typed :class:`~dphr_haystack.errors.DphrError` anywhere in the
  exception's chain (Haystack wraps node failures in a plain ``Exception``) decides the status
  (:func:`error_status`); anything else is a 500 whose traceback goes to the server log only.
* :func:`install_error_handlers`: an ``HTTPException`` keeps its status; a request that does not match the
  endpoint's schema is 422, with FastAPI's ``detail`` list beside the readable ``errors``.
"""

from __future__ import annotations

import errno
import json
import logging
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.exceptions import RequestValidationError
from haystack.errors import FilterError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from ...errors import (
    DirectoryLockedError,
    DphrError,
    IndexLoadError,
    IndexWriteError,
    InputTooLargeError,
    ModelLoadError,
    ReadOnlyStoreError,
)
from ..stores import UnknownIndexError
from .settings import MAX_UPLOAD_BYTES_ENV

logger = logging.getLogger(__name__)


def typed_cause(exc: BaseException) -> BaseException | None:
    """The first typed error (a DphrError or Haystack's FilterError) in ``exc``'s chain of causes, if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, (DphrError, FilterError)):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def error_status(exc: BaseException) -> int:
    """The HTTP status of an error: 404 an unknown document index, 413 over a bound, 403 a read-only store, 503 a
    locked store, 507 a full disk, 500 a server-side model or index failure, 400 any other typed error (bad
    parameters, an invalid query, an unsafe path), 500 the rest."""
    typed = typed_cause(exc)
    if typed is None:
        return 500
    if isinstance(typed, InputTooLargeError):
        return 413
    if isinstance(typed, UnknownIndexError):
        return 404
    if isinstance(typed, ReadOnlyStoreError):  # the store can be read, never written: not a passing lock
        return 403
    if isinstance(typed, DirectoryLockedError):
        return 503
    if isinstance(typed, IndexWriteError):  # nothing was written: 507 Insufficient Storage when the disk is full
        return 507 if getattr(typed, "errno", None) in (errno.ENOSPC, errno.EDQUOT) else 500
    if isinstance(typed, (ModelLoadError, IndexLoadError)):
        return 500
    return 400


def error_message(exc: BaseException) -> str:
    typed = typed_cause(exc)
    if typed is None:
        return f"internal server error ({type(exc).__name__}); the server log has the details"
    return f"{type(typed).__name__}: {typed}"


async def send_json(send: Any, status: int, body: Any) -> None:
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` when the body passes the bound (an HTTPException: FastAPI's body parsing passes it
    on to the HTTPException handler unchanged, where any other exception would become a 400)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body over {limit} bytes (the server's {MAX_UPLOAD_BYTES_ENV})")


class RestGuard:
    """ASGI middleware: the request body bound and the JSON error body (see the module docstring)."""

    def __init__(self, app: Any, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    def _too_large(self) -> dict[str, list[str]]:
        return {"errors": [BodyTooLarge(self.max_body_bytes).detail]}

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            await send_json(send, 413, self._too_large())
            return
        received = 0
        started = False

        async def bounded_receive() -> dict:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise BodyTooLarge(self.max_body_bytes)
            return message

        async def watched_send(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, bounded_receive, watched_send)
        except Exception as exc:
            if started:
                raise
            if isinstance(exc, BodyTooLarge) or isinstance(exc.__cause__, BodyTooLarge):
                await send_json(send, 413, self._too_large())
                return
            status = error_status(exc)
            if status >= 500:
                logger.error("%s %s failed", scope.get("method"), scope.get("path"), exc_info=exc)
            await send_json(send, status, {"errors": [error_message(exc)]})


def _location(error: dict[str, Any]) -> str:
    return ".".join(str(part) for part in error.get("loc", ()) if part != "body") or "body"


async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
    return JSONResponse({"errors": [str(exc.detail)]}, status_code=exc.status_code, headers=exc.headers)


async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    details = exc.errors()
    messages = [f"{_location(e)}: {e.get('msg', 'invalid')}" for e in details] or ["invalid request"]
    return JSONResponse({"errors": messages, "detail": json.loads(json.dumps(details, default=str))}, status_code=422)


def install_error_handlers(app: FastAPI) -> None:
    """Answer HTTPExceptions and schema mismatches with the JSON error body (see the module docstring)."""
    app.add_exception_handler(StarletteHTTPException, _http_error)  # FastAPI's and the router's 404/405
    app.add_exception_handler(RequestValidationError, _validation_error)


__all__ = [
    "BodyTooLarge",
    "RestGuard",
    "error_message",
    "error_status",
    "install_error_handlers",
    "send_json",
    "typed_cause",
]
