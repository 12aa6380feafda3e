"""Hayhooks deployment of the shipped ``phrase_qa.yml``: a question in, phrase answers out.

The pipeline is the shipped YAML as is, except for its document store, which opens the store directory named by
``DPHR_STORE_PATH`` (default: ``dphr-store`` in the server's working directory), the one ``dphr_indexing`` writes to.
``DPHR_MODEL`` names another phrase model (a shipped name or a model directory; the default is the YAML's), the same
for both pipelines.
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException
from hayhooks import BasePipelineWrapper, log
from pydantic import BaseModel, Field

from dphr_haystack.haystack2 import PIPELINES_DIR
from dphr_haystack.haystack2.deployment import client_error, pipeline_on_store, store_path

PIPELINE_FILE = PIPELINES_DIR / "phrase_qa.yml"
COMPONENT = "retriever"


class Answer(BaseModel):
    """One phrase answer."""

    text: str = Field(description="The answer phrase, as it stands in the document")
    score: float = Field(description="The answer's confidence, in [0, 1]")
    document_id: str | None = Field(description="The id of the document the phrase is in")
    start: int | None = Field(default=None, description="The phrase's first character in the document's content")
    end: int | None = Field(default=None, description="One past the phrase's last character")
    meta: dict[str, Any] = Field(default_factory=dict, description="The document's meta fields")
    no_answer: bool = Field(default=False, description='True for "no answer": the documents hold no answer')


class Answers(BaseModel):
    """The answers to one question, best first."""

    question: str
    answers: list[Answer]


class PipelineWrapper(BasePipelineWrapper):
    """Phrase answers from the shared store directory (``phrase_qa.yml``)."""

    def setup(self) -> None:
        """Loads the shipped YAML on the store directory and the phrase model."""
        self.pipeline = pipeline_on_store(PIPELINE_FILE, COMPONENT)
        self.pipeline.warm_up()
        log.info("dphr_phrase_qa: store directory {}", store_path())

    def run_api(
        self,
        question: str,
        top_k: int | None = None,
        filters: dict[str, Any] | None = None,
        no_answer: bool | None = None,
        no_answer_threshold: float | None = None,
        verify: bool | None = None,
    ) -> Answers:
        """
        Answers a question with phrases of the indexed documents, best first.

        Args:
            question: The question.
            top_k: How many answers (default: the pipeline's, 5).
            filters: Haystack metadata filters; only matching documents are searched.
            no_answer: Also answer "no answer" (empty text, no document, ``no_answer`` true), scored 1 - P(the
                documents hold an answer): first when that probability is below ``no_answer_threshold``, last
                otherwise.
            no_answer_threshold: P(the documents hold an answer) below which "no answer" comes first, from 0 to 1
                (default: the model's for the search; the shipped default's 0.4).
            verify: Let a reader read the top answer in its passage; the confidences (and "no answer") weigh what
                it sees (one reader pass, tens of milliseconds on a CPU).

        Returns:
            The answers, each with its text, confidence, document id and place in the document.
        """
        if not question.strip():
            raise HTTPException(status_code=422, detail="question must not be empty")
        given = {
            "top_k": top_k,
            "no_answer": no_answer,
            "no_answer_threshold": no_answer_threshold,
            "verify": verify,
        }
        inputs: dict[str, Any] = {
            "query": question,
            "filters": filters,
            **{name: value for name, value in given.items() if value is not None},
        }
        try:
            result = self.pipeline.run({COMPONENT: inputs})
        except Exception as error:  # a component's error reaches here wrapped in Haystack's PipelineRuntimeError
            cause = client_error(error)
            if cause is None:
                raise
            raise HTTPException(status_code=422, detail=str(cause)) from error
        return Answers(question=question, answers=[_answer(a) for a in result[COMPONENT]["answers"]])


def _answer(answer: Any) -> Answer:
    """An ``ExtractedAnswer`` as JSON-ready fields."""
    span = answer.document_offset
    return Answer(
        text=answer.data or "",
        score=float(answer.score),
        document_id=answer.document.id if answer.document is not None else None,
        start=span.start if span is not None else None,
        end=span.end if span is not None else None,
        meta=dict(answer.meta or {}),
        no_answer=bool((answer.meta or {}).get("no_answer")),
    )
