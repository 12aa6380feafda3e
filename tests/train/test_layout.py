"""Converting the DensePhrases query layout (two encoders) to the shared one (one encoder, two heads)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from dphr_haystack.model.phrase_model import PhraseModel
from train.layout import main, to_shared_layout

pytestmark = pytest.mark.unit

WORDS = "capital france paris who wrote hamlet highest mountain river africa python language city".split()


def _questions(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(2, 7))) + "?" for _ in range(n)]


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_shared_layout_keeps_start_and_phrase_side_and_fits_the_end(tiny_model):
    torch.manual_seed(1)
    with torch.no_grad():  # make the end encoder differ from the start encoder, as training does
        for param in tiny_model.query_end_encoder.parameters():
            param.add_(0.02 * torch.randn_like(param))
    shared, fit = to_shared_layout(tiny_model, _questions(200))
    assert shared.config.query_layout == "shared" and tiny_model.config.query_layout == "separate"
    assert shared.phrase_fingerprint() == tiny_model.phrase_fingerprint()
    held_out = _questions(60, seed=7)
    s_ref, e_ref = tiny_model.encode_queries(held_out)
    s_new, e_new = shared.encode_queries(held_out)
    np.testing.assert_allclose(s_new, s_ref, atol=1e-5)
    identity_cos = _cosine(s_ref, e_ref).mean()  # what an untrained (identity) end head would give
    fitted_cos = _cosine(e_new, e_ref).mean()
    assert fitted_cos > identity_cos and fitted_cos > 0.95, (fitted_cos, identity_cos)
    assert 0.0 < fit["r2"] <= 1.0 and fit["mean_cosine"] > 0.95


def test_shared_layout_errors(tiny_model):
    with pytest.raises(ValueError, match="more than 32 questions"):
        to_shared_layout(tiny_model, _questions(10))
    shared, _ = to_shared_layout(tiny_model, _questions(64))
    with pytest.raises(ValueError, match="already 'shared'"):
        to_shared_layout(shared, _questions(64))


def test_layout_command_writes_a_loadable_model(tiny_model, tmp_path, capsys):
    tiny_model.save(tmp_path / "separate")
    context = "Paris is the capital of France."
    qas = [
        {"id": f"q{i}", "question": q, "answers": [{"text": "Paris", "answer_start": 0}]}
        for i, q in enumerate(_questions(50))
    ]
    train = tmp_path / "train.json"
    train.write_text(json.dumps({"data": [{"title": "France", "paragraphs": [{"context": context, "qas": qas}]}]}))
    assert main(["--model", str(tmp_path / "separate"), "--out", str(tmp_path / "shared"), "--train", str(train)]) == 0
    fit = json.loads((tmp_path / "shared" / "layout_fit.json").read_text())
    assert fit["questions"] == 50 and fit["phrase_fingerprint"] == tiny_model.phrase_fingerprint()
    loaded = PhraseModel.load(tmp_path / "shared")
    assert loaded.config.query_layout == "shared"
    np.testing.assert_allclose(
        loaded.encode_queries(["who wrote hamlet?"])[0], tiny_model.encode_queries(["who wrote hamlet?"])[0], atol=1e-5
    )
    with pytest.raises(SystemExit):
        main(
            ["--model", str(tmp_path / "separate"), "--out", str(tmp_path / "x"), "--train", str(tmp_path / "no.json")]
        )
