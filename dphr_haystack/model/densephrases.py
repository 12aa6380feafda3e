"""Published DensePhrases checkpoints: import with DensePhrases v1.0's conventions, query-only checkpoints.

:meth:`PhraseModel.from_densephrases <dphr_haystack.model.phrase_model.PhraseModel.from_densephrases>` is the
entry point: it passes :func:`import_checkpoint` the function that builds and checks a model and the one that loads
the phrase side it is given. This module holds the parts: the key renames, the settings recorded at import and the
assembly of a query-only checkpoint on an existing phrase side. It never imports the model class.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .._util.lazy import require
from ..errors import InvalidParameterError, ModelLoadError, ModelMismatchError, QueryOnlyCheckpointError
from .config import PhraseModelConfig
from .remote_code import TRUST_REMOTE_CODE, refuse_remote_code
from .tokenizer import apply_casing, check_fast_tokenizer, has_tokenizer_files

logger = logging.getLogger(__name__)

# The weights file of a published DensePhrases checkpoint (beside its ``config.json``).
CHECKPOINT_WEIGHTS_FILE = "pytorch_model.bin"
# Builds a phrase model from (encoder config, tokenizer, config, state dict, source) and checks it: in practice
# ``PhraseModel.build_checked``; the models it returns and the phrase sides given are PhraseModels.
ModelBuilder = Callable[[Any, Any, PhraseModelConfig, dict[str, torch.Tensor], Path], Any]

_DENSEPHRASES_RENAMES = {
    "bert_start.": "phrase_encoder.",
    "bert_q_start.": "query_start_encoder.",
    "bert_q_end.": "query_end_encoder.",
}
_DENSEPHRASES_PREFIXES = ("phrase_encoder.", "query_start_encoder.", "query_end_encoder.", "filter_linear.")


def import_checkpoint(
    build: ModelBuilder,
    path: str | Path,
    tokenizer: str | Path | None,
    do_lower_case: bool,
    phrase_side: Callable[[], Any] | None,
    phrase_fingerprint: str | None,
    config_overrides: dict[str, Any] | None,
) -> Any:
    """:meth:`PhraseModel.from_densephrases` (see there).

    ``build`` makes and checks a model (``PhraseModel.build_checked``); ``phrase_side`` returns the loaded phrase
    model given as ``phrase_model`` (None: none given), called once the checkpoint has been read. Returns the
    model ``build`` made, still on the CPU.
    """
    transformers = require("transformers")
    path = Path(path)
    weights = path / CHECKPOINT_WEIGHTS_FILE
    if not weights.is_file() or not (path / "config.json").is_file():
        raise ModelLoadError(f"{path}: a DensePhrases checkpoint needs config.json and {CHECKPOINT_WEIGHTS_FILE}")
    refuse_remote_code(path)  # before transformers reads anything of it: RemoteCodeError
    if tokenizer is not None:
        refuse_remote_code(tokenizer)
    try:
        raw = json.loads((path / "config.json").read_text())
        raw.pop("architectures", None)
        raw.setdefault("model_type", "bert")
        enc_config = transformers.AutoConfig.for_model(**raw)
    except Exception as exc:
        raise ModelLoadError(f"cannot read {path / 'config.json'}: {exc}") from exc
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ModelLoadError(f"refused to load {weights}: not a plain tensor checkpoint ({exc})") from exc
    if not isinstance(state, dict):
        raise ModelLoadError(f"{weights}: expected a state dict, got {type(state).__name__}")
    state = densephrases_state(state)
    query_only = not any(k.startswith("phrase_encoder.") for k in state)
    phrase = phrase_side() if phrase_side is not None else None
    if query_only:
        if phrase is None:
            raise QueryOnlyCheckpointError(
                f"{path} holds only a query side (no phrase_encoder weights: DensePhrases v1.1 query-side "
                "fine-tuning saves it so); pass phrase_model=<the phrase model or DensePhrases checkpoint "
                "whose index it queries> (CLI: --phrase-model)"
            )
        model = _query_side_for(build, phrase, enc_config, state, tokenizer, weights)
    else:
        tok = _load_tokenizer(tokenizer if tokenizer is not None else path, path, do_lower_case)
        max_length = _max_positions(enc_config, path)
        settings: dict[str, Any] = {
            "passage_token_type": "all_one",
            "max_title_length": 10,
            "max_passage_length": min(512, max_length),
            "passage_stride": min(500, max_length),
            "passage_stride_mode": "step",
            "sep_after_empty_title": True,
            "max_query_length": min(64, max_length),
            "filter_threshold": -2.0,
            "do_lower_case": do_lower_case,
            "truecase": not do_lower_case,
            "base_model": f"densephrases:{path.name}",
        }
        config = _config_with(settings, config_overrides, path)
        model = build(enc_config, tok, config, state, weights)
        if phrase is not None and phrase.phrase_fingerprint() != model.phrase_fingerprint():
            raise ModelMismatchError(f"{path}: its phrase encoder differs from the given phrase_model's")
    if query_only and config_overrides:
        model.config = _config_with(model.config.to_dict(), config_overrides, path)
    if phrase_fingerprint is not None and model.phrase_fingerprint() != phrase_fingerprint:
        raise ModelMismatchError(
            f"{path}: the phrase side's fingerprint {model.phrase_fingerprint()[:12]}… is not the expected "
            f"{str(phrase_fingerprint)[:12]}… (the index was built with another phrase encoder or settings)"
        )
    return model


def _query_side_for(
    build: ModelBuilder, phrase: Any, enc_config: Any, state: dict[str, torch.Tensor], tokenizer: Any, weights: Path
) -> Any:
    """A query-only checkpoint's query encoders on ``phrase``'s phrase encoder, filter and settings."""
    own = phrase.phrase_encoder.config
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "model_type"):
        if getattr(own, key, None) != getattr(enc_config, key, None):
            raise ModelMismatchError(
                f"{weights.parent}: {key} {getattr(enc_config, key, None)!r} differs from the phrase model's "
                f"{getattr(own, key, None)!r}"
            )
    tok = phrase.tokenizer
    if tokenizer is not None:
        tok = _load_tokenizer(tokenizer, weights.parent, phrase.config.do_lower_case)
        if tok.get_vocab() != phrase.tokenizer.get_vocab():
            raise ModelMismatchError(f"{tokenizer}: not the phrase model's vocabulary")
    config = copy.deepcopy(phrase.config)
    config.query_layout = "separate"
    config.calibration = None  # a calibration belongs to the query side it was fitted on
    config.base_model = f"{phrase.config.base_model} + densephrases-query:{weights.parent.name}"
    merged = {k: v for k, v in state.items() if k.startswith(("query_start_encoder.", "query_end_encoder."))}
    for key, value in phrase.state_dict().items():
        if key.startswith(("phrase_encoder.", "filter_linear.")):
            merged[key] = value.detach().cpu().clone()
    ours = merged.get("phrase_encoder.embeddings.word_embeddings.weight")
    theirs = state.get("query_start_encoder.embeddings.word_embeddings.weight")
    if ours is not None and theirs is not None and ours.shape == theirs.shape and not torch.equal(ours, theirs):
        logger.warning(
            "%s: its query word embeddings differ from the phrase encoder's (DensePhrases freezes both at "
            "their shared initialisation): is this the phrase model it was fine-tuned against?",
            weights.parent,
        )
    return build(copy.deepcopy(own), tok, config, merged, weights)


def _load_tokenizer(source: str | Path, checkpoint: Path, do_lower_case: bool | None) -> Any:
    """A fast tokenizer from ``source`` with the given casing (None: as its files say)."""
    transformers = require("transformers")
    source = str(source)
    kwargs = {} if do_lower_case is None else {"do_lower_case": do_lower_case}
    try:
        if Path(source).is_dir() and not has_tokenizer_files(Path(source)):
            # transformers 5.x builds an empty tokenizer (special tokens only) from such a directory
            raise OSError(f"{source} holds no tokenizer files")
        tok = transformers.AutoTokenizer.from_pretrained(
            source, use_fast=True, trust_remote_code=TRUST_REMOTE_CODE, **kwargs
        )
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        raise ModelLoadError(
            f"no tokenizer for {checkpoint}: DensePhrases checkpoints ship none; pass tokenizer=<path to the "
            f"SpanBERT/spanbert-base-cased tokenizer> ({exc})"
        ) from exc
    check_fast_tokenizer(tok, source)
    if do_lower_case is not None:
        apply_casing(tok, do_lower_case, source)
    return tok


def _max_positions(enc_config, path: Path) -> int:
    try:
        return int(enc_config.max_position_embeddings)
    except (TypeError, ValueError, AttributeError) as exc:
        raise ModelLoadError(f"{path / 'config.json'}: unusable max_position_embeddings ({exc})") from exc


def _config_with(settings: dict[str, Any], overrides: dict[str, Any] | None, path: Path) -> PhraseModelConfig:
    values = {k: v for k, v in {**settings, **(overrides or {})}.items() if k != "format_version"}
    known = {f.name for f in dataclasses.fields(PhraseModelConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise InvalidParameterError(f"unknown config_overrides {unknown}; valid: {', '.join(sorted(known))}")
    try:
        return PhraseModelConfig(**values)
    except InvalidParameterError:
        raise
    except (TypeError, ValueError) as exc:
        raise ModelLoadError(f"{path}: {exc}") from exc


def densephrases_state(state: dict) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    dropped = []
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise ModelLoadError(f"checkpoint entry {key!r} is not a tensor")
        new_key = key
        for old, new in _DENSEPHRASES_RENAMES.items():
            if key.startswith(old):
                new_key = new + key[len(old) :]
        if new_key.startswith(_DENSEPHRASES_PREFIXES):
            out[new_key] = value
        else:
            dropped.append(key)
    if dropped:
        logger.info(
            "DensePhrases import: dropped %d non-encoder keys (teachers, heads): %s", len(dropped), dropped[:5]
        )
    return out
