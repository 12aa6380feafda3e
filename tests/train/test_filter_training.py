"""Token-filter training: window targets (every answer of a window is a positive, each window trained once) and
the MLP filter head."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from train.data import PassageWindows, build_features, load_squad
from train.filter import FilterTask, answerable_windows, filter_metrics, filter_scores, window_targets
from train.losses import FilterLoss
from train.tasks import epoch_order

pytestmark = pytest.mark.unit


@pytest.fixture
def sample_features(tiny_model):
    data = load_squad("builtin")
    windows = PassageWindows(tiny_model.tokenizer, tiny_model.config, data.passages)
    return data, build_features(data, windows)


def _bce(x: float, y: float, w: float) -> float:
    sig = 1.0 / (1.0 + np.exp(-x))
    return -(w * y * np.log(sig) + (1.0 - y) * np.log(1.0 - sig))


def test_window_loss_matches_a_direct_computation():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 6, 2, generator=g, dtype=torch.float64)
    starts = torch.tensor([[0, 1, 0, 1, 0, 0], [0, 0, 0, 0, 0, 0]])
    ends = torch.tensor([[0, 0, 1, 0, 1, 0], [0, 0, 0, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]])
    value = FilterLoss()(logits, starts, ends, mask)
    valid = [0, 1, 2, 3, 4]  # row 1 has no answer: left out
    per_channel = []
    for channel, target in ((0, starts[0]), (1, ends[0])):
        w = len(valid) / int(target.sum())  # all positives weigh as much as all negatives
        per_channel.append(sum(_bce(float(logits[0, t, channel]), float(target[t]), w) for t in valid) / len(valid))
    assert value.item() == pytest.approx(0.5 * sum(per_channel), rel=1e-9)


def test_one_hot_window_targets_equal_positions():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 5, 2, generator=g)
    starts, ends = torch.tensor([1, 0, 3]), torch.tensor([2, 0, 4])
    mask = torch.ones(3, 5)
    one_hot = [torch.nn.functional.one_hot(p, 5) * (p > 0)[:, None] for p in (starts, ends)]
    for pos_weight in (None, 4.0):
        loss = FilterLoss(pos_weight)
        assert loss(logits, *one_hot, mask).item() == pytest.approx(loss(logits, starts, ends, mask).item(), rel=1e-6)


def test_window_targets_mark_every_question_of_a_window(tiny_model, sample_features):
    data, features = sample_features
    task = FilterTask(tiny_model, data, features, labels="window")
    batch = next(iter(task.batches(0, batch_size=3, rank=0, world_size=1, seed=0)))
    starts, ends = batch["start_positions"], batch["end_positions"]
    assert starts.shape == batch["p_input_ids"].shape  # one row per window
    units = [task.units[i] for i in epoch_order(len(task.units), 0, 0)[:3]]
    rows_with_two = 0
    for row, unit in enumerate(units):
        assert {f.window for f in unit} == {unit[0].window}
        assert batch["p_input_ids"][row, : len(unit[0].input_ids)].tolist() == unit[0].input_ids
        gold = sorted({(f.start, f.end) for f in features if f.window == unit[0].window and f.start > 0})
        assert sorted(torch.nonzero(starts[row]).flatten().tolist()) == sorted({s for s, _ in gold})
        assert sorted(torch.nonzero(ends[row]).flatten().tolist()) == sorted({e for _, e in gold})
        rows_with_two += len(gold) >= 2
    assert rows_with_two > 0, "the builtin sample asks two questions per passage"


def test_window_labels_train_each_answerable_window_once_an_epoch(tiny_model, sample_features):
    data, features = sample_features
    windows = answerable_windows(features)
    task = FilterTask(tiny_model, data, features, labels="window")
    seen = [
        tuple(row[row > 0].tolist())
        for b in task.batches(0, batch_size=2, rank=0, world_size=1, seed=0)
        for row in b["p_input_ids"]
    ]
    assert len(seen) == len(set(seen)) == task.num_batches(2, 1) * 2 <= len(windows)
    per_question = FilterTask(tiny_model, data, features, labels="question")
    assert len(per_question.units) == sum(len(w) for w in windows) > len(windows)
    with pytest.raises(ValueError, match="valid: window, question"):
        FilterTask(tiny_model, data, features, labels="passage")


def test_window_scores_label_all_answers_and_question_scores_one(tiny_model, sample_features):
    data, features = sample_features
    by_window = filter_scores(tiny_model, data, features, labels="window")
    by_question = filter_scores(tiny_model, data, features, labels="question")
    n_answerable = sum(f.start > 0 for f in features)
    assert by_question["start_label"].sum() == n_answerable
    assert by_window["start_label"].sum() == len({(f.window, f.start) for f in features if f.start > 0})
    assert len(by_question["start"]) > len(by_window["start"])  # each window counted once, not once per question
    assert 0.0 < filter_metrics(by_window)["auc_pr"] <= 1.0


def test_window_targets_from_a_grouped_batch():
    batch = {
        "p_input_ids": torch.zeros(2, 6, dtype=torch.long),
        "own_index": torch.tensor([0, 0, 1, 1]),
        "start_positions": torch.tensor([1, 3, 0, 2]),
        "end_positions": torch.tensor([2, 4, 0, 5]),
    }
    starts, ends = window_targets(batch)
    assert starts.tolist() == [[False, True, False, True, False, False], [False, False, True, False, False, False]]
    assert ends.tolist() == [[False, False, True, False, True, False], [False, False, False, False, False, True]]


def test_mlp_filter_head_round_trips_and_leaves_the_fingerprint(tiny_model, tmp_path):
    from dphr_haystack.errors import InvalidParameterError
    from dphr_haystack.model.config import PhraseModelConfig
    from dphr_haystack.model.phrase_model import PhraseModel, filter_head

    fingerprint = tiny_model.phrase_fingerprint()
    tiny_model.config.filter_hidden = 16
    tiny_model.filter_linear = filter_head(tiny_model.phrase_encoder.config.hidden_size, 16)
    assert tiny_model.phrase_fingerprint() == fingerprint  # the filter picks vectors, it does not change them
    tiny_model.save(tmp_path / "mlp")
    loaded = PhraseModel.load(tmp_path / "mlp")
    assert isinstance(loaded.filter_linear, torch.nn.Sequential) and loaded.config.filter_hidden == 16
    text = ["Paris is the capital and most populous city of France."]
    for a, b in zip(tiny_model.encode_passages(text), loaded.encode_passages(text), strict=True):
        np.testing.assert_allclose(a.filter_logits, b.filter_logits, rtol=1e-5, atol=1e-6)
    for bad in (0, -3, True, 2.5):
        with pytest.raises(InvalidParameterError, match="filter_hidden"):
            PhraseModelConfig(filter_hidden=bad)


def test_filter_stage_trains_a_fresh_mlp_head(tmp_path, run_tiny_recipe):
    import json

    overrides = {
        "filter.hidden": 8,
        "filter.thresholds": [None, 0.0],
        "filter.sweep_subcorpus": "C0",
        "filter.train": {"max_steps": 3, "batch_size": 4, "lr": 1e-2, "log_every": 1, "progress": False},
    }
    result = run_tiny_recipe(overrides, "filter")
    assert result["filter_hidden"] == 8 and result["labels"] == "window" and result["steps"] == 3
    saved = json.loads((tmp_path / "run" / "filter" / "final" / "dphr_config.json").read_text())
    assert saved["filter_hidden"] == 8 and "filter_threshold" in saved


def test_filter_stage_holds_a_vector_budget_to_a_random_sample_of_the_training_passages(tmp_path, run_tiny_recipe):
    overrides = {
        "filter.thresholds": [None, -0.5, 0.0, 0.5],
        "filter.sweep_subcorpus": "C0",
        "filter.vector_budget": 1000.0,
        "filter.budget_sample": 4,
        "filter.train": {"max_steps": 2, "batch_size": 4, "lr": 1e-2, "log_every": 1, "progress": False},
    }
    result = run_tiny_recipe(overrides, "filter")
    counts = [row["sample_vectors_per_passage"] for row in result["sweep"]]
    assert counts[0] > 0 and counts == sorted(counts, reverse=True)  # a higher threshold keeps no more
    assert all(c >= 1 for c in counts)  # a passage the filter empties keeps its first token, as the dump does
    choice = result["threshold_choice"]
    assert choice["budget_count"] == "sample_vectors_per_passage" and "corpus sample" in choice["rule"]
    # every row fits a budget this large: the most accurate one is chosen
    assert choice["chosen"] == max(row[choice["metric"]] for row in result["sweep"])


def test_sample_passages_is_seeded_and_keeps_corpus_order():
    from train.filter import sample_passages

    passages = [{"id": str(i), "text": f"passage {i}"} for i in range(50)]
    drawn = sample_passages(passages, 10, seed=3)
    assert drawn == sample_passages(passages, 10, seed=3) and drawn != sample_passages(passages, 10, seed=4)
    assert [int(p["id"]) for p in drawn] == sorted(int(p["id"]) for p in drawn) and len(drawn) == 10
    assert sample_passages(passages, 500) == passages  # a sample larger than the corpus is the corpus
