"""A BERT encoder in plain torch, for loading phrase models to search with: the forward pass of transformers'
``BertModel`` (absolute positions, SDPA attention, encoder only), computed with the same torch operations in the same
order, so that its outputs are bit-identical (``tests/core/test_bert_encoder.py``, run with transformers 4.51 and
5.24), without importing ``transformers.modeling_utils``.

That import costs more than anything else in a cold ``dphr search`` (2-4 s on 2 cores: it brings in
``torch.distributed.tensor``, ``torch._dynamo`` and, through text generation, scikit-learn, SciPy and pandas;
``benchmarks/speed/cli_search.py``). Module and parameter names are transformers' (``embeddings.word_embeddings``,
``encoder.layer.N.attention.self.query``, ...), so state dicts, fingerprints and checkpoints are the same; ``config``
is the transformers config the encoder was built from. Dropout is applied in training mode as transformers does.
:func:`supports` says which configs it covers; any other encoder is built by transformers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional

ACTIVATIONS = {"gelu": functional.gelu, "relu": functional.relu}


def supports(config: Any) -> bool:
    """Whether ``config`` (a transformers config) describes an encoder this module computes exactly as transformers'
    ``BertModel`` with SDPA attention does."""
    hidden, heads = getattr(config, "hidden_size", None), getattr(config, "num_attention_heads", None)
    return (
        getattr(config, "model_type", None) == "bert"
        and getattr(config, "position_embedding_type", "absolute") == "absolute"
        and not getattr(config, "is_decoder", False)
        and not getattr(config, "add_cross_attention", False)
        and getattr(config, "hidden_act", None) in ACTIVATIONS
        and not getattr(config, "chunk_size_feed_forward", 0)
        and not getattr(config, "pruned_heads", None)
        and not getattr(config, "output_attentions", False)
        and not getattr(config, "output_hidden_states", False)
        and isinstance(hidden, int)
        and isinstance(heads, int)
        and heads > 0
        and hidden % heads == 0
    )


@dataclass
class EncoderOutput:
    """What the phrase model reads of an encoder's output (transformers' field names)."""

    last_hidden_state: torch.Tensor
    pooler_output: torch.Tensor


class Embeddings(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        positions = torch.arange(config.max_position_embeddings).expand((1, -1))
        self.register_buffer("position_ids", positions, persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(positions.size(), dtype=torch.long), persistent=False)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings += self.position_embeddings(self.position_ids[:, : input_ids.size(1)])
        return self.dropout(self.LayerNorm(embeddings))


class SelfAttention(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        self.heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_prob = config.attention_probs_dropout_prob

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.size()[:-1] + (self.heads, self.head_size)).permute(0, 2, 1, 3)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        batch, length, _ = hidden.size()
        query = self._heads(self.query(hidden))
        key = self._heads(self.key(hidden))
        value = self._heads(self.value(hidden))
        out = functional.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, dropout_p=self.dropout_prob if self.training else 0.0, is_causal=False
        )
        return out.transpose(1, 2).reshape(batch, length, self.heads * self.head_size)


class DenseResidual(nn.Module):
    """Linear, dropout, then LayerNorm of the sum with the block's input (transformers' ``BertSelfOutput`` and
    ``BertOutput``)."""

    def __init__(self, config: Any, inputs: int) -> None:
        super().__init__()
        self.dense = nn.Linear(inputs, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden)) + residual)


class Attention(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        self.self = SelfAttention(config)
        self.output = DenseResidual(config, config.hidden_size)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return self.output(self.self(hidden, mask), hidden)


class Intermediate(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.activation = ACTIVATIONS[config.hidden_act]

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(hidden))


class Layer(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        self.attention = Attention(config)
        self.intermediate = Intermediate(config)
        self.output = DenseResidual(config, config.intermediate_size)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        attended = self.attention(hidden, mask)
        return self.output(self.intermediate(attended), attended)


class Encoder(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        self.layer = nn.ModuleList([Layer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        for layer in self.layer:
            hidden = layer(hidden, mask)
        return hidden


class Pooler(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


class BertEncoder(nn.Module):
    """transformers' ``BertModel`` forward pass (see the module docstring) for a config :func:`supports`."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        if not supports(config):
            raise ValueError("this encoder config needs transformers' own model class")
        self.config = config
        self.embeddings = Embeddings(config)
        self.encoder = Encoder(config)
        self.pooler = Pooler(config)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> EncoderOutput:
        batch, length = input_ids.size()
        if token_type_ids is None:
            token_type_ids = self.embeddings.token_type_ids[:, :length].expand(batch, length)
        hidden = self.embeddings(input_ids, token_type_ids)
        hidden = self.encoder(hidden, _attention_bias(attention_mask, hidden.dtype, length))
        return EncoderOutput(last_hidden_state=hidden, pooler_output=self.pooler(hidden))


def _attention_bias(mask: torch.Tensor | None, dtype: torch.dtype, length: int) -> torch.Tensor | None:
    """The additive (batch, 1, length, length) mask SDPA gets: None when nothing is padded, else 0 where a token
    may be attended to and the dtype's lowest value where it may not."""
    if mask is None or bool(torch.all(mask == 1)):
        return None
    batch, keys = mask.size()
    inverted = 1.0 - mask[:, None, None, :].expand(batch, 1, length, keys).to(dtype)
    return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)
