"""Compact model weights: float16, shards of bounded size (large tensors split by rows), tensors taken from the
base."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from dphr_haystack import ModelLoadError, PhraseModel
from dphr_haystack.errors import InvalidParameterError
from dphr_haystack.model.weights import WEIGHTS_FILE, WEIGHTS_INDEX_FILE

pytestmark = pytest.mark.unit

TEXT = "The Louvre in Paris is the most visited museum in the world."


def _trained_like(model: PhraseModel) -> PhraseModel:
    """Perturb every encoder tensor but the word embeddings, as training with frozen word embeddings would."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "word_embeddings" not in name:
                param.add_(0.01 * torch.randn_like(param))
    return model


def _vectors(model: PhraseModel) -> tuple[np.ndarray, np.ndarray]:
    return model.encode_passages([TEXT], ["Louvre"])[0].vectors, model.encode_queries(["where is the louvre"])[0]


def test_sharded_float32_round_trip_is_exact_and_every_shard_is_within_the_limit(tiny_model, tmp_path):
    limit_mb = 0.1
    written = tiny_model.save(tmp_path / "m", max_shard_mb=limit_mb)
    index = json.loads((tmp_path / "m" / WEIGHTS_INDEX_FILE).read_text())
    assert not (tmp_path / "m" / WEIGHTS_FILE).exists() and len(written["files"]) > 3
    assert index["split"], "the tiny model's word embeddings exceed the limit and must be split by rows"
    for name in written["files"]:
        assert (tmp_path / "m" / name).stat().st_size <= limit_mb * 2**20
    loaded = PhraseModel.load(tmp_path / "m")
    for got, want in zip(_vectors(loaded), _vectors(tiny_model)):
        assert np.array_equal(got, want)
    assert loaded.phrase_fingerprint() == tiny_model.phrase_fingerprint()


def test_float16_weights_halve_the_size_and_change_vectors_only_by_rounding(tiny_model, tmp_path):
    full = tiny_model.save(tmp_path / "fp32")
    half = tiny_model.save(tmp_path / "fp16", weights_dtype="float16")
    assert half["bytes"] < 0.55 * full["bytes"]
    loaded = PhraseModel.load(tmp_path / "fp16")
    for got, want in zip(_vectors(loaded), _vectors(tiny_model)):
        assert not np.array_equal(got, want)
        np.testing.assert_allclose(got, want, atol=5e-2 * np.abs(want).max())


def test_omitted_base_tensors_come_back_from_the_base_model(tiny_base_dir, tiny_model, tmp_path):
    model = _trained_like(tiny_model)
    written = model.save(tmp_path / "m", omit_base_weights=True)
    index = json.loads((tmp_path / "m" / WEIGHTS_INDEX_FILE).read_text())
    assert written["from_base"] == 3 and all("word_embeddings" in key for key in index["from_base"])
    loaded = PhraseModel.load(tmp_path / "m")
    for got, want in zip(_vectors(loaded), _vectors(model)):
        assert np.array_equal(got, want)


def test_a_changed_base_model_is_refused(tiny_base_dir, tiny_model, tmp_path):
    base = shutil.copytree(tiny_base_dir, tmp_path / "base")
    model = PhraseModel.from_base(base, tiny_model.config)
    model.save(tmp_path / "m", omit_base_weights=True)
    other = PhraseModel.from_base(base, tiny_model.config)
    with torch.no_grad():
        other.phrase_encoder.embeddings.word_embeddings.weight.mul_(2)
    other.phrase_encoder.save_pretrained(str(base))
    with pytest.raises(ModelLoadError, match="word_embeddings"):
        PhraseModel.load(tmp_path / "m")


def test_a_corrupted_or_missing_shard_is_refused(tiny_model, tmp_path):
    written = tiny_model.save(tmp_path / "m", max_shard_mb=0.1)
    shard = tmp_path / "m" / written["files"][1]
    shard.write_bytes(shard.read_bytes()[:-8] + b"\x00" * 8)
    with pytest.raises(ModelLoadError, match="checksum"):
        PhraseModel.load(tmp_path / "m")
    shard.unlink()
    with pytest.raises(ModelLoadError, match=shard.name):
        PhraseModel.load(tmp_path / "m")


