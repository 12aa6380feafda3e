"""A shallower query side: ``query_layers`` builds, saves and loads a model whose query encoders keep their first
layers, and ``train.query_depth`` distils such a query side from the full one, the phrase side untouched."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from dphr_haystack import PhraseModel, PhraseModelConfig
from dphr_haystack.errors import InvalidParameterError, ModelLoadError
from train.query_depth import distil, shallow_copy

pytestmark = pytest.mark.unit

WORDS = "capital france paris who wrote hamlet highest mountain river africa python language city".split()
CONFIG = {"max_passage_length": 48, "passage_stride": 8, "max_query_length": 24}


def _questions(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(2, 7))) + "?" for _ in range(n)]


@pytest.mark.parametrize("layout", ["shared", "separate"])
def test_a_model_of_fewer_query_layers_builds_saves_and_loads_as_such(tiny_base_dir, tmp_path, layout):
    full = PhraseModel.from_base(tiny_base_dir, PhraseModelConfig(**CONFIG, query_layout=layout))
    short = PhraseModel.from_base(tiny_base_dir, PhraseModelConfig(**CONFIG, query_layout=layout, query_layers=1))
    encoders = [m for n, m in short.named_children() if n.startswith("query_") and n.endswith("encoder")]
    assert encoders and all(len(e.encoder.layer) == 1 == e.config.num_hidden_layers for e in encoders)
    assert len(short.phrase_encoder.encoder.layer) == 2
    assert short.phrase_fingerprint() == full.phrase_fingerprint()  # the index does not depend on it
    queries = _questions(5)
    assert not np.allclose(short.encode_queries(queries)[0], full.encode_queries(queries)[0])
    short.save(tmp_path / "short")
    loaded = PhraseModel.load(tmp_path / "short")
    assert loaded.config.query_layers == 1
    for precision in ("float32", "int8"):
        for got, want in zip(
            loaded.encode_queries(queries, precision=precision),
            short.encode_queries(queries, precision=precision),
            strict=True,
        ):
            np.testing.assert_array_equal(got, want)
    dphr = PhraseModel.load(tmp_path / "short", encoders="dphr")  # dphr's own BERT forward, one layer
    np.testing.assert_allclose(dphr.encode_queries(queries)[1], short.encode_queries(queries)[1], atol=1e-5)


def test_query_layers_must_be_a_count_the_encoder_has(tiny_base_dir, tmp_path):
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(InvalidParameterError, match="query_layers"):
            PhraseModelConfig(query_layers=bad)
    with pytest.raises(InvalidParameterError, match="the encoder has 2 layers"):
        PhraseModel.from_base(tiny_base_dir, PhraseModelConfig(**CONFIG, query_layers=3))
    model = PhraseModel.from_base(tiny_base_dir, PhraseModelConfig(**CONFIG, query_layers=1))
    model.save(tmp_path / "m")
    config = PhraseModelConfig.load(tmp_path / "m" / "dphr_config.json")
    config.query_layers = None  # a config that asks for more layers than the weights hold
    config.save(tmp_path / "m" / "dphr_config.json")
    with pytest.raises(ModelLoadError, match="missing"):
        PhraseModel.load(tmp_path / "m")


def test_distillation_brings_the_shallow_query_side_towards_the_full_one(tiny_model):
    torch.manual_seed(0)
    with torch.no_grad():  # a second layer that matters, as a trained one does
        for encoder in (tiny_model.query_start_encoder, tiny_model.query_end_encoder):
            for param in encoder.encoder.layer[1].parameters():
                param.add_(0.5 * torch.randn_like(param))
    student, report = distil(
        tiny_model,
        1,
        _questions(256),
        _questions(64, seed=9),
        steps=60,
        batch_size=32,
        lr=1e-3,
        eval_every=20,
        progress=False,
    )
    history = report["history"]
    assert history[0]["step"] == 0 and [row["step"] for row in history[1:]] == [20, 40, 60]
    best = min(row["relative_error"] for row in history)
    assert best < 0.5 * history[0]["relative_error"], history
    assert report["best_step"] > 0 and report["query_parameters"]["student"] < report["query_parameters"]["teacher"]
    assert student.config.query_layers == 1 and tiny_model.config.query_layers is None
    assert student.phrase_fingerprint() == tiny_model.phrase_fingerprint()
    assert not any(p.requires_grad for p in student.parameters())
    phrase = dict(tiny_model.phrase_encoder.named_parameters())
    assert all(torch.equal(p, phrase[n]) for n, p in student.phrase_encoder.named_parameters())
    held_out = _questions(16, seed=9)
    got = np.concatenate(student.encode_queries(held_out), axis=1)
    want = np.concatenate(tiny_model.encode_queries(held_out), axis=1)
    assert np.sum((got - want) ** 2) / np.sum(want**2) == pytest.approx(
        next(r["relative_error"] for r in history if r["step"] == report["best_step"]), rel=0.5
    )


def test_a_student_must_keep_fewer_layers_than_its_teacher(tiny_model):
    for layers in (0, 2, 3):
        with pytest.raises(ValueError, match="--layers must be from 1 to 1"):
            shallow_copy(tiny_model, layers)


def test_a_shared_layout_students_heads_start_fitted_to_the_teacher(tiny_base_dir):
    teacher = PhraseModel.from_base(tiny_base_dir, PhraseModelConfig(**CONFIG, query_layout="shared"))
    torch.manual_seed(0)
    with torch.no_grad():
        for param in teacher.query_encoder.encoder.layer[1].parameters():
            param.add_(0.5 * torch.randn_like(param))
    student, report = distil(
        teacher, 1, _questions(256), _questions(64, seed=9), steps=1, eval_every=1, progress=False
    )
    cut, fitted = report["cut_before_heads_fitted"], report["history"][0]
    assert fitted["relative_error"] < 0.5 * cut["relative_error"] and fitted["mean_cosine"] > cut["mean_cosine"]
    assert not torch.equal(student.query_start_head.weight, teacher.query_start_head.weight)


def test_a_phrase_model_trains_with_a_shallower_query_side_from_the_start(run_tiny_recipe):
    overrides = {
        "stages": ["rc"],
        "model.config": {**CONFIG, "query_layout": "shared", "query_layers": 1},
        "rc.select_on": None,
        "rc.train": {
            "max_steps": 3,
            "batch_size": 4,
            "lr": 1.0e-3,
            "log_every": 1,
            "save_every": 100,
            "progress": False,
        },
    }
    result = run_tiny_recipe(overrides, "rc")
    trained = PhraseModel.load(result["final"])
    assert trained.config.query_layers == 1 and len(trained.query_encoder.encoder.layer) == 1
    assert len(trained.phrase_encoder.encoder.layer) == 2


def test_score_weights_measure_query_errors_by_the_phrase_scores_they_move(tiny_model, tmp_path):
    from dphr_haystack import PhraseIndex
    from dphr_haystack.encode.add import add_passages
    from train.data import load_squad
    from train.query_depth import _in_score_space, score_weights

    index = PhraseIndex.create(tiny_model, path=tmp_path / "index")
    add_passages(index, tiny_model, load_squad("builtin").passages, progress=False)
    weights = score_weights(tmp_path / "index", sample=10**6)
    h = torch.from_numpy(index.vectors()).double()
    error = torch.randn(3, 2 * h.shape[1], dtype=torch.float64)
    d = h.shape[1]
    by_scores = ((error[:, :d] @ h.T) ** 2).mean(1) + ((error[:, d:] @ h.T) ** 2).mean(1)
    torch.testing.assert_close((_in_score_space(error, weights) ** 2).sum(1), by_scores)
    torch.testing.assert_close(weights, weights.T)
    student, report = distil(
        tiny_model, 1, _questions(64), _questions(16, seed=9), steps=2, eval_every=1, progress=False, weights=weights
    )
    assert report["loss"].startswith("phrase scores") and "relative_score_error" in report["history"][-1]
