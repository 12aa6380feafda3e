"""The answerability benchmark's per-set statistics: what a threshold on the "no answer" score turns away and loses."""

from __future__ import annotations

import numpy as np

from benchmarks.quality.answerability import SWEEP_SHOWN, THRESHOLDS, _markdown, _stats


def _row(p, answerable, correct):
    stats = _stats(np.array(p), np.array(answerable), np.array(correct), 0.4)
    return {"before": stats, "after": stats, "holds_answer": stats}


def test_each_threshold_counts_unanswerable_turned_away_and_right_answers_lost():
    # four answerable (three right, scoring 0.9 / 0.55 / 0.35, one wrong at 0.2), four unanswerable
    p = [0.9, 0.55, 0.35, 0.2, 0.65, 0.45, 0.25, 0.1]
    answerable = [True] * 4 + [False] * 4
    correct = [True, True, True, False] + [False] * 4
    stats = _stats(np.array(p), np.array(answerable), np.array(correct), 0.4)
    at = {row["threshold"]: row for row in stats["by_threshold"]}
    assert [row["threshold"] for row in stats["by_threshold"]] == list(THRESHOLDS)
    assert at[0.4]["no_answer_share"] == stats["no_answer_share"] == 0.5  # 0.25 and 0.1
    assert at[0.4]["right_lost_share"] == stats["right_lost_share"] == 1 / 3  # 0.35; the wrong one is not counted
    assert at[0.5] == {"threshold": 0.5, "no_answer_share": 0.75, "right_lost_share": 1 / 3}
    assert at[0.6] == {"threshold": 0.6, "no_answer_share": 0.75, "right_lost_share": 2 / 3}
    assert at[0.05] == {"threshold": 0.05, "no_answer_share": 0.0, "right_lost_share": 0.0}


def test_the_markdown_shows_the_sweep_per_set_and_only_when_every_set_has_one():
    result = {
        "threshold": 0.4,
        "unanswerable_sets": {
            "nq-over-open": _row([0.9, 0.3, 0.55, 0.2], [True, True, False, False], [True, True, False, False]),
        },
        "sizes": {},
    }
    text = _markdown(result)
    header = "| unanswerable set | " + " | ".join(f"{t:g}" for t in SWEEP_SHOWN) + " |"
    assert header in text
    assert "| nq-over-open | 50.0% / 0.0% | 50.0% / 50.0% | 50.0% / 50.0% | 100.0% / 50.0% | 100.0% / 50.0% |" in text
    del result["unanswerable_sets"]["nq-over-open"]["holds_answer"]["by_threshold"]
    assert header not in _markdown(result)  # a result written before the sweep


def test_the_size_table_shows_the_ece_of_the_fits_mix_only_when_the_result_has_it():
    size = {
        "em@1": 0.6,
        "unanswerable_share_mixed": 0.3 / 1.3,
        "before": {"auroc_right_vs_wrong": 0.8, "ece": 0.07, "ece_mixed": 0.05},
        "after": {"auroc_right_vs_wrong": 0.88, "ece": 0.06, "ece_mixed": 0.04, "ece_mixed_interval": [0.03, 0.08]},
    }
    result = {"threshold": 0.4, "unanswerable_sets": {}, "sizes": {"5": size}}
    text = _markdown(result)
    assert "ECE with 23% unanswerable before → after [95% interval]" in text
    assert "| 5 | 60.0 | 0.800 → 0.880 | 0.070 → 0.060 | 0.050 → 0.040 [0.030–0.080] |" in text
    del size["unanswerable_share_mixed"]
    older = _markdown(result)  # a result written before the mix was measured
    assert "unanswerable before" not in older and "| 5 | 60.0 | 0.800 → 0.880 | 0.070 → 0.060 |" in older


def test_the_plot_adds_the_fits_mix_as_a_panel_only_when_every_size_has_it(tmp_path, monkeypatch):
    from benchmarks.quality import answerability

    reliability = [
        {"confidence": 0.2, "accuracy": 0.25, "count": 10},
        {"confidence": 0.8, "accuracy": 0.7, "count": 9},
    ]
    after = {"ece": 0.05, "reliability": reliability, "ece_mixed": 0.04, "reliability_mixed": reliability}
    sizes = {"5": {"unanswerable_share_mixed": 0.23, "after": after}, "50": {"after": dict(after)}}
    sets = {"nq-over-open": _row([0.9, 0.3, 0.55, 0.2], [True, True, False, False], [True, True, False, False])}
    panels = []
    monkeypatch.setattr(answerability, "save_figure", lambda fig, path: panels.append(len(fig.axes)))
    answerability._plot({"sizes": sizes, "unanswerable_sets": sets}, tmp_path / "a.png")
    del sizes["50"]["after"]["reliability_mixed"]  # one size measured before the mix: no mix panel
    answerability._plot({"sizes": sizes, "unanswerable_sets": sets}, tmp_path / "b.png")
    assert panels == [3, 2]
