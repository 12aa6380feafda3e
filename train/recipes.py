"""Recipes: a YAML file describes the model, the data and each stage; ``run_stage`` runs one, ``run_all`` chains.

Stage outputs under ``output_dir``::

    reader/{final,metrics.json,metrics.jsonl,curves.png}   a QA reader: the distillation teacher (``teacher: reader``)
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
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import torch

from dphr_haystack._util.atomic import write_file_atomic
from dphr_haystack.model.phrase_model import PhraseModel, filter_head
from dphr_haystack.model.registry import model_dir

from .context import Context, is_main_rank, rank_device
from .data import (
    PassageWindows,
    answer_removed_passages,
    build_features,
    near_miss_features,
    unanswerable_features,
)
from .schema import STAGES, DataSection, RCSection, Recipe, load_recipe, resolve_data, resolve_dir
from .trainer import TrainArgs, Trainer, barrier, dist_info, init_distributed
from .validation import Validator, build_index

logger = logging.getLogger(__name__)

__all__ = ["STAGES", "Context", "DataSection", "Recipe", "load_recipe", "run_all", "run_stage"]


def _train_args(recipe: Recipe, stage: str, values: dict[str, Any], select_metric: str | None) -> TrainArgs:
    kwargs = {"seed": recipe.seed, **values, "output_dir": str(recipe.out / stage), "select_metric": select_metric}
    return TrainArgs(**kwargs)


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(path, json.dumps(data, indent=1, default=_jsonable), fsync=False)


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

        teacher_dir = ctx.stage_model_dir("reader") if section.teacher == "reader" else resolve_dir(section.teacher)
        if teacher_dir is None:
            raise FileNotFoundError(f"{recipe.out / 'reader'} has no reader: run the reader stage first")
        teacher = CrossEncoderTeacher.load(teacher_dir, model.tokenizer)
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
        lambda_kl=section.lambda_kl,
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


def run_reader(ctx: Context) -> dict[str, Any]:
    """Train a cross-attention reader on the phrase model's windows (a distillation teacher, or the verification's
    reader) and compare the two.

    Both are measured on the gold windows of the dev questions (:func:`train.reader.span_metrics`): a teacher
    helps only where it reads better than the student. With ``near_misses`` / ``swapped_names`` /
    ``answer_removed`` the reader also learns to answer [CLS] on passages of the question's article that do not hold
    its answer, on questions asked of another entity than their passage's (:func:`train.data.unanswerable_features`)
    and on the question's own passage less the sentences that state its answer
    (:func:`train.data.answer_removed_passages`); its no-answer score is measured on the dev questions' windows of
    each kind (:func:`train.reader.no_answer_metrics`), and a reader that went on from another (``start``) is
    measured beside that one.
    """
    from .reader import ReaderModel, ReaderTask, no_answer_metrics, null_scores, phrase_model_logits, span_metrics

    recipe, r = ctx.recipe, ctx.recipe.reader
    model, source = ctx.init_model(r.init, ("rc",))
    if r.start:
        reader, source = ReaderModel.from_reader(r.start, model.config), r.start
    else:
        reader = ReaderModel.from_phrase_model(model, r.encoder_init)
    train, removed = answer_removed_passages(ctx.train_data, r.answer_removed, recipe.seed)
    windows = PassageWindows(model.tokenizer, model.config, train.passages)
    features = build_features(train, windows)
    train, near, swapped = unanswerable_features(train, windows, r.near_misses, r.swapped_names, recipe.seed)
    removed_features = near_miss_features(removed, windows)
    logger.info(
        "reader features: %d with the answer's passage, %d near misses, %d of questions asked of another entity, "
        "%d of their passage less the answer's sentences",
        len(features),
        len(near),
        len(swapped),
        len(removed_features),
    )
    args = _train_args(recipe, "reader", {"freeze_word_embeddings": False, **r.train}, None)
    task = ReaderTask(reader, train, features + near + swapped + removed_features, r.bucket_batches)
    result = Trainer(reader, args, task).train()
    if not is_main_rank():
        return {"rank": dist_info()[0], "steps": result.steps}
    dev, dev_removed = answer_removed_passages(ctx.dev_data, 1.0, recipe.seed)
    dev_windows = PassageWindows(model.tokenizer, model.config, dev.passages)
    dev_features = build_features(dev, dev_windows)
    dev, dev_near, dev_swapped = unanswerable_features(dev, dev_windows, 1.0, 1.0, recipe.seed)
    unanswerable = {
        "near_misses": dev_near,
        "swapped_names": dev_swapped,
        "answer_removed": near_miss_features(dev_removed, dev_windows),
    }

    def measure(reads: Any) -> dict[str, Any]:
        """A reader's spans on the dev questions' gold windows and its no-answer score on each kind of window that
        does not answer them."""
        answered = null_scores(reads, dev, [f for f in dev_features if f.start > 0], model.tokenizer, model.config)
        return {
            "gold_window_spans": span_metrics(reads, dev, dev_features, model.tokenizer, model.config),
            "no_answer": {
                name: no_answer_metrics(answered, null_scores(reads, dev, found, model.tokenizer, model.config))
                for name, found in unanswerable.items()
            },
        }

    trained = measure(ReaderModel.load(result.final_dir).to(rank_device()).eval().teacher().logits)
    phrase_model = phrase_model_logits(model.to(rank_device()).eval())
    metrics = {
        "init": source,
        "encoder_init": None if r.start else r.encoder_init,
        "features": len(features),
        "near_miss_features": len(near),
        "swapped_name_features": len(swapped),
        "answer_removed_features": len(removed_features),
        "steps": result.steps,
        "final": result.final_dir,
        "samples_per_s": result.samples_per_second,
        "gold_window_spans": {
            "reader": trained["gold_window_spans"],
            "phrase_model": span_metrics(phrase_model, dev, dev_features, model.tokenizer, model.config),
        },
        "no_answer": trained["no_answer"],
    }
    if r.start:  # the reader it went on from, on the same windows: what this training changed
        metrics["start_reader"] = measure(
            ReaderModel.from_reader(r.start, model.config).to(rank_device()).eval().teacher().logits
        )
    logger.info(
        "reader on gold windows and no-answer windows: %s", {k: metrics[k] for k in ("gold_window_spans", "no_answer")}
    )
    _write_json(recipe.out / "reader" / "metrics.json", metrics)
    return metrics


def run_mine(ctx: Context) -> dict[str, Any]:
    """Index the training corpus with the round-1 model and mine hard negatives for every training question."""
    from .mining import mine_hard_negatives, mining_stats, write_negatives

    if not is_main_rank():  # rank 0 mines; the others wait in run_stage's barrier
        return {"rank": dist_info()[0], "skipped": "mining runs on rank 0"}
    recipe, m = ctx.recipe, ctx.recipe.mine
    model, source = ctx.init_model(m.init, ("rc",))
    model = model.to(rank_device())
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
    """Search ``nprobe`` lists of an IVF structure, for this run only (nothing is written to the index); other
    structures have no lists and are left as they are."""
    from dphr_haystack.index.structures import ivf_of

    if index.faiss_index is not None and ivf_of(index.faiss_index) is not None:
        index.set_search_params(persist=False, nprobe=nprobe)


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
        sample_passages,
        store_filter_threshold,
        threshold_sweep,
    )

    recipe, f = ctx.recipe, ctx.recipe.filter
    model, source = ctx.init_model(f.init, ("hn", "rc"))
    if f.hidden is not None and f.hidden != model.config.filter_hidden:  # a fresh head of the asked shape
        torch.manual_seed(recipe.seed)
        model.config.filter_hidden = f.hidden
        model.config.validate()
        model.filter_linear = filter_head(model.phrase_encoder.config.hidden_size, f.hidden)
    out = recipe.out / "filter"
    train, dev = ctx.train_data, ctx.dev_data
    features = build_features(train, PassageWindows(model.tokenizer, model.config, train.passages))
    dev_features = build_features(dev, PassageWindows(model.tokenizer, model.config, dev.passages))
    model = model.to(rank_device())
    main = is_main_rank()
    before = filter_metrics(filter_scores(model, dev, dev_features, labels=f.labels)) if main else {}
    args = _train_args(recipe, "filter", {"trainable": "filter", "freeze_word_embeddings": False, **f.train}, None)
    result = Trainer(model, args, FilterTask(model, train, features, f.pos_weight, f.labels)).train()
    if not main:  # rank 0 evaluates, sweeps and writes
        return {"rank": dist_info()[0], "steps": result.steps}
    model = PhraseModel.load(result.final_dir).to(rank_device())
    after = filter_metrics(filter_scores(model, dev, dev_features, labels=f.labels))
    metrics: dict[str, Any] = {
        "init": source,
        "labels": f.labels,
        "filter_hidden": model.config.filter_hidden,
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
        counted = f.vector_budget is not None and f.budget_sample > 0
        rows = threshold_sweep(
            model,
            passages,
            dev.examples[: recipe.validate.max_questions],
            f.thresholds,
            recipe.validate.batch_size,
            recipe.validate.ks,
            sample=sample_passages(train.passages, f.budget_sample, recipe.seed) if counted else None,
        )
        choice = choose_threshold(rows, f.choose_metric, f.max_drop, f.vector_budget)
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
    model = model.to(rank_device())
    data = ctx.train_data
    if q.index:
        from dphr_haystack.index.phrase_index import PhraseIndex

        if "doc" in q.label_strategy.split(","):
            raise ValueError(
                "qsft.index: an external index's passage ids are not the training data's; use label_strategy: phrase"
            )
        index = PhraseIndex.load(resolve_dir(q.index), model=model)
    else:
        index = build_index(model, data.passages, recipe.validate.batch_size, faiss_factory=q.faiss_factory)
    _set_nprobe(index, recipe.mine.nprobe)
    reference = ctx.reference_dir()
    validator, metric = ctx.validator(q.select_on, reference)
    questions = data
    if q.questions:
        from dphr_haystack.evaluation.questions import read_questions

        questions = read_questions(resolve_data(q.questions) or q.questions)
    task = QsftTask(
        model,
        questions,
        index,
        top_k=q.top_k,
        label_strategy=q.label_strategy,
        candidates=q.candidates,
        answer_match=q.answer_match,
    )
    args = _train_args(recipe, "qsft", {"trainable": "query", **q.train}, metric)
    result = Trainer(model, args, task, eval_fn=validator).train()
    return {
        "init": source,
        "index": q.index,
        "questions": q.questions,
        "candidates": q.candidates,
        "answer_match": q.answer_match,
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
    if not is_main_rank():
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
        scores = validator(PhraseModel.load(path).to(rank_device()))
        results["models"][name] = {"path": str(path), "seconds": time.perf_counter() - started, **scores}
    _write_json(recipe.out / "validate" / "results.json", results)
    return results


RUNNERS = {
    "reader": run_reader,
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
        if is_main_rank():
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
    previous = json.loads(path.read_text()) if is_main_rank() and path.is_file() else {}
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
        if is_main_rank():
            _write_json(recipe.out / "summary.json", summary)
    return summary
