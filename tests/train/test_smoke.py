"""The smoke recipe end to end, in-process: every stage's outputs exist and its metrics are finite."""

from __future__ import annotations

import json
import math
import time

import pytest
import torch

pytestmark = pytest.mark.integration


def _finite_numbers(obj) -> list[float]:
    if isinstance(obj, bool):
        return []
    if isinstance(obj, (int, float)):
        return [float(obj)]
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _finite_numbers(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in _finite_numbers(v)]
    return []


def test_smoke_recipe_runs_every_stage(tmp_path):
    from train.recipes import STAGES, load_recipe, run_all

    recipe = load_recipe("train/configs/smoke.yaml", {"output_dir": str(tmp_path / "smoke")})
    threads = torch.get_num_threads()
    started = time.perf_counter()
    try:
        summary = run_all(recipe)
    finally:
        torch.set_num_threads(threads)
    elapsed = time.perf_counter() - started
    assert elapsed < 120, f"smoke recipe took {elapsed:.0f}s"
    out = tmp_path / "smoke"
    assert list(summary["stages"]) == list(STAGES)
    for stage in ("rc", "hn", "qsft"):
        assert (out / stage / "final" / "model.safetensors").is_file()
        assert (out / stage / "best" / "dphr_config.json").is_file()
        assert (out / stage / "curves.png").is_file()
        records = [json.loads(line) for line in (out / stage / "metrics.jsonl").read_text().splitlines()]
        losses = [r["loss"] for r in records if "loss" in r]
        assert losses and all(math.isfinite(x) for x in losses)
        assert any(k.startswith("eval/") for r in records for k in r)
    assert (out / "reader" / "final" / "config.json").is_file()
    spans = json.loads((out / "reader" / "metrics.json").read_text())["gold_window_spans"]
    assert set(spans) == {"reader", "phrase_model"} and all(0 <= s["em"] <= s["f1"] <= 100 for s in spans.values())
    assert (out / "mine" / "hard_negatives.jsonl").is_file()
    assert (out / "filter" / "sweep.png").is_file() and (out / "filter" / "final" / "model.safetensors").is_file()
    filt = json.loads((out / "filter" / "metrics.json").read_text())
    assert 0.0 <= filt["auc_pr_after"]["auc_pr"] <= 1.0
    sweep = json.loads((out / "filter" / "sweep.json").read_text())
    chosen = sweep["choice"]["threshold"]
    assert chosen in [r["threshold"] for r in sweep["rows"]] and chosen == filt["filter_threshold"]
    assert all(r["vectors_per_passage"] > 0 for r in sweep["rows"])
    for stage in ("filter", "qsft"):  # stored with the model; QSFT starts from the filter model and keeps it
        config = json.loads((out / stage / "final" / "dphr_config.json").read_text())
        assert config["filter_threshold"] == chosen
    results = json.loads((out / "validate" / "results.json").read_text())
    assert set(results["subcorpora"]) >= {"C0", "H_10"}
    assert set(results["models"]) == {"rc", "hn", "filter", "qsft"}
    for scores in results["models"].values():
        assert {"C0/em@1", "H_10/em@1", "H_10/acc@20"} <= set(scores)
    numbers = _finite_numbers(summary["stages"])
    assert numbers and all(math.isfinite(x) for x in numbers)
