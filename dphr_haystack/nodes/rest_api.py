"""Haystack's REST API (the ``rest_api`` package of Haystack 1.26) with this package's nodes registered first.

Serve pipelines that use ``PhraseRetriever`` / ``PhraseDocumentStore``::

    PIPELINE_YAML_PATH=pipelines/rest_api.yml DOCUMENTSTORE_PARAMS_PATH=/srv/dphr-store \\
        uvicorn dphr_haystack.nodes.rest_api:app --host 127.0.0.1 --port 8000

``rest_api`` builds its pipelines when ``rest_api.application`` is imported; the nodes must be registered before
that, which importing this module does. The file is first read through the bounded YAML reader
(:mod:`dphr_haystack._util.safe_yaml`), so a file whose aliases would expand without bound is refused at once.
"""

from __future__ import annotations

import os
from pathlib import Path

from .._util.lazy import require
from .._util.safe_yaml import read_yaml
from .document_store import PhraseDocumentStore  # noqa: F401  (importing the nodes package registers them)


def _check_pipeline_file() -> None:
    """Read PIPELINE_YAML_PATH through the bounded YAML reader first: Haystack's own loader would expand an alias
    bomb while validating it (UnsafeYamlError names the file instead)."""
    path = os.environ.get("PIPELINE_YAML_PATH")
    if path and Path(path).is_file():
        read_yaml(path)


_check_pipeline_file()
app = require("rest_api.application").app  # builds the pipelines named by PIPELINE_YAML_PATH

__all__ = ["app"]
