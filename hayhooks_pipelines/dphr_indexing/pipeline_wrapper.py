"""Hayhooks deployment of the shipped ``indexing.yml``: documents in, how many were written out.

The pipeline is the shipped YAML as is, except for its document store, which opens the store directory named by
``DPHR_STORE_PATH`` (default: ``dphr-store`` in the server's working directory), the one ``dphr_phrase_qa`` answers
from. ``DPHR_MODEL`` names another phrase model (a shipped name or a model directory; the default is the YAML's), the
same for both pipelines.
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException
from hayhooks import BasePipelineWrapper, log
from haystack import Document
from pydantic import BaseModel, Field

from dphr_haystack.haystack2 import PIPELINES_DIR
from dphr_haystack.haystack2.deployment import client_error, pipeline_on_store, store_path

PIPELINE_FILE = PIPELINES_DIR / "indexing.yml"
COMPONENT = "indexer"


class TextDocument(BaseModel):
    """A document to index."""

    content: str = Field(min_length=1, description="The document's text")
    meta: dict[str, Any] = Field(default_factory=dict, description="Meta fields (e.g. title), for filters")
    id: str | None = Field(default=None, description="The document's id (default: derived from content and meta)")


class Indexed(BaseModel):
    """What one indexing request changed in the store."""

    documents_written: int = Field(description="Documents written (one with a stored id replaces it)")
    phrases_encoded: int = Field(description="Documents whose phrases were encoded")


class PipelineWrapper(BasePipelineWrapper):
    """Writes documents to the shared store directory and encodes their phrases (``indexing.yml``)."""

    def setup(self) -> None:
        """Loads the shipped YAML on the store directory and the phrase model."""
        self.pipeline = pipeline_on_store(PIPELINE_FILE, COMPONENT)
        self.pipeline.warm_up()
        log.info("dphr_indexing: store directory {}", store_path())

    def run_api(self, documents: list[TextDocument]) -> Indexed:
        """
        Indexes documents: writes them to the store and encodes their phrases.

        Args:
            documents: The documents, each with its text and optional meta fields and id.

        Returns:
            How many documents were written and how many had their phrases encoded.
        """
        given = [_document(d) for d in documents]
        try:
            result = self.pipeline.run({COMPONENT: {"documents": given}})
        except Exception as error:  # a component's error reaches here wrapped in Haystack's PipelineRuntimeError
            cause = client_error(error)
            if cause is None:
                raise
            raise HTTPException(status_code=422, detail=str(cause)) from error
        return Indexed(**result[COMPONENT])


def _document(given: TextDocument | dict[str, Any]) -> Document:
    """A Haystack document from a request's document (Hayhooks passes nested request models as dicts)."""
    doc = given if isinstance(given, TextDocument) else TextDocument.model_validate(given)
    return Document(content=doc.content, meta=doc.meta, **({"id": doc.id} if doc.id else {}))
