"""PhraseRetriever: phrase answers, phrase-ranked passages and documents from a PhraseDocumentStore."""

from __future__ import annotations

from typing import Any, Literal

from haystack.document_stores import BaseDocumentStore
from haystack.errors import HaystackError
from haystack.nodes import BaseRetriever
from haystack.schema import Answer, Document, Span

from .._util.threads import check_threads, resolve_threads, using_threads
from ..confidence import NO_ANSWER_THRESHOLD
from ..documents.encoding import PhraseEncoding
from ..documents.filters import check_legacy_filters
from ..documents.results import (
    NoAnswer,
    RetrievedAnswer,
    RetrievedDocument,
    check_no_answer_model,
    check_no_answer_threshold,
    retrieved,
    with_no_answer,
)
from ..documents.retrieval import (
    PhraseSearchOptions,
    check_flag,
    check_truecase,
    resolve_max_answer_length,
)
from ..documents.validation import check_storable
from ..errors import InvalidParameterError
from ..model.cache import load_phrase_model
from ..model.registry import DEFAULT_MODEL
from ..params import check_param, check_query_precision
from ..search import check_passage_scoring, check_ranking, check_unit
from ._schema import typed_init
from .document_store import PhraseDocumentStore


@typed_init
class PhraseRetriever(BaseRetriever, PhraseEncoding):
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

    Args:
        document_store: The PhraseDocumentStore to search.
        model: Phrase model: ``dphr-minilm-squad-distilled`` (the default: trained, shipped with the package,
            offline), ``dphr-minilm-squad-384`` (shipped, the previous default: the same windows without distillation),
            ``dphr-minilm-squad`` (shipped, 192-subword windows: indexes ~5% faster on a CPU, answers less well),
            ``minilm`` (untrained, built on the offline all-MiniLM-L6-v2), a model directory, a DensePhrases
            checkpoint directory or a hub name. Loaded once per process and device.
        top_k: Results per query.
        unit: ``phrase`` (top-k phrases; documents are their passages, deduplicated), ``passage`` (top-k
            passages by best phrase) or ``document`` (top-k documents by best passage, grouped by the store's
            ``document_id_field``).
        max_answer_length: Longest phrase in subwords, 1 to 512 and at most the model's passage window (default:
            the model's).
        whole_words: Phrases start and end on word boundaries (never inside a WordPiece-split word).
        skip_question_copies: Never answer with a phrase the question itself contains ("Who won Super Bowl
            50?" → "Super Bowl 50"), in every unit; passage and document rankings and scores are unchanged by it.
        passage_scoring: How passages and documents score their retrieved phrases: ``max`` (the best one, Lee et
            al. 2021b) or ``logsumexp`` (all of them).
        filter_threshold: Token-filter threshold used when this retriever creates a phrase index: ``"model"``
            (the default) takes the one chosen when the model's filter was trained (none for an untrained model),
            a number sets it, None keeps every token.
        truecase: Truecase all-lowercase queries before encoding them (DensePhrases' ``--truecase``), from the
            case of the indexed passages and the model's cased vocabulary; None (default) follows the model, which
            turns it on for cased DensePhrases checkpoints.
        batch_size: Batch size for passage and query encoding.
        device: ``cpu``, ``cuda`` or ``auto``.
        scale_score: Scores in [0, 1] (default) or raw phrase scores (for min-max fusion). A phrase answer of a
            model with a stored calibration (the shipped one) always has its calibrated confidence (P(correct), in
            [0, 1]) as ``Answer.score``, in every unit, and ``meta["confidence"]`` too; its raw score stays in
            ``meta["raw_score"]``. Its Documents then score their answer's confidence capped by those ranked above
            (:mod:`dphr_haystack.documents.results`; raw score in ``meta["phrase_score"]``). Without a calibration
            scores are expit(score / 100), scaled, or raw.
        return_answers: Emit ``answers`` besides ``documents`` in ``run``. Turn off for Haystack's SAS
            evaluation, which cannot handle a node that emits both.
        threads: torch/FAISS intra-op threads a query runs on (default: ``$DPHR_THREADS``, else 1, fastest when
            several queries run at once; see ``dphr_haystack._util.threads``). Indexing keeps torch's default.
        ranking: ``confidence`` (default): the first results by score (50 phrase answers for the shipped default, 10
            passages or documents) are ordered by their answer's calibrated confidence (on SQuAD-open-small EM@1
            32.85 → 45.20, passage acc@1 55.95 → 74.35 for the shipped default; raw scores then need not decrease
            down the list); ``score``: by score alone (DensePhrases). A model without a calibration ranks by score.
        query_precision: ``int8`` (default): queries are encoded on the CPU by an int8 copy of the query side,
            in about half the time of ``float32`` (DensePhrases' way, and always on a GPU) with the same EM on the
            shipped model (``dphr_haystack.model.int8``).
        no_answer: Add the "no answer" answer (see above) to ``run``'s answers (with ``return_answers``); off by
            default (then nothing changes). Needs a model with a calibration (InvalidParameterError otherwise).
            Documents never change. Overridable per query: ``run``'s ``no_answer``
            (``params={"Retriever": {"no_answer": True}}``).
        no_answer_threshold: The top answer's confidence below which "no answer" comes first, in [0, 1] (default
            :data:`~dphr_haystack.confidence.NO_ANSWER_THRESHOLD`); overridable per query like ``no_answer``.
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
        no_answer_threshold: float = NO_ANSWER_THRESHOLD,
    ):
        super().__init__()
        check_unit(unit)
        top_k, batch_size = check_param("top_k", top_k), check_param("batch_size", batch_size)
        if max_answer_length is not None:
            max_answer_length = check_param("max_answer_length", max_answer_length)
        if document_store is not None and not isinstance(document_store, PhraseDocumentStore):
            raise InvalidParameterError(
                f"PhraseRetriever needs a PhraseDocumentStore, got {type(document_store).__name__}"
            )
        self.document_store = document_store
        self.model = model
        self.top_k = top_k
        self.unit = unit
        self.batch_size = batch_size
        self.device = device
        self.scale_score = check_flag("scale_score", scale_score)
        self.return_answers = return_answers
        self.threads = check_threads(threads)
        self.query_precision = check_query_precision(query_precision)
        self.ranking = check_ranking(ranking)
        self.phrase_model = load_phrase_model(model, device)
        if filter_threshold == "model":
            filter_threshold = self.phrase_model.config.filter_threshold
        elif isinstance(filter_threshold, str) or isinstance(filter_threshold, bool):
            raise InvalidParameterError(f"filter_threshold={filter_threshold!r}; valid: 'model', a number or None")
        self.filter_threshold = filter_threshold
        self.max_answer_length = resolve_max_answer_length(self.phrase_model, max_answer_length)
        self.whole_words = check_flag("whole_words", whole_words)
        self.skip_question_copies = check_flag("skip_question_copies", skip_question_copies)
        self.truecase = check_truecase(truecase)
        self.passage_scoring = check_passage_scoring(passage_scoring)
        self.no_answer = check_flag("no_answer", no_answer)
        self.no_answer_threshold = check_no_answer_threshold(no_answer_threshold)
        if self.no_answer:
            check_no_answer_model(self.phrase_model, model)

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
        return self._search([query], filters, top_k, index, scale_score, document_store)[0][0]

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
        return [
            docs for docs, _ in self._search(queries, filters, top_k, index, scale_score, document_store, batch_size)
        ]

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
        no_answer: bool | None = None,
        no_answer_threshold: float | None = None,
    ):
        """BaseRetriever's ``run``, also taking ``no_answer`` and ``no_answer_threshold`` (None: the init values),
        so that a pipeline passes them per query (``params={"Retriever": {"no_answer": True}}``)."""
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
            no_answer=no_answer,
            no_answer_threshold=no_answer_threshold,
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
        no_answer: bool | None = None,
        no_answer_threshold: float | None = None,
    ):
        """BaseRetriever's ``run_batch``, also taking ``no_answer`` and ``no_answer_threshold`` as ``run`` does."""
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
            no_answer=no_answer,
            no_answer_threshold=no_answer_threshold,
        )

    def run_query(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        index: str | None = None,
        headers: dict[str, str] | None = None,
        scale_score: bool | None = None,
        no_answer: bool | None = None,
        no_answer_threshold: float | None = None,
    ):
        """Documents and answers for one query (``no_answer``, ``no_answer_threshold``: None for the init values)."""
        asked = self._no_answer(no_answer, no_answer_threshold)
        docs, answers = self._search([query], filters, top_k, index, scale_score, no_answer=asked)[0]
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
        no_answer: bool | None = None,
        no_answer_threshold: float | None = None,
    ):
        """Documents and answers per query, as ``run_query``."""
        if isinstance(queries, str):
            one = filters if not isinstance(filters, list) else filters[0]
            return self.run_query(
                queries, one, top_k, index, no_answer=no_answer, no_answer_threshold=no_answer_threshold
            )
        asked = self._no_answer(no_answer, no_answer_threshold)
        results = self._search(queries, filters, top_k, index, None, None, batch_size, no_answer=asked)
        output: dict[str, Any] = {"documents": [docs for docs, _ in results]}
        if self.return_answers:
            output["answers"] = [answers for _, answers in results]
        return output, "output_1"

    def _no_answer(self, no_answer: bool | None, threshold: float | None) -> float | None:
        """The threshold of a search that adds "no answer", None for one that does not (checked before searching)."""
        on = self.no_answer if no_answer is None else check_flag("no_answer", no_answer)
        threshold = self.no_answer_threshold if threshold is None else check_no_answer_threshold(threshold)
        if not on:
            return None
        check_no_answer_model(self.phrase_model, self.model)
        return threshold

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
        top_k: int | None,
        index: str | None,
        scale_score: bool | None,
        document_store: BaseDocumentStore | None = None,
        batch_size: int | None = None,
        no_answer: float | None = None,
    ) -> list[tuple[list[Document], list[Answer]]]:
        """Resolve the options, make one store call (the store searches and scores), build Documents and Answers
        (with "no answer" placed by the threshold ``no_answer`` when it is not None)."""
        store = document_store or self.document_store
        if not isinstance(store, PhraseDocumentStore):
            raise InvalidParameterError("PhraseRetriever has no PhraseDocumentStore: pass document_store")
        if isinstance(queries, str):
            raise InvalidParameterError("retrieve_batch takes a list of queries, not one string")
        for one in filters if isinstance(filters, list) else [filters]:  # even where the store has nothing to search
            check_legacy_filters(one)
        options = PhraseSearchOptions(
            unit=self.unit,
            top_k=self.top_k if top_k is None else check_param("top_k", top_k),
            max_answer_length=self.max_answer_length,
            whole_words=self.whole_words,
            skip_question_copies=self.skip_question_copies,
            truecase=self.truecase,
            passage_scoring=self.passage_scoring,
            query_batch_size=self.batch_size if batch_size is None else check_param("batch_size", batch_size),
            query_precision=self.query_precision,
            ranking=self.ranking,
        )
        scale = check_flag("scale_score", self.scale_score if scale_score is None else scale_score)
        with using_threads(resolve_threads(self.threads, "query")):
            results = store.search_phrases(self.phrase_model, list(queries), options, filters, index, self.model)
        out = []
        for pairs in results:
            documents, answers = retrieved(pairs, lambda doc: doc.meta, scale)
            given = answers if no_answer is None else with_no_answer(answers, no_answer)
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
            meta={"no_answer": True, "top_confidence": result.top_confidence},
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
