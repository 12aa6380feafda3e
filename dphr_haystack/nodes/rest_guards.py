"""What stands between Haystack's REST app and a hostile request: a bound on the body and JSON errors.

:class:`RestGuard` is ASGI middleware. It refuses a request body over ``max_body_bytes`` with 413 (from the
declared ``Content-Length`` at once, else as the body arrives, before it is parsed or spooled), and turns an
exception that escapes an endpoint into Haystack's REST error body, ``{"errors": [message]}``, with no traceback:
a typed :class:`~dphr_haystack.errors.DphrError` anywhere in the exception's chain (Haystack wraps node failures
in a plain ``Exception``) decides the status (:func:`error_status`); anything else is a 500 whose traceback goes
to the server log only.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from typing import Any

from fastapi import HTTPException
from haystack.errors import FilterError

from ..errors import (
    DirectoryLockedError,
    DphrError,
    IndexLoadError,
    IndexWriteError,
    InputTooLargeError,
    InvalidParameterError,
    ModelLoadError,
)

logger = logging.getLogger(__name__)

MAX_UPLOAD_BYTES_ENV = "DPHR_MAX_UPLOAD_BYTES"
DEFAULT_MAX_UPLOAD_BYTES = 5 * 1024 * 1024


def env_limit(name: str, default: int) -> int:
    """A positive integer bound from the environment variable ``name`` (``default`` when unset)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise InvalidParameterError(f"{name}={text!r}: expected a positive whole number")
    return value


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
    """The HTTP status of an error: 413 over a bound, 503 a locked store, 507 a full disk, 500 a server-side model
    or index failure, 400 any other typed error (bad parameters, an invalid query, an unsafe path), 500 the rest."""
    typed = typed_cause(exc)
    if typed is None:
        return 500
    if isinstance(typed, InputTooLargeError):
        return 413
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


class _BodyTooLarge(HTTPException):
    """Raised from ``receive`` when the body passes the bound (an HTTPException: FastAPI's body parsing passes it
    on to Haystack's handler unchanged, where any other exception would become a 400)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body over {limit} bytes (the server's {MAX_UPLOAD_BYTES_ENV})")


class RestGuard:
    """ASGI middleware: the request body bound and the JSON error body (see the module docstring)."""

    def __init__(self, app: Any, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    def _too_large(self) -> dict[str, list[str]]:
        return {"errors": [_BodyTooLarge(self.max_body_bytes).detail]}

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
                    raise _BodyTooLarge(self.max_body_bytes)
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
            if isinstance(exc, _BodyTooLarge) or isinstance(exc.__cause__, _BodyTooLarge):
                await send_json(send, 413, self._too_large())
                return
            status = error_status(exc)
            if status >= 500:
                logger.error("%s %s failed", scope.get("method"), scope.get("path"), exc_info=exc)
            await send_json(send, status, {"errors": [error_message(exc)]})


__all__ = [
    "DEFAULT_MAX_UPLOAD_BYTES",
    "MAX_UPLOAD_BYTES_ENV",
    "RestGuard",
    "env_limit",
    "error_message",
    "error_status",
    "typed_cause",
]
