"""The REST app: Haystack 1.x's REST endpoints over YAML pipelines of this package's nodes, and a web page.

:func:`build_app` builds the served pipelines first (a server whose pipelines cannot be built does not start),
then a FastAPI app with the endpoints of :mod:`.search`, :mod:`.upload` and :mod:`.compare`, the page of
:mod:`.web`, and the bounds and JSON errors of :mod:`.guards`. The API pages ``/docs`` (Swagger UI) and ``/redoc``
load their scripts and styles from this server (``fastapi-offline``'s copies, the ``serve`` extra), never from a
CDN: they work offline.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from ..document_store import PhraseDocumentStore
from .compare import Comparison, add_compare_route
from .guards import RestGuard, install_error_handlers
from .schema import StoreInfo
from .search import RequestLimiter, add_search_routes
from .served import ServedPipelines, load_served_pipelines
from .settings import RestSettings
from .upload import add_upload_route
from .web import add_web_routes

logger = logging.getLogger(__name__)


def _upload_folder(settings: RestSettings) -> tuple[Path, bool]:
    """The folder uploads wait in while they are indexed, and whether it is a temporary one of this app."""
    if settings.upload_dir is not None:
        Path(settings.upload_dir).mkdir(parents=True, exist_ok=True)
        return Path(settings.upload_dir), False
    return Path(tempfile.mkdtemp(prefix="dphr-upload-")), True


def _fastapi(**kwargs: Any) -> FastAPI:
    """A FastAPI app whose ``/docs`` and ``/redoc`` serve their assets themselves (fastapi-offline); without
    fastapi-offline installed the two pages are left out rather than left blank where no CDN can be reached."""
    try:
        from fastapi_offline import FastAPIOffline
    except ImportError:
        logger.warning('no /docs or /redoc: they need fastapi-offline (pip install "dphr-haystack[serve]")')
        return FastAPI(docs_url=None, redoc_url=None, **kwargs)
    return FastAPIOffline(**kwargs)


def build_app(settings: RestSettings | None = None, served: ServedPipelines | None = None) -> FastAPI:
    """The REST app serving ``settings`` (default: from the environment; see :mod:`.settings`).

    Args:
        settings: What to serve and the request bounds.
        served: Pipelines already built from ``settings`` (``dphr serve`` builds them first to index a corpus).

    Raises:
        dphr_haystack.errors.InvalidParameterError: A pipeline cannot be built, an environment override does not
            convert to its parameter's type, or a bound is not a positive number.
        dphr_haystack.errors.UnsafeYamlError: The pipeline file's aliases expand without bound.
    """
    import haystack

    settings = settings if settings is not None else RestSettings.from_env()
    served = served if served is not None else load_served_pipelines(settings)
    folder, temporary = _upload_folder(settings)
    app = _fastapi(
        title="dphr-haystack REST API",
        description="Haystack 1.x REST endpoints over dense phrase retrieval pipelines, and a web page at /.",
        version=haystack.__version__,
        root_path=settings.root_path,
    )
    install_error_handlers(app)
    limiter = RequestLimiter(settings.concurrency)
    comparison = Comparison(served)
    add_search_routes(app, served, limiter, settings.max_query_chars)
    add_upload_route(app, served, folder, settings.max_passage_chars)
    add_compare_route(app, comparison, limiter, settings.max_query_chars)
    add_web_routes(app)

    @app.get("/store", response_model=StoreInfo, response_model_exclude_none=True, tags=["document"])
    def store_info() -> dict:
        """How many documents the served store holds, and what the server serves."""
        store = served.document_store
        return {
            "documents": store.get_document_count() if store is not None else 0,
            "phrase_documents": store.get_phrase_document_count() if isinstance(store, PhraseDocumentStore) else None,
            "query_pipeline": settings.query_pipeline,
            "indexing": served.indexing is not None,
            "compare": comparison.available,
            "hs_version": haystack.__version__,
        }

    if temporary:
        app.add_event_handler("shutdown", lambda: shutil.rmtree(folder, ignore_errors=True))
    if settings.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Content-Type"],
        )
    app.add_middleware(RestGuard, max_body_bytes=settings.max_body_bytes)
    app.state.served = served
    app.state.settings = settings
    logger.info("serving %s (query pipeline %r)", served.file, settings.query_pipeline)
    return app


__all__ = ["build_app"]
