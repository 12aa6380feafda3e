"""PhraseRetriever: phrase answers, phrase-ranked passages and documents from a PhraseDocumentStore."""

from __future__ import annotations

from typing import Any, Literal

from haystack.document_stores import BaseDocumentStore
from haystack.errors import HaystackError
from haystack.nodes import BaseRetriever
from haystack.schema import Answer, Document, Span

from ..documents.encoding import PhraseEncoding
from ..documents.filters import check_legacy_filters
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
from ..documents.validation import check_storable
from ..errors import InvalidParameterError
from ..model.cache import load_phrase_model
from ..model.registry import DEFAULT_MODEL
from ..search_options import PhraseSearchOptions, SearchOptionAttributes, check_flag
from ..verification import check_verify_model
from ._schema import typed_init
from .document_store import PhraseDocumentStore


@typed_init
class PhraseRetriever(SearchOptionAttributes, BaseRetriever, PhraseEncoding):
    """Dense phrase retrieval (DensePhrases) as a Haystack 1.x retriever.

    ``retrieve`` returns Documents ranked by their best phrase: ``score`` is the phrase-derived passage
    (or document) score and ``meta`` gains ``best_phrase``, ``best_phrase_start``/``best_phrase_end``
    (char offsets in ``content``) and ``best_phrase_score`` (raw). In a pipeline, ``run`` also returns the
    phrases as extractive ``Answer``s: in every unit a passage answers with its best phrase that is no copy of
    the question (none when all its retrieved phrases are copies).

    Example:
        >>> store = PhraseDocumentStore()
        >>> retriever = PhraseRetriever(document_store=store, unit="phrase")   # the shipped default model
        >>> store.index_documents([Document("Hamlet was written by Shakespeare.")], retriever)
        >>> retriever.run_query("Who wrote Hamlet?")[0]["answers"][0].answer

    The search options (``top_k``, ``unit``, ``max_answer_length``, ``whole_words``, ``skip_question_copies``,
    ``truecase``, ``passage_scoring``, ``ranking``, ``query_precision``, ``batch_size``, ``threads``, ``scale_score``,
    ``no_answer``, ``no_answer_threshold``, ``verify``) have the names, defaults and meanings of
    :class:`~dphr_haystack.search_options.PhraseSearchOptions`, the one search contract of every front end (this
    retriever, the Haystack 2 component, ``dphr search``, the REST server,
    :class:`~dphr_haystack.search.PhraseSearcher`); each reads and writes as an attribute (``retriever.top_k = 5``,
    checked). Here in particular: with ``unit="phrase"`` the documents are the top phrases' passages, deduplicated;
    ``document`` groups passages by the store's ``document_id_field``. A phrase answer of a calibrated model (the
    shipped one) scores its calibrated confidence (P(correct)) as ``Answer.score`` and ``meta["confidence"]``, raw
    score in ``meta["raw_score"]``; its Documents score their answer's confidence capped by those ranked above (raw
    score in ``meta["phrase_score"]``).
    ``no_answer`` adds to ``run``'s answers "no answer" as Haystack 1.x's readers write it (empty text, no context,
    offsets (0, 0)), scored 1 − P(the corpus holds an answer) (``meta["holds_answer"]`` of the answers, when the
    calibration gives it; else the top answer's confidence), with ``meta={"no_answer": True, "top_confidence": ...,
    "holds_answer": ...}``; it needs a model with a calibration, and documents never change. Where the question names
    what no document writes, the answers and "no answer" say so in ``meta["unwritten_names"]`` (as the question
    writes them; the shipped model weighs them). ``batch_size`` also batches passage encoding.
    ``verify`` lets a question-answering reader read each query's top answer in its passage (one reader pass a query,
    :mod:`dphr_haystack.verification`): its confidence, and "no answer", then weigh what the reader sees.
    ``run``, ``run_query`` (and their batch forms) take ``top_k``, ``unit``, ``scale_score``, ``no_answer``,
    ``no_answer_threshold`` and ``verify`` per query (None: the init value), so a pipeline passes them as
    ``params={"Retriever": {"no_answer": True, "verify": True}}``.

    Args:
        document_store: The PhraseDocumentStore to search.
        model: Phrase model: ``dphr-minilm-squad-distilled`` (the default: trained, shipped with the package,
            offline), ``dphr-minilm-squad-384`` (shipped, the previous default: the same windows without distillation),
            ``dphr-minilm-squad`` (shipped, 192-subword windows: indexes ~5% faster on a CPU, answers less well),
            ``minilm`` (untrained, built on the offline all-MiniLM-L6-v2), a model directory, a DensePhrases
            checkpoint directory or a hub name. Loaded once per process and device.
        filter_threshold: Token-filter threshold used when this retriever creates a phrase index (an indexing
            option): ``"model"`` (the default) takes the one chosen when the model's filter was trained (none for an
            untrained model), a number sets it, None keeps every token.
        device: ``cpu``, ``cuda`` or ``auto`` (Haystack 1.x's convention: a string).
        return_answers: Emit ``answers`` besides ``documents`` in ``run``. Turn off for Haystack's SAS
            evaluation, which cannot handle a node that emits both.
    """

    outgoing_edges = 1

    def __init__(
        self,
        document_store: BaseDocumentStore | None = None,
        model: str = DEFAULT_MODEL,
        top_k: int = 10,
        unit: Literal["phrase", "passage", "document"] = "passage",
        max_answer_length: int | None = None,
        whole_words: bool = True,
        skip_question_copies: bool = True,
        passage_scoring: Literal["max", "logsumexp"] = "max",
        filter_threshold: float | Literal["model"] | None = "model",
        truecase: bool | None = None,
        batch_size: int = 32,
        device: Literal["cpu", "cuda", "auto"] = "auto",
        scale_score: bool = True,
        return_answers: bool = True,
        threads: int | None = None,
        query_precision: Literal["int8", "float32"] = "int8",
        ranking: Literal["confidence", "score"] = "confidence",
        no_answer: bool = False,
        no_answer_threshold: float | None = None,
        verify: bool = False,
    ):
        super().__init__()
        if document_store is not None and not isinstance(document_store, PhraseDocumentStore):
            raise InvalidParameterError(
                f"PhraseRetriever needs a PhraseDocumentStore, got {type(document_store).__name__}"
            )
        self.search_options = PhraseSearchOptions.from_params(locals())
        self.document_store = document_store
        self.model = model
        self.device = device
        self.return_answers = check_flag("return_answers", return_answers)
        self.phrase_model = load_phrase_model(model, device)
        if filter_threshold == "model":
            filter_threshold = self.phrase_model.config.filter_threshold
        elif isinstance(filter_threshold, str) or isinstance(filter_threshold, bool):
            raise InvalidParameterError(f"filter_threshold={filter_threshold!r}; valid: 'model', a number or None")
        self.filter_threshold = filter_threshold
        resolve_max_answer_length(self.phrase_model, self.max_answer_length)  # within the model's passage window
        if self.no_answer:
            check_no_answer_model(self.phrase_model, model)
        if self.verify:
            check_verify_model(self.phrase_model, model)

    def warm_up(self, index: str | None = None) -> None:
        """Read now what the first search of the store's ``index`` would otherwise wait for (the REST server calls it
        before it reports ready)."""
        if isinstance(self.document_store, PhraseDocumentStore):
            self.document_store.warm_up(self.phrase_model, self.search_options, index)

    # ----------------------------------------------------------------- BaseRetriever API
    def retrieve(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        index: str | None = None,
        headers: dict[str, str] | None = None,
        scale_score: bool | None = None,
        document_store: BaseDocumentStore | None = None,
    ) -> list[Document]:
        """Top-k Documents for one query (see the class docstring for ``unit``)."""
        asked = self.search_options.updated(top_k=top_k, scale_score=scale_score)
        return self._search([query], filters, asked, index, document_store)[0][0]

    def retrieve_batch(
        self,
        queries: list[str],
        filters: dict[str, Any] | list[dict[str, Any] | None] | None = None,
        top_k: int | None = None,
        index: str | None = None,
        headers: dict[str, str] | None = None,
        batch_size: int | None = None,
        scale_score: bool | None = None,
        document_store: BaseDocumentStore | None = None,
    ) -> list[list[Document]]:
        """Top-k Documents per query; queries are encoded in batches of ``batch_size``."""
        asked = self.search_options.updated(top_k=top_k, batch_size=batch_size, scale_score=scale_score)
        return [docs for docs, _ in self._search(queries, filters, asked, index, document_store)]

    def run(  # type: ignore[override]
        self,
        root_node: str,
        query: str | None = None,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        documents: list[Document] | None = None,
        index: str | None = None,
        headers: dict[str, str] | None = None,
        scale_score: bool | None = None,
        unit: str | None = None,
        no_answer: bool | None = None,
        no_answer_threshold: float | None = None,
        verify: bool | None = None,
    ):
        """BaseRetriever's ``run``, also taking ``unit``, ``no_answer``, ``no_answer_threshold`` and ``verify`` (None:
        the init values), so that a pipeline passes them per query (``params={"Retriever": {"no_answer": True}}``)."""
        if root_node != "Query":
            return super().run(root_node, query, filters, top_k, documents, index, headers, scale_score)
        if query is None:
            raise HaystackError(
                "Must provide a 'query' parameter for retrievers in pipelines where Query is the root node."
            )
        self.query_count += 1
        return self.timing(self.run_query, "query_time")(
            query=query,
            filters=filters,
            top_k=top_k,
            index=index,
            headers=headers,
            scale_score=scale_score,
            unit=unit,
            no_answer=no_answer,
            no_answer_threshold=no_answer_threshold,
            verify=verify,
        )

    def run_batch(  # type: ignore[override]
        self,
        root_node: str,
        queries: list[str] | None = None,
        filters: dict[str, Any] | list[dict[str, Any] | None] | None = None,
        top_k: int | None = None,
        documents: list[Document] | list[list[Document]] | None = None,
        index: str | None = None,
        headers: dict[str, str] | None = None,
        scale_score: bool | None = None,
        unit: str | None = None,
        no_answer: bool | None = None,
        no_answer_threshold: float | None = None,
        verify: bool | None = None,
    ):
        """BaseRetriever's ``run_batch``, also taking ``scale_score``, ``unit``, ``no_answer``,
        ``no_answer_threshold`` and ``verify`` as ``run`` does."""
        if root_node != "Query":
            return super().run_batch(root_node, queries, filters, top_k, documents, index, headers)
        if queries is None:
            raise HaystackError(
                "Must provide a 'queries' parameter for retrievers in pipelines where Query is the root node."
            )
        self.query_count += len(queries) if isinstance(queries, list) else 1
        return self.timing(self.run_query_batch, "query_time")(
            queries=queries,
            filters=filters,
            top_k=top_k,
            index=index,
            headers=headers,
            scale_score=scale_score,
            unit=unit,
            no_answer=no_answer,
            no_answer_threshold=no_answer_threshold,
            verify=verify,
        )

    def run_query(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        index: str | None = None,
        headers: dict[str, str] | None = None,
        scale_score: bool | None = None,
        unit: str | None = None,
        no_answer: bool | None = None,
        no_answer_threshold: float | None = None,
        verify: bool | None = None,
    ):
        """Documents and answers for one query (each option None: the init value)."""
        asked = self.search_options.updated(
            top_k=top_k,
            scale_score=scale_score,
            unit=unit,
            no_answer=no_answer,
            no_answer_threshold=no_answer_threshold,
            verify=verify,
        )
        docs, answers = self._search([query], filters, asked, index)[0]
        output: dict[str, Any] = {"documents": docs}
        if self.return_answers:
            output["answers"] = answers
        return output, "output_1"

    def run_query_batch(
        self,
        queries: list[str],
        filters: dict[str, Any] | list[dict[str, Any] | None] | None = None,
        top_k: int | None = None,
        index: str | None = None,
        headers: dict[str, str] | None = None,
        batch_size: int | None = None,
        scale_score: bool | None = None,
        unit: str | None = None,
        no_answer: bool | None = None,
        no_answer_threshold: float | None = None,
        verify: bool | None = None,
    ):
        """Documents and answers per query, as ``run_query``."""
        if isinstance(queries, str):
            one = filters if not isinstance(filters, list) else filters[0]
            return self.run_query(
                queries,
                one,
                top_k,
                index,
                scale_score=scale_score,
                unit=unit,
                no_answer=no_answer,
                no_answer_threshold=no_answer_threshold,
                verify=verify,
            )
        asked = self.search_options.updated(
            top_k=top_k,
            batch_size=batch_size,
            scale_score=scale_score,
            unit=unit,
            no_answer=no_answer,
            no_answer_threshold=no_answer_threshold,
            verify=verify,
        )
        results = self._search(queries, filters, asked, index)
        output: dict[str, Any] = {"documents": [docs for docs, _ in results]}
        if self.return_answers:
            output["answers"] = [answers for _, answers in results]
        return output, "output_1"

    def run_indexing(self, documents: list[Document]):
        """Indexing pipelines (``File`` root): encode the documents' phrases (with a progress bar); the pipeline's
        DocumentStore node, which writes the same documents next, commits them with the documents."""
        store = self.document_store
        if not isinstance(store, PhraseDocumentStore):
            raise InvalidParameterError("PhraseRetriever has no PhraseDocumentStore to index into")
        for doc in documents:  # refused before encoding: the store would refuse to write them
            if isinstance(doc, Document):
                check_storable(doc.id, doc.content, doc.meta, embedding=doc.embedding)
        store.stage_phrases(documents, self)
        return {"documents": documents}, "output_1"

    # ----------------------------------------------------------------- search
    def _search(
        self,
        queries: list[str],
        filters,
        options: PhraseSearchOptions,
        index: str | None,
        document_store: BaseDocumentStore | None = None,
    ) -> list[tuple[list[Document], list[Answer]]]:
        """Make one store call with the query's ``options`` (the store searches and scores), build Documents and
        Answers (with "no answer" when ``options.no_answer``)."""
        store = document_store or self.document_store
        if not isinstance(store, PhraseDocumentStore):
            raise InvalidParameterError("PhraseRetriever has no PhraseDocumentStore: pass document_store")
        if isinstance(queries, str):
            raise InvalidParameterError("retrieve_batch takes a list of queries, not one string")
        for one in filters if isinstance(filters, list) else [filters]:  # even where the store has nothing to search
            check_legacy_filters(one)
        if options.no_answer:  # refused before searching
            check_no_answer_model(self.phrase_model, self.model)
        if options.verify:
            check_verify_model(self.phrase_model, self.model)
        results = store.search_phrases(self.phrase_model, list(queries), options, filters, index, self.model)
        threshold = placed_threshold(self.phrase_model, options) if options.no_answer else None
        out = []
        for pairs in results:
            documents, answers = retrieved(pairs, lambda doc: doc.meta, options.scale_score)
            given = with_no_answer(answers, threshold) if options.no_answer else answers
            out.append(([_document(d) for d in documents], [_answer(a) for a in given]))
        return out


def _document(result: RetrievedDocument[Document]) -> Document:
    doc = result.document
    return Document(
        content=doc.content,
        content_type=doc.content_type,
        id=doc.id,
        meta=result.meta,
        score=result.score,
        id_hash_keys=doc.id_hash_keys,
    )


def _answer(result: RetrievedAnswer[Document] | NoAnswer) -> Answer:
    if isinstance(result, NoAnswer):  # as Haystack 1.x's readers give "no answer"
        return Answer(
            answer="",
            type="extractive",
            score=result.score,
            context=None,
            offsets_in_context=[Span(start=0, end=0)],
            offsets_in_document=[Span(start=0, end=0)],
            document_ids=None,
            meta=result.meta(),
        )
    phrase, doc = result.phrase, result.document
    return Answer(
        answer=phrase.text,
        type="extractive",
        score=result.score,
        context=doc.content,
        offsets_in_document=[Span(start=phrase.start, end=phrase.end)],
        offsets_in_context=[Span(phrase.start, phrase.end)],
        document_ids=[doc.id],
        meta={**(doc.meta or {}), **result.meta},
    )


__all__ = ["PhraseRetriever"]
