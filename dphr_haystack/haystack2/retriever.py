"""PhraseRetriever: phrase answers and phrase-ranked passages from a PhraseDocumentStore, as a Haystack 2 component."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from haystack import Document, component
from haystack.core.serialization import default_to_dict
from haystack.dataclasses import ExtractedAnswer
from haystack.document_stores.types import FilterPolicy, apply_filter_policy
from haystack.utils import ComponentDevice

from ..documents.results import (
    NoAnswer,
    RetrievedAnswer,
    RetrievedDocument,
    check_no_answer_model,
    placed_threshold,
    retrieved,
    with_no_answer,
)
from ..documents.retrieval import resolve_max_answer_length
from ..errors import InvalidParameterError
from ..model.cache import load_phrase_model
from ..model.phrase_model import PhraseModel
from ..model.registry import DEFAULT_MODEL
from ..search_options import PhraseSearchOptions, SearchOptionAttributes, check_flag
from ..verification import check_verify_model
from .document_store import PhraseDocumentStore
from .filters import check_filters
from .serialization import (
    check_model_reference,
    component_device,
    component_from_dict,
    serialised_device,
    torch_device,
)
from .serialization import filter_policy as checked_filter_policy


@component
class PhraseRetriever(SearchOptionAttributes):
    """Dense phrase retrieval (DensePhrases) over a :class:`PhraseDocumentStore`.

    Outputs ``documents``, ranked by their best phrase (``unit="passage"``: passages by best phrase;
    ``"document"``: the best passage of each document group; ``"phrase"``: the passages of the top phrases),
    each with ``meta["best_phrase"]``, ``best_phrase_start``/``best_phrase_end`` (char offsets in ``content``) and
    ``best_phrase_score`` (raw); and ``answers``, the phrases as ``ExtractedAnswer``s with their document and
    offsets (in every unit a passage answers with its best phrase that is no copy of the question, none when all
    its retrieved phrases are copies). An answer's ``score``, in every unit, is the model's calibrated confidence
    (P(correct), in [0, 1]) when the model carries a calibration, else the scaled (or raw) phrase score as
    before; ``meta["raw_score"]`` keeps the raw one. With ``no_answer`` the answers also hold "no answer" as
    Haystack 2's readers give it (``ExtractedAnswer(data=None, document=None)``), scored 1 − P(the corpus holds an
    answer) (``meta["holds_answer"]`` of the answers, when the calibration gives it; else the top answer's
    confidence), with ``meta={"no_answer": True, "top_confidence": ..., "holds_answer": ...}``: first when that
    probability is below ``no_answer_threshold`` (or there is no answer), last otherwise
    (:func:`dphr_haystack.documents.results.with_no_answer`). Where the question names what no document writes, the
    answers and "no answer" say so in ``meta["unwritten_names"]`` (as the question writes them; the shipped model
    weighs them).

    Example:
        >>> retriever = PhraseRetriever(document_store=store)      # the shipped default model
        >>> retriever.warm_up()
        >>> retriever.run(query="Who wrote Hamlet?", unit="phrase", top_k=1)["answers"][0].data

    The search options (``top_k``, ``unit``, ``max_answer_length``, ``whole_words``, ``skip_question_copies``,
    ``truecase``, ``passage_scoring``, ``ranking``, ``query_precision``, ``batch_size``, ``threads``, ``scale_score``,
    ``no_answer``, ``no_answer_threshold``, ``verify``) have the names, defaults and meanings of
    :class:`~dphr_haystack.search_options.PhraseSearchOptions`, the one search contract of every front end (this
    component, the Haystack 1.x retriever, ``dphr search``, the REST server,
    :class:`~dphr_haystack.search.PhraseSearcher`); each reads and writes as an attribute (checked), and ``to_dict``
    writes them all. ``run`` takes ``top_k``, ``unit``, ``scale_score``, ``no_answer``, ``no_answer_threshold`` and
    ``verify`` per query (None: the init value); ``verify`` lets a question-answering reader read the top answer in
    its passage (:mod:`dphr_haystack.verification`). ``batch_size`` also batches the encoding of ``encode_missing``.

    Args:
        document_store: The store to search.
        model: ``dphr-minilm-squad-distilled`` (shipped, trained, the default), ``dphr-minilm-squad-384``,
            ``dphr-minilm-squad`` (shipped), ``minilm`` (untrained) or a phrase model directory.
        filters: Haystack 2 filters of every search (see ``filter_policy``).
        device: A ``haystack.utils.ComponentDevice`` (one CPU or CUDA device), or ``cpu``, ``cuda``, ``cuda:N``;
            None or ``auto`` (default): CUDA when available, else the CPU. Serialised as Haystack components do.
        encode_missing: Before searching, encode the phrases of documents written without them (for example by a
            ``DocumentWriter``). Off: such documents stay invisible until a ``PhraseIndexer`` run.
        filter_policy: How ``run``'s filters combine with ``filters``: ``REPLACE`` (default: they replace them) or
            ``MERGE`` (both apply), as in Haystack's retrievers; a ``FilterPolicy`` or its name.
    """

    def __init__(
        self,
        document_store: PhraseDocumentStore,
        model: str = DEFAULT_MODEL,
        top_k: int = 10,
        unit: Literal["phrase", "passage", "document"] = "passage",
        filters: dict[str, Any] | None = None,
        max_answer_length: int | None = None,
        whole_words: bool = True,
        skip_question_copies: bool = True,
        passage_scoring: Literal["max", "logsumexp"] = "max",
        batch_size: int = 32,
        device: ComponentDevice | str | None = None,
        scale_score: bool = True,
        encode_missing: bool = True,
        truecase: bool | None = None,
        filter_policy: FilterPolicy | str = FilterPolicy.REPLACE,
        query_precision: Literal["int8", "float32"] = "int8",
        ranking: Literal["confidence", "score"] = "confidence",
        no_answer: bool = False,
        no_answer_threshold: float | None = None,
        threads: int | None = None,
        verify: bool = False,
    ) -> None:
        if not isinstance(document_store, PhraseDocumentStore):
            raise InvalidParameterError(
                f"PhraseRetriever needs a PhraseDocumentStore, got {type(document_store).__name__}"
            )
        self.search_options = PhraseSearchOptions.from_params(locals())
        self.device = component_device(device)
        self.filter_policy = checked_filter_policy(filter_policy)
        if filters is not None and not isinstance(filters, dict):
            raise InvalidParameterError(f"filters must be a dict or None, got {type(filters).__name__}")
        check_filters(filters)
        self.encode_missing = check_flag("encode_missing", encode_missing)
        self.document_store = document_store
        self.model = check_model_reference(model)
        self.filters = filters
        self.phrase_model: PhraseModel | None = None

    def warm_up(self) -> None:
        """Loads the phrase model (once per process, shared by every component naming it) and has the store read
        what the first search would otherwise wait for (once)."""
        if self.phrase_model is None:
            model = load_phrase_model(self.model, torch_device(self.device))
            resolve_max_answer_length(model, self.max_answer_length)
            if self.verify:
                check_verify_model(model, self.model)
            self.document_store.warm_up(model, self.search_options)
            self.phrase_model = model

    def to_dict(self) -> dict[str, Any]:
        """Serialises the component, its store included, and every search option (``device`` as
        ``ComponentDevice.to_dict``, None for auto)."""
        return default_to_dict(
            self,
            document_store=self.document_store.to_dict(),
            model=self.model,
            filters=self.filters,
            device=serialised_device(self.device),
            encode_missing=self.encode_missing,
            filter_policy=self.filter_policy.value,
            **self.search_options.to_params(),
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PhraseRetriever:
        """Deserialises the component (its store: the live one of the same path or index, if any)."""
        return component_from_dict(cls, data, _deserialised_store)

    @component.output_types(documents=list[Document], answers=list[ExtractedAnswer])
    def run(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        unit: str | None = None,
        scale_score: bool | None = None,
        no_answer: bool | None = None,
        no_answer_threshold: float | None = None,
        verify: bool | None = None,
    ) -> dict[str, Any]:
        """Phrase-ranked documents and phrase answers for ``query``.

        Args:
            query: The question.
            filters: Haystack 2 filters; only matching documents are searched. They replace the init ``filters`` or
                are merged with them, per ``filter_policy``.
            top_k: Results (default: the init value).
            unit: ``phrase``, ``passage`` or ``document`` (default: the init value).
            scale_score: Scores in [0, 1] or raw (default: the init value).
            no_answer: Add "no answer" to the answers (default: the init value).
            no_answer_threshold: P(the documents hold an answer) below which "no answer" comes first (default: the
                init value).
            verify: A reader reads the top answer in its passage; the confidences weigh its view (default: the init
                value).

        Raises:
            InvalidParameterError: A bad option value (``top_k`` < 1, an unknown ``unit``, ``no_answer`` not a bool,
                ``no_answer_threshold`` not a number in [0, 1], ...) or ``no_answer`` with a model without a
                calibration, or ``verify`` with a model without a verification.
            InvalidQueryError: An empty query.
            haystack.errors.FilterError: Malformed filters.
        """
        options = self.search_options.updated(
            top_k=top_k,
            unit=unit,
            scale_score=scale_score,
            no_answer=no_answer,
            no_answer_threshold=no_answer_threshold,
            verify=verify,
        )
        check_filters(filters)
        filters = apply_filter_policy(self.filter_policy, self.filters, filters)
        check_filters(filters)  # before anything is encoded
        self.warm_up()
        assert self.phrase_model is not None
        if options.no_answer:
            check_no_answer_model(self.phrase_model, self.model)
        if options.verify:
            check_verify_model(self.phrase_model, self.model)
        store = self.document_store
        if self.encode_missing:
            store.update_phrases(self.phrase_model, batch_size=self.batch_size)
        pairs = store.search_phrases(self.phrase_model, [query], options, filters)[0]
        documents, answers = retrieved(pairs, lambda doc: doc.meta, options.scale_score)
        given = with_no_answer(answers, placed_threshold(self.phrase_model, options)) if options.no_answer else answers
        return {
            "documents": [self._document(d) for d in documents],
            "answers": [_answer(query, a) for a in given],
        }

    def _document(self, result: RetrievedDocument[Document]) -> Document:
        doc = result.document
        embedding = doc.embedding if self.document_store.return_embedding else None
        return dataclasses.replace(doc, meta=result.meta, score=result.score, embedding=embedding)


def _answer(query: str, result: RetrievedAnswer[Document] | NoAnswer) -> ExtractedAnswer:
    if isinstance(result, NoAnswer):  # as Haystack 2's readers give "no answer"
        return ExtractedAnswer(
            query=query,
            score=result.score,
            data=None,
            document=None,
            meta=result.meta(),
        )
    phrase = result.phrase
    return ExtractedAnswer(
        query=query,
        score=result.score,
        data=phrase.text,
        document=result.document,
        document_offset=ExtractedAnswer.Span(phrase.start, phrase.end),
        meta=result.meta,
    )


def _deserialised_store(params: dict[str, Any]) -> dict[str, Any]:
    """Init parameters with a serialised store replaced by the store (the live one of the same path or index)."""
    if isinstance(params.get("document_store"), dict):
        params["document_store"] = PhraseDocumentStore.from_dict(params["document_store"])
    return params


__all__ = ["PhraseRetriever"]
