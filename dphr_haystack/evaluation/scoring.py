"""Scoring what a system already returned (PhraseSearcher hits, ranked passages) by the evaluation's rules.

Benchmarks and training-time validation rank with their own calls, then score here, so every number they
report is computed as ``dphr eval`` computes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..answers import contains_answer
from .evaluate import QuestionResult, question_metrics, question_result
from .metrics import PASSAGE_KS
from .questions import QAExample


def hit_results(
    examples: Sequence[QAExample],
    phrases: Sequence[Sequence[Any]] | None,
    passages: Sequence[Sequence[Any]] | None,
    seconds: float = 0.0,
    answer_match: str = "squad",
) -> list[QuestionResult]:
    """Each question's result from :class:`~dphr_haystack.search.PhraseHit` lists, one per question, best first.

    Args:
        examples: The questions and their gold answers.
        phrases: Phrase hits (the answers) per question; None when phrases were not searched.
        passages: Passage hits (the ranking) per question; None when passages were not searched.
        seconds: The time each question took.
    """
    results = []
    for i, ex in enumerate(examples):
        results.append(
            QuestionResult(
                ex.qid,
                ex.question,
                list(ex.answers),
                [
                    {"text": h.text, "score": h.score, "passage_id": h.passage_id, "confidence": h.confidence}
                    for h in (phrases[i] if phrases is not None else [])
                ],
                [
                    {
                        "id": h.passage_id,
                        "score": h.score,
                        "has_answer": contains_answer(h.text, ex.answers, ex.regex, answer_match),
                    }
                    for h in (passages[i] if passages is not None else [])
                ],
                seconds,
            )
        )
    return results


def passage_metrics(
    examples: Sequence[QAExample],
    rankings: Sequence[Iterable[tuple[str, Any, str | None]]],
    top_k: int,
    ks: Sequence[int] | None = None,
    answer_match: str = "squad",
) -> dict[str, np.ndarray]:
    """Per question ``passage_acc@k`` (each of ``ks``; default: 1, 5 and 20 as far as ``top_k`` reaches, and
    ``top_k``), ``mrr@20`` and ``p@20`` (``@top_k`` when ``top_k`` < 20) of one ranked passage list per question,
    given as ``(id, score, content)`` tuples best first; the first ``top_k`` count.

    Example:
        >>> rankings = [[(d.id, d.score, d.content) for d in docs] for docs in ranked_documents]
        >>> per_question = passage_metrics(examples, rankings, top_k=20)
        >>> mean_metrics(per_question)["mrr@20"]
    """
    results = [
        question_result(ex, [], ranking, 0.0, top_k, answer_match)
        for ex, ranking in zip(examples, rankings, strict=True)
    ]
    return question_metrics(results, top_k, has_answers=False, has_passages=True, ks=ks)


def mean_metrics(per_question: Mapping[str, Sequence[float] | np.ndarray]) -> dict[str, float]:
    """The average of each per-question metric (e.g. of :func:`passage_metrics`)."""
    return {name: float(np.mean(values)) for name, values in per_question.items()}


def short_metrics(
    results: Sequence[QuestionResult],
    ks: Sequence[int] = PASSAGE_KS,
    has_answers: bool = True,
    has_passages: bool = True,
    regex: bool = False,
) -> dict[str, float]:
    """Averaged metrics under the short names of training validation and benchmark tables: ``em@1`` and ``f1@1``
    of the top answer (with ``has_answers``), ``acc@k`` of the passage ranking for each k (with ``has_passages``).

    They equal the report's ``phrase_em@1``, ``phrase_f1@1`` and ``passage_acc@k`` of the same results.
    """
    per_question = question_metrics(results, 1, has_answers, has_passages, regex, ks)
    out: dict[str, float] = {}
    if has_answers:
        out["em@1"] = float(np.mean(per_question["phrase_em@1"]))
        out["f1@1"] = float(np.mean(per_question["phrase_f1@1"]))
    if has_passages:
        out.update({f"acc@{k}": float(np.mean(per_question[f"passage_acc@{k}"])) for k in ks})
    return out


__all__ = ["hit_results", "mean_metrics", "passage_metrics", "short_metrics"]
