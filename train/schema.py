"""The recipe schema: the YAML sections of a training recipe, checked and given defaults (:func:`load_recipe`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .trainer import TrainArgs

STAGES = ("reader", "rc", "mine", "hn", "filter", "qsft", "validate")
DEFAULT_STAGES = ("rc", "mine", "hn", "filter", "qsft", "validate")  # the reader (a teacher) only when asked
REPO_ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- configuration
@dataclass
class ModelSection:
    base: str = "minilm"
    tiny: dict[str, Any] = field(default_factory=lambda: {"hidden_size": 32, "layers": 2, "heads": 4})
    config: dict[str, Any] = field(default_factory=dict)
    # A model built from its base starts its shared query heads at this multiple of the identity (1: the identity).
    # A base whose token states are small (all-mpnet-base-v2's last LayerNorm holds them near norm 3) scores every
    # token alike at the start, and the heads would take many thousand steps to grow the scores the loss needs.
    query_head_scale: float = 1.0


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
    teacher: str | None = None  # a QA reader directory, or "reader" (this run's reader stage); needs a KL weight
    lambda_kl: float = 0.0  # unified loss: weight of the distillation term from ``teacher``
    batching: str = "question"  # or "passage": a window encoded once for all its questions (train.tasks.RCTask)
    bucket_batches: int = 50  # passage batching: batches per length-sorted run
    train: dict[str, Any] = field(default_factory=dict)


@dataclass
class ReaderSection:
    init: str | None = None  # the phrase model whose windows (and, with encoder_init "phrase", encoder) it uses
    encoder_init: str = "phrase"  # or "base": the pre-trained base, as DensePhrases' teachers
    start: str | None = None  # a reader (directory or shipped name) to go on training instead of a new one
    near_misses: float = 0.0  # near-miss passages a question, trained to answer [CLS] (train.data.near_miss_passages)
    swapped_names: float = 0.0  # share of questions also asked of another entity (train.data.swapped_name_examples)
    answer_removed: float = 0.0  # share also asked of their passage less its answer (data.answer_removed_passages)
    bucket_batches: int = 50
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
    labels: str = "window"  # "window": all answers of a window are its positives; "question": one answer per row
    hidden: int | None = None  # a fresh MLP filter with this hidden width (PhraseModelConfig.filter_hidden)
    thresholds: list[float | None] = field(default_factory=lambda: [None, -3.0, -2.0, -1.0, 0.0, 1.0])
    sweep_subcorpus: str = "C0"
    choose_metric: str = "em@1"  # the threshold rule: see train.filter.choose_threshold
    max_drop: float = 0.01
    # stored vectors per passage: when set, the rule is "highest choose_metric within this budget" (max_drop unused)
    vector_budget: float | None = None
    # with vector_budget: how many training passages, drawn at random, the budget is counted on (0: on the sweep's
    # subcorpus, whose passages may keep more or fewer vectors than the corpus a model will index)
    budget_sample: int = 500
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
    # Training questions from an open-domain question file (SQuAD/DensePhrases JSON, NQ-open JSONL, DPR .qa.csv)
    # instead of the training data's, as DensePhrases fine-tunes on NQ or CuratedTREC; needs ``index``.
    questions: str | None = None
    # "phrases": the searcher's top-k distinct whole-word phrases; "densephrases": DensePhrases' raw 2·top_k start-
    # and end-anchored candidates, zero-vector padding in the softmax, probabilities clamped at 1e-7.
    candidates: str = "phrases"
    # "auto" (regex for CuratedTREC-style question files), "exact" or "regex".
    answer_match: str = "auto"
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
    stages: list[str] = field(default_factory=lambda: list(DEFAULT_STAGES))
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    reader: ReaderSection = field(default_factory=ReaderSection)
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
    from dphr_haystack._util.safe_yaml import read_yaml

    raw = read_yaml(path) or {}
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
    for name in ("reader", "rc", "hn", "filter", "qsft"):
        section = getattr(recipe, name)
        valid = {f.name for f in dataclasses.fields(TrainArgs)} - {"output_dir"}
        unknown = sorted(set(section.train) - valid)
        if unknown:
            raise ValueError(f"{path}: {name}.train has unknown keys {unknown}; valid: {', '.join(sorted(valid))}")
    from .qsft import ANSWER_MATCHES, CANDIDATE_SCHEMES

    if recipe.qsft.candidates not in CANDIDATE_SCHEMES:
        raise ValueError(f"{path}: qsft.candidates {recipe.qsft.candidates!r}; valid: {', '.join(CANDIDATE_SCHEMES)}")
    if recipe.qsft.answer_match not in ANSWER_MATCHES:
        raise ValueError(f"{path}: qsft.answer_match {recipe.qsft.answer_match!r}; valid: {', '.join(ANSWER_MATCHES)}")
    if recipe.qsft.questions and not recipe.qsft.index:
        raise ValueError(f"{path}: qsft.questions needs qsft.index (the phrase index those questions are asked of)")
    from .filter import LABELS
    from .reader import INITS

    if recipe.reader.encoder_init not in INITS:
        raise ValueError(f"{path}: reader.encoder_init {recipe.reader.encoder_init!r}; valid: {', '.join(INITS)}")
    if recipe.reader.near_misses < 0:
        raise ValueError(f"{path}: reader.near_misses must be >= 0 a question, got {recipe.reader.near_misses}")
    for share in ("swapped_names", "answer_removed"):
        if not 0 <= getattr(recipe.reader, share) <= 1:
            raise ValueError(
                f"{path}: reader.{share} is a share of the questions in [0, 1], got {getattr(recipe.reader, share)}"
            )
    if recipe.filter.labels not in LABELS:
        raise ValueError(f"{path}: filter.labels {recipe.filter.labels!r}; valid: {', '.join(LABELS)}")
    metrics = ["em@1", *(f"acc@{k}" for k in recipe.validate.ks)]
    if recipe.filter.choose_metric not in metrics:
        raise ValueError(
            f"{path}: filter.choose_metric {recipe.filter.choose_metric!r} is not swept; valid: "
            f"{', '.join(metrics)} (validate.ks)"
        )
    if recipe.filter.budget_sample < 0:
        raise ValueError(f"{path}: filter.budget_sample must be >= 0 passages, got {recipe.filter.budget_sample}")
    if recipe.filter.vector_budget is not None and not recipe.filter.vector_budget > 0:
        raise ValueError(
            f"{path}: filter.vector_budget must be > 0 vectors per passage, got {recipe.filter.vector_budget}"
        )
    return recipe


# ----------------------------------------------------------------------------- helpers
def resolve_data(path: str) -> Path | None:
    """The data file ``path``, as given or relative to the repository root; None when neither exists."""
    for candidate in (Path(path), REPO_ROOT / path):
        if candidate.is_file():
            return candidate
    return None


def resolve_dir(path: str) -> Path:
    """The directory ``path``, as given or relative to the repository root; FileNotFoundError when neither exists."""
    for candidate in (Path(path), REPO_ROOT / path):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"directory not found: {path}")
