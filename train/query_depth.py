"""A shallower query side: a model's query encoder(s) cut to their first layers and distilled from the full ones.

    python -m train.query_depth --model dphr-minilm-squad-distilled --layers 3 --out runs/query-depth-3

A query is a handful of subwords, so its encoder's cost is its layers: a query side of fewer layers answers sooner.
The student starts as the model with its query encoder(s) cut to their first ``--layers`` transformer layers
(``PhraseModelConfig.query_layers``; a shared layout's two heads refitted by ridge regression onto the teacher's
vectors), and learns to give the full query side's start and end
vectors (mean squared error, relative to the teacher vectors' mean squared norm; no dropout) on SQuAD training
questions, the teacher's vectors computed once. The phrase encoder, filter and calibration are copied, so the
student's phrase fingerprint is the teacher's and every index built with the teacher serves it. Held-out questions
(SQuAD dev) are scored every ``--eval-every`` steps (relative error and cosine to the teacher's vectors) and the best
student is kept. A base-size phrase model's query side would be cut the same way, so that its queries cost what a
small encoder's do.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from dphr_haystack._util.atomic import write_file_atomic
from dphr_haystack.model.building import first_layers
from dphr_haystack.model.inputs import tokenize_queries
from dphr_haystack.model.phrase_model import QUERY_SIDE, PhraseModel

from .layout import fit_linear

logger = logging.getLogger(__name__)


def shallow_copy(model: PhraseModel, layers: int) -> PhraseModel:
    """A copy of ``model`` whose query encoder(s) keep their first ``layers`` transformer layers.

    Raises:
        ValueError: ``layers`` is not below the query encoders' own count.
    """
    have = model.config.query_layers or model.phrase_encoder.config.num_hidden_layers
    if not 1 <= layers < have:
        raise ValueError(f"--layers must be from 1 to {have - 1} (the query side has {have}), got {layers}")
    student = copy.deepcopy(model)
    student.__dict__.pop("_int8_query_side", None)  # the teacher's int8 copy, made for its own weights
    student.config.query_layers = layers
    for name in QUERY_SIDE[student.config.query_layout]:
        if name.endswith("_encoder"):  # the heads stay
            first_layers(getattr(student, name), layers)
    return student


def query_parameters(model: PhraseModel, word_embeddings: bool = True) -> list[nn.Parameter]:
    """The query side's parameters (encoders and heads); without ``word_embeddings`` (what the distillation trains:
    DensePhrases freezes them too) the encoders' word embeddings left out."""
    return [
        p
        for name in QUERY_SIDE[model.config.query_layout]
        for key, p in getattr(model, name).named_parameters()
        if word_embeddings or "word_embeddings" not in key
    ]


@torch.no_grad()
def fit_heads(student: PhraseModel, batches: list[dict[str, torch.Tensor]], targets: list[torch.Tensor]) -> None:
    """Set a shared-layout student's start and end heads to the ridge regression of the teacher's vectors on its own
    query encoder's [CLS] states: the shallow encoder's last layer is not the full one's, and a linear map takes it
    most of the way (a separate layout has no heads: left as it is)."""
    if student.config.query_layout != "shared":
        return
    states = torch.cat([student.query_encoder(**b).last_hidden_state[:, 0] for b in batches]).numpy()
    wanted = torch.cat(targets).numpy()
    d = wanted.shape[1] // 2
    for head, part in ((student.query_start_head, wanted[:, :d]), (student.query_end_head, wanted[:, d:])):
        weights = fit_linear(states, part)
        head.weight.copy_(torch.from_numpy(weights[:-1].T.astype(np.float32)))
        head.bias.copy_(torch.from_numpy(weights[-1].astype(np.float32)))


def score_weights(index_path: str | Path, sample: int = 100_000, seed: int = 0) -> torch.Tensor:
    """M with ``|(q − q') M|² = E_h[((q − q')·h)²]`` over the stored phrase vectors h of the index at ``index_path``
    (a sample of ``sample`` rows): the symmetric square root of their second moment. With it the distillation
    weighs a query vector's error by how much it moves phrase scores, not equally in every direction."""
    from dphr_haystack.index.phrase_index import PhraseIndex

    index = PhraseIndex.load(index_path)
    total = len(index)
    rows = np.sort(np.random.default_rng(seed).choice(total, size=min(sample, total), replace=False))
    vectors = torch.from_numpy(index.vectors(rows).astype(np.float64))
    moment = vectors.T @ vectors / len(rows)
    values, basis = torch.linalg.eigh(moment)
    return (basis * values.clamp(min=0).sqrt()) @ basis.T


