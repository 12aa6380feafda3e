"""The phrase model's configuration: every setting that changes what the model outputs."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .._util.atomic import write_file_atomic
from ..errors import InvalidParameterError, ModelLoadError
from ..params import check_choice, check_param
from .calibration import Calibration

TOKEN_TYPE_MODES = ("all_one", "pair", "all_zero")
STRIDE_MODES = ("overlap", "step")
QUERY_LAYOUTS = ("separate", "shared")
# How `PhraseModel.save` can store weights (model/weights.py defines them; named here so the CLI needs no torch).
WEIGHT_STORAGE = ("float32", "float16", "int8", "int8-phrase")
CONFIG_FORMAT_VERSION = 1
# The encoders low-rank adapters may sit on (:mod:`dphr_haystack.model.adapters`).
ADAPTER_ROLES = ("phrase", "query")
# The file a phrase model's config is saved to, beside its weights.
CONFIG_FILE = "dphr_config.json"


@dataclass
class PhraseModelConfig:
    """Input conventions and layout of a phrase model. Saved as ``dphr_config.json`` beside the weights.

    Args:
        max_passage_length: Subword window length for passages ([CLS] title [SEP] context [SEP]).
        passage_stride: With ``passage_stride_mode="overlap"``, the overlap in context subwords between
            consecutive windows of a long passage (each token keeps its max-context window's vector); with
            ``"step"``, the distance between window starts (DensePhrases v1.0's ``doc_stride``).
        passage_stride_mode: ``overlap`` (the default) or ``step``: windows start every ``passage_stride``
            context subwords and every window's context tokens are kept in window order, as DensePhrases v1.0
            dumps them (tokens in two windows get two vectors; a token past a window's end and before the next
            window's start gets none).
        sep_after_empty_title: Untitled passages read ``[CLS] [SEP] context [SEP]`` (DensePhrases) instead of
            ``[CLS] context [SEP]``.
        append_title: Put the title before the context, as DensePhrases does.
        max_title_length: Title subwords kept (DensePhrases: 10).
        passage_token_type: ``all_one`` (DensePhrases v1.0: every passage token has segment 1),
            ``pair`` (title segment 0, context segment 1, DensePhrases v1.1) or ``all_zero``.
        max_query_length: Query subwords kept, [CLS] and [SEP] included (DensePhrases: 64).
        strip_question_mark: Drop one trailing ``?`` from queries, as DensePhrases does.
        max_answer_length: Default longest phrase in subwords (end − start < this).
        query_layout: ``separate`` (three encoders, the DensePhrases layout) or ``shared`` (one query
            encoder whose [CLS] state feeds two linear heads).
        base_model: Where the encoders were initialised from (informational).
        do_lower_case: The tokenizer's casing, applied whenever the model loads (DensePhrases checkpoints:
            False, they are cased); None keeps what the tokenizer files say.
        truecase: Truecase all-lowercase queries before encoding them (DensePhrases' ``--truecase``; on for cased
            DensePhrases models); searchers and retrievers may override it.
        filter_hidden: Width of the token filter's hidden layer: None (the DensePhrases filter, one linear map
            from h_t to the two logits) or n (a two-layer MLP, Linear(d, n) → GELU → Linear(n, 2), which separates
            answer tokens better on a frozen encoder). Not part of :meth:`passage_side`.
        filter_threshold: Token-filter threshold chosen by the filter training stage; ``dphr index`` keeps the
            tokens whose start or end filter logit exceeds it unless told otherwise (None: keep every token).
            Not part of :meth:`passage_side`: it changes which vectors are stored, not the vectors.
        calibration: The phrase-answer confidence calibration (:class:`dphr_haystack.model.calibration.Calibration`
            as a dict), fitted by ``python -m train.calibrate``; None: answers carry no confidence.
        adapters: Low-rank adapters on the encoders' linear maps (:mod:`dphr_haystack.model.adapters`):
            ``{"rank", "alpha", "roles"}``, built whenever the model is; None: none.
        query_layers: Transformer layers of the query encoder(s): None, as many as the phrase encoder's; n, the
            first n of them (a faster query side, e.g. distilled by ``python -m train.query_depth``). Not part of
            :meth:`passage_side`: the phrase vectors, and so an index, do not depend on it.
    """

    max_passage_length: int = 384
    passage_stride: int = 128
    passage_stride_mode: Literal["overlap", "step"] = "overlap"
    sep_after_empty_title: bool = False
    append_title: bool = True
    max_title_length: int = 10
    passage_token_type: Literal["all_one", "pair", "all_zero"] = "all_one"
    max_query_length: int = 64
    strip_question_mark: bool = True
    max_answer_length: int = 10
    query_layout: Literal["separate", "shared"] = "separate"
    base_model: str = ""
    do_lower_case: bool | None = None
    truecase: bool = False
    filter_hidden: int | None = None
    filter_threshold: float | None = None
    calibration: dict[str, Any] | None = None
    adapters: dict[str, Any] | None = None
    query_layers: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise InvalidParameterError on a setting outside its range."""
        check_choice("passage_token_type", self.passage_token_type, TOKEN_TYPE_MODES)
        check_choice("query_layout", self.query_layout, QUERY_LAYOUTS)
        for name in ("max_passage_length", "passage_stride", "max_title_length", "max_query_length"):
            setattr(self, name, check_param(name, getattr(self, name)))
        check_choice("passage_stride_mode", self.passage_stride_mode, STRIDE_MODES)
        if self.passage_stride_mode == "overlap" and not self.passage_stride < self.max_passage_length // 2:
            raise InvalidParameterError(
                f"passage_stride={self.passage_stride} is out of range: an integer from 0 to "
                f"{self.max_passage_length // 2 - 1} (below half of max_passage_length={self.max_passage_length})"
            )
        if self.passage_stride_mode == "step" and not 1 <= self.passage_stride <= self.max_passage_length:
            raise InvalidParameterError(
                f"a step passage_stride must be in [1, max_passage_length], got {self.passage_stride}"
            )
        for name in ("do_lower_case", "truecase", "sep_after_empty_title"):
            value = getattr(self, name)
            if not isinstance(value, bool) and not (value is None and name == "do_lower_case"):
                raise InvalidParameterError(f"{name} must be true or false, got {value!r}")
        self.max_answer_length = check_param(
            "max_answer_length",
            self.max_answer_length,
            high=self.max_passage_length,
            why=f"max_passage_length={self.max_passage_length}, the passage window",
        )
        hidden = self.filter_hidden
        if hidden is not None and (isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1):
            raise InvalidParameterError(f"filter_hidden must be a positive integer or None, got {hidden!r}")
        threshold = self.filter_threshold
        if threshold is not None and (
            isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold)
        ):
            raise InvalidParameterError(f"filter_threshold must be a finite number or None, got {threshold!r}")
        if self.calibration is not None:
            Calibration.from_dict(self.calibration)
        if self.adapters is not None:
            self.adapters = check_adapters(self.adapters)
        layers = self.query_layers
        if layers is not None and (isinstance(layers, bool) or not isinstance(layers, int) or layers < 1):
            raise InvalidParameterError(f"query_layers must be a positive integer or None, got {layers!r}")

    def passage_side(self) -> dict[str, Any]:
        """The settings that change phrase vectors (part of an index's model fingerprint).

        The settings added for DensePhrases checkpoints count only when they differ from their defaults, so the
        fingerprints of models (and indexes) that predate them are unchanged.
        """
        keys = ("max_passage_length", "passage_stride", "append_title", "max_title_length", "passage_token_type")
        side = {k: getattr(self, k) for k in keys}
        for key, default in (("passage_stride_mode", "overlap"), ("sep_after_empty_title", False)):
            if getattr(self, key) != default:
                side[key] = getattr(self, key)
        if self.do_lower_case is not None:
            side["do_lower_case"] = self.do_lower_case
        return side

    def to_dict(self) -> dict[str, Any]:
        return {"format_version": CONFIG_FORMAT_VERSION, **dataclasses.asdict(self)}

    def save(self, path: str | Path) -> None:
        write_file_atomic(Path(path), json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n", fsync=False)

    @classmethod
    def load(cls, path: str | Path) -> PhraseModelConfig:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deeply
            raise ModelLoadError(f"cannot read model config {path}: {type(exc).__name__}: {exc}") from exc
        if not isinstance(data, dict):
            raise ModelLoadError(f"{path}: expected a JSON object, got {type(data).__name__}")
        version = data.pop("format_version", None)
        if version != CONFIG_FORMAT_VERSION:
            raise ModelLoadError(
                f"{path}: config format version {version!r}, this library reads {CONFIG_FORMAT_VERSION}"
            )
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ModelLoadError(f"{path}: unknown config keys {unknown}")
        defaults = cls()
        for key, value in data.items():  # a damaged file must fail here, not deep inside the model
            default = getattr(defaults, key)
            if default is not None and not _same_json_type(value, default):
                raise ModelLoadError(f"{path}: {key} must be {type(default).__name__}, got {value!r:.60}")
        try:
            return cls(**data)
        except InvalidParameterError as exc:
            raise ModelLoadError(f"{path}: {exc}") from exc


def check_adapters(spec: Any) -> dict[str, Any]:
    """``spec`` as a checked adapters config ``{"rank": int from 1 to 4096, "alpha": number > 0, "roles": [...]}``
    (roles among :data:`ADAPTER_ROLES`, default both); InvalidParameterError otherwise."""
    if not isinstance(spec, dict):
        raise InvalidParameterError(f"adapters must be a mapping with rank and alpha, got {spec!r:.80}")
    unknown = sorted(set(spec) - {"rank", "alpha", "roles"})
    if unknown:
        raise InvalidParameterError(f"adapters: unknown keys {unknown}; valid: rank, alpha, roles")
    rank, alpha, roles = spec.get("rank"), spec.get("alpha"), spec.get("roles", list(ADAPTER_ROLES))
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= 4096:
        raise InvalidParameterError(f"adapters rank must be an integer from 1 to 4096, got {rank!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha <= 0:
        raise InvalidParameterError(f"adapters alpha must be a positive number, got {alpha!r}")
    valid = isinstance(roles, (list, tuple)) and roles and all(r in ADAPTER_ROLES for r in roles)
    if not valid or len(set(roles)) < len(roles):
        roles_text = ", ".join(ADAPTER_ROLES)
        raise InvalidParameterError(f"adapters roles must be distinct names among {roles_text}, got {roles!r}")
    return {"rank": rank, "alpha": float(alpha), "roles": list(roles)}


def _same_json_type(value: Any, default: Any) -> bool:
    """True when a JSON value has the type of a config default (bool is not an int; an int is a float)."""
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))


def parse_threshold_arg(text: str) -> float | str:
    """A command line's ``--filter-threshold``: a finite number, or ``none`` for no filtering."""
    if text.strip().lower() == "none":
        return "none"
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"--filter-threshold must be a finite number or 'none', got {text!r}")
    return value


def effective_filter_threshold(requested: float | str | None, config: PhraseModelConfig) -> float | None:
    """The threshold to dump with: ``requested`` (``"none"``: keep every token), else the model's own."""
    if requested is None:
        return config.filter_threshold
    return None if requested == "none" else float(requested)
