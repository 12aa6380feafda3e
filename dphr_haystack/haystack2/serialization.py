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
from haystack.document_stores.types import FilterPolicy
from haystack.utils import ComponentDevice

from ..errors import DphrError, InvalidParameterError

T = TypeVar("T")


def check_model_reference(model: Any) -> str:
    """A component's ``model``: a non-empty name or path (a path-like object becomes its string)."""
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if not isinstance(model, str) or not model.strip():
        raise InvalidParameterError(f"model must be a non-empty model name or directory, got {model!r:.60}")
    return model


def component_device(device: Any) -> ComponentDevice | None:
    """A component's ``device`` as Haystack components take it: a ``ComponentDevice`` (one CPU or CUDA device), its
    serialised dict, or the strings these components took before: ``auto`` (or None: the best device available when
    the model loads; kept as None), ``cpu``, ``cuda`` or ``cuda:N``.

    Raises:
        InvalidParameterError: Another device type (``mps``, a device map) or a value that is no device.
    """
    if device is None or (isinstance(device, str) and device.strip().lower() == "auto"):
        return None
    try:
        if isinstance(device, str):
            device = ComponentDevice.from_str(device.strip().lower())
        elif isinstance(device, dict):
            device = ComponentDevice.from_dict(device)
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidParameterError(f"device={device!r:.60}: {exc}; valid: auto, cpu, cuda, cuda:N") from exc
    if not isinstance(device, ComponentDevice):
        raise InvalidParameterError(
            f"device must be a ComponentDevice or one of auto, cpu, cuda, cuda:N, got {type(device).__name__}"
        )
    if device.has_multiple_devices:
        raise InvalidParameterError("device: a device map is not supported; give one device")
    if device.to_torch_str().split(":")[0] not in ("cpu", "cuda"):
        raise InvalidParameterError(f"device={device.to_torch_str()!r}; valid: auto, cpu, cuda, cuda:N")
    return device


def torch_device(device: ComponentDevice | None) -> str:
    """The device string the model loader takes (``auto`` for None)."""
    return "auto" if device is None else device.to_torch_str()


def serialised_device(device: ComponentDevice | None) -> dict[str, Any] | None:
    """``device`` as Haystack components serialise it (``ComponentDevice.to_dict``; None stays None: auto)."""
    return None if device is None else device.to_dict()


def filter_policy(policy: Any) -> FilterPolicy:
    """A retriever's ``filter_policy``: a ``FilterPolicy`` or its name (``replace``, ``merge``), as serialised."""
    if isinstance(policy, FilterPolicy):
        return policy
    if isinstance(policy, str):
        try:
            return FilterPolicy.from_str(policy)
        except ValueError as exc:
            raise InvalidParameterError(f"filter_policy={policy!r}; valid: replace, merge") from exc
    raise InvalidParameterError(f"filter_policy must be a FilterPolicy or its name, got {type(policy).__name__}")


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


__all__ = [
    "check_model_reference",
    "component_device",
    "component_from_dict",
    "filter_policy",
    "serialised_device",
    "torch_device",
]