def _vectors(model: PhraseModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    q_start, q_end = model.query_vectors(**batch)
    return torch.cat([q_start, q_end], dim=1)


def _batches(model: PhraseModel, questions: Sequence[str], size: int) -> list[dict[str, torch.Tensor]]:
    return [
        tokenize_queries(model.tokenizer, questions[i : i + size], model.config)
        for i in range(0, len(questions), size)
    ]


@torch.no_grad()
def teacher_vectors(model: PhraseModel, batches: list[dict[str, torch.Tensor]]) -> list[torch.Tensor]:
    """The full query side's [q_start, q_end] for each batch."""
    model.eval()
    return [_vectors(model, batch) for batch in batches]


def _in_score_space(vectors: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """[q_start, q_end] rows mapped by ``weights`` (each half by itself); unchanged without weights."""
    if weights is None:
        return vectors
    d = vectors.shape[1] // 2
    weights = weights.to(vectors.dtype)
    return torch.cat([vectors[:, :d] @ weights, vectors[:, d:] @ weights], dim=1)


@torch.no_grad()
def agreement(
    student: PhraseModel, batches, targets: list[torch.Tensor], weights: torch.Tensor | None = None
) -> dict[str, float]:
    """How close the student's query vectors are to the teacher's: relative squared error, mean cosine and, with
    ``weights`` (:func:`score_weights`), the relative squared error of the phrase scores they give."""
    sums = {"error": 0.0, "norm": 0.0, "score_error": 0.0, "score_norm": 0.0}
    cosines = []
    for batch, target in zip(batches, targets, strict=True):
        got = _vectors(student, batch)
        sums["error"] += float(((got - target) ** 2).sum())
        sums["norm"] += float((target**2).sum())
        if weights is not None:
            sums["score_error"] += float((_in_score_space(got - target, weights) ** 2).sum())
            sums["score_norm"] += float((_in_score_space(target, weights) ** 2).sum())
        d = got.shape[1] // 2
        for part in (slice(0, d), slice(d, None)):
            cosines.append(torch.nn.functional.cosine_similarity(got[:, part], target[:, part], dim=1))
    out = {"relative_error": sums["error"] / sums["norm"], "mean_cosine": float(torch.cat(cosines).mean())}
    if weights is not None:
        out["relative_score_error"] = sums["score_error"] / sums["score_norm"]
    return out


def distil(
    model: PhraseModel,
    layers: int,
    questions: Sequence[str],
    dev_questions: Sequence[str],
    steps: int = 1500,
    batch_size: int = 64,
    lr: float = 1e-4,
    eval_every: int = 250,
    seed: int = 0,
    progress: bool = True,
    weights: torch.Tensor | None = None,
) -> tuple[PhraseModel, dict[str, Any]]:
    """The best student of ``layers`` query layers and the run's report. With ``weights`` (:func:`score_weights`)
    the loss, and the choice of the best student, weigh the errors by the phrase scores they move; without, every
    direction of the query vectors counts alike."""
    from tqdm.auto import tqdm

    if steps < 1 or batch_size < 1 or eval_every < 1 or not questions or not dev_questions:
        raise ValueError("steps, batch_size, eval_every, questions and dev_questions must be positive / non-empty")
    torch.manual_seed(seed)
    order = list(questions)
    random.Random(seed).shuffle(order)
    started = time.perf_counter()
    train_batches = _batches(model, order, batch_size)
    dev_batches = _batches(model, list(dev_questions), 128)
    targets = teacher_vectors(model, train_batches)
    dev_targets = teacher_vectors(model, dev_batches)
    scale = float(_in_score_space(torch.cat(targets), weights).pow(2).sum(1).mean())
    metric = "relative_error" if weights is None else "relative_score_error"
    teacher_seconds = time.perf_counter() - started
    student = shallow_copy(model, layers)
    student.eval()  # a regression onto fixed targets: no dropout
    before = agreement(student, dev_batches, dev_targets, weights)
    fit_heads(student, train_batches, targets)
    for param in student.parameters():
        param.requires_grad_(False)
    trainable = query_parameters(student, word_embeddings=False)
    for param in trainable:
        param.requires_grad_(True)
    optimiser = torch.optim.AdamW(trainable, lr=lr, weight_decay=0.01)
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / max(1, steps - warmup)))
    )
    history = [{"step": 0, "seconds": 0.0, **agreement(student, dev_batches, dev_targets, weights)}]
    best = (history[0][metric], copy.deepcopy(student.state_dict()), 0)
    losses: list[float] = []
    train_started = time.perf_counter()
    bar = tqdm(range(1, steps + 1), desc=f"query side, {layers} layers", disable=not progress)
    for step in bar:
        i = (step - 1) % len(train_batches)
        error = _in_score_space(_vectors(student, train_batches[i]) - targets[i], weights)
        loss = (error**2).sum(1).mean() / scale
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimiser.step()
        schedule.step()
        losses.append(float(loss.detach()))
        bar.set_postfix(loss=f"{np.mean(losses[-50:]):.4f}")
        if step % eval_every == 0 or step == steps:
            row = {
                "step": step,
                "seconds": time.perf_counter() - train_started,
                "train_loss": float(np.mean(losses[-eval_every:])),
            }
            row.update(agreement(student, dev_batches, dev_targets, weights))
            history.append(row)
            logger.info("step %d: held-out %s", step, ", ".join(f"{k} {v:.4f}" for k, v in row.items() if k != "step"))
            if row[metric] < best[0]:
                best = (row[metric], copy.deepcopy(student.state_dict()), step)
    student.load_state_dict(best[1])
    student.eval()
    for param in student.parameters():
        param.requires_grad_(False)
    student.__dict__.pop("_int8_query_side", None)
    report = {
        "layers": layers,
        "teacher_layers": model.config.query_layers or model.phrase_encoder.config.num_hidden_layers,
        "questions": len(order),
        "dev_questions": len(dev_questions),
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "epochs": steps * batch_size / len(order),
        "loss": "phrase scores (index second moment)" if weights is not None else "query vectors",
        "best_step": best[2],
        "cut_before_heads_fitted": before,
        "teacher_seconds": teacher_seconds,
        "train_seconds": time.perf_counter() - train_started,
        "history": history,
        "query_parameters": {
            "teacher": sum(p.numel() for p in query_parameters(model)),
            "student": sum(p.numel() for p in query_parameters(student)),
        },
    }
    return student, report


