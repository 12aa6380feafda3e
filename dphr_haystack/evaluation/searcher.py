"""Evaluating a :class:`~dphr_haystack.search.PhraseSearcher`: ``dphr eval --index`` and training-time validation.

:func:`evaluate_searcher` is the one way a searcher is asked the questions (the same searcher calls, hence the
same candidate pool, wherever it is evaluated); :class:`SearcherEvaluator` wraps it as an evaluator with a
primary metric, which training front ends call on each model's searcher.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from tqdm.auto import tqdm

from .evaluate import EvalReport, QuestionResult, check_evaluation, eval_report
from .metrics import PASSAGE_KS
from .questions import QAExample
from .scoring import hit_results, short_metrics


def _batches(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def evaluate_searcher(
    searcher,
    examples: Sequence[QAExample],
    top_k: int = 20,
    batch_size: int = 32,
    system: str = "phrase-index",
    answer_match: str = "squad",
    progress: bool = True,
) -> EvalReport:
    """Phrase answers and phrase-ranked passages of a :class:`~dphr_haystack.search.PhraseSearcher`.

    Queries are encoded once per batch; the same vectors serve the phrase and the passage search, each asked
    for ``top_k`` results with the searcher's own candidate pool.
    """
    check_evaluation(examples, top_k, answer_match)
    results: list[QuestionResult] = []
    bar = tqdm(total=len(examples), desc=f"eval {system}", unit="q", disable=not progress)
    for batch in _batches(examples, batch_size):
        start = time.perf_counter()
        texts = [ex.question for ex in batch]
        q_start, q_end = searcher.model.encode_queries(texts, precision=searcher.query_precision)
        phrases = searcher.search_vectors(q_start, q_end, unit="phrase", top_k=top_k, questions=texts)
        passages = searcher.search_vectors(q_start, q_end, unit="passage", top_k=top_k)
        per_question = (time.perf_counter() - start) / len(batch)
        results.extend(hit_results(batch, phrases, passages, per_question, answer_match))
        bar.update(len(batch))
    bar.close()
    return eval_report(system, results, examples, top_k, answer_match, has_answers=True, has_passages=True)


class SearcherEvaluator:
    """Scores searchers on fixed questions exactly as ``dphr eval --index ... --top-k max(ks)`` does, under the
    short metric names (``em@1``, ``f1@1``, ``acc@k``; see :func:`~.scoring.short_metrics`).

    Example:
        >>> evaluator = SearcherEvaluator(read_questions("dev.jsonl"), ks=(1, 5, 20))
        >>> evaluator(PhraseSearcher(index, model))[evaluator.primary_metric]
    """

    primary_metric: ClassVar[str] = "em@1"
    greater_is_better: ClassVar[bool] = True

    def __init__(
        self,
        examples: Sequence[QAExample],
        ks: Sequence[int] = PASSAGE_KS,
        batch_size: int = 32,
        answer_match: str = "squad",
        name: str = "phrase-index",
    ) -> None:
        self.examples = list(examples)
        self.ks = tuple(ks)
        self.top_k = max(self.ks)
        self.batch_size = batch_size
        self.answer_match = answer_match
        self.name = name
        check_evaluation(self.examples, self.top_k, answer_match)

    def report(self, searcher) -> EvalReport:
        """The full report of ``searcher`` on the questions (what ``dphr eval`` writes)."""
        return evaluate_searcher(
            searcher, self.examples, self.top_k, self.batch_size, self.name, self.answer_match, progress=False
        )

    def __call__(self, searcher) -> dict[str, float]:
        """``em@1``, ``f1@1`` and ``acc@k`` for each k of ``searcher`` on the questions."""
        report = self.report(searcher)
        return short_metrics(report.results, self.ks, regex=report.settings["regex"])


__all__ = ["SearcherEvaluator", "evaluate_searcher"]
