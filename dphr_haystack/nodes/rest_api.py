"""Haystack's REST API (the ``rest_api`` package of Haystack 1.26) with this package's nodes registered first.

Serve pipelines that use ``PhraseRetriever`` / ``PhraseDocumentStore``::

    PIPELINE_YAML_PATH=pipelines/rest_api.yml DOCUMENTSTORE_PARAMS_PATH=/srv/dphr-store \\
        uvicorn dphr_haystack.nodes.rest_api:app --host 127.0.0.1 --port 8000

``rest_api`` builds its pipelines when ``rest_api.application`` is imported; the nodes must be registered before
that, which importing this module does. The file is first read through the bounded YAML reader
(:mod:`dphr_haystack._util.safe_yaml`), so a file whose aliases would expand without bound is refused at once.

On top of Haystack's app:

* Environment overrides (``DOCUMENTSTORE_PARAMS_PROGRESS_BAR=false``, ``RETRIEVER_PARAMS_TOP_K=3``) arrive as
  strings; those of a parameter declared ``bool``, ``int`` or ``float`` are converted (``true``/``false``,
  ``1``/``0``, ``yes``/``no``, ``on``/``off``; ``null``/``none`` where None is allowed), and one that does not
  convert stops the start-up with InvalidParameterError naming the variable. A server whose query (or declared
  indexing) pipeline cannot be built does not start: the error names the overrides in effect.
* ``DPHR_MAX_UPLOAD_BYTES`` (default 5 MiB) bounds every request body (413, :mod:`.rest_guards`);
  ``DPHR_MAX_UPLOAD_PASSAGE_CHARS`` (default 50,000) bounds one passage of an uploaded text file (413,
  :mod:`.rest_routes`).
* Errors are JSON, ``{"errors": [message]}``: 400 for bad parameters, an invalid query or an unsafe upload name,
  413 over a bound, never a traceback (:mod:`.rest_guards`); ``/query`` and ``/file-upload`` check their input
  first and a failed upload leaves no file behind (:mod:`.rest_routes`).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import os
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .._util.lazy import require
from .._util.safe_yaml import read_yaml
from ..errors import InvalidParameterError
from .document_store import PhraseDocumentStore  # noqa: F401  (importing the nodes package registers them)

logger = logging.getLogger(__name__)

_TRUE, _FALSE, _NONE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}, {"null", "none"}


def _check_pipeline_file() -> dict[str, Any] | None:
    """Read PIPELINE_YAML_PATH through the bounded YAML reader first: Haystack's own loader would expand an alias
    bomb while validating it (UnsafeYamlError names the file instead)."""
    path = os.environ.get("PIPELINE_YAML_PATH")
    if path and Path(path).is_file():
        config = read_yaml(path)
        return config if isinstance(config, dict) else None
    return None


def _members(annotation: Any) -> tuple[Any, ...]:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return typing.get_args(annotation)
    return (annotation,)


def coerce_override(variable: str, value: str, annotation: Any) -> Any:
    """``value`` of the environment variable ``variable`` as the type ``annotation`` declares: converted when that
    is bool, int or float (optionally None); unchanged when it allows anything else (a string, a Literal)."""
    members = _members(annotation)
    allowed = [m for m in members if m in (bool, int, float)]
    if not allowed:
        return value
    optional = type(None) in members
    text = value.strip().lower()
    if optional and text in _NONE:
        return None
    if bool in allowed and text in _TRUE | _FALSE:
        return text in _TRUE
    for kind in (int, float):
        if kind in allowed:
            with contextlib.suppress(ValueError):
                return kind(text)
    if any(m not in (bool, int, float, type(None)) for m in members):
        return value  # e.g. filter_threshold: a number, "model" or None
    expected = " or ".join(t.__name__ for t in allowed) + (" or null" if optional else "")
    raise InvalidParameterError(f"{variable}={value!r}: expected {expected}")


def _coerce_definitions(definitions: dict[str, dict[str, Any]]) -> None:
    """Convert, in place, the environment overrides of typed parameters in Haystack's component definitions."""
    from haystack.nodes.base import BaseComponent

    for name, definition in definitions.items():
        params = definition.get("params") or {}
        prefix = f"{name}_params_".upper()
        try:
            signature = inspect.signature(BaseComponent.get_subclass(definition.get("type")).__init__)
        except Exception:  # noqa: BLE001  (an unknown type is Haystack's to report)
            continue
        for variable, value in os.environ.items():
            param = variable.replace(prefix, "").lower() if variable.startswith(prefix) else None
            if param in signature.parameters and params.get(param) == value:
                params[param] = coerce_override(variable, value, signature.parameters[param].annotation)


