"""PhraseRetriever: phrase answers and phrase-ranked passages from a PhraseDocumentStore, as a Haystack 2 component."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

from haystack import Document, component
from haystack.core.serialization import default_from_dict, default_to_dict
from haystack.dataclasses import ExtractedAnswer

from dphr_haystack import DEFAULT_MODEL, DocumentHit, InvalidParameterError, PhraseHit, PhraseModel
from dphr_haystack.params import check_param
from dphr_haystack.search import check_passage_scoring

from ._models import DEVICES, load_model
from .document_store import PhraseDocumentStore

UNITS = ("phrase", "passage", "document")
# Raw phrase scores are sums of two inner products; scale_score maps them to (0, 1) as Haystack scales dot-product
# similarities (expit(score / 100)), which keeps the ranking.
_SCORE_SCALE = 100.0


def check_top_k(top_k: Any) -> int:
    return check_param("top_k", top_k)


def check_unit(unit: Any) -> str:
    if unit not in UNITS:
        raise InvalidParameterError(f"unknown retrieval unit {unit!r}; valid units: {', '.join(UNITS)}")
    return unit


def _expit(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


@component
class PhraseRetriever:
    """Dense phrase retrieval (DensePhrases) over a :class:`PhraseDocumentStore`.

    Outputs ``documents``, ranked by their best phrase (``unit="passage"``: passages by best phrase;
    ``"document"``: the best passage of each document group; ``"phrase"``: the passages of the top phrases),
    each with ``meta["best_phrase"]``, ``best_phrase_start``/``best_phrase_end`` (char offsets in ``content``) and
    ``best_phrase_score`` (raw); and ``answers``, the phrases as ``ExtractedAnswer``s with their document and
    offsets. An answer's ``score`` is the model's calibrated confidence (P(correct)) when the model carries a
    calibration, else the scaled (or raw) phrase score; ``meta["raw_score"]`` keeps the raw one.

    Example:
        >>> retriever = PhraseRetriever(document_store=store)      # the shipped dphr-minilm-squad model
        >>> retriever.warm_up()
        >>> retriever.run(query="Who wrote Hamlet?", unit="phrase", top_k=1)["answers"][0].data

    Args:
        document_store: The store to search.
        model: ``dphr-minilm-squad`` (shipped, trained), ``minilm`` (untrained) or a phrase model directory.
        top_k: Results per query (overridable in ``run``).
        unit: ``phrase``, ``passage`` or ``document`` (overridable in ``run``).
        filters: Haystack 2 filters applied when ``run`` gets none.
        max_answer_length: Longest phrase in subwords (default: the model's).
        whole_words: Phrases start and end on word boundaries.
        skip_question_copies: Never answer with a phrase the question itself contains.
        passage_scoring: How passages and documents score their retrieved phrases: ``max`` (the best one) or
            ``logsumexp`` (all of them).
        batch_size: Batch size for query and phrase encoding.
        device: ``cpu``, ``cuda`` or ``auto``.
        scale_score: Map document scores (and uncalibrated answer scores) to (0, 1) with expit(score / 100).
        encode_missing: Before searching, encode the phrases of documents written without them (for example by a
            ``DocumentWriter``). Off: such documents stay invisible until a ``PhraseIndexer`` run.
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
        device: Literal["cpu", "cuda", "auto"] = "auto",
        scale_score: bool = True,
        encode_missing: bool = True,
    ) -> None:
        if not isinstance(document_store, PhraseDocumentStore):
            raise InvalidParameterError(
                f"PhraseRetriever needs a PhraseDocumentStore, got {type(document_store).__name__}"
            )
        check_top_k(top_k)
        check_unit(unit)
        check_param("batch_size", batch_size)
        if max_answer_length is not None:
            check_param("max_answer_length", max_answer_length)
        if device not in DEVICES:
            raise InvalidParameterError(f"device={device!r}; valid: {', '.join(DEVICES)}")
        if filters is not None and not isinstance(filters, dict):
            raise InvalidParameterError(f"filters must be a dict or None, got {type(filters).__name__}")
        for name, flag in (
            ("whole_words", whole_words),
            ("skip_question_copies", skip_question_copies),
            ("scale_score", scale_score),
            ("encode_missing", encode_missing),
        ):
            if not isinstance(flag, bool):
                raise InvalidParameterError(f"{name}={flag!r}; valid: true or false")
        self.document_store = document_store
        self.model = model
        self.top_k = top_k
        self.unit = unit
        self.filters = filters
        self.max_answer_length = max_answer_length
        self.whole_words = whole_words
        self.skip_question_copies = skip_question_copies
        self.passage_scoring = check_passage_scoring(passage_scoring)
        self.batch_size = batch_size
        self.device = device
        self.scale_score = scale_score
        self.encode_missing = encode_missing
        self.phrase_model: PhraseModel | None = None

    def warm_up(self) -> None:
        """Loads the phrase model (once per process, shared by every component naming it)."""
        if self.phrase_model is None:
            model = load_model(self.model, self.device)
            longest = self.max_answer_length or model.config.max_answer_length
            if longest > model.config.max_passage_length:
                raise InvalidParameterError(
                    f"max_answer_length={longest} exceeds the model's passage windows "
                    f"({model.config.max_passage_length} subwords)"
                )
            self.phrase_model = model

    def to_dict(self) -> dict[str, Any]:
        """Serialises the component, its store included."""
        return default_to_dict(
            self,
            document_store=self.document_store.to_dict(),
            model=self.model,
            top_k=self.top_k,
            unit=self.unit,
            filters=self.filters,
            max_answer_length=self.max_answer_length,
            whole_words=self.whole_words,
            skip_question_copies=self.skip_question_copies,
            passage_scoring=self.passage_scoring,
            batch_size=self.batch_size,
            device=self.device,
            scale_score=self.scale_score,
            encode_missing=self.encode_missing,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PhraseRetriever:
        """Deserialises the component (its store: the live one of the same path or index, if any)."""
        data = {**data, "init_parameters": dict(data.get("init_parameters", {}))}
        store = data["init_parameters"].get("document_store")
        if isinstance(store, dict):
            data["init_parameters"]["document_store"] = PhraseDocumentStore.from_dict(store)
        return default_from_dict(cls, data)

    @component.output_types(documents=list[Document], answers=list[ExtractedAnswer])
    def run(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        unit: str | None = None,
    ) -> dict[str, Any]:
        """Phrase-ranked documents and phrase answers for ``query``.

        Args:
            query: The question.
            filters: Haystack 2 filters (replace the init ones); only matching documents are searched.
            top_k: Results (default: the init value).
            unit: ``phrase``, ``passage`` or ``document`` (default: the init value).

        Raises:
            InvalidParameterError: ``top_k`` < 1 or an unknown ``unit``.
            InvalidQueryError: An empty query.
            haystack.errors.FilterError: Malformed filters.
        """
        top_k = self.top_k if top_k is None else check_top_k(top_k)
        unit = self.unit if unit is None else check_unit(unit)
        filters = self.filters if filters is None else filters
        self.warm_up()
        assert self.phrase_model is not None
        store = self.document_store
        if self.encode_missing:
            store.update_phrases(self.phrase_model, batch_size=self.batch_size)
        pairs = store.search_phrases(
            self.phrase_model,
            [query],
            unit=unit,
            top_k=top_k,
            filters=filters,
            max_answer_length=self.max_answer_length,
            whole_words=self.whole_words,
            skip_question_copies=self.skip_question_copies,
            batch_size=self.batch_size,
            passage_scoring=self.passage_scoring,
        )[0]
        documents: list[Document] = []
        answers: list[ExtractedAnswer] = []
        seen: set[str] = set()
        for hit, doc in pairs:
            phrase = _phrase_of(hit)
            answers.append(self._answer(query, phrase, doc))
            if doc.id in seen:
                continue
            seen.add(doc.id)
            score = phrase.score if isinstance(hit, PhraseHit) else hit.score
            meta = {
                **doc.meta,
                "best_phrase": phrase.text,
                "best_phrase_start": phrase.start,
                "best_phrase_end": phrase.end,
                "best_phrase_score": phrase.score,
            }
            if isinstance(hit, DocumentHit):
                meta["phrase_document_id"] = hit.document_id
            documents.append(
                dataclasses.replace(
                    doc,
                    meta=meta,
                    score=self._scaled(score),
                    embedding=doc.embedding if store.return_embedding else None,
                )
            )
        return {"documents": documents, "answers": answers}

    def _scaled(self, raw: float) -> float:
        return _expit(raw / _SCORE_SCALE) if self.scale_score else float(raw)

    def _answer(self, query: str, phrase: PhraseHit, doc: Document) -> ExtractedAnswer:
        meta = {"raw_score": phrase.score, "title": phrase.title, "phrase_document_id": phrase.document_id}
        score = self._scaled(phrase.score)
        if phrase.confidence is not None:
            score = meta["confidence"] = float(phrase.confidence)
        return ExtractedAnswer(
            query=query,
            score=score,
            data=phrase.text,
            document=doc,
            document_offset=ExtractedAnswer.Span(phrase.start, phrase.end),
            meta=meta,
        )


def _phrase_of(hit: Any) -> PhraseHit:
    if isinstance(hit, PhraseHit):
        return hit
    if isinstance(hit, DocumentHit):
        return hit.best_passage.best_phrase
    return hit.best_phrase


__all__ = ["PhraseRetriever"]