def main(argv: Sequence[str] | None = None) -> int:
    from .data import load_squad
    from .schema import DataSection, resolve_data

    parser = argparse.ArgumentParser(prog="python -m train.query_depth", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="the teacher: a model directory or shipped name")
    parser.add_argument("--layers", type=int, required=True, help="query encoder layers the student keeps")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--train", default=DataSection.train, help="SQuAD training file (its questions)")
    parser.add_argument("--dev", default=DataSection.dev, help="SQuAD file of the held-out questions")
    parser.add_argument("--questions", type=int, default=40_000, help="training questions (evenly spaced)")
    parser.add_argument("--dev-questions", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--index", help="a phrase index of the model: weigh errors by the phrase scores they move")
    parser.add_argument("--report", type=Path, help="also write the report here (e.g. benchmarks/results/...)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    paths = {name: resolve_data(getattr(args, name)) for name in ("train", "dev")}
    missing = [f"--{name} {getattr(args, name)}" for name, path in paths.items() if path is None]
    if missing:
        parser.error(f"not found: {', '.join(missing)}")
    model = PhraseModel.load(args.model)
    weights = score_weights(args.index) if args.index else None
    questions = [ex.question for ex in load_squad(paths["train"], max_questions=args.questions).examples]
    dev = [ex.question for ex in load_squad(paths["dev"], max_questions=args.dev_questions).examples]
    try:
        student, report = distil(
            model,
            args.layers,
            questions,
            dev,
            args.steps,
            args.batch_size,
            args.lr,
            args.eval_every,
            args.seed,
            weights=weights,
        )
    except ValueError as exc:
        parser.error(str(exc))
    student.save(args.out)
    report.update(
        teacher=str(args.model),
        out=str(args.out),
        phrase_fingerprint=student.phrase_fingerprint(),
        command=" ".join(["python -m train.query_depth", *(argv if argv is not None else sys.argv[1:])]),
    )
    text = json.dumps(report, indent=1)
    write_file_atomic(args.out / "query_depth.json", text, fsync=False)
    if args.report:
        write_file_atomic(args.report, text, fsync=False)
    print(json.dumps({k: v for k, v in report.items() if k != "history"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
