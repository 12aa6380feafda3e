"""The REST API: Haystack 1.x's REST endpoints over YAML pipelines of this package's nodes, and a web page.

``dphr serve`` runs it; ``uvicorn dphr_haystack.nodes.rest_api:app`` serves the same app configured from the
environment (:mod:`.settings`). Needs the ``serve`` extra (FastAPI, uvicorn, python-multipart).
"""

from __future__ import annotations

from .app import build_app
from .served import ServedPipelines, load_served_pipelines
from .settings import RestSettings, coerce_override

__all__ = ["RestSettings", "ServedPipelines", "build_app", "coerce_override", "load_served_pipelines"]
