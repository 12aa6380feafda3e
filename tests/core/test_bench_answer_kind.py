"""The answer-kind benchmark: its training pairs, a head that learns a separable kind, the sets it judges against."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.quality.answer_kind import _answerable_of, _markdown, train_head, training_pairs

torch = pytest.importorskip("torch")


def test_each_question_pairs_its_gold_answer_with_other_answers_never_its_own_text():
    rows = [(0, "q0", "1923"), (0, "q1", "Aldo Ferrin"), (0, "q2", "1923"), (1, "q3", "blue"), (1, "q4", "9 metres")]
    q, a, y = training_pairs(rows, seed=0)
    for i in range(len(rows)):
        mine = q == i
        assert (y[mine] == 1).sum() == 1 and a[mine & (y == 1)][0] == i
        assert all(rows[j][2] != rows[i][2] for j in a[mine & (y == 0)])  # a copy of the gold text is no negative


def test_the_head_learns_a_kind_the_embeddings_carry():
    rng = np.random.default_rng(0)
    n, dim = 400, 8
    kinds = rng.integers(0, 2, n)  # a question asks for kind 0 or 1; its answer's embedding says which kind it is
    questions = torch.tensor(np.eye(dim)[kinds] + 0.05 * rng.normal(size=(n, dim)), dtype=torch.float32)
    answers = torch.tensor(np.eye(dim)[kinds] + 0.05 * rng.normal(size=(n, dim)), dtype=torch.float32)
    q = np.repeat(np.arange(n), 2)
    a = np.stack([np.arange(n), rng.permutation(n)], 1).reshape(-1)
    y = (kinds[q] == kinds[a]).astype(np.float32)
    _, held_out = train_head(questions, answers, (q, a, y), seed=0, epochs=60)
    assert held_out > 0.95


def test_each_unanswerable_set_is_judged_against_its_own_questions_corpus():
    assert _answerable_of("5") == "5" and _answerable_of("dev") == "dev"
    assert _answerable_of("squad-paragraph-removed-dev") == "dev" and _answerable_of("nq-over-dev") == "dev"
    assert _answerable_of("squad-article-alone") == "squad-article-alone"
    table = _markdown(
        {
            "train_questions": 10,
            "held_out_auroc_gold_vs_other": 0.8,
            "sets": {
                "5": {
                    "right": 3,
                    "unanswerable": 4,
                    "auroc_right_vs_unanswerable": 0.75,
                    "mean_kind_right": 0.1,
                    "mean_kind_unanswerable": -1.0,
                }
            },
        }
    )
    assert "| 5 | 3 / 4 | 0.750 | 0.10 / -1.00 |" in table