@contextlib.contextmanager
def _typed_overrides() -> Iterator[None]:
    """While Haystack builds the app's pipelines, convert the environment overrides it reads."""
    base = importlib.import_module("haystack.pipelines.base")
    original = base.get_component_definitions

    def typed(pipeline_config: dict[str, Any], overwrite_with_env_variables: bool = True) -> dict[str, Any]:
        definitions = original(
            pipeline_config=pipeline_config, overwrite_with_env_variables=overwrite_with_env_variables
        )
        if overwrite_with_env_variables:
            _coerce_definitions(definitions)
        return definitions

    base.get_component_definitions = typed
    try:
        yield
    finally:
        base.get_component_definitions = original


def _overrides(config: dict[str, Any] | None) -> list[str]:
    names = [c.get("name", "") for c in (config or {}).get("components", []) if isinstance(c, dict)]
    prefixes = tuple(f"{n}_params_".upper() for n in names if isinstance(n, str) and n)
    return sorted(f"{k}={v!r}" for k, v in os.environ.items() if prefixes and k.startswith(prefixes))


def _refuse_unbuilt_pipelines(config: dict[str, Any] | None) -> None:
    """Stop the start-up when the query pipeline (or an indexing pipeline the file declares) was not built:
    Haystack only logs that, and its app would then say it is initialized and fail every request."""
    from rest_api import config as rest_config
    from rest_api.utils import get_pipelines

    pipelines = get_pipelines()
    declared = {p.get("name") for p in (config or {}).get("pipelines", []) if isinstance(p, dict)}
    missing = [("query", rest_config.QUERY_PIPELINE_NAME)] if pipelines.get("query_pipeline") is None else []
    if pipelines.get("indexing_pipeline") is None and rest_config.INDEXING_PIPELINE_NAME in declared:
        missing.append(("indexing", rest_config.INDEXING_PIPELINE_NAME))
    if not missing:
        return
    role, name = missing[0]
    reason = "see the log above"
    with _typed_overrides():
        try:
            from haystack import Pipeline

            Pipeline.load_from_yaml(Path(rest_config.PIPELINE_YAML_PATH), pipeline_name=name)
        except Exception as exc:  # noqa: BLE001  (reported below, with its cause)
            cause = exc.__cause__ or exc
            reason = f"{type(cause).__name__}: {cause}"
    overrides = ", ".join(_overrides(config)) or "none"
    raise InvalidParameterError(
        f"the {role} pipeline {name!r} of {rest_config.PIPELINE_YAML_PATH} could not be built ({reason}); "
        f"environment overrides: {overrides}"
    )


def _build_app() -> Any:
    from .rest_guards import DEFAULT_MAX_UPLOAD_BYTES, MAX_UPLOAD_BYTES_ENV, RestGuard, env_limit

    max_body = env_limit(MAX_UPLOAD_BYTES_ENV, DEFAULT_MAX_UPLOAD_BYTES)
    config = _check_pipeline_file()
    with _typed_overrides():
        haystack_app = require("rest_api.application").app  # builds the pipelines named by PIPELINE_YAML_PATH
    _refuse_unbuilt_pipelines(config)
    from .rest_routes import DEFAULT_MAX_PASSAGE_CHARS, MAX_PASSAGE_CHARS_ENV, install_routes

    env_limit(MAX_PASSAGE_CHARS_ENV, DEFAULT_MAX_PASSAGE_CHARS)  # a bad value stops the start-up, not an upload
    install_routes(haystack_app)
    haystack_app.add_middleware(RestGuard, max_body_bytes=max_body)
    return haystack_app


app = _build_app()

__all__ = ["app", "coerce_override"]
