"""Loading YAML pipelines that use the dphr_haystack nodes."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from haystack import Pipeline
from haystack.errors import PipelineConfigError
from haystack.schema import Document

from .._util.resources import pipelines_dir
from .._util.safe_yaml import read_yaml
from ..corpus import read_corpora
from ..errors import DphrError, InvalidParameterError

PIPELINES_DIR = pipelines_dir()


def load_pipeline(
    path: str | Path,
    pipeline_name: str | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    overwrite_with_env_variables: bool = True,
    strict_version_check: bool = False,
    components: dict[str, Any] | None = None,
) -> Pipeline:
    """Load a Haystack YAML pipeline after registering the dphr_haystack nodes.

    Args:
        path: The YAML file. A bare name such as ``phrase_qa.yml`` is also looked up among the pipelines
            shipped with the package (:data:`PIPELINES_DIR`) when it is not a file.
        pipeline_name: Which pipeline of the file (needed when it declares several).
        overrides: ``{component name: {param: value}}`` merged into the components' params before loading
            (e.g. ``{"Retriever": {"model": "/path/to/model"}}``); an unknown component name raises KeyError.
        overwrite_with_env_variables: Apply Haystack's ``<COMPONENT>_PARAMS_<PARAM>`` environment overrides
            (they arrive as strings).
        strict_version_check: Fail when the file's ``version`` differs from the installed Haystack.
        components: Already built components used instead of the file's definitions of the same names, e.g.
            ``{"DocumentStore": store}`` so that several pipelines query one store (and one phrase index in
            memory) instead of each loading its own.

    Raises:
        dphr_haystack.errors.UnsafeYamlError: The file's YAML aliases expand to more nodes than any pipeline has
            (an alias bomb) or refer to themselves; refused before Haystack validates the file.
        haystack.errors.PipelineSchemaError: Unknown component types, unknown params or wrongly typed values.
        dphr_haystack.errors.DphrError: A dphr node refused its params (e.g. ModelLoadError naming a missing
            model path).
    """
    from . import document_store, joins, retriever  # noqa: F401  (registers the node classes)

    file = Path(path)
    if not file.is_file() and (PIPELINES_DIR / file.name).is_file() and not file.parent.parts:
        file = PIPELINES_DIR / file.name
    config = _read_yaml(file)
    _check_structure(config, file)
    if overrides:
        config = copy.deepcopy(config)
        declared = {c["name"]: c for c in config.get("components", [])}
        for name, params in overrides.items():
            if name not in declared:
                raise KeyError(f"{file}: no component named {name!r} (components: {sorted(declared)})")
            declared[name].setdefault("params", {}).update(params)
    try:
        if not components:
            return Pipeline.load_from_config(
                config,
                pipeline_name=pipeline_name,
                overwrite_with_env_variables=overwrite_with_env_variables,
                strict_version_check=strict_version_check,
            )
        return _load_with_components(
            config, pipeline_name, overwrite_with_env_variables, strict_version_check, components, file
        )
    except PipelineConfigError as exc:
        # Haystack hides a component's own error behind "see the stacktrace"; surface ours (e.g. the missing
        # model path) in the message.
        cause = exc.__cause__
        while isinstance(cause, PipelineConfigError):  # a component loading another (a retriever's store)
            cause = cause.__cause__
        if isinstance(cause, DphrError):
            raise type(cause)(f"{file}: {exc} {cause}") from exc
        raise


def _check_structure(config: dict[str, Any], file: Path) -> None:
    """Raise PipelineConfigError on a malformed layout (Haystack's validator crashes on some with KeyError)."""

    def fail(what: str) -> None:
        raise PipelineConfigError(f"{file}: {what}")

    components, pipelines = config.get("components", []), config.get("pipelines", [])
    if not isinstance(components, list) or not isinstance(pipelines, list):
        fail("'components' and 'pipelines' must be lists")
    for n, component in enumerate(components):
        if (
            not isinstance(component, dict)
            or not isinstance(component.get("name"), str)
            or not isinstance(component.get("type"), str)
            or not isinstance(component.get("params", {}), dict)
        ):
            fail(f"component {n} must be a mapping with a string name and type and optional params mapping")
    for n, pipeline in enumerate(pipelines):
        nodes = pipeline.get("nodes") if isinstance(pipeline, dict) else None
        if not isinstance(pipeline, dict) or not isinstance(pipeline.get("name"), str) or not isinstance(nodes, list):
            fail(f"pipeline {n} must be a mapping with a string name and a list of nodes")
        for node in nodes:
            if (
                not isinstance(node, dict)
                or not isinstance(node.get("name"), str)
                or not isinstance(node.get("inputs"), list)
                or not all(isinstance(i, str) for i in node["inputs"])
            ):
                fail(f"pipeline {pipeline['name']!r}: each node needs a string name and a list of input names")


def _read_yaml(file: Path) -> dict[str, Any]:
    """The pipeline file as a mapping; an unreadable, malformed or non-mapping file raises PipelineConfigError, one
    whose YAML aliases expand beyond :data:`~dphr_haystack._util.safe_yaml.MAX_NODES` nodes UnsafeYamlError."""
    try:
        config = read_yaml(file)  # aliases bounded: Haystack's schema validation would expand an alias bomb
    except (OSError, UnicodeDecodeError) as exc:
        raise PipelineConfigError(f"cannot read pipeline file {file}: {exc}") from exc
    except (yaml.YAMLError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise PipelineConfigError(f"{file} is not valid YAML: {type(exc).__name__}: {exc}") from exc
    if not isinstance(config, dict):
        raise PipelineConfigError(
            f"{file}: a pipeline file is a YAML mapping with version, components and "
            f"pipelines, got {type(config).__name__}"
        )
    return config


def corpus_documents(corpora: Iterable[str | Path]) -> list[Document]:
    """Haystack documents of one or more corpus files (:func:`dphr_haystack.corpus.read_corpus` formats), with
    ``title`` and ``document_id`` in their meta, as PhraseDocumentStore expects."""
    return [
        Document(content=p.text, id=p.id, meta={**p.meta, "title": p.title, "document_id": p.document_id})
        for p in read_corpora(corpora)
    ]


def index_corpus(pipeline: Pipeline, documents: list[Document]) -> dict[str, Any]:
    """Write ``documents`` into the pipeline's document store and build what each retriever needs.

    Phrase retrievers get their phrase index, dense retrievers their embeddings (documents that already have
    them keep them); BM25 needs nothing more. With no ``documents``, only what is missing for the documents
    already stored is built. Returns per-step timings in seconds.
    """
    from haystack.nodes import DenseRetriever

    from .retriever import PhraseRetriever

    store = pipeline.get_document_store()
    if store is None:
        raise InvalidParameterError("the pipeline has no document store to index into")
    timings: dict[str, Any] = {}
    if documents:
        start = time.perf_counter()
        store.write_documents(documents, duplicate_documents="skip")
        timings["write_documents"] = time.perf_counter() - start
    for name in pipeline.graph.nodes:
        component = pipeline.graph.nodes[name].get("component")
        start = time.perf_counter()
        if isinstance(component, PhraseRetriever):
            store.update_embeddings(component)
        elif isinstance(component, DenseRetriever):
            store.update_embeddings(component, update_existing_embeddings=False)
        else:
            continue
        timings[name] = time.perf_counter() - start
    return timings


def _load_with_components(
    config: dict[str, Any],
    pipeline_name: str | None,
    overwrite_with_env_variables: bool,
    strict_version_check: bool,
    prebuilt: dict[str, Any],
    file: Path,
) -> Pipeline:
    """``Pipeline.load_from_config`` seeded with prebuilt components (Haystack 1.26 builds every one itself)."""
    from haystack.pipelines.config import get_component_definitions, get_pipeline_definition, validate_config

    declared = {c["name"] for c in config.get("components", [])}
    unknown = sorted(set(prebuilt) - declared)
    if unknown:
        raise KeyError(f"{file}: no component named {unknown} to replace (components: {sorted(declared)})")
    validate_config(config, strict_version_check=strict_version_check)
    definition = get_pipeline_definition(pipeline_config=config, pipeline_name=pipeline_name)
    definitions = get_component_definitions(
        pipeline_config=config, overwrite_with_env_variables=overwrite_with_env_variables
    )
    built = dict(prebuilt)
    pipeline = Pipeline()
    for node in definition["nodes"]:
        component = Pipeline._load_or_get_component(name=node["name"], definitions=definitions, components=built)
        pipeline.add_node(component=component, name=node["name"], inputs=node["inputs"])
    pipeline.update_config_hash()
    return pipeline


__all__ = ["PIPELINES_DIR", "corpus_documents", "index_corpus", "load_pipeline"]
