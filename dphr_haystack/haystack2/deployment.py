"""The shipped Haystack 2 pipelines on one store directory: what a deployment (``hayhooks_pipelines/``) loads.

A served query pipeline and indexing pipeline must share their documents: :func:`pipeline_on_store` loads a shipped
YAML with its document store opened on the directory named by ``DPHR_STORE_PATH`` (default ``dphr-store`` in the
working directory) and, when ``DPHR_MODEL`` is set, another phrase model. Pipelines loaded in one process share the
store instance (:meth:`~dphr_haystack.haystack2.PhraseDocumentStore.from_dict`), also when loaded in parallel threads.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from haystack import Pipeline
from haystack.errors import FilterError
from haystack.marshal import YamlMarshaller

from ..errors import InvalidParameterError, InvalidQueryError
from . import load_pipeline


def store_path() -> Path:
    """The store directory served pipelines open (``DPHR_STORE_PATH``, default ``dphr-store``)."""
    return Path(os.environ.get("DPHR_STORE_PATH") or "dphr-store").resolve()


def store_overrides(pipeline_file: Path, component: str) -> dict[str, dict[str, Any]]:
    """``load_pipeline`` overrides of ``component`` (the one holding the store): the YAML's own store settings with
    :func:`store_path` and no progress bars, plus ``DPHR_MODEL`` when set."""
    declared = YamlMarshaller().unmarshal(pipeline_file.read_text(encoding="utf-8"))["components"][component]
    store = declared["init_parameters"]["document_store"]
    params = {**store["init_parameters"], "path": str(store_path()), "progress_bar": False}
    changed: dict[str, Any] = {"document_store": {**store, "init_parameters": params}}
    if "progress_bar" in declared["init_parameters"]:
        changed["progress_bar"] = False
    if os.environ.get("DPHR_MODEL"):
        changed["model"] = os.environ["DPHR_MODEL"]
    return {component: changed}


def pipeline_on_store(pipeline_file: Path, component: str) -> Pipeline:
    """The pipeline of ``pipeline_file`` with :func:`store_overrides`."""
    return load_pipeline(pipeline_file, overrides=store_overrides(pipeline_file, component))


def client_error(error: BaseException) -> BaseException | None:
    """The error a bad request caused (Haystack wraps what a component raised in its own errors), or None."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, InvalidQueryError | InvalidParameterError | FilterError):
            return seen
        seen = seen.__cause__
    return None


__all__ = ["client_error", "pipeline_on_store", "store_overrides", "store_path"]
