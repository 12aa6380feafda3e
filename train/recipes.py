"""Recipes: a YAML file describes the model, the data and each stage; ``run_stage`` runs one, ``run_all`` chains.

Stage outputs under ``output_dir``::

    base/                  the tiny random base (``model.base: tiny`` only)
    rc/{best,final,checkpoint-*,metrics.jsonl,curves.png}
    mine/{hard_negatives.jsonl,stats.json}
    hn/...                 like rc/
    filter/{final,metrics.json,sweep.json,sweep.png,metrics.jsonl,curves.png}
    qsft/...               like rc/
    validate/{subcorpora-*.json,results.json}
    summary.json           (run-all) what each stage produced, with its metrics and wall time
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dphr_haystack._util.device import resolve_device
from dphr_haystack.model.config import PhraseModelConfig
from dphr_haystack.model.phrase_model import PhraseModel
from dphr_haystack.model.registry import model_dir

from .data import PassageWindows, RCData, build_features, load_squad
from .trainer import TrainArgs, Trainer, barrier, dist_info, init_distributed
from .validation import Validator, build_index, build_subcorpora

logger = logging.getLogger(__name__)

STAGES = ("rc", "mine", "hn", "filter", "qsft", "validate")
REPO_ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- configuration
@dataclass
class ModelSection:
    base: str = "minilm"
    tiny: dict[str, Any] = field(default_factory=lambda: {"hidden_size": 32, "layers": 2, "heads": 4})
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class DataSection:
    train: str = "../shared/data/squad/train-v1.1-rebuilt.json.gz"
    dev: str = "../shared/data/squad/dev-v1.1-public.json.gz"
    fallback_builtin: bool = False
    train_paragraphs: int | None = None
    train_questions: int | None = None
    dev_paragraphs: int | None = 1000
    dev_questions: int | None = 500
    dev_skip_paragraphs: int = 0
    keep_unanswered_windows: bool = True


@dataclass
class RCSection:
    init: str | None = None
    loss: str = "densephrases"
    loss_kwargs: dict[str, Any] = field(default_factory=dict)
    pre_batch: int = 2
    lambda_flt: float = 0.0
    hard_per_example: int = 1
    select_on: str | None = None
    gather_negatives: bool = False
    teacher: str | None = None  # an AutoModelForQuestionAnswering directory (densephrases loss, lambda_kl > 0)
    batching: str = "question"  # or "passage": a window encoded once for all its questions (train.tasks.RCTask)
    bucket_batches: int = 50  # passage batching: batches per length-sorted run
    train: dict[str, Any] = field(default_factory=dict)


@dataclass
class MineSection:
    init: str | None = None
    top_k: int = 10
    faiss_factory: str = "Flat"
    nprobe: int = 64
    batch_size: int = 64


@dataclass
class FilterSection:
    init: str | None = None
    pos_weight: float | None = None
    thresholds: list[float | None] = field(default_factory=lambda: [None, -3.0, -2.0, -1.0, 0.0, 1.0])
    sweep_subcorpus: str = "C0"
    choose_metric: str = "em@1"  # the threshold rule: see train.filter.choose_threshold
    max_drop: float = 0.01
    train: dict[str, Any] = field(default_factory=dict)


@dataclass
class QsftSection:
    init: str | None = None
    top_k: int = 100
    label_strategy: str = "phrase"
    faiss_factory: str = "Flat"
    # An existing PhraseIndex directory built with this model's phrase encoder (e.g. the whole open-domain corpus,
    # as DensePhrases fine-tunes against its Wikipedia index) instead of indexing the training passages. Its
    # passage ids need not match the training data's, so use label_strategy "phrase" with it.
    index: str | None = None
    select_on: str | None = None
    train: dict[str, Any] = field(default_factory=dict)


@dataclass
class ValidateSection:
    reference: str | None = None
    hard_k: list[int] = field(default_factory=lambda: [10])
    random_fractions: list[float] = field(default_factory=lambda: [0.1])
    ks: list[int] = field(default_factory=lambda: [1, 5, 20])
    models: list[str] = field(default_factory=lambda: ["rc", "hn", "qsft"])
    max_questions: int | None = None
    batch_size: int = 64


@dataclass
class Recipe:
    """A whole training recipe (see ``train/configs/*.yaml``)."""

    output_dir: str = "runs/recipe"
    seed: int = 0
    torch_threads: int | None = None
    stages: list[str] = field(default_factory=lambda: list(STAGES))
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    rc: RCSection = field(default_factory=RCSection)
    mine: MineSection = field(default_factory=MineSection)
    hn: RCSection = field(default_factory=lambda: RCSection(loss="unified"))
    filter: FilterSection = field(default_factory=FilterSection)
    qsft: QsftSection = field(default_factory=QsftSection)
    validate: ValidateSection = field(default_factory=ValidateSection)

    @property
    def out(self) -> Path:
        return Path(self.output_dir)


def _build(cls: type, values: dict[str, Any], where: str) -> Any:
    if not isinstance(values, dict):
        raise ValueError(f"{where}: expected a mapping, got {type(values).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; valid: {', '.join(fields)}")
    kwargs = {}
    default = cls()
    for key, value in values.items():
        sub = getattr(default, key)
        if dataclasses.is_dataclass(sub) and isinstance(value, dict):
            value = _build(type(sub), {**_shallow(sub, key, cls), **value}, f"{where}.{key}")
        kwargs[key] = value
    return cls(**kwargs)


def _shallow(sub: Any, key: str, parent: type) -> dict[str, Any]:
    # Sections whose defaults differ from their class defaults (``hn`` uses the unified loss).
    return {f.name: getattr(sub, f.name) for f in dataclasses.fields(sub)} if parent is Recipe else {}


def load_recipe(path: str | Path, overrides: dict[str, Any] | None = None) -> Recipe:
    """Read a recipe YAML; ``overrides`` maps dotted keys (``rc.train.lr``) to values."""
    import yaml

    raw = yaml.safe_load(Path(path).read_text()) or {}
    for dotted, value in (overrides or {}).items():
        node = raw
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    recipe = _build(Recipe, raw, str(path))
    bad = [s for s in recipe.stages if s not in STAGES]
    if bad:
        raise ValueError(f"unknown stages {bad}; valid: {', '.join(STAGES)}")
    for name in ("rc", "hn", "filter", "qsft"):
        section = getattr(recipe, name)
        valid = {f.name for f in dataclasses.fields(TrainArgs)} - {"output_dir"}
        unknown = sorted(set(section.train) - valid)
        if unknown:
            raise ValueError(f"{path}: {name}.train has unknown keys {unknown}; valid: {', '.join(sorted(valid))}")
    metrics = ["em@1", *(f"acc@{k}" for k in recipe.validate.ks)]
    if recipe.filter.choose_metric not in metrics:
        raise ValueError(
            f"{path}: filter.choose_metric {recipe.filter.choose_metric!r} is not swept; valid: "
            f"{', '.join(metrics)} (validate.ks)"
        )
    return recipe


# ----------------------------------------------------------------------------- helpers
def _resolve_data(path: str) -> Path | None:
    for candidate in (Path(path), REPO_ROOT / path):
        if candidate.is_file():
            return candidate
    return None


def _resolve_dir(path: str) -> Path:
    for candidate in (Path(path), REPO_ROOT / path):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"directory not found: {path}")


def _device() -> torch.device:
    """This rank's GPU when CUDA is usable (:func:`~dphr_haystack._util.device.resolve_device`), else the CPU."""
    _, local_rank, _ = dist_info()
    return torch.device("cuda", local_rank) if resolve_device("auto") == "cuda" else torch.device("cpu")


def _is_main() -> bool:
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
        path = _resolve_data(d.train if which == "train" else d.dev)
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
                (target / "config.json").write_text(json.dumps(cfg, indent=2))
        return target

    def base_model(self) -> PhraseModel:
        m = self.recipe.model
        base = str(self.tiny_base_dir()) if m.base == "tiny" else m.base
        return PhraseModel.from_base(base, config=PhraseModelConfig(**m.config), seed=self.recipe.seed)

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
            reference = reference.to(_device())
        sub = build_subcorpora(
            self.dev_data,
            reference,
            v.hard_k if reference is not None else (),
            v.random_fractions,
            seed=self.recipe.seed,
            batch_size=v.batch_size,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"reference": reference_name, "subcorpora": sub}, indent=1))
        return sub

    def validator(self, select_on: str | None, reference_dir: str | None) -> tuple[Validator | None, str | None]:
        """A validator for checkpoint selection on ``select_on`` (H_k falls back to C0 without a reference).

        Under torchrun only rank 0 validates: the other ranks get no validator.
        """
        if not select_on:
            return None, None
        if not _is_main():
            return None, f"{select_on}/em@1"
        reference = PhraseModel.load(reference_dir) if reference_dir else None
        sub = self.subcorpora(reference, reference_dir or "none")
        if select_on not in sub:
            logger.warning("subcorpus %s unavailable (no reference model?): selecting on C0", select_on)
            select_on = "C0"
        v = self.recipe.validate
        return Validator(self.dev_data, sub, [select_on], v.ks, v.batch_size, v.max_questions), f"{select_on}/em@1"


def _train_args(recipe: Recipe, stage: str, values: dict[str, Any], select_metric: str | None) -> TrainArgs:
    kwargs = {"seed": recipe.seed, **values, "output_dir": str(recipe.out / stage), "select_metric": select_metric}
    return TrainArgs(**kwargs)


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=_jsonable))


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


# ----------------------------------------------------------------------------- stages
def run_rc(ctx: Context, stage: str = "rc") -> dict[str, Any]:
    """Train phrase + query encoders on RC data (``hn``: with mined hard negatives)."""
    from .mining import negatives_by_example, read_negatives
    from .tasks import RCTask

    recipe = ctx.recipe
    section: RCSection = getattr(recipe, stage)
    chain = ("rc",) if stage == "hn" else ()
    model, source = ctx.init_model(section.init, chain)
    data = ctx.train_data
    windows = PassageWindows(model.tokenizer, model.config, data.passages)
    features = build_features(data, windows, recipe.data.keep_unanswered_windows)
    negatives = None
    if stage == "hn":
        path = recipe.out / "mine" / "hard_negatives.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: run the mine stage first")
        negatives = negatives_by_example(data, read_negatives(path))
    reference = ctx.reference_dir() if stage == "hn" else (recipe.validate.reference or None)
    validator, metric = ctx.validator(section.select_on, reference)
    teacher = None
    if section.teacher:
        from .teacher import CrossEncoderTeacher

        teacher = CrossEncoderTeacher.load(_resolve_dir(section.teacher), model.tokenizer)
    task = RCTask(
        model,
        data,
        features,
        windows,
        loss=section.loss,
        loss_kwargs=section.loss_kwargs,
        pre_batch=section.pre_batch,
        negatives=negatives,
        hard_per_example=section.hard_per_example,
        lambda_flt=section.lambda_flt,
        gather_negatives=section.gather_negatives,
        seed=recipe.seed,
        teacher=teacher,
        batching=section.batching,
        bucket_batches=section.bucket_batches,
    )
    args = _train_args(
        recipe, stage, {"trainable": "all" if section.loss == "densephrases" else "encoders", **section.train}, metric
    )
    result = Trainer(model, args, task, eval_fn=validator).train()
    return {
        "init": source,
        "features": len(features),
        "examples": len(data.examples),
        "steps": result.steps,
        "teacher": section.teacher,
        "final": result.final_dir,
        "best": result.best_dir,
        "best_metric": result.best_metric,
        "select_metric": metric,
        "last": result.last_metrics,
        "samples_per_s": result.samples_per_second,
    }


def run_mine(ctx: Context) -> dict[str, Any]:
    """Index the training corpus with the round-1 model and mine hard negatives for every training question."""
    from .mining import mine_hard_negatives, mining_stats, write_negatives

    if not _is_main():  # rank 0 mines; the others wait in run_stage's barrier
        return {"rank": dist_info()[0], "skipped": "mining runs on rank 0"}
    recipe, m = ctx.recipe, ctx.recipe.mine
    model, source = ctx.init_model(m.init, ("rc",))
    model = model.to(_device())
    data = ctx.train_data
    index = build_index(model, data.passages, m.batch_size, faiss_factory=m.faiss_factory)
    _set_nprobe(index, m.nprobe)
    negatives = mine_hard_negatives(model, data, index, top_k=m.top_k)
    out = recipe.out / "mine"
    out.mkdir(parents=True, exist_ok=True)
    write_negatives(out / "hard_negatives.jsonl", negatives)
    stats = {
        "init": source,
        "passages": index.num_passages,
        "vectors": len(index),
        **mining_stats(negatives, recipe.hn.hard_per_example),
    }
    _write_json(out / "stats.json", stats)
    return stats


def _set_nprobe(index: Any, nprobe: int) -> None:
    import faiss

    try:
        faiss.extract_index_ivf(index.faiss_index).nprobe = nprobe
    except RuntimeError:
        pass  # not an IVF index


def run_filter(ctx: Context) -> dict[str, Any]:
    """Train the token filter on the frozen encoder, report AUC-PR before/after, sweep and choose a threshold.

    The chosen threshold (:func:`train.filter.choose_threshold`) is written into ``filter/final`` and
    ``filter/best`` (``dphr_config.json`` ``filter_threshold``), where ``dphr index`` picks it up by default.
    """
    from .filter import (
        FilterTask,
        choose_threshold,
        filter_metrics,
        filter_scores,
        plot_sweep,
        store_filter_threshold,
        threshold_sweep,
    )

    recipe, f = ctx.recipe, ctx.recipe.filter
    model, source = ctx.init_model(f.init, ("hn", "rc"))
    out = recipe.out / "filter"
    train, dev = ctx.train_data, ctx.dev_data
    features = build_features(train, PassageWindows(model.tokenizer, model.config, train.passages))
    dev_features = build_features(dev, PassageWindows(model.tokenizer, model.config, dev.passages))
    model = model.to(_device())
    main = _is_main()
    before = filter_metrics(filter_scores(model, dev, dev_features)) if main else {}
    args = _train_args(recipe, "filter", {"trainable": "filter", "freeze_word_embeddings": False, **f.train}, None)
    result = Trainer(model, args, FilterTask(model, train, features, f.pos_weight)).train()
    if not main:  # rank 0 evaluates, sweeps and writes
        return {"rank": dist_info()[0], "steps": result.steps}
    model = PhraseModel.load(result.final_dir).to(_device())
    after = filter_metrics(filter_scores(model, dev, dev_features))
    metrics: dict[str, Any] = {
        "init": source,
        "auc_pr_before": before,
        "auc_pr_after": after,
        "steps": result.steps,
        "final": result.final_dir,
    }
    if f.thresholds:
        ref_dir = ctx.reference_dir()
        sub = ctx.subcorpora(PhraseModel.load(ref_dir) if ref_dir else None, ref_dir or "none")
        name = f.sweep_subcorpus if f.sweep_subcorpus in sub else "C0"
        if name != f.sweep_subcorpus:
            logger.warning("filter sweep: subcorpus %s unavailable (no reference model?), using C0", f.sweep_subcorpus)
        passages = [dev.passages[dev.passage_index[p]] for p in sub[name]]
        rows = threshold_sweep(
            model,
            passages,
            dev.examples[: recipe.validate.max_questions],
            f.thresholds,
            recipe.validate.batch_size,
            recipe.validate.ks,
        )
        choice = choose_threshold(rows, f.choose_metric, f.max_drop)
        for directory in {result.final_dir, result.best_dir}:
            store_filter_threshold(directory, choice["threshold"])
        _write_json(out / "sweep.json", {"subcorpus": name, "rows": rows, "choice": choice})
        plot_sweep(rows, out / "sweep.png", chosen=choice["threshold"])
        logger.info("filter threshold %s (%s)", choice["threshold"], choice["rule"])
        metrics.update({"sweep": rows, "filter_threshold": choice["threshold"], "threshold_choice": choice})
    _write_json(out / "metrics.json", metrics)
    return metrics


def run_qsft(ctx: Context) -> dict[str, Any]:
    """Query-side fine-tuning against a fixed index of the training corpus."""
    from .qsft import QsftTask

    recipe, q = ctx.recipe, ctx.recipe.qsft
    model, source = ctx.init_model(q.init, ("filter", "hn", "rc"))
    model = model.to(_device())
    data = ctx.train_data
    if q.index:
        from dphr_haystack.index.phrase_index import PhraseIndex

        if "doc" in q.label_strategy.split(","):
            raise ValueError(
                "qsft.index: an external index's passage ids are not the training data's; use label_strategy: phrase"
            )
        index = PhraseIndex.load(_resolve_dir(q.index), model=model)
    else:
        index = build_index(model, data.passages, recipe.validate.batch_size, faiss_factory=q.faiss_factory)
    _set_nprobe(index, recipe.mine.nprobe)
    reference = ctx.reference_dir()
    validator, metric = ctx.validator(q.select_on, reference)
    task = QsftTask(model, data, index, top_k=q.top_k, label_strategy=q.label_strategy)
    args = _train_args(recipe, "qsft", {"trainable": "query", **q.train}, metric)
    result = Trainer(model, args, task, eval_fn=validator).train()
    return {
        "init": source,
        "index": q.index,
        "index_vectors": len(index),
        "steps": result.steps,
        "final": result.final_dir,
        "best": result.best_dir,
        "best_metric": result.best_metric,
        "last": result.last_metrics,
        "samples_per_s": result.samples_per_second,
    }


def run_validate(ctx: Context) -> dict[str, Any]:
    """Score each listed model (stage name or directory) on C0, R_r and H_k of the validation corpus."""
    if not _is_main():
        return {"rank": dist_info()[0], "skipped": "validation runs on rank 0"}
    recipe, v = ctx.recipe, ctx.recipe.validate
    ref_dir = ctx.reference_dir()
    reference = PhraseModel.load(ref_dir) if ref_dir else None
    sub = ctx.subcorpora(reference, ref_dir or "none")
    validator = Validator(ctx.dev_data, sub, None, v.ks, v.batch_size, v.max_questions)
    results: dict[str, Any] = {
        "reference": ref_dir,
        "subcorpora": {k: len(p) for k, p in sub.items()},
        "questions": len(validator.examples),
        "models": {},
    }
    for name in v.models:
        path = ctx.stage_model_dir(name) if name in STAGES else model_dir(name)
        if path is None:
            logger.warning("validate: no model for %r, skipped", name)
            continue
        started = time.perf_counter()
        scores = validator(PhraseModel.load(path).to(_device()))
        results["models"][name] = {"path": str(path), "seconds": time.perf_counter() - started, **scores}
    _write_json(recipe.out / "validate" / "results.json", results)
    return results


RUNNERS = {
    "rc": lambda ctx: run_rc(ctx, "rc"),
    "mine": run_mine,
    "hn": lambda ctx: run_rc(ctx, "hn"),
    "filter": run_filter,
    "qsft": run_qsft,
    "validate": run_validate,
}


def run_stage(recipe: Recipe, stage: str, ctx: Context | None = None) -> dict[str, Any]:
    """Run one stage of ``recipe``; returns its summary."""
    if stage not in RUNNERS:
        raise ValueError(f"unknown stage {stage!r}; valid: {', '.join(RUNNERS)}")
    ctx = ctx or Context(recipe)
    init_distributed()
    recipe.out.mkdir(parents=True, exist_ok=True)
    if recipe.model.base == "tiny":  # under torchrun rank 0 builds it before any rank reads it
        if _is_main():
            ctx.tiny_base_dir()
        barrier()
    if recipe.torch_threads:
        torch.set_num_threads(recipe.torch_threads)
    torch.manual_seed(recipe.seed)
    result = RUNNERS[stage](ctx)
    barrier()  # under torchrun, the next stage starts when every rank (and rank 0's files) are done
    return result


def run_all(recipe: Recipe) -> dict[str, Any]:
    """Run the recipe's stages in order and write ``summary.json``.

    Recipes sharing an ``output_dir`` (e.g. ``cpu_ul`` then ``cpu_filter``) add to one summary: each stage's entry
    holds its result, wall time and the recipe that ran it; a re-run stage replaces its entry.
    """
    ctx = Context(recipe)
    path = recipe.out / "summary.json"
    previous = json.loads(path.read_text()) if _is_main() and path.is_file() else {}
    summary: dict[str, Any] = {
        "recipe": copy.deepcopy(dataclasses.asdict(recipe)),
        "stages": previous.get("stages", {}) if isinstance(previous, dict) else {},
    }
    for stage in recipe.stages:
        started = time.perf_counter()
        logger.info("stage %s", stage)
        result = run_stage(recipe, stage, ctx)
        summary["stages"][stage] = {
            "seconds": time.perf_counter() - started,
            **result,
            "recipe": copy.deepcopy(dataclasses.asdict(recipe)),
        }
        if _is_main():
            _write_json(recipe.out / "summary.json", summary)
    return summary
