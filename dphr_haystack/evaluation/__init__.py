"""Open-domain QA evaluation: question files in, SQuAD-normalised metrics, a searcher or a Haystack pipeline run.

Metrics (per question, then averaged):

* phrase level (systems that return answers): EM@1 and F1@1 of the top answer, EM@k (any of the top-k);
* passage level (systems that return passages/documents): accuracy@k (a gold answer occurs in one of the
  top-k passages), MRR@20 (1/rank of the first such passage, 0 beyond 20) and P@20 (the fraction of the
  top 20 that contain an answer, divided by 20 as in DPR-style tables).

Answers match with SQuAD normalisation (lower case, no punctuation or articles), as whole words inside a
passage; CuratedTREC answers are regular expressions, matched case-insensitively (DrQA/DPR convention).
``answer_match="substring"`` switches passages to Haystack's own criterion (the raw answer string is a
substring of the content), which the tests use to show that our aggregation equals Haystack's eval.
"""

from __future__ import annotations

from .evaluate import (
    TABLE_COLUMNS,
    EvalReport,
    QuestionResult,
    check_evaluation,
    evaluate_pipeline,
    evaluate_searcher,
    markdown_table,
    pipeline_top_k_params,
    question_metrics,
    question_result,
    read_results,
    report_stem,
    summarize,
)
from .metrics import ANSWER_MATCHES, PASSAGE_KS, contains_answer, exact_match, f1_score, normalize_answer
from .questions import QAExample, read_questions

__all__ = [
    "ANSWER_MATCHES",
    "EvalReport",
    "PASSAGE_KS",
    "QAExample",
    "QuestionResult",
    "TABLE_COLUMNS",
    "check_evaluation",
    "contains_answer",
    "evaluate_pipeline",
    "evaluate_searcher",
    "exact_match",
    "f1_score",
    "markdown_table",
    "normalize_answer",
    "pipeline_top_k_params",
    "question_metrics",
    "question_result",
    "read_questions",
    "read_results",
    "report_stem",
    "summarize",
]
