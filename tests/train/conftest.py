"""Every train/ test runs its tiny models on one torch thread (see tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


@pytest.fixture
def run_tiny_recipe(tmp_path, tiny_base_dir):
    """Run the smoke recipe on the tiny base and the built-in sample with ``overrides``: one ``stage``, or all of
    ``stages`` (run-all). Output goes to ``tmp_path/run``; the torch thread count is restored afterwards."""
    import torch

    from train.recipes import load_recipe, run_all, run_stage

    def run(overrides: dict, stage: str | None = None) -> dict:
        settings = {
            "output_dir": str(tmp_path / "run"),
            "model.base": str(tiny_base_dir),
            "model.config": {"max_passage_length": 48, "passage_stride": 8, "max_query_length": 24},
            "data.train": "builtin",
            "data.dev": "builtin",
            "torch_threads": 1,
            **overrides,
        }
        threads = torch.get_num_threads()
        try:
            recipe = load_recipe("train/configs/smoke.yaml", settings)
            return run_stage(recipe, stage) if stage else run_all(recipe)
        finally:
            torch.set_num_threads(threads)

    return run


@pytest.fixture
def sample_index(tiny_model):
    """The built-in SQuAD sample and an in-memory phrase index of its passages by the tiny model."""
    from dphr_haystack import PhraseIndex
    from dphr_haystack.encode.add import add_passages
    from train.data import load_squad

    sample = load_squad("builtin")
    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, sample.passages, progress=False)
    return sample, index
