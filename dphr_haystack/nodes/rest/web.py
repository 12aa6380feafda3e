"""The web page: ``GET /`` and its script and style sheet, static files shipped with the package (``web/``).

The page asks ``/compare`` and ``/file-upload`` (same origin) and builds everything it shows from text nodes,
never from markup, so document text cannot inject HTML; its Content-Security-Policy allows only its own script and
style sheet on top of that.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from starlette.responses import Response

ASSETS = {"index.html": "text/html", "app.js": "text/javascript", "style.css": "text/css"}
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def _asset(name: str) -> bytes:
    return (resources.files(__package__) / "web" / name).read_bytes()


def add_web_routes(app: FastAPI) -> None:
    """Add the page (``GET /``) and its assets (``GET /web/app.js``, ``GET /web/style.css``) to ``app``."""
    assets = {name: _asset(name) for name in ASSETS}  # read once: a missing file fails the start-up, not a visit
    headers = {
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "no-cache",
    }

    def serve(name: str) -> Response:
        return Response(assets[name], media_type=ASSETS[name], headers=headers)  # text/*: charset=utf-8 added

    app.add_api_route("/", lambda: serve("index.html"), methods=["GET"], include_in_schema=False)
    app.add_api_route("/web/app.js", lambda: serve("app.js"), methods=["GET"], include_in_schema=False)
    app.add_api_route("/web/style.css", lambda: serve("style.css"), methods=["GET"], include_in_schema=False)


__all__ = ["ASSETS", "CONTENT_SECURITY_POLICY", "add_web_routes"]
