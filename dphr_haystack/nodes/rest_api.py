"""Haystack's REST API (the ``rest_api`` package of Haystack 1.26) with this package's nodes registered first.

Serve pipelines that use ``PhraseRetriever`` / ``PhraseDocumentStore``::

    PIPELINE_YAML_PATH=pipelines/rest_api.yml DOCUMENTSTORE_PARAMS_PATH=/srv/dphr-store \\
        uvicorn dphr_haystack.nodes.rest_api:app --host 127.0.0.1 --port 8000

``rest_api`` builds its pipelines when ``rest_api.application`` is imported; the nodes must be registered before
that, which importing this module does.
"""

from __future__ import annotations

from .._util.lazy import require
from .document_store import PhraseDocumentStore  # noqa: F401  (importing the nodes package registers them)

app = require("rest_api.application").app  # builds the pipelines named by PIPELINE_YAML_PATH

__all__ = ["app"]
