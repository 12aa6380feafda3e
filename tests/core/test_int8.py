"""Int8 query encoding: the int8 copy of the query side, when it is used, and when it is remade."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dphr_haystack.errors import InvalidParameterError
from dphr_haystack.model.int8 import Int8Linear, int8_available, int8_copy

pytestmark = pytest.mark.skipif(not int8_available(), reason="this PyTorch has no int8 matrix product on the CPU")

QUESTIONS = ["where is the louvre?", "who wrote hamlet", "what is the capital of france and why is it there?"]


@pytest.fixture(params=["separate", "shared"])
def layout_model(request, tiny_base_dir):
    """A tiny phrase model with three encoders (DensePhrases) or one query encoder and two heads (shipped)."""
    from dphr_haystack import PhraseModel, PhraseModelConfig

    config = PhraseModelConfig(max_passage_length=48, passage_stride=8, query_layout=request.param)
    return PhraseModel.from_base(tiny_base_dir, config=config, seed=0)


def _query_encoder(model) -> torch.nn.Module:
    return model.query_encoder if model.config.query_layout == "shared" else model.query_start_encoder


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_int8_linear_is_close_to_the_float_one_row_by_row():
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48)
    x = torch.randn(2, 5, 64) * torch.logspace(-2, 2, 5)[None, :, None]  # rows of very different sizes
    x[0, 0] = 0.0  # an all-zero row quantizes to zeros, not NaN
    exact, approx = linear(x), Int8Linear(linear)(x)
    assert approx.shape == exact.shape and torch.isfinite(approx).all()
    assert torch.allclose(approx[0, 0], linear.bias, atol=1e-6)
    error = (approx - exact).norm(dim=-1) / exact.norm(dim=-1)
    assert error.max() < 0.02  # per-row input scales: small rows lose no more than large ones


def test_int8_copy_swaps_every_linear_and_leaves_the_original_alone(tiny_model):
    original = tiny_model.query_start_encoder
    before = {k: v.clone() for k, v in original.state_dict().items()}
    clone = int8_copy(original)
    assert not any(isinstance(m, torch.nn.Linear) for m in clone.modules())
    assert sum(isinstance(m, Int8Linear) for m in clone.modules()) == sum(
        isinstance(m, torch.nn.Linear) for m in original.modules()
    )
    assert all(torch.equal(before[k], v) for k, v in original.state_dict().items())


def test_int8_query_vectors_match_float32_and_leave_the_model_state_dict_unchanged(layout_model, one_torch_thread):
    keys = set(layout_model.state_dict())
    exact = layout_model.encode_queries(QUESTIONS)
    approx = layout_model.encode_queries(QUESTIONS, precision="int8")
    for a, b in zip(exact, approx, strict=True):
        assert not np.array_equal(a, b)  # the int8 path really ran
        assert _cosines(a, b).min() > 0.995
    assert set(layout_model.state_dict()) == keys  # the copy is no submodule: saving sees float32 weights only


def test_int8_copy_is_remade_after_the_query_weights_change(layout_model, one_torch_thread):
    first = layout_model.encode_queries(QUESTIONS, precision="int8")
    assert np.array_equal(first[0], layout_model.encode_queries(QUESTIONS, precision="int8")[0])  # kept
    with torch.no_grad():
        for p in _query_encoder(layout_model).parameters():
            p.mul_(1.5)  # an in-place write, as an optimizer step makes
    exact = layout_model.encode_queries(QUESTIONS)
    again = layout_model.encode_queries(QUESTIONS, precision="int8")
    assert not np.allclose(first[0], again[0])
    assert _cosines(exact[0], again[0]).min() > 0.995


def test_training_mode_and_float32_use_the_float_weights(tiny_model, one_torch_thread):
    tiny_model.train()  # dropout: the same seed draws the same masks
    torch.manual_seed(0)
    exact = tiny_model.encode_queries(QUESTIONS)
    torch.manual_seed(0)
    assert np.array_equal(exact[0], tiny_model.encode_queries(QUESTIONS, precision="int8")[0])
    tiny_model.eval()
    exact = tiny_model.encode_queries(QUESTIONS)
    assert np.array_equal(exact[1], tiny_model.encode_queries(QUESTIONS, precision="float32")[1])


def test_unknown_precision_is_refused_by_name(tiny_model):
    with pytest.raises(InvalidParameterError, match="query_precision='int4'; valid: int8, float32"):
        tiny_model.encode_queries(QUESTIONS, precision="int4")
