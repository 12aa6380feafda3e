"""Phrase model: save/load round trip, windowing, query conventions, DensePhrases import, safe loading."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch

from dphr_haystack import InvalidQueryError, ModelLoadError, PhraseModel, PhraseModelConfig
from dphr_haystack.model import phrase_model as phrase_model_module
from dphr_haystack.model.fingerprint import compute_phrase_fingerprint, weights_state
from dphr_haystack.model.inputs import normalize_query

pytestmark = pytest.mark.unit

TEXT = "The Louvre in Paris is the most visited museum in the world, and it holds the Mona Lisa."


def test_save_load_gives_identical_vectors(tiny_model, tmp_path):
    tiny_model.save(tmp_path / "m")
    loaded = PhraseModel.load(tmp_path / "m")
    a = tiny_model.encode_passages([TEXT], ["Louvre"])[0]
    b = loaded.encode_passages([TEXT], ["Louvre"])[0]
    assert np.array_equal(a.vectors, b.vectors)
    assert np.array_equal(a.filter_logits, b.filter_logits)
    qa, qb = tiny_model.encode_queries(["where is the louvre?"]), loaded.encode_queries(["where is the louvre?"])
    assert np.array_equal(qa[0], qb[0]) and np.array_equal(qa[1], qb[1])
    assert loaded.config == tiny_model.config
    assert loaded.phrase_fingerprint() == tiny_model.phrase_fingerprint()


def test_fingerprint_ignores_query_side_but_not_phrase_side(tiny_model):
    before = tiny_model.phrase_fingerprint()
    with torch.no_grad():
        tiny_model.query_start_encoder.embeddings.word_embeddings.weight.add_(1.0)
    assert tiny_model.phrase_fingerprint() == before
    with torch.no_grad():
        tiny_model.phrase_encoder.embeddings.word_embeddings.weight.add_(1.0)
    assert tiny_model.phrase_fingerprint() != before


def test_phrase_fingerprint_is_kept_until_the_phrase_side_changes(tiny_model, monkeypatch):
    model = tiny_model

    def fresh() -> str:
        return compute_phrase_fingerprint(model.config, model.tokenizer, model.phrase_encoder)

    original = model.phrase_fingerprint()
    assert original == fresh()
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    calls = []
    monkeypatch.setattr(phrase_model_module, "compute_phrase_fingerprint", lambda *a: calls.append(a) or fresh())
    assert model.phrase_fingerprint() == original and not calls  # kept, not recomputed
    # A training step updates the weights in place: the fingerprint follows.
    optimizer = torch.optim.AdamW(model.phrase_encoder.parameters(), lr=1e-2)
    ids = torch.tensor([[2, 5, 6, 3]])
    model.phrase_states(ids, torch.ones_like(ids), torch.zeros_like(ids)).square().mean().backward()
    optimizer.step()
    stepped = model.phrase_fingerprint()
    assert stepped != original and stepped == fresh() and len(calls) == 1
    assert model.phrase_fingerprint() == stepped and len(calls) == 1
    with torch.no_grad():
        model.phrase_encoder.encoder.layer[0].output.dense.bias.add_(0.5)
    assert model.phrase_fingerprint() == fresh() != stepped
    model.load_state_dict(saved)  # back to the original weights
    assert model.phrase_fingerprint() == original
    model.config.passage_stride += 1  # a passage setting is part of it too
    assert model.phrase_fingerprint() == fresh() != original
    model.config.passage_stride -= 1
    assert model.phrase_fingerprint() == original
    with torch.inference_mode():  # inference tensors track no version: no key, always computed afresh
        layer = torch.nn.Linear(2, 2)
    assert weights_state(model.config, model.tokenizer, layer) is None


def test_every_context_token_gets_the_vector_of_its_max_context_window(tiny_model):
    long_text = " ".join([TEXT] * 6)
    encoded = tiny_model.encode_passages([long_text], ["Louvre"])[0]
    n_tokens = len(tiny_model.tokenizer(long_text, add_special_tokens=False)["input_ids"])
    assert n_tokens > tiny_model.config.max_passage_length  # really windowed
    assert encoded.vectors.shape == (n_tokens, tiny_model.hidden_size)
    assert not np.any(np.all(encoded.vectors == 0, axis=1))
    # Offsets point at the token's characters.
    for (start, end), tok in zip(encoded.char_offsets, tiny_model.tokenizer.tokenize(long_text)):
        assert long_text[start:end].lower() == tok.replace("##", "") or tok == "[UNK]"


def test_window_choice_matches_direct_encoding(tiny_model):
    """A token in the middle of the second window has exactly the vector that window gives it."""
    from dphr_haystack.model.inputs import build_windows, pad_batch, tokenize_passages

    long_text = " ".join([TEXT] * 4)
    tokenized = tokenize_passages(tiny_model.tokenizer, [long_text], ["Louvre"], tiny_model.config)
    windows = build_windows(tiny_model.tokenizer, tokenized, tiny_model.config)
    assert len(windows) >= 2
    owned = np.concatenate([w.owned_context for w in windows])
    assert sorted(owned.tolist()) == list(range(len(tokenized[0].context_ids)))  # each token exactly once
    w = windows[1]
    batch = pad_batch([w.input_ids], [w.token_type_ids], 0)
    with torch.no_grad():
        direct = tiny_model.phrase_states(**batch)[0].numpy()
    encoded = tiny_model.encode_passages([long_text], ["Louvre"])[0]
    np.testing.assert_allclose(encoded.vectors[w.owned_context], direct[w.owned_positions], rtol=1e-5, atol=1e-5)


def test_passage_token_types_follow_config(tiny_model):
    from dphr_haystack.model.inputs import build_windows, tokenize_passages

    for mode, expected_title_type in (("all_one", 1), ("pair", 0)):
        config = PhraseModelConfig(max_passage_length=48, passage_stride=8, passage_token_type=mode)
        tp = tokenize_passages(tiny_model.tokenizer, [TEXT], ["Louvre museum"], config)
        window = build_windows(tiny_model.tokenizer, tp, config)[0]
        assert window.token_type_ids[0] == expected_title_type
        assert window.token_type_ids[-1] == 1


def test_title_is_truncated_to_max_title_length(tiny_model):
    from dphr_haystack.model.inputs import tokenize_passages

    tp = tokenize_passages(tiny_model.tokenizer, [TEXT], ["a b c d e f g h i j k l m n"], tiny_model.config)
    assert len(tp[0].title_ids) == tiny_model.config.max_title_length == 10


@pytest.mark.parametrize("query", ["", "   ", "?", " ? ", "\n\t"])
def test_empty_queries_are_rejected(tiny_model, query):
    with pytest.raises(InvalidQueryError):
        tiny_model.encode_queries([query])


def test_trailing_question_mark_is_stripped(tiny_model):
    assert normalize_query("Who wrote Hamlet? ", tiny_model.config) == "Who wrote Hamlet"
    a = tiny_model.encode_queries(["who wrote hamlet?"])[0]
    b = tiny_model.encode_queries(["who wrote hamlet"])[0]
    assert np.array_equal(a, b)


def test_query_is_truncated_to_max_query_length(tiny_model):
    from dphr_haystack.model.inputs import tokenize_queries

    batch = tokenize_queries(tiny_model.tokenizer, ["word " * 500], tiny_model.config)
    assert batch["input_ids"].shape[1] == tiny_model.config.max_query_length


def test_shared_query_layout_round_trips(tiny_base_dir, tmp_path):
    config = PhraseModelConfig(max_passage_length=48, passage_stride=8, query_layout="shared")
    model = PhraseModel.from_base(tiny_base_dir, config)
    assert not hasattr(model, "query_start_encoder")
    model.save(tmp_path / "shared")
    loaded = PhraseModel.load(tmp_path / "shared")
    assert np.array_equal(model.encode_queries(["louvre"])[1], loaded.encode_queries(["louvre"])[1])


def test_missing_model_directory_names_the_path(tmp_path):
    with pytest.raises(ModelLoadError, match="nowhere"):
        PhraseModel.load(tmp_path / "nowhere")


def test_corrupted_weights_are_refused(tiny_model, tmp_path):
    tiny_model.save(tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(ModelLoadError, match="model.safetensors"):
        PhraseModel.load(tmp_path / "m")


# ----------------------------------------------------------------- DensePhrases checkpoints
def _write_densephrases_checkpoint(model: PhraseModel, out, old_names: bool) -> None:
    """The published layout: config.json (BertConfig, architectures Encoder) + pytorch_model.bin."""
    out.mkdir(parents=True)
    state = {}
    names = {"phrase_encoder": "bert_start", "query_start_encoder": "bert_q_start", "query_end_encoder": "bert_q_end"}
    for enc_name, old in names.items():
        for key, value in getattr(model, enc_name).state_dict().items():
            state[f"{old if old_names else enc_name}.{key}"] = value.clone()
        # Older transformers saved the position_ids buffer; the published files carry it.
        state[f"{old if old_names else enc_name}.embeddings.position_ids"] = torch.arange(512).unsqueeze(0)
    state["filter_linear.weight"] = model.filter_linear.weight.detach().clone()
    state["filter_linear.bias"] = model.filter_linear.bias.detach().clone()
    state["cross_encoder.qa_outputs.weight"] = torch.zeros(2, model.hidden_size)  # a teacher key, dropped
    torch.save(state, out / "pytorch_model.bin")
    config = json.loads(model.phrase_encoder.config.to_json_string())
    config["architectures"] = ["Encoder"]
    (out / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("old_names", [False, True])
def test_densephrases_checkpoint_imports(tiny_model, tiny_base_dir, tmp_path, old_names):
    _write_densephrases_checkpoint(tiny_model, tmp_path / "dp", old_names)
    with pytest.raises(ModelLoadError, match="tokenizer"):
        PhraseModel.from_densephrases(tmp_path / "dp")
    imported = PhraseModel.from_densephrases(tmp_path / "dp", tokenizer=tiny_base_dir)
    assert imported.config.passage_token_type == "all_one" and imported.config.max_title_length == 10
    for name in ("phrase_encoder", "query_start_encoder", "query_end_encoder", "filter_linear"):
        ours, theirs = getattr(tiny_model, name).state_dict(), getattr(imported, name).state_dict()
        for key in theirs:
            if not key.endswith("position_ids"):
                assert torch.equal(ours[key], theirs[key]), key
    # Vectors equal a direct BertModel forward over [CLS] title [SEP] context [SEP] with segment ids 1.
    tok = imported.tokenizer
    title_ids = tok("Louvre", add_special_tokens=False)["input_ids"]
    ctx_ids = tok("the louvre is in paris", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([[tok.cls_token_id, *title_ids, tok.sep_token_id, *ctx_ids, tok.sep_token_id]])
    with torch.no_grad():
        direct = tiny_model.phrase_encoder(input_ids=ids, token_type_ids=torch.ones_like(ids)).last_hidden_state[0]
    got = imported.encode_passages(["the louvre is in paris"], ["Louvre"])[0].vectors
    start = 2 + len(title_ids)
    np.testing.assert_allclose(got, direct[start : start + len(ctx_ids)].numpy(), rtol=1e-5, atol=1e-5)


class _Exploit:
    def __reduce__(self):
        return (exec, ("import pathlib; pathlib.Path(__import__('os').environ['PWNED']).write_text('ran')",))


def test_malicious_pickle_checkpoint_is_refused_and_nothing_runs(tiny_model, tiny_base_dir, tmp_path, monkeypatch):
    _write_densephrases_checkpoint(tiny_model, tmp_path / "dp", old_names=False)
    marker = tmp_path / "pwned"
    monkeypatch.setenv("PWNED", str(marker))
    with (tmp_path / "dp" / "pytorch_model.bin").open("wb") as handle:
        pickle.dump({"phrase_encoder.x": _Exploit()}, handle)
    with pytest.raises(ModelLoadError, match="refused"):
        PhraseModel.from_densephrases(tmp_path / "dp", tokenizer=tiny_base_dir)
    assert not marker.exists()
