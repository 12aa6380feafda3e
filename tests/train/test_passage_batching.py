"""Passage-grouped batches: each window encoded once for all of its questions, same loss as per-question rows."""

from __future__ import annotations

import pytest
import torch

from train.data import PassageWindows, build_features, collate, load_squad, per_question
from train.losses import UnifiedLoss
from train.tasks import RCTask, epoch_order

pytestmark = pytest.mark.unit


@pytest.fixture
def sample():
    return load_squad("builtin")


def _features(model, data):
    windows = PassageWindows(model.tokenizer, model.config, data.passages)
    return windows, build_features(data, windows)


def test_grouped_collate_encodes_each_window_once(tiny_model, sample):
    _, features = _features(tiny_model, sample)
    questions = [sample.examples[f.example].question for f in features]
    grouped = collate(features, questions, tiny_model.tokenizer, tiny_model.config, group_windows=True)
    plain = collate(features, questions, tiny_model.tokenizer, tiny_model.config)
    n_windows = len({f.window for f in features})
    assert n_windows < len(features), "the builtin sample asks several questions per passage"
    assert grouped["p_input_ids"].shape[0] == n_windows
    assert grouped["q_input_ids"].shape[0] == len(features)
    expanded = per_question(grouped)
    for key in ("p_input_ids", "p_attention_mask", "p_token_type_ids", "p_context_start"):
        width = min(expanded[key].shape[-1], plain[key].shape[-1]) if expanded[key].ndim > 1 else None
        assert torch.equal(expanded[key][..., :width], plain[key][..., :width]), key
    assert expanded["passage_ids"] == plain["passage_ids"]


def test_grouped_unified_step_equals_per_question_rows_without_duplicates(tiny_model, sample):
    windows, features = _features(tiny_model, sample)
    task = RCTask(tiny_model, sample, features, windows, loss="unified", pre_batch=0, batching="passage")
    batch = next(iter(task.batches(0, batch_size=4, rank=0, world_size=1, seed=0)))
    tiny_model.eval()
    with torch.no_grad():
        grouped = task.step(tiny_model, batch)
        states = tiny_model.phrase_states(batch["p_input_ids"], batch["p_attention_mask"], batch["p_token_type_ids"])
        q_start, q_end = tiny_model.query_vectors(batch["q_input_ids"], batch["q_attention_mask"])
        own = batch["own_index"]
        # Per-question rows repeat a window once per question. Excluding the other windows of a question's own
        # passage and every repeated copy of a window (but its own row) leaves exactly the grouped negatives.
        codes = {p: i for i, p in enumerate(dict.fromkeys(batch["passage_ids"]))}
        passage = torch.tensor([codes[p] for p in batch["passage_ids"]])[own]
        repeated = torch.tensor([int(own[j]) in own[:j].tolist() for j in range(len(own))])
        exclude = (passage[:, None] == passage[None, :]) | repeated[None, :]
        reference = UnifiedLoss()(
            q_start,
            q_end,
            states[own],
            batch["p_attention_mask"][own],
            batch["start_positions"],
            batch["end_positions"],
            exclude=exclude,
        )
    assert float(grouped["loss"]) == pytest.approx(float(reference["loss"]), rel=1e-5)
    assert float(grouped["negatives"]) == pytest.approx(float(reference["negatives"]))


@pytest.mark.parametrize("loss", ["densephrases", "unified"])
def test_grouped_batches_train(tiny_model, sample, loss):
    windows, features = _features(tiny_model, sample)
    task = RCTask(tiny_model, sample, features, windows, loss=loss, pre_batch=1, batching="passage")
    tiny_model.train()
    for batch in task.batches(0, batch_size=3, rank=0, world_size=1, seed=0):
        out = task.step(tiny_model, batch)
        out["loss"].backward()
        assert torch.isfinite(out["loss"])
    grads = [p.grad for p in tiny_model.phrase_encoder.parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    tiny_model.zero_grad(set_to_none=True)


def test_passage_plan_covers_windows_once_bucketed_and_deterministic(tiny_model):
    from dataclasses import replace

    config = replace(tiny_model.config, max_passage_length=24, passage_stride=4)  # several windows per passage
    data = load_squad("builtin")
    windows = PassageWindows(tiny_model.tokenizer, config, data.passages)
    features = build_features(data, windows)
    task = RCTask(tiny_model, data, features, windows, loss="unified", batching="passage", bucket_batches=2)
    plan = task.batch_plan(epoch=0, per_step=3, seed=0)
    assert plan == task.batch_plan(epoch=0, per_step=3, seed=0)
    assert plan != task.batch_plan(epoch=1, per_step=3, seed=0)
    units = [u for batch in plan for u in batch]
    assert len(units) == len(set(units)) == 3 * (len(task.units) // 3)
    assert len(plan) == task.num_batches(3, 1)
    sorted_once = RCTask(
        tiny_model, data, features, windows, loss="unified", batching="passage", bucket_batches=len(task.units)
    )  # one bucket: batches are slices of one sorted run
    order = epoch_order(len(task.units), 0, 0)[: len(units)]
    unbucketed = [order[i : i + 3] for i in range(0, len(order), 3)]
    assert len(set(task.unit_length)) > 1
    assert _padding(sorted_once, sorted_once.batch_plan(0, 3, 0)) < _padding(task, unbucketed)
    questions = sum(len(task.units[u]) for u in units)
    assert questions > len(units)


def _padding(task: RCTask, plan: list[list[int]]) -> int:
    """Padding tokens of a plan's batches (each padded to its longest window)."""
    return sum(max(task.unit_length[u] for u in b) * len(b) - sum(task.unit_length[u] for u in b) for b in plan)


def test_bad_batching_settings_are_refused(tiny_model, sample):
    windows, features = _features(tiny_model, sample)
    with pytest.raises(ValueError, match="batching"):
        RCTask(tiny_model, sample, features, windows, batching="document")
    with pytest.raises(ValueError, match="bucket_batches"):
        RCTask(tiny_model, sample, features, windows, batching="passage", bucket_batches=0)
    with pytest.raises(ValueError, match="unified"):
        RCTask(tiny_model, sample, features, windows, loss="densephrases", batching="passage", gather_negatives=True)


def test_chunked_query_vectors_equal_one_padded_batch(tiny_model):
    from dphr_haystack.model.inputs import tokenize_queries
    from train.tasks import chunked_query_vectors

    questions = ["Who?", "Where does the Nile flow into the sea today?", "What is the capital of France?", "When?"]
    batch = {f"q_{k}": v for k, v in tokenize_queries(tiny_model.tokenizer, questions, tiny_model.config).items()}
    tiny_model.eval()
    with torch.no_grad():
        want = tiny_model.query_vectors(batch["q_input_ids"], batch["q_attention_mask"], batch["q_token_type_ids"])
        got = chunked_query_vectors(tiny_model, batch, chunk=2)
    for g, w in zip(got, want, strict=True):
        assert torch.allclose(g, w, atol=1e-5)