def test_saving_again_replaces_the_previous_weight_files(tiny_model, tmp_path):
    tiny_model.save(tmp_path / "m", max_shard_mb=0.1)
    tiny_model.save(tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").glob("model*.safetensors*")) == [WEIGHTS_FILE]
    assert np.array_equal(_vectors(PhraseModel.load(tmp_path / "m"))[1], _vectors(tiny_model)[1])


def test_dphr_model_export_writes_a_loadable_compact_model(tiny_model, tmp_path, capsys):
    from dphr_haystack.cli import main

    model = _trained_like(tiny_model)
    model.save(tmp_path / "full")
    assert (
        main(
            [
                "model",
                "export",
                "--model",
                str(tmp_path / "full"),
                "--out",
                str(tmp_path / "compact"),
                "--max-shard-mb",
                "0.1",
                "--omit-base-weights",
            ]
        )
        == 0
    )
    assert "3 tensors from the base model" in capsys.readouterr().out
    loaded = PhraseModel.load(tmp_path / "compact")
    np.testing.assert_allclose(_vectors(loaded)[1], _vectors(model)[1], atol=5e-2 * np.abs(_vectors(model)[1]).max())


def test_int8_weights_are_smaller_than_float16_and_keep_vectors_close(tiny_model, tmp_path):
    half = tiny_model.save(tmp_path / "fp16", weights_dtype="float16")
    quantized = tiny_model.save(tmp_path / "int8", weights_dtype="int8")
    index = json.loads((tmp_path / "int8" / WEIGHTS_INDEX_FILE).read_text())
    assert any(key.endswith("::scale") for key in index["weight_map"])
    assert quantized["bytes"] < 0.85 * half["bytes"]  # the tiny model's many small tensors stay float16
    loaded = PhraseModel.load(tmp_path / "int8")
    for got, want in zip(_vectors(loaded), _vectors(tiny_model)):
        cosine = (got * want).sum(-1) / (np.linalg.norm(got, axis=-1) * np.linalg.norm(want, axis=-1))
        assert cosine.min() > 0.95 and not np.array_equal(got, want)


def test_int8_phrase_keeps_an_int8_phrase_encoder_exactly_and_the_query_side_in_float16(tiny_model, tmp_path):
    """The shipped recipe: phrase encoder from an int8 copy, frozen; query side fine-tuned after loading it."""
    tiny_model.save(tmp_path / "int8", weights_dtype="int8")
    model = _trained_like(PhraseModel.load(tmp_path / "int8"))
    with torch.no_grad():  # query-side fine-tuning leaves the phrase encoder as the int8 copy had it
        model.phrase_encoder.load_state_dict(PhraseModel.load(tmp_path / "int8").phrase_encoder.state_dict())
    model.save(tmp_path / "mixed", weights_dtype="int8-phrase")
    model.save(tmp_path / "fp16", weights_dtype="float16")
    index = json.loads((tmp_path / "mixed" / WEIGHTS_INDEX_FILE).read_text())
    scaled = {key.split("::")[0] for key in index["weight_map"] if key.endswith("::scale")}
    assert scaled and all(key.startswith("phrase_encoder.") for key in scaled)
    mixed, half = PhraseModel.load(tmp_path / "mixed"), PhraseModel.load(tmp_path / "fp16")
    assert mixed.phrase_fingerprint() == model.phrase_fingerprint() != half.phrase_fingerprint()
    np.testing.assert_array_equal(
        mixed.encode_queries(["where is the louvre"])[0], half.encode_queries(["where is the louvre"])[0]
    )
    with pytest.raises(InvalidParameterError, match="int8-phrase"):
        model.save(tmp_path / "bad", weights_dtype="int4")


def test_int8_codes_without_their_scales_are_refused(tiny_model, tmp_path):
    tiny_model.save(tmp_path / "m", weights_dtype="int8")
    index_file = tmp_path / "m" / WEIGHTS_INDEX_FILE
    index = json.loads(index_file.read_text())
    scale_key = next(key for key in index["weight_map"] if key.endswith("::scale"))
    shard = tmp_path / "m" / index["weight_map"][scale_key]
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(shard))
    del tensors[scale_key]
    save_file(tensors, str(shard))
    from dphr_haystack._util.atomic import file_sha256

    index["files_sha256"][shard.name] = file_sha256(shard)
    index_file.write_text(json.dumps(index))
    with pytest.raises(ModelLoadError, match="row scales"):
        PhraseModel.load(tmp_path / "m")


def test_the_cli_lists_exactly_the_storage_options():
    from dphr_haystack.model.config import WEIGHT_STORAGE
    from dphr_haystack.model.weights import STORAGE_DTYPES

    assert tuple(WEIGHT_STORAGE) == tuple(STORAGE_DTYPES)


@pytest.mark.parametrize("dtype", ["float16", "int8", "int8-phrase"])
def test_the_token_filter_is_stored_exactly_under_every_option(tiny_model, tmp_path, dtype):
    """An index keeps the tokens whose filter logit passes the threshold: a rounded filter would keep others."""
    from dphr_haystack.model.phrase_model import filter_head

    tiny_model.config.filter_hidden = 128  # 128 x 32 = 4,096 weights: large enough to be int8 otherwise
    tiny_model.filter_linear = filter_head(tiny_model.phrase_encoder.config.hidden_size, 128)
    tiny_model.save(tmp_path / dtype, weights_dtype=dtype)
    index = json.loads((tmp_path / dtype / WEIGHTS_INDEX_FILE).read_text())
    assert not any(key.startswith("filter_linear.") and key.endswith("::scale") for key in index["weight_map"])
    loaded = PhraseModel.load(tmp_path / dtype)
    for name, tensor in tiny_model.filter_linear.state_dict().items():
        assert torch.equal(loaded.filter_linear.state_dict()[name], tensor), name
