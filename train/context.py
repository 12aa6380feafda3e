"""What the stages of one recipe run share within a process: data, features, subcorpora, devices."""

from __future__ import annotations

import hashlib
import json
import logging
import math
from pathlib import Path

import torch

from dphr_haystack._util.atomic import write_file_atomic
from dphr_haystack._util.device import resolve_device
from dphr_haystack.model.config import PhraseModelConfig
from dphr_haystack.model.phrase_model import PhraseModel

from .data import RCData, load_squad
from .schema import Recipe, resolve_data
from .trainer import dist_info
from .validation import Validator, build_subcorpora

logger = logging.getLogger(__name__)


def rank_device() -> torch.device:
    """This rank's GPU when CUDA is usable (:func:`~dphr_haystack._util.device.resolve_device`), else the CPU."""
    _, local_rank, _ = dist_info()
    return torch.device("cuda", local_rank) if resolve_device("auto") == "cuda" else torch.device("cpu")


def is_main_rank() -> bool:
    """Whether this process is rank 0 (or the only process)."""
    return dist_info()[0] == 0


class Context:
    """Caches what several stages share within one process: data, features, subcorpora."""

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self._train: RCData | None = None
        self._dev: RCData | None = None

    def _load(self, which: str) -> RCData:
        d = self.recipe.data
        if (d.train if which == "train" else d.dev) == "builtin":
            return load_squad("builtin")
        path = resolve_data(d.train if which == "train" else d.dev)
        if path is None:
            if not d.fallback_builtin:
                raise FileNotFoundError(f"{which} data not found: {d.train if which == 'train' else d.dev}")
            logger.warning("%s data not found: using the built-in sample", which)
            return load_squad("builtin")
        if which == "train":
            return load_squad(path, d.train_paragraphs, d.train_questions)
        return load_squad(path, d.dev_paragraphs, d.dev_questions, skip_paragraphs=d.dev_skip_paragraphs)

    @property
    def train_data(self) -> RCData:
        if self._train is None:
            self._train = self._load("train")
        return self._train

    @property
    def dev_data(self) -> RCData:
        if self._dev is None:
            self._dev = self._load("dev")
        return self._dev

    # -- models
    def tiny_base_dir(self) -> Path:
        """The random tiny base of ``model.base: tiny`` (vocabulary from the data), built on first use."""
        from dphr_haystack.testing import make_tiny_base

        target = self.recipe.out / "base"
        if not (target / "config.json").is_file():
            texts = [p["text"] for p in self.train_data.passages + self.dev_data.passages]
            texts += [ex.question for ex in self.train_data.examples]
            tiny = dict(self.recipe.model.tiny)
            dropout = tiny.pop("dropout", None)
            make_tiny_base(target, texts, seed=self.recipe.seed, **tiny)
            if dropout is not None:  # e.g. 0.0 for runs that must be deterministic across batch layouts
                cfg = json.loads((target / "config.json").read_text())
                cfg["hidden_dropout_prob"] = cfg["attention_probs_dropout_prob"] = float(dropout)
                write_file_atomic(target / "config.json", json.dumps(cfg, indent=2), fsync=False)
        return target

    def base_model(self) -> PhraseModel:
        m = self.recipe.model
        base = str(self.tiny_base_dir()) if m.base == "tiny" else m.base
        model = PhraseModel.from_base(base, config=PhraseModelConfig(**m.config), seed=self.recipe.seed)
        return scale_query_heads(model, m.query_head_scale)

    def reference_dir(self) -> str | None:
        """The reference model of the hard subcorpora: ``validate.reference``, else the rc stage's model, else None."""
        if self.recipe.validate.reference:
            return self.recipe.validate.reference
        rc_dir = self.stage_model_dir("rc")
        return str(rc_dir) if rc_dir else None

    def stage_model_dir(self, stage: str) -> Path | None:
        for name in ("best", "final"):
            path = self.recipe.out / stage / name
            if (path / "model.safetensors").is_file():
                return path
        return None

    def init_model(self, explicit: str | None, chain: tuple[str, ...]) -> tuple[PhraseModel, str]:
        """Load ``explicit`` or the first existing output of ``chain``; the base model when none exists."""
        if explicit:
            return PhraseModel.load(explicit), explicit
        for stage in chain:
            path = self.stage_model_dir(stage)
            if path is not None:
                return PhraseModel.load(path), str(path)
        return self.base_model(), f"base:{self.recipe.model.base}"

    # -- validation
    def subcorpora(self, reference: PhraseModel | None, reference_name: str) -> dict[str, list[str]]:
        v = self.recipe.validate
        key = hashlib.sha256(
            json.dumps(
                [
                    reference_name,
                    v.hard_k,
                    v.random_fractions,
                    self.recipe.seed,
                    [p["id"] for p in self.dev_data.passages],
                ]
            ).encode()
        ).hexdigest()[:12]
        path = self.recipe.out / "validate" / f"subcorpora-{key}.json"
        if path.is_file():
            return json.loads(path.read_text())["subcorpora"]
        if reference is not None:
            reference = reference.to(rank_device())
        sub = build_subcorpora(
            self.dev_data,
            reference,
            v.hard_k if reference is not None else (),
            v.random_fractions,
            seed=self.recipe.seed,
            batch_size=v.batch_size,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomic(path, json.dumps({"reference": reference_name, "subcorpora": sub}, indent=1), fsync=False)
        return sub

    def validator(self, select_on: str | None, reference_dir: str | None) -> tuple[Validator | None, str | None]:
        """A validator for checkpoint selection on ``select_on`` (H_k falls back to C0 without a reference).

        Under torchrun only rank 0 validates: the other ranks get no validator.
        """
        if not select_on:
            return None, None
        if not is_main_rank():
            return None, f"{select_on}/em@1"
        reference = PhraseModel.load(reference_dir) if reference_dir else None
        sub = self.subcorpora(reference, reference_dir or "none")
        if select_on not in sub:
            logger.warning("subcorpus %s unavailable (no reference model?): selecting on C0", select_on)
            select_on = "C0"
        v = self.recipe.validate
        return Validator(self.dev_data, sub, [select_on], v.ks, v.batch_size, v.max_questions), f"{select_on}/em@1"


def scale_query_heads(model: PhraseModel, scale: float) -> PhraseModel:
    """Multiply the shared query layout's start and end heads by ``scale`` (in place; the phrase side untouched)."""
    if not (isinstance(scale, (int, float)) and not isinstance(scale, bool) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"model.query_head_scale must be a positive number, got {scale!r}")
    if scale != 1.0:
        heads = [getattr(model, name, None) for name in ("query_start_head", "query_end_head")]
        if any(head is None for head in heads):
            raise ValueError("model.query_head_scale needs the shared query layout (query_layout: shared)")
        with torch.no_grad():
            for head in heads:
                head.weight.mul_(scale)
                head.bias.mul_(scale)
    return model
