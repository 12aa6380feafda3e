"""The phrase model: a phrase encoder, query start/end encoders and a token filter (DensePhrases layout).

A passage token's last hidden state h_t is both its start and its end vector; a query's start and end
vectors are the [CLS] states of the two query encoders; a phrase (i, j) scores q_s·h_i + q_e·h_j.
``filter_linear`` maps h_t to (start, end) filter logits (one linear map as in DensePhrases, or a small MLP
with ``PhraseModelConfig.filter_hidden``). Parameter names follow DensePhrases
(``phrase_encoder.*``, ``query_start_encoder.*``, ``query_end_encoder.*``, ``filter_linear.*``) so a
published checkpoint loads as is.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .._util.atomic import write_file_atomic
from .._util.lazy import require
from .._util.threads import resolve_threads, using_threads
from ..errors import ModelLoadError
from ..params import check_param, check_query_precision
from .adapters import add_adapters
from .building import (
    attention_for,
    build_for_weights,
    check_impl,
    filter_head,
    first_layers,
    identity_linear,
    make_encoder,
    on_meta,
    query_layers_of,
)
from .config import CONFIG_FILE, PhraseModelConfig
from .densephrases import CHECKPOINT_WEIGHTS_FILE, import_checkpoint
from .encoding import EncodedPassage, EncodedPiece, encode_tokenized, iter_encoded_pieces
from .fingerprint import compute_phrase_fingerprint, weights_state
from .inputs import TokenizedPassage, Window, pad_batch, tokenize_passages, tokenize_queries
from .int8 import int8_available, int8_copy
from .registry import is_shipped_name, resolve_base, shipped_model_path
from .remote_code import TRUST_REMOTE_CODE, refuse_remote_code
from .sources import ModelSource, model_source
from .tokenizer import apply_casing, check_fast_tokenizer, load_tokenizer, save_tokenizer
from .truecase import TrueCaser
from .weights import WEIGHTS_FILE, WEIGHTS_INDEX_FILE, read_base_state, read_weights, write_weights

ENCODER_CONFIG_FILE = "encoder_config.json"
# the modules that encode queries, by query layout
QUERY_SIDE = {
    "shared": ("query_encoder", "query_start_head", "query_end_head"),
    "separate": ("query_start_encoder", "query_end_encoder"),
}
_INT8_LOCK = threading.Lock()


class PhraseModel(nn.Module):
    """Phrase encoder + query-start/end encoders + token filter.

    Example:
        >>> model = PhraseModel.from_base("minilm")            # untrained, from the offline MiniLM
        >>> encoded = model.encode_passages(["Paris is the capital of France."], titles=["France"])
        >>> q_start, q_end = model.encode_queries(["What is the capital of France?"])
    """

    def __init__(
        self,
        phrase_encoder: nn.Module,
        query_start_encoder: nn.Module | None,
        query_end_encoder: nn.Module | None,
        tokenizer,
        config: PhraseModelConfig,
        query_encoder: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.tokenizer = tokenizer
        self.phrase_encoder = phrase_encoder
        hidden = phrase_encoder.config.hidden_size
        if config.query_layout == "separate":
            if query_start_encoder is None or query_end_encoder is None:
                raise ModelLoadError("the separate layout needs query_start_encoder and query_end_encoder")
            self.query_start_encoder = query_start_encoder
            self.query_end_encoder = query_end_encoder
        else:
            if query_encoder is None:
                raise ModelLoadError("the shared layout needs query_encoder")
            self.query_encoder = query_encoder
            self.query_start_head = identity_linear(hidden)
            self.query_end_head = identity_linear(hidden)
        self.filter_linear = filter_head(hidden, config.filter_hidden)
        if config.adapters is not None:  # built with the model, so that a saved adapted model loads adapted
            add_adapters(self, config.adapters)

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_base(cls, base: str | Path, config: PhraseModelConfig | None = None, seed: int = 0) -> PhraseModel:
        """An untrained phrase model whose three encoders start as copies of a BERT-family ``base`` (a directory,
        ``minilm`` or ``mpnet``; MPNet has no segment embeddings and ignores the passages' token types)."""
        transformers = require("transformers")
        path = resolve_base(base)
        config = copy.deepcopy(config) if config is not None else PhraseModelConfig()
        config.base_model = str(base)
        refuse_remote_code(path)
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(
                path, use_fast=True, trust_remote_code=TRUST_REMOTE_CODE
            )
            enc_config = transformers.AutoConfig.from_pretrained(path, trust_remote_code=TRUST_REMOTE_CODE)
            encoder = transformers.AutoModel.from_pretrained(
                path,
                config=enc_config,
                attn_implementation=attention_for(enc_config),
                trust_remote_code=TRUST_REMOTE_CODE,
            )
        except (OSError, ValueError) as exc:  # ValueError: e.g. a hub model that needs its own code
            raise ModelLoadError(f"cannot load base model {path!r}: {exc}") from exc
        check_fast_tokenizer(tokenizer, path)
        max_pos = getattr(encoder.config, "max_position_embeddings", config.max_passage_length)
        config.max_passage_length = min(config.max_passage_length, max_pos)
        torch.manual_seed(seed)
        layers = query_layers_of(enc_config, config)

        def query_copy() -> nn.Module:
            return first_layers(copy.deepcopy(encoder), layers)

        if config.query_layout == "separate":
            model = cls(encoder, query_copy(), query_copy(), tokenizer, config)
        else:
            model = cls(encoder, None, None, tokenizer, config, query_encoder=query_copy())
        return model.eval()

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu", encoders: str = "transformers") -> PhraseModel:
        """Load a model saved by :meth:`save` (safetensors weights; nothing is unpickled).

        ``path`` may also name a model shipped with the package (``dphr-minilm-squad-distilled``, alias
        ``default``; ``dphr-minilm-squad-384``, ``dphr-minilm-squad``) when no directory of that name exists.
        ``encoders="dphr"`` computes plain BERT encoders with :class:`~dphr_haystack.model.bert.BertEncoder` (the same
        outputs, bit for bit, without importing transformers' modeling code: what
        :func:`~dphr_haystack.model.loading.load_model` does for search); other encoders, and
        ``encoders="transformers"`` (default), are transformers models.
        """
        check_impl(encoders)
        transformers = require("transformers")
        if not Path(path).is_dir() and is_shipped_name(path):
            path = shipped_model_path(path)
        path = Path(path)
        if not path.is_dir():
            raise ModelLoadError(f"model directory not found: {path}")
        if (path / CHECKPOINT_WEIGHTS_FILE).is_file() and not (path / CONFIG_FILE).is_file():
            return cls.from_densephrases(path, device=device)
        for name in (CONFIG_FILE, ENCODER_CONFIG_FILE):
            if not (path / name).is_file():
                raise ModelLoadError(f"{path / name} is missing: not a dphr_haystack model directory")
        if not (path / WEIGHTS_FILE).is_file() and not (path / WEIGHTS_INDEX_FILE).is_file():
            raise ModelLoadError(
                f"{path / WEIGHTS_FILE} (or {WEIGHTS_INDEX_FILE}) is missing: not a dphr_haystack model directory"
            )
        refuse_remote_code(path)
        config = PhraseModelConfig.load(path / CONFIG_FILE)
        try:
            raw = json.loads((path / ENCODER_CONFIG_FILE).read_text())
            if not isinstance(raw, dict):
                raise ValueError(f"{ENCODER_CONFIG_FILE} holds a {type(raw).__name__}, not a JSON object")
            enc_config = transformers.AutoConfig.for_model(**raw)
            tokenizer = load_tokenizer(path)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            raise ModelLoadError(f"cannot read encoder config or tokenizer in {path}: {exc}") from exc
        check_fast_tokenizer(tokenizer, path)
        if config.do_lower_case is not None:
            apply_casing(tokenizer, config.do_lower_case, path)
        state = read_weights(path)
        model = cls.build_checked(enc_config, tokenizer, config, state, source=path, encoders=encoders)
        return model.to(device).eval()

    @classmethod
    def from_densephrases(
        cls,
        path: str | Path,
        tokenizer: str | Path | None = None,
        device: str | torch.device = "cpu",
        do_lower_case: bool = False,
        phrase_model: PhraseModel | str | Path | None = None,
        phrase_fingerprint: str | None = None,
        config_overrides: dict[str, Any] | None = None,
    ) -> PhraseModel:
        """Import a published DensePhrases checkpoint directory (``config.json`` + ``pytorch_model.bin``).

        The weights are read with ``torch.load(weights_only=True)``: a file holding anything but tensors
        is refused. DensePhrases repos ship no tokenizer: pass ``tokenizer`` (e.g. a local copy of
        SpanBERT/spanbert-base-cased) unless the directory has tokenizer files. Old key names
        (``bert_start``, ``bert_q_start``, ``bert_q_end``) are renamed; teacher keys are dropped.

        The model behaves as DensePhrases v1.0, which trained the published checkpoints, and these settings go
        into its ``dphr_config.json``: the tokenizer keeps case (``do_lower_case=False``, DensePhrases' default,
        whatever the tokenizer folder says), all-lowercase queries are truecased, passages are
        ``[CLS] title [SEP] context [SEP]`` (``[CLS] [SEP] context [SEP]`` untitled) with every segment id 1 and
        titles of at most 10 subwords, in 512-subword windows started every 500 context subwords with every
        window kept, and ``dphr index`` / the retriever keep the tokens whose filter logit exceeds −2.0.
        ``config_overrides`` (PhraseModelConfig fields, e.g. ``{"filter_threshold": None}``) replaces any of them.

        A query-only checkpoint (DensePhrases v1.1 query-side fine-tuning saves no ``phrase_encoder``) needs
        ``phrase_model``: the phrase model (object, directory or DensePhrases checkpoint) whose index it queries;
        the phrase encoder, filter, tokenizer and passage settings come from it. With ``phrase_fingerprint``
        (e.g. ``PhraseIndex.model_fingerprint`` of the index to search) the result's phrase fingerprint must
        equal it. A full checkpoint given a ``phrase_model`` must hold the same phrase side.

        Raises:
            ModelLoadError: A file is missing, damaged or refused.
            QueryOnlyCheckpointError: The checkpoint holds no phrase encoder and no ``phrase_model`` was given.
            ModelMismatchError: The phrase side differs from ``phrase_model`` / ``phrase_fingerprint``.
        """

        def phrase_side() -> PhraseModel:  # loaded once the checkpoint has been read and checked
            if isinstance(phrase_model, PhraseModel):
                return phrase_model
            return cls.from_source(model_source(phrase_model))

        model = import_checkpoint(
            cls.build_checked,
            path,
            tokenizer,
            do_lower_case,
            phrase_side if phrase_model is not None else None,
            phrase_fingerprint,
            config_overrides,
        )
        return model.to(device).eval()

    @classmethod
    def from_source(cls, source: ModelSource, encoders: str = "transformers") -> PhraseModel:
        """Load a resolved model reference (:func:`~dphr_haystack.model.sources.model_source`); ``encoders`` as in
        :meth:`load` (a base model is always built by transformers)."""
        if source.kind == "base":
            return cls.from_base(source.location)
        return cls.load(source.location, encoders=encoders)

    @classmethod
    def _from_encoder_config(
        cls, enc_config, tokenizer, config: PhraseModelConfig, encoders: str = "transformers"
    ) -> PhraseModel:
        query_config = copy.deepcopy(enc_config)
        query_config.num_hidden_layers = query_layers_of(enc_config, config)

        def build_query():
            return make_encoder(query_config, encoders)

        phrase_encoder = make_encoder(enc_config, encoders)
        if config.query_layout == "separate":
            return cls(phrase_encoder, build_query(), build_query(), tokenizer, config)
        return cls(phrase_encoder, None, None, tokenizer, config, query_encoder=build_query())

    @classmethod
    def build_checked(
        cls,
        enc_config: Any,
        tokenizer: Any,
        config: PhraseModelConfig,
        state: dict[str, torch.Tensor],
        source: Path,
        encoders: str = "transformers",
    ) -> PhraseModel:
        """Build a model whose shapes match ``state``, load it and run a test forward pass.

        A damaged or hostile config must fail with ModelLoadError before it allocates anything: the model is
        first built on the meta device (no memory) and compared with the weights, then built for real.
        """
        layers = {
            k.split(".layer.")[1].split(".")[0] for k in state if k.startswith("phrase_encoder.") and ".layer." in k
        }
        declared = getattr(enc_config, "num_hidden_layers", None)
        if layers and declared != len(layers):
            raise ModelLoadError(
                f"{source}: the encoder config declares {declared!r} layers, the weights hold {len(layers)}"
            )
        try:
            with on_meta():
                probe = cls._from_encoder_config(enc_config, tokenizer, config, encoders)
            probe._load_state(state, source=source, check_only=True)
            del probe
            model = build_for_weights(
                lambda: cls._from_encoder_config(enc_config, tokenizer, config, encoders),
                state,
                lambda built, weights, assign: built._load_state(weights, source=source, assign=assign),
            )
        except ModelLoadError:
            raise
        except Exception as exc:
            raise ModelLoadError(f"{source}: the encoder config cannot build a model ({exc})") from exc
        max_positions = getattr(enc_config, "max_position_embeddings", None)
        if isinstance(max_positions, int) and max(config.max_passage_length, config.max_query_length) > max_positions:
            raise ModelLoadError(
                f"{source}: max_passage_length {config.max_passage_length} / max_query_length "
                f"{config.max_query_length} exceed the encoder's {max_positions} positions"
            )
        vocab = getattr(enc_config, "vocab_size", None)
        if isinstance(vocab, int) and len(tokenizer) > vocab:
            raise ModelLoadError(f"{source}: the tokenizer has {len(tokenizer)} tokens, the encoder embeds {vocab}")
        probe = "Self test: who won Super Bowl 50 in 2016? 1,234.5 £€ Ünïcödé 東京 😀 naïve-résumé"
        try:
            with using_threads(resolve_threads(None, "query")):  # query-sized work (see _util.threads)
                model.eval().encode_queries([probe])
                model.encode_passages([probe], [probe])
        except ModelLoadError as exc:
            raise ModelLoadError(f"{source}: {exc}") from exc
        except Exception as exc:
            raise ModelLoadError(f"{source}: the loaded model fails a test forward pass ({exc})") from exc
        return model

    def _load_state(
        self, state: dict[str, torch.Tensor], source: Path, check_only: bool = False, assign: bool = False
    ) -> None:
        own = self.state_dict()
        # Buffers some transformers versions save and others do not (e.g. position_ids) are optional.
        optional = {k for k in own if k.endswith("position_ids") or k.endswith("token_type_ids")}
        state = {k: v for k, v in state.items() if k in own or not k.endswith("position_ids")}
        missing = sorted(set(own) - set(state) - optional)
        unexpected = sorted(set(state) - set(own))
        if missing or unexpected:
            raise ModelLoadError(
                f"{source}: weights do not match the model (missing {missing[:5]}{'...' if len(missing) > 5 else ''},"
                f" unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''})"
            )
        for key, value in state.items():
            if own[key].shape != value.shape:
                raise ModelLoadError(
                    f"{source}: {key} has shape {tuple(value.shape)}, expected {tuple(own[key].shape)}"
                )
        if not check_only:
            self.load_state_dict(state, strict=False, assign=assign)

    def save(
        self,
        path: str | Path,
        weights_dtype: str = "float32",
        max_shard_mb: float | None = None,
        omit_base_weights: bool = False,
    ) -> dict[str, Any]:
        """Write ``dphr_config.json``, ``encoder_config.json``, the weights and tokenizer files; returns what
        :func:`~dphr_haystack.model.weights.write_weights` wrote.

        By default the weights are one float32 ``model.safetensors``. For shipping or moving a model,
        ``weights_dtype="float16"`` halves them (``"int8"``: per-row quantized matrices; ``"int8-phrase"``: int8
        phrase encoder, float16 query side), ``max_shard_mb`` splits
        them into shards of at most that size, and ``omit_base_weights`` leaves out tensors identical to the base
        model's (``config.base_model``, e.g.
        the frozen word embeddings of a model trained from ``minilm``), which are then read from the installed
        base at load time.

        No file is written through a symbolic link: one in ``path`` where a file of the model goes raises
        :class:`~dphr_haystack.errors.UnsafePathError`.
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.config.save(path / CONFIG_FILE)
        write_file_atomic(path / ENCODER_CONFIG_FILE, self.phrase_encoder.config.to_json_string(), fsync=False)
        state = {
            k: v.detach().contiguous().cpu() for k, v in self.state_dict().items() if not k.endswith("position_ids")
        }
        base_state = read_base_state(self.config.base_model) if omit_base_weights else None
        written = write_weights(
            state,
            path,
            dtype=weights_dtype,
            max_shard_mb=max_shard_mb,
            base_state=base_state,
            base_model=self.config.base_model,
        )
        save_tokenizer(self.tokenizer, path)
        return written

    # ----------------------------------------------------------------- encoders
    @property
    def hidden_size(self) -> int:
        return int(self.phrase_encoder.config.hidden_size)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def phrase_states(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        """Last hidden states of the phrase encoder: (batch, length, d)."""
        token_type_ids = self._safe_token_types(self.phrase_encoder, token_type_ids)
        out = self.phrase_encoder(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return out.last_hidden_state

    def query_vectors(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        precision: str = "float32",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Query start and end vectors: (batch, d) each. ``precision="int8"``: by an int8 copy of the query side
        (:mod:`~dphr_haystack.model.int8`; inference on the CPU only, else float32)."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        side = self._query_side(precision, input_ids.device)
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        if self.config.query_layout == "separate":
            q_start = side["query_start_encoder"](**inputs).last_hidden_state[:, 0]
            q_end = side["query_end_encoder"](**inputs).last_hidden_state[:, 0]
            return q_start, q_end
        cls_state = side["query_encoder"](**inputs).last_hidden_state[:, 0]
        return side["query_start_head"](cls_state), side["query_end_head"](cls_state)

    def _query_side(self, precision: str, device: torch.device) -> dict[str, nn.Module]:
        """The query-side modules by name: this model's own, or (int8 on the CPU, not training) their int8 copies,
        made on first use and again whenever a query-side weight changes."""
        names = QUERY_SIDE[self.config.query_layout]
        own = {name: getattr(self, name) for name in names}
        if check_query_precision(precision) == "float32" or device.type != "cpu" or self.training:
            return own
        if not int8_available():
            return own
        with _INT8_LOCK:
            memo = self.__dict__.get("_int8_query_side")
            if memo is None or memo[0] != own or memo[2] is None or _version_key(memo[1]) != memo[2]:
                tensors = [t for module in own.values() for t in module.state_dict(keep_vars=True).values()]
                copies = {name: int8_copy(module) for name, module in own.items()}
                memo = (own, tensors, _version_key(tensors), copies)
                self.__dict__["_int8_query_side"] = memo
        return memo[3]

    @staticmethod
    def _safe_token_types(encoder: nn.Module, token_type_ids: torch.Tensor) -> torch.Tensor:
        if getattr(encoder.config, "type_vocab_size", 2) < 2:
            return torch.zeros_like(token_type_ids)
        return token_type_ids

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters by role: ``phrase`` (phrase encoder), ``query`` (query side), ``filter``."""
        groups: dict[str, list[nn.Parameter]] = {"phrase": [], "query": [], "filter": []}
        for name, param in self.named_parameters():
            role = (
                "phrase"
                if name.startswith("phrase_encoder.")
                else "filter"
                if name.startswith("filter_linear.")
                else "query"
            )
            groups[role].append(param)
        return groups

    @torch.inference_mode()
    def encode_passages(
        self, texts: Sequence[str], titles: Sequence[str] | None = None, batch_size: int = 32
    ) -> list[EncodedPassage]:
        """Token vectors of each passage's context (title and special tokens are not stored).

        Windows of all passages are sorted by length and encoded ``batch_size`` at a time; on CUDA under
        bf16/fp16 autocast. Holds every passage's vectors at once: for corpora with long passages,
        :meth:`iter_encoded_pieces` keeps memory bounded.
        """
        batch_size = check_param("batch_size", batch_size)
        return self._encode_tokenized(self.tokenize_passages(texts, titles), batch_size)

    def tokenize_passages(self, texts: Sequence[str], titles: Sequence[str] | None = None) -> list[TokenizedPassage]:
        """Context subwords with character offsets, and title subwords, of each passage (model inputs)."""
        titles = list(titles) if titles is not None else [""] * len(texts)
        return tokenize_passages(self.tokenizer, list(texts), titles, self.config)

    @torch.inference_mode()
    def iter_encoded_pieces(
        self, tokenized: Sequence[TokenizedPassage], batch_size: int = 32
    ) -> Iterator[tuple[int, EncodedPiece]]:
        """Encode tokenised passages with memory bounded by ``batch_size`` windows, whatever a passage's length.

        Yields ``(passage index, piece)`` in passage order and, within a passage, in row order: the pieces of a
        passage together hold each of its output rows once, exactly the rows :meth:`encode_passages` gives it (one
        per context token; with ``passage_stride_mode="step"``, every window's tokens). Consecutive passages of at
        most ``batch_size`` windows are encoded together (windows sorted by length, one piece per passage, as
        :meth:`encode_passages` does); a longer passage is encoded ``batch_size`` windows at a time, one piece per
        batch, so a consumer that writes each piece out before asking for the next holds one batch's vectors
        however long the passage.
        """
        batch_size = check_param("batch_size", batch_size)
        yield from iter_encoded_pieces(
            self.tokenizer, self.config, self._encode_batch, self.hidden_size, tokenized, batch_size
        )

    def _encode_tokenized(self, tokenized: Sequence[TokenizedPassage], batch_size: int) -> list[EncodedPassage]:
        return encode_tokenized(
            self.tokenizer, self.config, self._encode_batch, self.hidden_size, tokenized, batch_size
        )

    def _encode_batch(self, batch: Sequence[Window]) -> tuple[np.ndarray, np.ndarray]:
        """Phrase-encoder states and filter logits of a batch of windows: (B, L, d) and (B, L, 2) float32."""
        device = self.device
        pad_id = self.tokenizer.pad_token_id or 0
        tensors = pad_batch([w.input_ids for w in batch], [w.token_type_ids for w in batch], pad_id)
        tensors = {k: v.to(device) for k, v in tensors.items()}
        with _autocast(device):
            states = self.phrase_states(**tensors)
            filt = self.filter_linear(states)
        return states.float().cpu().numpy(), filt.float().cpu().numpy()

    @torch.inference_mode()
    def encode_queries(
        self,
        queries: Sequence[str],
        batch_size: int = 64,
        truecase: bool | None = None,
        truecaser: TrueCaser | None = None,
        precision: str = "float32",
    ) -> tuple[np.ndarray, np.ndarray]:
        """Start and end vectors of each query: two float32 arrays (n, d). Raises InvalidQueryError on empty ones.

        The query side runs in float32 (as DensePhrases encodes queries), also on a GPU; ``precision="int8"`` runs
        it on the CPU by an int8 copy, about 2× faster (on the shipped model the same EM@1, 94% of top answers
        unchanged: :mod:`~dphr_haystack.model.int8`). With ``truecase``
        (default: the model's ``config.truecase``, on for cased DensePhrases models) all-lowercase queries are
        truecased first, by ``truecaser`` or else the model's vocabulary truecaser (:attr:`truecaser`).
        """
        batch_size = check_param("batch_size", batch_size)
        check_query_precision(precision)
        if truecase is None:
            truecase = self.config.truecase
        if truecase:
            caser = truecaser or self.truecaser
            queries = [caser.truecase_query(q) if isinstance(q, str) else q for q in queries]
        starts, ends = [], []
        device = self.device
        for b in range(0, len(queries), batch_size):
            tensors = tokenize_queries(self.tokenizer, queries[b : b + batch_size], self.config)
            tensors = {k: v.to(device) for k, v in tensors.items()}
            with _full_precision(device):  # DensePhrases encodes queries in float32, even on a GPU
                q_start, q_end = self.query_vectors(**tensors, precision=precision)
            starts.append(q_start.float().cpu().numpy())
            ends.append(q_end.float().cpu().numpy())
        if not starts:
            d = self.hidden_size
            return np.zeros((0, d), np.float32), np.zeros((0, d), np.float32)
        return np.concatenate(starts), np.concatenate(ends)

    @property
    def truecaser(self) -> TrueCaser:
        """A truecaser from the tokenizer's cased vocabulary alone (searchers add their corpus's statistics)."""
        caser = self.__dict__.get("_truecaser")
        if caser is None:
            caser = TrueCaser.from_vocab(self.tokenizer.get_vocab())
            self.__dict__["_truecaser"] = caser
        return caser

    def phrase_fingerprint(self) -> str:
        """SHA-256 of the phrase encoder's weights and passage input settings.

        Everything that changes stored phrase vectors; the query side and the filter are left out, so a
        query-side fine-tuned model still matches an index dumped with its phrase encoder. Computed once and kept
        until a phrase-encoder weight, the passage settings or the tokenizer change
        (:func:`~dphr_haystack.model.fingerprint.weights_state`).
        """
        key = weights_state(self.config, self.tokenizer, self.phrase_encoder)
        memo = self.__dict__.get("_phrase_fingerprint")
        if key is not None and memo is not None and memo[0] == key:
            return memo[2]
        fingerprint = compute_phrase_fingerprint(self.config, self.tokenizer, self.phrase_encoder)
        if key is not None:  # the tokenizer is kept with the key so that its id cannot be reused meanwhile
            self.__dict__["_phrase_fingerprint"] = (key, self.tokenizer, fingerprint)
        return fingerprint


def _version_key(tensors: list[torch.Tensor]) -> tuple | None:
    """A key that every in-place write to ``tensors`` (optimizer step, ``load_state_dict``) and every move
    (``.to()``) changes: data pointers and autograd version counters (None for inference tensors, which track no
    version: the copy is then remade each time)."""
    try:
        return tuple((t.data_ptr(), t._version) for t in tensors)
    except RuntimeError:  # "Inference tensors do not track version counter"
        return None


def _full_precision(device: torch.device):
    """No autocast, whatever a caller's context enabled: the query side runs in its weights' float32."""
    return torch.autocast(device.type if device.type in ("cuda", "cpu") else "cpu", enabled=False)


def _autocast(device: torch.device):
    if device.type == "cuda":
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.autocast("cuda", dtype=dtype)
    return torch.autocast("cpu", enabled=False)
