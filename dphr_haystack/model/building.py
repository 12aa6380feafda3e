"""Building a phrase model's encoders for weights about to be loaded: which implementation, and no random init.

A loaded model gets its weights from a file, so initialising them at random first (transformers' ``_init_weights``
and torch's ``reset_parameters``: half a second of CPU for the shipped model's two MiniLM encoders) is wasted:
:func:`build_for_weights` builds the modules with their parameters on the meta device and then takes the loaded
tensors as the parameters. :func:`make_encoder` builds one encoder, with transformers' ``AutoModel`` or, for
``impl="dphr"`` and a plain BERT config, :class:`~dphr_haystack.model.bert.BertEncoder` (bit-identical outputs
without importing transformers' modeling code). :func:`query_layers_of` and :func:`first_layers` give the query
encoders the depth ``PhraseModelConfig.query_layers`` asks for; :func:`filter_head` and :func:`identity_linear` are
the token filter and the shared query layout's heads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from .._util.lazy import require
from ..errors import InvalidParameterError
from .bert import BertEncoder, supports
from .remote_code import TRUST_REMOTE_CODE

# One attention kernel for every way of building an encoder, so save/load round trips are bit-identical.
ATTENTION = "sdpa"
ENCODER_IMPLS = ("transformers", "dphr")
# In-place writes of tensor data that weight initialisation uses (torch.nn.init, transformers' _init_weights).
_DATA_WRITES = frozenset(
    {"normal_", "uniform_", "zero_", "zeros_", "ones_", "eye_", "fill_", "copy_", "erfinv_", "mul_", "add_", "sub_"}
    | {"div_", "clamp_"}
)

M = TypeVar("M", bound=nn.Module)


def check_impl(impl: str) -> str:
    if impl not in ENCODER_IMPLS:
        raise InvalidParameterError(f"encoder implementation {impl!r}; valid: {', '.join(ENCODER_IMPLS)}")
    return impl


def attention_for(enc_config: Any) -> str:
    """The attention kernel of a transformers encoder for ``enc_config``: :data:`ATTENTION`, or ``"eager"`` for an
    architecture transformers has no SDPA attention for (MPNet), whether it is built from a base or for weights."""
    mapping = require("transformers").MODEL_MAPPING
    model_class = mapping[type(enc_config)] if type(enc_config) in mapping else None
    return ATTENTION if getattr(model_class, "_supports_sdpa", True) else "eager"


def make_encoder(enc_config: Any, impl: str = "transformers") -> nn.Module:
    """One encoder for ``enc_config``: dphr's BERT forward for ``impl="dphr"`` when it :func:`supports
    <dphr_haystack.model.bert.supports>` the config (BERT only), else transformers' ``AutoModel``
    (:func:`attention_for`)."""
    if check_impl(impl) == "dphr" and supports(enc_config):
        return BertEncoder(enc_config)
    transformers = require("transformers")
    return transformers.AutoModel.from_config(
        enc_config, attn_implementation=attention_for(enc_config), trust_remote_code=TRUST_REMOTE_CODE
    )


class _ParametersOnMeta(TorchFunctionMode):
    """Building a model without initialising its weights: with ``all_meta`` every tensor is made on the meta device
    (a shape-only probe); otherwise only those made by ``torch.empty`` (what ``nn.Linear``, ``nn.Embedding`` and
    ``nn.LayerNorm`` make their parameters with), while buffers made otherwise (``torch.arange``, ``torch.zeros``)
    stay real. Writes of random or constant data into a meta tensor are skipped: it has no data, and on the meta
    device each write costs milliseconds."""

    def __init__(self, all_meta: bool = False) -> None:
        super().__init__()
        self.all_meta = all_meta

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        if name in _DATA_WRITES or (name == "eye" and "out" in kwargs):  # nn.init.eye_ writes torch.eye(out=...)
            # Tensor.normal_(self, ...), torch.nn.init.normal_(tensor=..., ...), torch.eye(n, m, out=...)
            target = kwargs["out"] if name == "eye" else args[0] if args else kwargs.get("tensor", kwargs.get("self"))
            if isinstance(target, torch.Tensor) and target.is_meta:
                return target
        if func is torch.empty and not self.all_meta:
            kwargs["device"] = "meta"
        if func is torch.arange and self.all_meta and args and all(type(a) is int for a in args):
            # (a meta arange runs Python reference code that imports sympy: a second of start-up on 2 cores)
            size = len(range(*args))
            return torch.empty(size, dtype=kwargs.get("dtype") or torch.long, device="meta")
        return func(*args, **kwargs)


@contextlib.contextmanager
def on_meta() -> Iterator[None]:
    """Build modules with every tensor on the meta device and nothing initialised: a probe of names and shapes."""
    with torch.device("meta"), _ParametersOnMeta(all_meta=True):
        yield


def build_for_weights(
    build: Callable[[], M], state: dict[str, torch.Tensor], load: Callable[[M, dict, bool], None]
) -> M:
    """``build()`` holding the tensors of ``state`` as its weights, without first initialising them at random.

    ``state`` was checked against the model's keys and shapes; ``load(model, state, assign)`` loads it (with
    ``assign``: the tensors become the parameters). A tensor whose memory several keys share (a base-model tensor
    read once) is copied, so that no two weights share memory. A model whose modules share a parameter (tied
    weights), or that keeps a buffer on the meta device (one made with ``torch.empty``), is built the plain way
    instead and the weights copied in.
    """
    with _ParametersOnMeta():
        model = build()
    named = list(model.named_parameters(remove_duplicate=False))
    if len({id(p) for _, p in named}) == len(named):
        seen: set[int] = set()
        own: dict[str, torch.Tensor] = {}
        for key, value in state.items():
            memory = value.untyped_storage().data_ptr()
            own[key] = value.clone() if memory in seen and value.numel() else value
            seen.add(memory)
        load(model, own, True)
        if not any(t.is_meta for t in (*model.parameters(), *model.buffers())):
            return model
    model = build()
    load(model, state, False)
    return model


def query_layers_of(enc_config: Any, config: Any) -> int:
    """The transformer layers of the query encoders a phrase model config (``config.query_layers``) gives over a
    phrase encoder of ``enc_config``.

    Raises:
        InvalidParameterError: ``config.query_layers`` asks for more layers than the phrase encoder has.
    """
    total = int(enc_config.num_hidden_layers)
    if config.query_layers is None:
        return total
    if config.query_layers > total:
        raise InvalidParameterError(f"query_layers={config.query_layers}: the encoder has {total} layers")
    return config.query_layers


def first_layers(encoder: nn.Module, layers: int) -> nn.Module:
    """``encoder`` (a BERT-family encoder: ``encoder.encoder.layer``) keeping only its first ``layers`` layers."""
    blocks = encoder.encoder.layer
    if layers < len(blocks):
        encoder.encoder.layer = nn.ModuleList(list(blocks)[:layers])
        encoder.config.num_hidden_layers = layers
    return encoder


def filter_head(dim: int, hidden: int | None = None) -> nn.Module:
    """The token filter: Linear(d, 2) (DensePhrases), or Linear(d, hidden) → GELU → Linear(hidden, 2)."""
    if hidden is None:
        return nn.Linear(dim, 2)
    return nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, 2))


def identity_linear(dim: int) -> nn.Linear:
    """Linear(d, d) starting as the identity (a shared query layout's start and end heads)."""
    layer = nn.Linear(dim, dim)
    nn.init.eye_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer
