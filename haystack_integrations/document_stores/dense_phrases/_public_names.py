"""The public names of the dense phrase classes: the ``haystack_integrations`` modules that re-export them.

Haystack saves a component or document store under ``f"{cls.__module__}.{cls.__name__}"`` and, from haystack-ai 3,
loads pipeline files from allow-listed modules only (``haystack``, ``haystack_integrations``, ...), checking the
module a class really comes from. :func:`publish_classes` therefore gives the classes of ``dphr_haystack.haystack2``
these modules as ``__module__``: pipelines then save them under the ``haystack_integrations`` names and load without
an allowlist. The classes keep one identity, and the names they had before (``dphr_haystack.haystack2.<module>.
<Class>``) still load, with ``allowed_modules=["dphr_haystack.haystack2"]`` as before.
"""

from __future__ import annotations

import functools
from typing import Any

from haystack import component

from dphr_haystack.haystack2 import PhraseDocumentStore, PhraseIndexer, PhraseRetriever

# Each class and the haystack_integrations module that re-exports it (its public name).
PUBLIC_MODULES: dict[type, str] = {
    PhraseDocumentStore: "haystack_integrations.document_stores.dense_phrases",
    PhraseRetriever: "haystack_integrations.components.retrievers.dense_phrases",
    PhraseIndexer: "haystack_integrations.components.writers.dense_phrases",
}


def _accepting_legacy_type(cls: type, legacy: str) -> None:
    """Makes ``cls.from_dict`` take data saved under the class's former name ``legacy`` (Haystack's
    ``default_from_dict`` accepts the class's current name only)."""
    original = cls.__dict__["from_dict"].__func__
    current = f"{cls.__module__}.{cls.__name__}"

    @functools.wraps(original)
    def from_dict(klass: type, data: Any) -> Any:
        if isinstance(data, dict) and data.get("type") == legacy:
            data = {**data, "type": current}
        return original(klass, data)

    cls.from_dict = classmethod(from_dict)  # type: ignore[attr-defined]


def publish(cls: type, module: str) -> None:
    """Gives ``cls`` the public name ``module.<Class>``: its ``__module__``, the component registry's key that
    ``Pipeline.from_dict`` looks up, and the names ``from_dict`` accepts. Idempotent."""
    if cls.__module__ == module:
        return
    legacy = f"{cls.__module__}.{cls.__name__}"
    cls.__module__ = module
    if component.registry.get(legacy) is cls:  # a component (a document store is none): keep the old key too
        component.registry[f"{module}.{cls.__name__}"] = cls
    _accepting_legacy_type(cls, legacy)


def publish_classes() -> None:
    """Publishes every class of :data:`PUBLIC_MODULES` (all at once: a component's ``from_dict`` builds its store
    directly, so the two must agree on the store's name)."""
    for cls, module in PUBLIC_MODULES.items():
        publish(cls, module)


__all__ = ["PUBLIC_MODULES", "publish", "publish_classes"]
