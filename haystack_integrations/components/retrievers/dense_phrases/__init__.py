"""Dense phrase retrieval for Haystack: the retriever, importable as Haystack integrations are.

``PhraseRetriever`` is ``dphr_haystack.haystack2.PhraseRetriever`` (the same class), saved in pipeline files as
``haystack_integrations.components.retrievers.dense_phrases.PhraseRetriever``, a name haystack-ai loads without an
allowlist.
"""

from __future__ import annotations

from dphr_haystack.haystack2 import PhraseRetriever
from haystack_integrations.document_stores.dense_phrases import PhraseDocumentStore  # noqa: F401  (publishes)

__all__ = ["PhraseRetriever"]
