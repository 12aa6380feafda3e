"""Deserialising this layer's components: data of the wrong shape or type ends in InvalidParameterError.

``from_dict`` receives whatever a pipeline file held; Haystack's ``default_from_dict`` answers such data with
``TypeError``, ``KeyError``, ``AttributeError`` or its own ``DeserializationError``. :func:`component_from_dict`
checks the shape first and turns what remains into the package's typed error, naming the component.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from haystack.core.errors import DeserializationError
from haystack.core.serialization import default_from_dict

from ..errors import DphrError, InvalidParameterError

T = TypeVar("T")


def check_model_reference(model: Any) -> str:
    """A component's ``model``: a non-empty name or path (a path-like object becomes its string)."""
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if not isinstance(model, str) or not model.strip():
        raise InvalidParameterError(f"model must be a non-empty model name or directory, got {model!r:.60}")
    return model


def component_from_dict(
    cls: type[T], data: Any, convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None
) -> T:
    """``cls`` built from its serialised ``data``; ``convert`` turns serialised init parameters (a store, an enum
    name) into objects first.

    Raises:
        InvalidParameterError: ``data`` or its ``init_parameters`` is not a mapping, names another class, lacks a
            required parameter, has an unknown one, or holds a value of the wrong type.
    """
    name = cls.__name__
    if not isinstance(data, dict):
        raise InvalidParameterError(f"{name}.from_dict takes a dict, got {type(data).__name__}")
    params = data.get("init_parameters", {})
    if not isinstance(params, dict):
        raise InvalidParameterError(f"{name}: init_parameters must be a dict, got {type(params).__name__}")
    try:
        params = convert(dict(params)) if convert else dict(params)
        return default_from_dict(cls, {**data, "init_parameters": params})
    except DphrError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, DeserializationError) as exc:
        raise InvalidParameterError(f"cannot deserialise {name}: {type(exc).__name__}: {exc}") from exc


__all__ = ["check_model_reference", "component_from_dict"]
