"""Open-domain QA evaluation: question files in, SQuAD-normalised metrics, a searcher or a Haystack pipeline run.

Metrics (per question, then averaged):

* phrase level (systems that return answers): EM@1 and F1@1 of the top answer, EM@k (any of the top-k);
* passage level (systems that return passages/documents): accuracy@k (a gold answer occurs in one of the
  top-k passages), MRR@20 (1/rank of the first such passage, 0 beyond 20) and P@20 (the fraction of the
  top 20 that contain an answer, divided by 20 as in DPR-style tables).

Answers are matched by :mod:`dphr_haystack.answers` (SQuAD normalisation, whole words inside a passage, regular
expressions for CuratedTREC); ``answer_match="substring"`` switches passages to Haystack's own criterion (the
raw answer string is a substring of the content), which the tests use to show that our aggregation equals
Haystack's eval. ``dphr eval``, training-time validation and the benchmarks all score through this package.
"""

from __future__ import annotations

from .evaluate import (
    TABLE_COLUMNS,
    EvalReport,
    QuestionResult,
    check_evaluation,
    evaluate_pipeline,
    markdown_table,
    pipeline_top_k_params,
    question_metrics,
    question_result,
    read_results,
    report_stem,
    summarize,
    table_columns,
)
from .metrics import (
    PASSAGE_KS,
    RANKING_DEPTH,
    accuracy_at,
    first_hit,
    passage_ks,
    precision_at,
    ranking_depth,
    ranking_metrics,
    reciprocal_rank_at,
)
from .questions import QAExample, read_questions
from .scoring import hit_results, mean_metrics, passage_metrics, short_metrics
from .searcher import SearcherEvaluator, evaluate_searcher

__all__ = [
    "EvalReport",
    "PASSAGE_KS",
    "QAExample",
    "QuestionResult",
    "RANKING_DEPTH",
    "SearcherEvaluator",
    "TABLE_COLUMNS",
    "accuracy_at",
    "check_evaluation",
    "evaluate_pipeline",
    "evaluate_searcher",
    "first_hit",
    "hit_results",
    "markdown_table",
    "mean_metrics",
    "passage_ks",
    "passage_metrics",
    "pipeline_top_k_params",
    "precision_at",
    "question_metrics",
    "question_result",
    "ranking_depth",
    "ranking_metrics",
    "read_questions",
    "read_results",
    "report_stem",
    "reciprocal_rank_at",
    "short_metrics",
    "summarize",
    "table_columns",
]
