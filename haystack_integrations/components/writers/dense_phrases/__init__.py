"""Dense phrase retrieval for Haystack: the indexer, importable as Haystack integrations are.

``PhraseIndexer`` (a writer: its output is ``DocumentWriter``'s plus ``phrases_encoded``) is
``dphr_haystack.haystack2.PhraseIndexer`` (the same class), saved in pipeline files as
``haystack_integrations.components.writers.dense_phrases.PhraseIndexer``, a name haystack-ai loads without an
allowlist.
"""

from __future__ import annotations

from dphr_haystack.haystack2 import PhraseIndexer
from haystack_integrations.document_stores.dense_phrases import PhraseDocumentStore  # noqa: F401  (publishes)

__all__ = ["PhraseIndexer"]
