"""What the REST app serves and its bounds: from the environment (the names Haystack 1.x's REST API reads) or
given directly (``dphr serve``), and the typed conversion of ``<COMPONENT>_PARAMS_<PARAM>`` overrides.

Environment variables:

* ``PIPELINE_YAML_PATH`` (default: the shipped ``rest_api.yml``), ``QUERY_PIPELINE_NAME`` (``query``),
  ``INDEXING_PIPELINE_NAME`` (``indexing``): the pipelines served.
* ``<COMPONENT>_PARAMS_<PARAM>``, e.g. ``DOCUMENTSTORE_PARAMS_PATH=/srv/store``: Haystack's override of one parameter
  of one component of the file. The value of a parameter declared ``bool``, ``int`` or ``float`` is converted
  (``true``/``false``, ``1``/``0``, ``yes``/``no``, ``on``/``off``; ``null``/``none`` where None is allowed); one that
  does not convert stops the start-up with InvalidParameterError naming the variable.
* ``FILE_UPLOAD_PATH``: where uploads wait while they are indexed (default: a fresh private temporary folder).
* ``CONCURRENT_REQUEST_PER_WORKER`` (4): queries run at once; more get 503.
* ``DPHR_MAX_UPLOAD_BYTES`` (5 MiB): the bound of any request body (413); ``DPHR_MAX_UPLOAD_PASSAGE_CHARS``
  (50,000): of one passage of an uploaded text file (413); ``DPHR_MAX_QUERY_CHARS`` (1,000): of one question of
  ``/query``, ``/query-batch`` or ``/compare`` (413, before any work).
* ``ROOT_PATH``: the path prefix behind a proxy; ``DPHR_CORS_ORIGINS``: comma-separated origins whose pages may call
  the API (none by default: the web page is served from the same origin).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import InvalidParameterError
from ..pipeline import PIPELINES_DIR

MAX_UPLOAD_BYTES_ENV = "DPHR_MAX_UPLOAD_BYTES"
DEFAULT_MAX_UPLOAD_BYTES = 5 * 1024 * 1024
MAX_PASSAGE_CHARS_ENV = "DPHR_MAX_UPLOAD_PASSAGE_CHARS"
DEFAULT_MAX_PASSAGE_CHARS = 50_000
MAX_QUERY_CHARS_ENV = "DPHR_MAX_QUERY_CHARS"
DEFAULT_MAX_QUERY_CHARS = 1_000
DEFAULT_PIPELINE_FILE = "rest_api.yml"

_TRUE, _FALSE, _NONE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}, {"null", "none"}


def env_limit(name: str, default: int, environ: Mapping[str, str] | None = None) -> int:
    """A positive integer bound from the environment variable ``name`` (``default`` when unset)."""
    text = (os.environ if environ is None else environ).get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise InvalidParameterError(f"{name}={text!r}: expected a positive whole number")
    return value


@dataclass(frozen=True)
class RestSettings:
    """What one REST app serves (see the module docstring for the environment variables behind each field).

    ``overrides`` (``{component: {param: value}}``), ``store_path`` (the ``path`` of every PhraseDocumentStore
    component) and ``phrase_retriever_params`` (of every PhraseRetriever component, e.g. ``model``) apply on top of
    the file and of the environment overrides.
    """

    pipeline_yaml: Path = field(default_factory=lambda: PIPELINES_DIR / DEFAULT_PIPELINE_FILE)
    query_pipeline: str = "query"
    indexing_pipeline: str = "indexing"
    upload_dir: Path | None = None
    concurrency: int = 4
    max_body_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS
    max_query_chars: int = DEFAULT_MAX_QUERY_CHARS
    root_path: str = ""
    cors_origins: tuple[str, ...] = ()
    store_path: Path | None = None
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    phrase_retriever_params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **given: Any) -> RestSettings:
        """Settings from the environment variables, with ``given`` fields taking precedence."""
        env = os.environ if environ is None else environ
        found: dict[str, Any] = {
            "query_pipeline": env.get("QUERY_PIPELINE_NAME") or "query",
            "indexing_pipeline": env.get("INDEXING_PIPELINE_NAME") or "indexing",
            "concurrency": env_limit("CONCURRENT_REQUEST_PER_WORKER", 4, env),
            "max_body_bytes": env_limit(MAX_UPLOAD_BYTES_ENV, DEFAULT_MAX_UPLOAD_BYTES, env),
            "max_passage_chars": env_limit(MAX_PASSAGE_CHARS_ENV, DEFAULT_MAX_PASSAGE_CHARS, env),
            "max_query_chars": env_limit(MAX_QUERY_CHARS_ENV, DEFAULT_MAX_QUERY_CHARS, env),
            "root_path": env.get("ROOT_PATH", "").rstrip("/"),
            "cors_origins": tuple(o.strip() for o in env.get("DPHR_CORS_ORIGINS", "").split(",") if o.strip()),
        }
        if env.get("PIPELINE_YAML_PATH"):
            found["pipeline_yaml"] = Path(env["PIPELINE_YAML_PATH"])
        if env.get("FILE_UPLOAD_PATH"):
            found["upload_dir"] = Path(env["FILE_UPLOAD_PATH"])
        return cls(**{**found, **given})


# ----------------------------------------------------------------- environment overrides
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


def _init_parameters(component_type: Any) -> Mapping[str, inspect.Parameter]:
    from haystack.nodes.base import BaseComponent

    try:
        return inspect.signature(BaseComponent.get_subclass(component_type).__init__).parameters
    except Exception:  # noqa: BLE001  (an unknown type is Haystack's to report when the pipeline is built)
        return {}


def env_overrides(config: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Haystack's ``<COMPONENT>_PARAMS_<PARAM>`` environment overrides of the components of a pipeline file, typed:
    ``{component: {param: value}}``, ready for :func:`~dphr_haystack.nodes.load_pipeline`'s ``overrides``."""
    env = os.environ if environ is None else environ
    found: dict[str, dict[str, Any]] = {}
    for component in config.get("components") or []:
        name = component.get("name") if isinstance(component, dict) else None
        if not isinstance(name, str) or not name:
            continue
        prefix = f"{name}_params_".upper()
        parameters = None
        for variable, value in env.items():
            if not variable.startswith(prefix):
                continue
            if parameters is None:
                parameters = _init_parameters(component.get("type"))
            param = variable[len(prefix) :].lower()
            if param in parameters:
                value = coerce_override(variable, value, parameters[param].annotation)
            found.setdefault(name, {})[param] = value
    return found


def described_overrides(config: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> str:
    """The environment overrides in effect for the file's components, for error messages (``none`` if none)."""
    env = os.environ if environ is None else environ
    names = [c.get("name") for c in config.get("components") or [] if isinstance(c, dict)]
    prefixes = tuple(f"{n}_params_".upper() for n in names if isinstance(n, str) and n)
    found = sorted(f"{k}={v!r}" for k, v in env.items() if prefixes and k.startswith(prefixes))
    return ", ".join(found) or "none"


__all__ = [
    "DEFAULT_MAX_PASSAGE_CHARS",
    "DEFAULT_MAX_QUERY_CHARS",
    "DEFAULT_MAX_UPLOAD_BYTES",
    "MAX_PASSAGE_CHARS_ENV",
    "MAX_QUERY_CHARS_ENV",
    "MAX_UPLOAD_BYTES_ENV",
    "RestSettings",
    "coerce_override",
    "described_overrides",
    "env_limit",
    "env_overrides",
]
