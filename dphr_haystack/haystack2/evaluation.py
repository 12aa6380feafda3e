"""Haystack 2 query pipelines scored on open-domain questions, with the metrics of :mod:`dphr_haystack.evaluation`.

The same per-question results and report as the 1.x :func:`dphr_haystack.evaluation.evaluate_pipeline`, so the two
layers' numbers compare metric for metric (and question for question).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from haystack import Pipeline

from dphr_haystack.errors import InvalidParameterError
from dphr_haystack.evaluation import EvalReport, QAExample, QuestionResult, check_evaluation
from dphr_haystack.evaluation.evaluate import eval_report, score_questions


def pipeline_inputs(pipeline: Pipeline, query: str, top_k: int) -> dict[str, dict[str, Any]]:
    """Run data giving ``query`` to every component with an open ``query`` input and asking every component with an
    open ``top_k`` input (retrievers and joiners alike) for ``top_k`` results, so that a joiner configured for 10
    cannot cap a top-20 evaluation."""
    data: dict[str, dict[str, Any]] = {}
    for name, sockets in pipeline.inputs().items():
        values = {key: value for key, value in (("query", query), ("top_k", top_k)) if key in sockets}
        if values:
            data[name] = values
    if not any("query" in values for values in data.values()):
        raise InvalidParameterError("no component of the pipeline takes a 'query' input")
    return data


def _output_component(pipeline: Pipeline, socket: str, wanted: str | None) -> str | None:
    """The component whose output ``socket`` the pipeline returns: ``wanted``, or the only one there is."""
    having = sorted(name for name, sockets in pipeline.outputs().items() if socket in sockets)
    if wanted is not None:
        if wanted not in having:
            raise InvalidParameterError(f"component {wanted!r} returns no {socket!r}; those that do: {having}")
        return wanted
    if len(having) > 1:
        raise InvalidParameterError(f"several components return {socket!r} ({having}): name the one to score")
    return having[0] if having else None


def evaluate_pipeline(
    pipeline: Pipeline,
    examples: Sequence[QAExample],
    top_k: int = 20,
    system: str = "pipeline",
    answer_match: str = "squad",
    documents_from: str | None = None,
    answers_from: str | None = None,
    progress: bool = True,
    on_result: Callable[[QuestionResult], None] | None = None,
) -> EvalReport:
    """Run a Haystack 2 query pipeline on every question and score the ``answers`` and ``documents`` it returns.

    Every component is asked for ``top_k`` results (:func:`pipeline_inputs`). ``seconds`` of a result is the time of
    its ``pipeline.run`` (warm the pipeline up first: model loading is not query latency).

    Args:
        pipeline: A Haystack 2 query pipeline (e.g. from :func:`dphr_haystack.haystack2.load_pipeline`).
        examples: The questions.
        top_k: Results asked of every component, and passages scored.
        system: The report's name.
        answer_match: ``squad`` (normalised whole words) or ``substring`` (see :mod:`dphr_haystack.evaluation`).
        documents_from: The component whose returned ``documents`` are scored (default: the only one returning them).
        answers_from: The component whose returned ``answers`` are scored (default: the only one returning them).
        progress: Show a progress bar.
        on_result: Called with each question's result.

    Raises:
        InvalidParameterError: No questions, ``top_k`` < 1, no component taking a query, or several components
            returning documents (answers) with none named.
    """
    check_evaluation(examples, top_k, answer_match)
    docs_from = _output_component(pipeline, "documents", documents_from)
    answers_of = _output_component(pipeline, "answers", answers_from)
    template = pipeline_inputs(pipeline, "", top_k)

    def run(question: str) -> tuple[Iterable, Iterable]:
        data = {
            name: {**values, "query": question} if "query" in values else values for name, values in template.items()
        }
        output = pipeline.run(data)
        answers = output.get(answers_of, {}).get("answers") or [] if answers_of else []
        documents = output.get(docs_from, {}).get("documents") or [] if docs_from else []
        return (
            ((a.data, a.score, a.document.id if a.document is not None else None) for a in answers),
            ((d.id, d.score, d.content) for d in documents),
        )

    results = score_questions(examples, run, system, top_k, answer_match, progress, on_result)
    return eval_report(system, results, examples, top_k, answer_match, answers_of is not None, docs_from is not None)


__all__ = ["evaluate_pipeline", "pipeline_inputs"]
