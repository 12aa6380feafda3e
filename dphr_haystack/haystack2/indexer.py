"""PhraseIndexer: the indexing-pipeline component that writes documents and encodes their phrases."""

from __future__ import annotations

from typing import Any

from haystack import Document, component
from haystack.core.serialization import default_to_dict
from haystack.document_stores.types import DuplicatePolicy
from haystack.utils import ComponentDevice

from ..errors import InvalidParameterError
from ..model.cache import load_phrase_model
from ..model.phrase_model import PhraseModel
from ..model.registry import DEFAULT_MODEL
from ..params import check_param
from ..search_options import check_flag
from .document_store import PhraseDocumentStore
from .serialization import (
    check_model_reference,
    component_device,
    component_from_dict,
    serialised_device,
    torch_device,
)


@component
class PhraseIndexer:
    """Writes ``documents`` to a :class:`PhraseDocumentStore`, then encodes the phrases of every stored document
    that has none yet: these documents, and any a ``DocumentWriter`` wrote before.

    Its output matches ``DocumentWriter``'s (``documents_written``), plus ``phrases_encoded`` (documents encoded
    by this run). Encoding commits every 512 documents, so an interrupted run resumes where it stopped.

    Example:
        >>> pipeline.add_component("splitter", DocumentSplitter(split_by="word", split_length=100))
        >>> pipeline.add_component("indexer", PhraseIndexer(document_store=store))
        >>> pipeline.connect("splitter.documents", "indexer.documents")

    Args:
        document_store: The store to write to.
        model: ``dphr-minilm-squad-distilled`` (shipped, trained, the default), ``dphr-minilm-squad-384``,
            ``dphr-minilm-squad`` (shipped), ``minilm``
            (untrained) or a phrase model directory; the
            ``PhraseRetriever`` of the store must use the same model.
        policy: Duplicate policy for ids already stored (``NONE`` means ``FAIL``, as in ``InMemoryDocumentStore``).
        batch_size: Passage encoding batch size.
        device: A ``haystack.utils.ComponentDevice``, or ``cpu``, ``cuda``, ``cuda:N``; None or ``auto`` (default):
            CUDA when available, else the CPU.
        progress_bar: Show a progress bar while encoding.
    """

    def __init__(
        self,
        document_store: PhraseDocumentStore,
        model: str = DEFAULT_MODEL,
        policy: DuplicatePolicy = DuplicatePolicy.OVERWRITE,
        batch_size: int = 32,
        device: ComponentDevice | str | None = None,
        progress_bar: bool = True,
    ) -> None:
        if not isinstance(document_store, PhraseDocumentStore):
            raise InvalidParameterError(
                f"PhraseIndexer needs a PhraseDocumentStore, got {type(document_store).__name__}"
            )
        if isinstance(policy, str):
            try:
                policy = DuplicatePolicy[policy.upper()]
            except KeyError:
                raise InvalidParameterError(
                    f"policy={policy!r}; valid: {', '.join(p.name for p in DuplicatePolicy)}"
                ) from None
        if not isinstance(policy, DuplicatePolicy):
            raise InvalidParameterError(f"policy must be a DuplicatePolicy, got {policy!r}")
        check_param("batch_size", batch_size)
        self.device = component_device(device)
        check_flag("progress_bar", progress_bar)
        self.document_store = document_store
        self.model = check_model_reference(model)
        self.policy = policy
        self.batch_size = batch_size
        self.progress_bar = progress_bar
        self.phrase_model: PhraseModel | None = None

    def warm_up(self) -> None:
        """Loads the phrase model (once per process)."""
        if self.phrase_model is None:
            self.phrase_model = load_phrase_model(self.model, torch_device(self.device))

    def to_dict(self) -> dict[str, Any]:
        """Serialises the component, its store included."""
        return default_to_dict(
            self,
            document_store=self.document_store.to_dict(),
            model=self.model,
            policy=self.policy.name,
            batch_size=self.batch_size,
            device=serialised_device(self.device),
            progress_bar=self.progress_bar,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PhraseIndexer:
        """Deserialises the component (its store: the live one of the same path or index, if any)."""
        return component_from_dict(cls, data, _deserialised_params)

    @component.output_types(documents_written=int, phrases_encoded=int)
    def run(self, documents: list[Document], policy: DuplicatePolicy | None = None) -> dict[str, int]:
        """Writes ``documents`` and encodes the phrases of all stored documents that lack them.

        Args:
            documents: Documents to write.
            policy: Overrides the init duplicate policy for this run.
        """
        self.warm_up()
        assert self.phrase_model is not None
        written = self.document_store.write_documents(documents, policy=policy or self.policy)
        encoded = self.document_store.update_phrases(
            self.phrase_model, batch_size=self.batch_size, progress_bar=self.progress_bar
        )
        return {"documents_written": written, "phrases_encoded": encoded}


def _deserialised_params(params: dict[str, Any]) -> dict[str, Any]:
    """Init parameters with a serialised store replaced by the store; the policy stays a name (``__init__``
    resolves and checks it)."""
    if isinstance(params.get("document_store"), dict):
        params["document_store"] = PhraseDocumentStore.from_dict(params["document_store"])
    return params


__all__ = ["PhraseIndexer"]
