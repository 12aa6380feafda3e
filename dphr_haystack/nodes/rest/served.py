"""The pipelines one REST app serves: the query pipeline, and the indexing pipeline when the file declares it.

Both come from one YAML file, read through the bounded YAML reader (an alias bomb is refused with
UnsafeYamlError naming the file before Haystack validates it). The indexing pipeline is built with the query
pipeline's components of the same names, so the two share one document store (and one phrase index in memory):
an upload is answerable as soon as ``/file-upload`` returns, even for a store without a ``path``. A pipeline that
cannot be built stops the start-up with InvalidParameterError naming its cause and the environment overrides in
effect: a server that would fail every request never says it is initialized. Building them fetches nothing:
Haystack's PreProcessor asks NLTK to download its sentence tokenizer (punkt) on creation whenever it is missing,
a network call at every start (and a wait where no network answers); that download is skipped
(:func:`no_nltk_downloads`). The served PreProcessor splits by blank lines and needs no NLTK data. Before the
server says it is initialized, each phrase retriever of the query pipeline reads what its first search would
otherwise wait for (:meth:`~dphr_haystack.nodes.PhraseRetriever.warm_up`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from haystack import Pipeline
from haystack.document_stores import BaseDocumentStore

from ..._util.safe_yaml import read_yaml
from ...errors import DphrError, InvalidParameterError
from ..document_store import PhraseDocumentStore
from ..pipeline import load_pipeline
from ..retriever import PhraseRetriever
from .settings import RestSettings, described_overrides, env_overrides

logger = logging.getLogger(__name__)


@dataclass
class ServedPipelines:
    """The query pipeline, the indexing pipeline (None when the file declares none) and their document store."""

    query: Pipeline
    indexing: Pipeline | None
    document_store: BaseDocumentStore | None
    file: Path

    def phrase_retriever(self) -> PhraseRetriever | None:
        """The first PhraseRetriever of the query pipeline, else of the indexing pipeline."""
        for pipeline in (self.query, self.indexing):
            for node in pipeline.get_nodes_by_class(PhraseRetriever) if pipeline is not None else []:
                return node
        return None

    def phrase_store(self) -> PhraseDocumentStore | None:
        store = self.document_store
        return store if isinstance(store, PhraseDocumentStore) else None


@contextmanager
def no_nltk_downloads() -> Iterator[None]:
    """While the block runs, ``nltk.download`` downloads nothing (it logs what was asked and returns False, as a
    failed download does). A sentence split asked of an upload where NLTK's punkt is not installed then fails with
    NLTK's LookupError naming the data to install."""
    try:
        import nltk
    except ImportError:  # no NLTK: nothing can download
        yield
        return
    download = nltk.download

    def skipped(info_or_id: Any = None, *args: Any, **kwargs: Any) -> bool:
        logger.info("not downloading NLTK data %r: the REST app fetches nothing from the network", info_or_id)
        return False

    nltk.download = skipped
    try:
        yield
    finally:
        nltk.download = download


def _read_config(file: Path) -> dict[str, Any]:
    if not file.is_file():
        raise InvalidParameterError(f"pipeline file {file} does not exist (PIPELINE_YAML_PATH)")
    config = read_yaml(file)
    if not isinstance(config, dict) or not isinstance(config.get("pipelines"), list):
        raise InvalidParameterError(f"{file} is not a pipeline file (a mapping with components and pipelines)")
    return config


def _overrides(config: dict[str, Any], settings: RestSettings) -> dict[str, dict[str, Any]]:
    overrides = env_overrides(config)
    for name, params in settings.overrides.items():
        overrides.setdefault(name, {}).update(params)
    by_type = {
        PhraseDocumentStore.__name__: {"path": str(settings.store_path)} if settings.store_path is not None else {},
        PhraseRetriever.__name__: settings.phrase_retriever_params,
    }
    for component in config.get("components") or []:
        params = by_type.get(component.get("type")) if isinstance(component, dict) else None
        if params and isinstance(component.get("name"), str):
            overrides.setdefault(component["name"], {}).update(params)
    return overrides


def _build(
    role: str,
    name: str,
    file: Path,
    config: dict[str, Any],
    overrides: dict[str, dict[str, Any]],
    components: dict[str, Any] | None = None,
) -> Pipeline:
    try:
        with no_nltk_downloads():
            return load_pipeline(
                file, name, overrides=overrides or None, overwrite_with_env_variables=False, components=components
            )
    except Exception as exc:  # noqa: BLE001  (reported with its cause and the overrides in effect)
        cause: BaseException = exc
        while cause.__cause__ is not None and not isinstance(cause, DphrError):
            cause = cause.__cause__
        raise InvalidParameterError(
            f"the {role} pipeline {name!r} of {file} could not be built ({type(cause).__name__}: {cause}); "
            f"environment overrides: {described_overrides(config)}"
        ) from exc


def load_served_pipelines(settings: RestSettings) -> ServedPipelines:
    """Build the pipelines ``settings`` name (see the module docstring)."""
    file = Path(settings.pipeline_yaml)
    config = _read_config(file)
    overrides = _overrides(config, settings)
    declared = {p.get("name") for p in config["pipelines"] if isinstance(p, dict)}
    if settings.query_pipeline not in declared:
        raise InvalidParameterError(
            f"{file} declares no pipeline {settings.query_pipeline!r} (QUERY_PIPELINE_NAME); it declares "
            f"{', '.join(sorted(str(n) for n in declared)) or 'none'}"
        )
    query = _build("query", settings.query_pipeline, file, config, overrides)
    indexing = None
    if settings.indexing_pipeline in declared:
        components = {c["name"] for c in config.get("components") or [] if isinstance(c, dict) and "name" in c}
        shared = {name: query.get_node(name) for name in query.graph.nodes if name in components}
        store = query.get_document_store()
        if store is not None and getattr(store, "name", None) in components:
            shared[store.name] = store
        shared = {name: node for name, node in shared.items() if node is not None}
        indexing = _build("indexing", settings.indexing_pipeline, file, config, overrides, shared or None)
    store = query.get_document_store() or (indexing.get_document_store() if indexing is not None else None)
    for name in query.graph.nodes:  # the first question waits for nothing a retriever can read now
        node = query.get_node(name)
        if isinstance(node, PhraseRetriever):
            node.warm_up()
    return ServedPipelines(query=query, indexing=indexing, document_store=store, file=file)


__all__ = ["ServedPipelines", "load_served_pipelines", "no_nltk_downloads"]
