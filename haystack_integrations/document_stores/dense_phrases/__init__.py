"""Dense phrase retrieval for Haystack: the document store, importable as Haystack integrations are.

``PhraseDocumentStore`` is ``dphr_haystack.haystack2.PhraseDocumentStore`` (the same class), saved in pipeline files
as ``haystack_integrations.document_stores.dense_phrases.PhraseDocumentStore``, a name haystack-ai loads without an
allowlist.
"""

from __future__ import annotations

from dphr_haystack.haystack2 import PhraseDocumentStore

from ._public_names import publish_classes

publish_classes()

__all__ = ["PhraseDocumentStore"]
