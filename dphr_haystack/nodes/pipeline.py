"""Loading YAML pipelines that use the dphr_haystack nodes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from haystack import Pipeline
from haystack.errors import PipelineConfigError

from ..errors import DphrError

PIPELINES_DIR = Path(__file__).resolve().parents[2] / "pipelines"


def load_pipeline(path: str | Path, pipeline_name: str | None = None,
                  overrides: dict[str, dict[str, Any]] | None = None, overwrite_with_env_variables: bool = True,
                  strict_version_check: bool = False) -> Pipeline:
    """Load a Haystack YAML pipeline after registering the dphr_haystack nodes.

    Args:
        path: The YAML file. A bare name such as ``phrase_qa.yml`` is also looked up in the repository's
            ``pipelines/`` directory when it is not a file.
        pipeline_name: Which pipeline of the file (needed when it declares several).
        overrides: ``{component name: {param: value}}`` merged into the components' params before loading
            (e.g. ``{"Retriever": {"model": "/path/to/model"}}``); an unknown component name raises KeyError.
        overwrite_with_env_variables: Apply Haystack's ``<COMPONENT>_PARAMS_<PARAM>`` environment overrides
            (they arrive as strings).
        strict_version_check: Fail when the file's ``version`` differs from the installed Haystack.

    Raises:
        haystack.errors.PipelineSchemaError: Unknown component types, unknown params or wrongly typed values.
        dphr_haystack.errors.DphrError: A dphr node refused its params (e.g. ModelLoadError naming a missing
            model path).
    """
    from . import document_store, joins, retriever  # noqa: F401  (registers the node classes)

    file = Path(path)
    if not file.is_file() and (PIPELINES_DIR / file.name).is_file() and not file.parent.parts:
        file = PIPELINES_DIR / file.name
    config = yaml.safe_load(file.read_text())
    if overrides:
        config = copy.deepcopy(config)
        components = {c["name"]: c for c in config.get("components", [])}
        for name, params in overrides.items():
            if name not in components:
                raise KeyError(f"{file}: no component named {name!r} (components: {sorted(components)})")
            components[name].setdefault("params", {}).update(params)
    try:
        return Pipeline.load_from_config(config, pipeline_name=pipeline_name,
                                         overwrite_with_env_variables=overwrite_with_env_variables,
                                         strict_version_check=strict_version_check)
    except PipelineConfigError as exc:
        # Haystack hides a component's own error behind "see the stacktrace"; surface ours (e.g. the missing
        # model path) in the message.
        if isinstance(exc.__cause__, DphrError):
            raise type(exc.__cause__)(f"{file}: {exc} {exc.__cause__}") from exc
        raise


__all__ = ["PIPELINES_DIR", "load_pipeline"]
