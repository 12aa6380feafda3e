"""The REST app configured from the environment, for ``uvicorn``: Haystack 1.x's REST endpoints and a web page.

Serve pipelines that use ``PhraseRetriever`` / ``PhraseDocumentStore`` (``dphr serve`` does the same in one
command)::

    PIPELINE_YAML_PATH=pipelines/rest_api.yml DOCUMENTSTORE_PARAMS_PATH=/srv/dphr-store \\
        uvicorn dphr_haystack.nodes.rest_api:app --host 127.0.0.1 --port 8000

Importing this module builds the pipelines named by ``PIPELINE_YAML_PATH`` (default: the shipped
``rest_api.yml``), ``QUERY_PIPELINE_NAME`` and ``INDEXING_PIPELINE_NAME``; the other variables are those of
:mod:`dphr_haystack.nodes.rest.settings`. Endpoints: ``GET /initialized``, ``GET /hs_version``, ``POST /query``,
``POST /query-batch``, ``POST /file-upload``, ``POST /documents/get_by_filters``,
``POST /documents/delete_by_filters`` (Haystack's request and answer shapes), ``POST /compare``, ``GET /store`` and
the web page at ``GET /``. Errors are JSON, ``{"errors": [message]}``: 400 for bad parameters, an invalid query or
an unsafe upload name, 413 over a bound, 422 for a body that does not match the endpoint, never a traceback.
"""

from __future__ import annotations

from .._util.lazy import require

require("fastapi")  # the `serve` extra: says how to install it
require("multipart")

from .rest import build_app, coerce_override  # noqa: E402

app = build_app()

__all__ = ["app", "coerce_override"]
