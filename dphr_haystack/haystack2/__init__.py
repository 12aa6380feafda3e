"""Dense phrase retrieval for Haystack 2.x/3.x (``haystack-ai``): a document store, a retriever and an indexer.

Install with ``pip install "dphr-haystack[haystack2]"`` (never beside the ``haystack`` extra, which is Haystack 1.x).
The classes are also importable as Haystack integrations are, under the names pipelines save them with, which load
with a plain ``Pipeline.loads(text)``:

- ``haystack_integrations.document_stores.dense_phrases.PhraseDocumentStore``
- ``haystack_integrations.components.retrievers.dense_phrases.PhraseRetriever``
- ``haystack_integrations.components.writers.dense_phrases.PhraseIndexer``

Files saved under the names of this package's modules load with ``Pipeline.loads(text,
allowed_modules=ALLOWED_MODULES)`` (haystack-ai 3 imports pipeline classes from trusted modules only) or with
:func:`load_pipeline`.
"""

from __future__ import annotations

import os

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import copy
import inspect
from pathlib import Path
from typing import Any

from haystack import Pipeline
from haystack.marshal import YamlMarshaller

from .._util.resources import pipelines_dir
from .document_store import PhraseDocumentStore
from .indexer import PhraseIndexer
from .retriever import PhraseRetriever

ALLOWED_MODULES = ["dphr_haystack.haystack2"]
# The Haystack 2 YAML pipelines shipped with the package (pipelines/haystack2 in the repository).
PIPELINES_DIR = pipelines_dir() / "haystack2"


def load_pipeline(path: str | Path, overrides: dict[str, dict[str, Any]] | None = None) -> Pipeline:
    """A Haystack 2 pipeline from a YAML file, trusting this package's components (and Haystack's own) only.

    Args:
        path: The YAML file. A bare name such as ``hybrid_rrf.yml`` is also looked up among the shipped Haystack 2
            pipelines (:data:`PIPELINES_DIR`) when it is not a file.
        overrides: ``{component name: {init parameter: value}}`` merged into the file's components before they are
            built (e.g. ``{"phrase": {"model": "/path/to/model"}}``); an unknown component name raises KeyError.
    """
    file = Path(path)
    if not file.is_file() and not file.parent.parts and (PIPELINES_DIR / file.name).is_file():
        file = PIPELINES_DIR / file.name
    text = file.read_text(encoding="utf-8")
    trusted = _trusting()
    if not overrides:
        return Pipeline.loads(text, **trusted)
    data = copy.deepcopy(YamlMarshaller().unmarshal(text))
    declared = data.get("components", {})
    for name, params in overrides.items():
        if name not in declared:
            raise KeyError(f"{file}: no component named {name!r} (components: {sorted(declared)})")
        declared[name].setdefault("init_parameters", {}).update(params)
    return Pipeline.from_dict(data, **trusted)


def _trusting() -> dict[str, Any]:
    """``allowed_modules`` for haystack-ai 3, which loads classes of allow-listed modules only; nothing for 2.x,
    which has no allowlist (and no such argument)."""
    if "allowed_modules" in inspect.signature(Pipeline.from_dict).parameters:
        return {"allowed_modules": ALLOWED_MODULES}
    return {}


# The classes' public names are their haystack_integrations modules: importing one gives them those names, so that
# pipelines save them as types haystack-ai loads without an allowlist (a plain import: that module imports this one).
import haystack_integrations.document_stores.dense_phrases  # noqa: E402, F401

__all__ = [
    "ALLOWED_MODULES",
    "PIPELINES_DIR",
    "PhraseDocumentStore",
    "PhraseIndexer",
    "PhraseRetriever",
    "load_pipeline",
]
