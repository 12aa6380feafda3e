"""dphr's BERT forward pass against transformers' BertModel (bit for bit), the configs it leaves to transformers,
the tokenizer loaded without AutoTokenizer, and a search process that never imports transformers' modeling code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers

from dphr_haystack import PhraseIndex, PhraseModel
from dphr_haystack.encode.add import add_passages
from dphr_haystack.model.bert import BertEncoder, supports
from dphr_haystack.model.building import make_encoder
from dphr_haystack.model.loading import load_model
from dphr_haystack.model.tokenizer import load_tokenizer
from tests.conftest import tiny_passages

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]


def _config(**overrides) -> transformers.BertConfig:
    settings = dict(
        vocab_size=97,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=64,
        type_vocab_size=2,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
    )
    return transformers.BertConfig(**{**settings, **overrides})


def _pair(config, seed: int = 0) -> tuple[torch.nn.Module, BertEncoder]:
    """transformers' BertModel (SDPA) with random weights, and dphr's encoder holding the same weights."""
    torch.manual_seed(seed)
    theirs = make_encoder(config, "transformers")  # transformers' BertModel, SDPA attention
    assert isinstance(theirs, transformers.BertModel)
    ours = BertEncoder(config)
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


def _inputs(batch: int = 3, length: int = 11, padded: bool = True, vocab: int = 97) -> dict:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (batch, length), generator=generator)
    mask = torch.ones_like(ids)
    if padded:
        mask[1, 7:] = 0
        mask[2, 3:] = 0
    types = torch.randint(0, 2, (batch, length), generator=generator)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


@pytest.mark.parametrize("act", ["gelu", "relu"])
@pytest.mark.parametrize("padded", [True, False])
def test_the_forward_pass_equals_transformers_bit_for_bit(act, padded, one_torch_thread):
    theirs, ours = _pair(_config(hidden_act=act))
    theirs.eval(), ours.eval()
    inputs = _inputs(padded=padded)
    with torch.inference_mode():
        a, b = theirs(**inputs), ours(**inputs)
        assert torch.equal(a.last_hidden_state, b.last_hidden_state)
        assert torch.equal(a.pooler_output, b.pooler_output)
        # without token types or an attention mask
        ids = inputs["input_ids"]
        assert torch.equal(theirs(input_ids=ids).last_hidden_state, ours(input_ids=ids).last_hidden_state)


def test_training_mode_draws_the_same_dropout_and_trains(one_torch_thread):
    theirs, ours = _pair(_config())
    theirs.train(), ours.train()
    inputs = _inputs()
    torch.manual_seed(7)
    a = theirs(**inputs).last_hidden_state
    torch.manual_seed(7)
    b = ours(**inputs).last_hidden_state
    assert torch.equal(a, b)
    torch.manual_seed(8)
    assert not torch.equal(ours(**inputs).last_hidden_state, b)  # dropout is on
    b.sum().backward()
    assert all(p.grad is not None for n, p in ours.named_parameters() if not n.startswith("pooler"))


def test_names_shapes_and_buffers_are_transformers_own():
    theirs, ours = _pair(_config())
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}
    assert dict(ours.named_buffers()).keys() == dict(theirs.named_buffers()).keys()
    assert ours.config is not None and ours.config.hidden_size == 32


@pytest.mark.parametrize(
    "overrides",
    [
        {"position_embedding_type": "relative_key"},
        {"is_decoder": True},
        {"is_decoder": True, "add_cross_attention": True},
        {"hidden_act": "gelu_new"},
        {"chunk_size_feed_forward": 4},
    ],
)
def test_other_configs_are_built_by_transformers(overrides):
    config = _config(**overrides)
    assert not supports(config)
    assert not isinstance(make_encoder(config, "dphr"), BertEncoder)
    with pytest.raises(ValueError):
        BertEncoder(config)


def test_a_roberta_config_is_built_by_transformers():
    config = transformers.RobertaConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    assert not supports(config)
    assert isinstance(make_encoder(config, "dphr"), transformers.RobertaModel)


def test_loading_with_dphr_encoders_gives_the_same_model(tiny_model, tmp_path, one_torch_thread):
    tiny_model.save(tmp_path / "m")
    plain = PhraseModel.load(tmp_path / "m")
    fast = PhraseModel.load(tmp_path / "m", encoders="dphr")
    assert isinstance(fast.phrase_encoder, BertEncoder) and not isinstance(plain.phrase_encoder, BertEncoder)
    queries = ["who wrote hamlet", "capital of france?"]
    for a, b in zip(plain.encode_queries(queries), fast.encode_queries(queries), strict=True):
        assert (a == b).all()
    texts = [p["text"] for p in tiny_passages()]
    for a, b in zip(plain.encode_passages(texts), fast.encode_passages(texts), strict=True):
        assert (a.vectors == b.vectors).all() and (a.filter_logits == b.filter_logits).all()
    assert fast.phrase_fingerprint() == plain.phrase_fingerprint() == tiny_model.phrase_fingerprint()
    fast.save(tmp_path / "again")  # writes what a transformers-built model writes
    assert (tmp_path / "again" / "encoder_config.json").read_text() == (
        tmp_path / "m" / "encoder_config.json"
    ).read_text()
    assert isinstance(load_model(tmp_path / "m").phrase_encoder, BertEncoder)


def test_the_tokenizer_loads_as_auto_tokenizer_loads_it(tiny_model, tmp_path):
    from dphr_haystack.model.registry import shipped_model_path

    tiny_model.save(tmp_path / "m")
    texts = ["Who wrote Hamlet? William Shakespeare, 1599.", "naïve résumé 東京 😀", ""]
    for directory in (tmp_path / "m", shipped_model_path("dphr-minilm-squad")):
        ours, auto = (
            load_tokenizer(directory),
            transformers.AutoTokenizer.from_pretrained(str(directory), use_fast=True),
        )
        assert type(ours) is type(auto) and ours.get_vocab() == auto.get_vocab()
        assert ours(texts, return_offsets_mapping=True).data == auto(texts, return_offsets_mapping=True).data
        assert ours.backend_tokenizer.to_str() == auto.backend_tokenizer.to_str()


@pytest.mark.parametrize("named", [None, "NoSuchTokenizer", "BertModel"])
def test_a_tokenizer_config_without_a_fast_class_goes_to_auto_tokenizer(tiny_model, tmp_path, monkeypatch, named):
    tiny_model.save(tmp_path / "m")
    config_file = tmp_path / "m" / "tokenizer_config.json"
    config = {**json.loads(config_file.read_text()), "tokenizer_class": named}
    config_file.write_text(json.dumps(config))
    calls = []
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: calls.append((a, k)) or "auto")
    assert load_tokenizer(tmp_path / "m") == "auto"
    assert calls and calls[0][1]["use_fast"] is True


def test_a_search_process_never_imports_transformers_model_code(tiny_model, tmp_path):
    tiny_model.save(tmp_path / "model")
    index = PhraseIndex.create(tiny_model, path=tmp_path / "idx", model_path=str(tmp_path / "model"))
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    script = (
        "import sys\n"
        "from dphr_haystack.cli import main\n"
        f"assert main(['search', '--index', {str(tmp_path / 'idx')!r}, 'who wrote hamlet']) == 0\n"
        "heavy = ('transformers.modeling_utils', 'torch._dynamo', 'sympy', 'sklearn')\n"
        "heavy = [m for m in heavy if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_shipped_model_gives_the_same_vectors_with_either_encoders(one_torch_thread):
    plain = PhraseModel.load("dphr-minilm-squad")
    fast = load_model("dphr-minilm-squad")
    queries = ["Which NFL team represented the AFC at Super Bowl 50?", "who wrote hamlet"]
    for a, b in zip(plain.encode_queries(queries), fast.encode_queries(queries), strict=True):
        assert (a == b).all()
    texts = [p["text"] for p in tiny_passages()[:3]]
    for a, b in zip(plain.encode_passages(texts), fast.encode_passages(texts), strict=True):
        assert (a.vectors == b.vectors).all()
