"""Low-rank adapters on a phrase model: an adapted model starts as its base, trains only what it should, saves only
what differs from the base, loads adapted, quantizes its query side with the adapters, and merges exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dphr_haystack import PhraseModel, PhraseModelConfig
from dphr_haystack.errors import InvalidParameterError, ModelLoadError
from dphr_haystack.model.adapters import (
    LoRALinear,
    adapter_parameter_count,
    adapter_parameters,
    merge_adapters,
    with_adapters,
)
from train.trainer import set_trainable

pytestmark = pytest.mark.unit

SPEC = {"rank": 4, "alpha": 8.0, "roles": ["phrase", "query"]}
PASSAGES = ["Paris is the capital of France.", "The Eiffel Tower was completed in 1889."]
TITLES = ["France", "Eiffel Tower"]
QUERIES = ["What is the capital of France?", "When was the Eiffel Tower completed?"]


def _vectors(model: PhraseModel, precision: str = "float32") -> np.ndarray:
    passages = np.concatenate([p.vectors for p in model.encode_passages(PASSAGES, TITLES)])
    q_start, q_end = model.encode_queries(QUERIES, precision=precision)
    return np.concatenate([passages.ravel(), q_start.ravel(), q_end.ravel()])


def _nudge(model: PhraseModel) -> None:
    """Move every adapter away from zero, as training would."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in adapter_parameters(model):
            param.add_(0.05 * torch.randn(param.shape, generator=generator))


@pytest.fixture
def adapted(tiny_base_dir):
    config = PhraseModelConfig(max_passage_length=48, passage_stride=8, query_layout="shared")
    model = PhraseModel.from_base(tiny_base_dir, config)
    before = _vectors(model)
    count = with_adapters(model, SPEC)
    return model, before, count


def test_an_adapted_model_starts_as_its_base_and_adapts_every_layer_linear(adapted):
    model, before, count = adapted
    layers = model.phrase_encoder.config.num_hidden_layers
    assert count == 6 * layers * 2  # q, k, v, attention out, feed-forward in and out; phrase and query encoders
    assert np.array_equal(_vectors(model), before)
    assert model.config.adapters == {"rank": 4, "alpha": 8.0, "roles": ["phrase", "query"]}
    assert not any(isinstance(m, LoRALinear) for n, m in model.named_modules() if "pooler" in n or "embeddings" in n)
    hidden, inner = model.phrase_encoder.config.hidden_size, model.phrase_encoder.config.intermediate_size
    assert adapter_parameter_count(model) == 2 * layers * 4 * (4 * 2 * hidden + 2 * (hidden + inner))
    _nudge(model)
    assert not np.allclose(_vectors(model), before)


def test_training_adapters_leaves_the_encoders_own_weights_alone(adapted):
    model, _, _ = adapted
    trainable = {id(p) for p in set_trainable(model, "adapters", freeze_word_embeddings=True)}
    for name, param in model.named_parameters():
        inside = name.startswith(("phrase_encoder.", "query_encoder."))
        assert (id(param) in trainable) == (name.endswith(("lora_a", "lora_b")) or not inside), name
    with pytest.raises(ValueError, match="adapters"):
        set_trainable(PhraseModel.from_base(model.config.base_model), "adapters", freeze_word_embeddings=True)


def test_adapters_with_norms_also_train_the_encoders_layer_norms_and_nothing_else_of_them(adapted):
    model, _, _ = adapted
    trainable = {id(p) for p in set_trainable(model, "adapters+norms", freeze_word_embeddings=True)}
    norms = [name for name, _ in model.named_parameters() if "LayerNorm" in name]
    assert any(name.startswith("phrase_encoder.") for name in norms)
    assert any(name.startswith("query_encoder.") for name in norms)
    for name, param in model.named_parameters():
        inside = name.startswith(("phrase_encoder.", "query_encoder."))
        expected = name.endswith(("lora_a", "lora_b")) or "LayerNorm" in name or not inside
        assert (id(param) in trainable) == expected, name


def test_a_save_without_base_weights_keeps_the_adapters_and_loads_adapted(adapted, tmp_path):
    model, _, _ = adapted
    _nudge(model)
    expected = _vectors(model)
    written = model.save(tmp_path / "model", weights_dtype="float32", max_shard_mb=8, omit_base_weights=True)
    index = json.loads((tmp_path / "model" / "model.safetensors.index.json").read_text())
    stored = set(index["weight_map"])
    assert written["from_base"] > 0 and not any(k in stored for k in index["from_base"])
    assert all(k.split("::")[0] in stored for k in (n for n, _ in model.named_parameters() if "lora_" in n))
    # the frozen encoder weights come from the base, not from the files
    assert "phrase_encoder.encoder.layer.0.attention.self.query.weight" in index["from_base"]
    loaded = PhraseModel.load(tmp_path / "model")
    assert loaded.config.adapters == model.config.adapters
    assert np.allclose(_vectors(loaded), expected, atol=1e-5)
    assert loaded.phrase_fingerprint() == model.phrase_fingerprint()
    searching = PhraseModel.load(tmp_path / "model", encoders="dphr")  # the search's own BERT encoder, adapted too
    assert np.allclose(_vectors(searching), expected, atol=1e-5)


def test_the_int8_query_side_carries_the_adapters(adapted):
    model, _, _ = adapted
    plain_int8 = model.encode_queries(QUERIES, precision="int8")[0]
    _nudge(model)
    exact = model.encode_queries(QUERIES)[0]
    quantized = model.encode_queries(QUERIES, precision="int8")[0]
    assert not np.allclose(quantized, plain_int8, atol=1e-3)  # the adapters reached the int8 copy
    cosine = (exact * quantized).sum(1) / np.linalg.norm(exact, axis=1) / np.linalg.norm(quantized, axis=1)
    assert cosine.min() > 0.99


def test_merging_computes_the_same_and_records_no_adapters(adapted, tmp_path):
    model, _, _ = adapted
    _nudge(model)
    expected, fingerprint = _vectors(model), model.phrase_fingerprint()
    assert merge_adapters(model) == 6 * model.phrase_encoder.config.num_hidden_layers * 2
    assert model.config.adapters is None and adapter_parameter_count(model) == 0
    assert np.allclose(_vectors(model), expected, atol=1e-5)
    assert model.phrase_fingerprint() != fingerprint  # other tensors, the same vectors (within float rounding)
    model.save(tmp_path / "merged")
    assert PhraseModel.load(tmp_path / "merged").config.adapters is None


@pytest.mark.parametrize(
    "spec",
    [
        {"rank": 0, "alpha": 8},
        {"rank": 4.0, "alpha": 8},
        {"rank": 4, "alpha": -1},
        {"rank": 4, "alpha": 8, "roles": ["filter"]},
        {"rank": 4, "alpha": 8, "roles": ["phrase", "phrase"]},
        {"rank": 4, "alpha": 8, "dropout": 0.1},
        [4, 8],
    ],
)
def test_bad_adapter_settings_are_refused(spec, tmp_path, tiny_model):
    with pytest.raises(InvalidParameterError, match="adapters"):
        PhraseModelConfig(adapters=spec)
    tiny_model.save(tmp_path / "model")
    config = json.loads((tmp_path / "model" / "dphr_config.json").read_text())
    (tmp_path / "model" / "dphr_config.json").write_text(json.dumps({**config, "adapters": spec}))
    with pytest.raises(ModelLoadError, match="adapters"):
        PhraseModel.load(tmp_path / "model")
