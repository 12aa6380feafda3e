"""A small training loop for phrase models: AdamW, linear schedule, clipping, AMP, accumulation, DDP, resume.

A :class:`TrainingTask` supplies batches and computes the loss from the model; the trainer owns the
optimisation, checkpoints (``checkpoint-<step>/model`` in the dphr_haystack format plus
``trainer_state.pt`` holding plain tensors and dicts, read back with ``weights_only=True``), the JSONL
metrics log, the curves plot and checkpoint selection by a validation metric.

Under ``torchrun`` (``WORLD_SIZE`` > 1) the model is wrapped in DistributedDataParallel (NCCL on CUDA, gloo
on CPU): each process takes its own shard of every global batch (the task's ``batches(rank, world_size)``),
gradients are averaged across processes, logged metrics are averaged across processes, and only rank 0
writes files (checkpoints, ``metrics.jsonl``, models). Validation runs on rank 0 while the others wait.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from dphr_haystack._util.atomic import replace_directory, write_file_atomic
from dphr_haystack._util.nofollow import make_temp_dir, open_no_follow, refuse_symlink
from dphr_haystack.errors import DphrError
from dphr_haystack.model.adapters import adapter_parameters
from dphr_haystack.model.phrase_model import PhraseModel
from dphr_haystack.model.weights import ENCODER_PREFIXES

from .curves import plot_curves

logger = logging.getLogger(__name__)

STATE_FILE = "trainer_state.pt"
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
TRAINABLE = ("all", "query", "filter", "encoders", "adapters", "adapters+norms")


@dataclass
class TrainArgs:
    """Optimisation settings of one training stage.

    Args:
        output_dir: Where checkpoints, ``final/``, ``best/``, ``metrics.jsonl`` and ``curves.png`` go.
        epochs: Passes over the task's examples (``max_steps`` overrides when set).
        batch_size: Examples per micro-batch (per process under DDP).
        grad_accum: Micro-batches per optimiser step.
        lr, weight_decay, warmup_ratio: AdamW and the linear schedule (warmup then linear decay to 0).
        max_grad_norm: Gradient clipping (0 disables).
        freeze_word_embeddings: Keep every ``word_embeddings`` matrix fixed (DensePhrases does).
        precision: ``auto`` (bf16 on CUDA when supported, else fp16; fp32 on CPU), ``fp32``, ``bf16`` (also on a
            CPU: bfloat16 autocast, fp32 weights), ``fp16`` (CUDA only; fp32 on CPU).
        trainable: ``all``, ``encoders`` (all but the filter), ``query`` (query encoders only, QSFT), ``filter`` or
            ``adapters`` (a model with low-rank adapters: the adapters, heads and filter; the encoders' own weights
            stay the base's) or ``adapters+norms`` (those and the encoders' LayerNorm gains and biases, which set
            the scale of the phrase vectors: all-mpnet-base-v2's last LayerNorm keeps them small).
        log_every, save_every, eval_every: In optimiser steps; ``save_every``/``eval_every`` 0 means once
            per epoch.
        keep_checkpoints: How many ``checkpoint-*`` directories to keep.
        select_metric: Validation metric to maximise when choosing ``best/`` (None: ``best`` = last).
        resume: Continue from the last checkpoint in ``output_dir`` when there is one.
        max_minutes: Wall-clock budget of this run: then a checkpoint is written and :class:`TimeBudgetReached` raised.
    """

    output_dir: str = "runs/stage"
    epochs: float = 1.0
    max_steps: int | None = None
    batch_size: int = 48
    grad_accum: int = 1
    lr: float = 3e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.0
    max_grad_norm: float = 1.0
    freeze_word_embeddings: bool = True
    precision: str = "auto"
    trainable: str = "all"
    log_every: int = 10
    save_every: int = 0
    eval_every: int = 0
    keep_checkpoints: int = 2
    select_metric: str | None = None
    resume: bool = True
    seed: int = 0
    progress: bool = True
    max_minutes: float | None = None

    def __post_init__(self) -> None:
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ValueError(f"max_minutes must be > 0 (or None), got {self.max_minutes}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision={self.precision!r}; valid: {', '.join(PRECISIONS)}")
        if self.trainable not in TRAINABLE:
            raise ValueError(f"trainable={self.trainable!r}; valid: {', '.join(TRAINABLE)}")
        if self.batch_size < 1 or self.grad_accum < 1:
            raise ValueError("batch_size and grad_accum must be >= 1")


class TimeBudgetReached(DphrError, RuntimeError):
    """Training stopped at ``TrainArgs.max_minutes`` after writing a checkpoint: the same run again resumes there
    (with a fresh budget)."""


class TrainingTask(Protocol):
    """What the trainer needs from a stage: batches and a loss."""

    def num_batches(self, batch_size: int, world_size: int) -> int:
        """Micro-batches per epoch for this process."""

    def batches(self, epoch: int, batch_size: int, rank: int, world_size: int, seed: int) -> Iterator[dict[str, Any]]:
        """The epoch's micro-batches for this process, in a deterministic order."""

    def step(self, model: PhraseModel, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Forward pass and loss: a dict holding ``loss`` and any scalars to log."""


@dataclass
class TrainResult:
    final_dir: Path
    best_dir: Path
    steps: int
    best_metric: float | None
    last_metrics: dict[str, float]
    samples_per_second: float


class _TaskModule(nn.Module):
    """Wraps model + task so DDP sees one ``forward`` (its gradient hooks fire on the parameters used)."""

    def __init__(self, model: PhraseModel, task: TrainingTask) -> None:
        super().__init__()
        self.model = model
        self.task = task

    def forward(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        return self.task.step(self.model, batch)


def dist_info() -> tuple[int, int, int]:
    """(rank, local_rank, world_size) from the torchrun environment; (0, 0, 1) without it."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def is_distributed() -> bool:
    """True inside an initialised process group."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def init_distributed() -> None:
    """Join the torchrun process group (NCCL on CUDA, gloo on CPU) when ``WORLD_SIZE`` > 1; no-op otherwise.

    The timeout (``DPHR_DIST_TIMEOUT_MINUTES``, default 120) bounds how long the other ranks wait while rank 0
    validates, mines or writes a model; NCCL's own default (10 minutes) is too short for a validation pass.
    """
    _, local_rank, world_size = dist_info()
    if world_size <= 1 or is_distributed():
        return
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    timeout = timedelta(minutes=float(os.environ.get("DPHR_DIST_TIMEOUT_MINUTES", 120)))
    torch.distributed.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo", timeout=timeout)


def barrier() -> None:
    """Wait for every process (no-op without a process group)."""
    if is_distributed():
        torch.distributed.barrier()


def average_across_ranks(values: dict[str, float], device: torch.device) -> dict[str, float]:
    """Mean of each value over the processes (every rank must pass the same keys); unchanged without DDP."""
    if not is_distributed() or not values:
        return values
    keys = sorted(values)
    tensor = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(tensor)
    tensor /= torch.distributed.get_world_size()
    return dict(zip(keys, tensor.tolist(), strict=True))


def parameter_spread(model: nn.Module, device: torch.device) -> float:
    """Largest difference across processes of any parameter tensor's sum and sum of squares (0 when in sync)."""
    if not is_distributed():
        return 0.0
    stats = torch.stack(
        [torch.stack([p.detach().double().sum(), p.detach().double().square().sum()]) for p in model.parameters()]
    ).to(device)  # (n_params, 2)
    high, low = stats.clone(), stats.clone()
    torch.distributed.all_reduce(high, op=torch.distributed.ReduceOp.MAX)
    torch.distributed.all_reduce(low, op=torch.distributed.ReduceOp.MIN)
    return float((high - low).abs().max())


class _GatherWithGrad(torch.autograd.Function):
    """All-gather along dim 0; backward sums every process's gradient and returns this process's rows.

    Written out rather than ``torch.distributed.nn.functional.all_gather``: on gloo that one receives the
    gradient into ``empty_like`` buffers that keep a non-contiguous gradient's strides, so the rows it hands
    back are scrambled (padding positions got gradient, real ones none) whenever the gradient arriving from
    the loss is not contiguous, e.g. after an einsum.
    """

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.contiguous()
        ctx.rows, ctx.rank = tensor.shape[0], torch.distributed.get_rank()
        parts = [torch.empty_like(tensor) for _ in range(torch.distributed.get_world_size())]
        torch.distributed.all_gather(parts, tensor)
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone(memory_format=torch.contiguous_format)  # (world·rows, ...)
        torch.distributed.all_reduce(grad)  # Σ over processes of d(their loss)/d(gathered)
        return grad[ctx.rank * ctx.rows : (ctx.rank + 1) * ctx.rows]


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate ``tensor`` from every DDP process along dim 0, keeping gradients for the local part.

    Every process must pass the same shape. The gradient of the local rows is the sum over processes of
    their losses' gradients; DDP then averages parameter gradients, so the result equals one process
    training on the concatenated batch with the mean of the per-process losses.
    """
    if not is_distributed():
        return tensor
    if not tensor.requires_grad:
        parts = [
            torch.empty_like(tensor, memory_format=torch.contiguous_format)
            for _ in range(torch.distributed.get_world_size())
        ]
        torch.distributed.all_gather(parts, tensor.contiguous())
        return torch.cat(parts, dim=0)
    return _GatherWithGrad.apply(tensor)


def set_trainable(model: PhraseModel, trainable: str, freeze_word_embeddings: bool) -> list[nn.Parameter]:
    """Set ``requires_grad`` by role and return the trainable parameters."""
    if trainable in ("adapters", "adapters+norms"):
        return _adapters_trainable(model, norms=trainable == "adapters+norms")
    groups = model.parameter_groups()
    chosen = {
        "all": tuple(groups),
        "encoders": ("phrase", "query"),
        "query": ("query",),
        "filter": ("filter",),
    }[trainable]
    for role, params in groups.items():
        for param in params:
            param.requires_grad_(role in chosen)
    if freeze_word_embeddings:
        for name, param in model.named_parameters():
            if "word_embeddings" in name:
                param.requires_grad_(False)
    return [p for p in model.parameters() if p.requires_grad]


def _adapters_trainable(model: PhraseModel, norms: bool = False) -> list[nn.Parameter]:
    """Only the adapters and what lies outside the encoders (heads, filter) train; with ``norms`` also the
    encoders' LayerNorm gains and biases."""
    adapters = {id(p) for p in adapter_parameters(model)}
    if not adapters:
        raise ValueError("trainable='adapters' needs a model with low-rank adapters (its config's adapters)")
    if norms:
        adapters |= {id(p) for m in model.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters()}
    for name, param in model.named_parameters():
        param.requires_grad_(id(param) in adapters or not name.startswith(ENCODER_PREFIXES))
    return [p for p in model.parameters() if p.requires_grad]


def linear_schedule(optimizer: torch.optim.Optimizer, warmup: int, total: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup over ``warmup`` steps, then linear decay to 0 at ``total``."""

    def factor(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class Trainer:
    """Runs a :class:`TrainingTask` on a :class:`PhraseModel`.

    Example:
        >>> result = Trainer(model, TrainArgs(output_dir="runs/rc"), task, eval_fn=validator).train()
        >>> PhraseModel.load(result.best_dir)
    """

    def __init__(
        self,
        model: PhraseModel,
        args: TrainArgs,
        task: TrainingTask,
        eval_fn: Callable[[PhraseModel], dict[str, float]] | None = None,
    ) -> None:
        self.model = model
        self.args = args
        self.task = task
        self.eval_fn = eval_fn
        self.out = Path(args.output_dir)
        self.rank, self.local_rank, self.world_size = dist_info()
        self.is_main = self.rank == 0

    # ----------------------------------------------------------------- setup
    def _setup_distributed(self) -> torch.device:
        init_distributed()
        if torch.cuda.is_available():
            torch.cuda.set_device(self.local_rank)
            return torch.device("cuda", self.local_rank)
        return torch.device("cpu")

    def _autocast_dtype(self, device: torch.device) -> torch.dtype | None:
        if self.args.precision == "fp32":
            return None
        if device.type != "cuda":  # a CPU autocasts only when asked to: bf16 (~3x faster where it has AVX512-BF16)
            return torch.bfloat16 if self.args.precision == "bf16" else None
        if self.args.precision == "fp16":
            return torch.float16
        if self.args.precision == "bf16" or torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float16

    # ----------------------------------------------------------------- checkpoints
    def last_checkpoint(self) -> Path | None:
        done = [p for p in self.out.glob("checkpoint-*") if (p / STATE_FILE).is_file() and (p / "model").is_dir()]
        return max(done, key=lambda p: int(p.name.split("-")[1])) if done else None

    def _save_checkpoint(self, step: int, state: dict[str, Any]) -> None:
        if not self.is_main:
            return
        final = refuse_symlink(self.out / f"checkpoint-{step}")
        tmp = make_temp_dir(final)  # fresh: nothing in it was put there by anyone else
        try:
            self.model.save(tmp / "model")
            with open_no_follow(tmp / STATE_FILE, "xb") as handle:
                torch.save(state, handle)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        replace_directory(tmp, final)  # an existing checkpoint stays until the new one is in place
        ckpts = sorted(self.out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        for old in ckpts[: max(0, len(ckpts) - self.args.keep_checkpoints)]:
            shutil.rmtree(old, ignore_errors=True)

    def _save_model(self, name: str) -> Path:
        path = self.out / name
        if self.is_main:
            tmp = make_temp_dir(refuse_symlink(path))
            try:
                self.model.save(tmp)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            replace_directory(tmp, path)
        return path

    # ----------------------------------------------------------------- logging
    def _log(self, record: dict[str, Any]) -> None:
        if not self.is_main:
            return
        with open_no_follow(self.out / "metrics.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")

    # ----------------------------------------------------------------- loop
    def train(self) -> TrainResult:
        """Train, evaluating and checkpointing as configured; returns where the final and best models are."""
        from tqdm.auto import tqdm

        args = self.args
        began = time.monotonic()
        self.out.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(args.seed)
        device = self._setup_distributed()
        if self.is_main:
            write_file_atomic(self.out / "train_args.json", json.dumps(asdict(args), indent=1), fsync=False)
        resume_from = self.last_checkpoint() if args.resume else None
        if resume_from is not None:
            loaded = type(self.model).load(resume_from / "model")  # a PhraseModel, or e.g. a ReaderModel
            self.model.load_state_dict(loaded.state_dict())
            logger.info("resuming from %s", resume_from)
        model = self.model.to(device)
        params = set_trainable(model, args.trainable, args.freeze_word_embeddings)
        optimizer = _adamw(model, args)
        per_epoch = max(1, self.task.num_batches(args.batch_size, self.world_size) // args.grad_accum)
        total = args.max_steps or max(1, math.ceil(per_epoch * args.epochs))
        scheduler = linear_schedule(optimizer, int(args.warmup_ratio * total), total)
        amp_dtype = self._autocast_dtype(device)
        scaler = torch.amp.GradScaler("cuda", enabled=amp_dtype == torch.float16)
        step, epoch, batches_done, best = 0, 0, 0, None
        if resume_from is not None:
            step, epoch, batches_done, best = _restore_state(resume_from, optimizer, scheduler, scaler)
        wrapped: nn.Module = _TaskModule(model, self.task)
        if self.world_size > 1:
            wrapped = nn.parallel.DistributedDataParallel(
                wrapped, device_ids=[self.local_rank] if device.type == "cuda" else None, find_unused_parameters=True
            )
        save_every = args.save_every or per_epoch
        eval_every = args.eval_every or per_epoch
        bar = tqdm(total=total, initial=step, desc=self.out.name, disable=not (args.progress and self.is_main))
        last_metrics: dict[str, float] = {}
        samples, started = 0, time.perf_counter()
        model.train()
        while step < total:
            micro, yielded = 0, False
            accum: dict[str, float] = {}
            for b_idx, batch in enumerate(
                self.task.batches(epoch, args.batch_size, self.rank, self.world_size, args.seed)
            ):
                yielded = True
                if b_idx < batches_done:
                    continue
                batch = _to_device(batch, device)
                sync = (micro + 1) % args.grad_accum == 0
                context = wrapped.no_sync() if (self.world_size > 1 and not sync) else contextlib.nullcontext()
                with context:
                    with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                        out = wrapped(batch)
                    loss = out["loss"] / args.grad_accum
                    scaler.scale(loss).backward()
                for key, value in out.items():
                    accum[key] = (
                        accum.get(key, 0.0)
                        + float(value.detach() if isinstance(value, torch.Tensor) else value) / args.grad_accum
                    )
                micro += 1
                batches_done = b_idx + 1
                samples += len(batch["start_positions"]) if "start_positions" in batch else args.batch_size
                if not sync:
                    continue
                if args.max_grad_norm > 0:
                    scaler.unscale_(optimizer)
                    # The norm of the (DDP-averaged) gradient before clipping: the same on every rank.
                    accum["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm))
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                scheduler.step()
                step += 1
                bar.update(1)
                elapsed = max(time.perf_counter() - started, 1e-9)
                last_metrics = {
                    **average_across_ranks(accum, device),
                    "samples_per_s": samples * self.world_size / elapsed,
                }
                if step % args.log_every == 0 or step == total:
                    self._log({"step": step, "epoch": epoch, "lr": scheduler.get_last_lr()[0], **last_metrics})
                    bar.set_postfix(loss=f"{accum.get('loss', float('nan')):.4f}")
                accum = {}
                if step % eval_every == 0 or step == total:
                    best = self._evaluate(step, epoch, best)
                if step % save_every == 0 or step == total:
                    state = _checkpoint_state(step, epoch, batches_done, best, optimizer, scheduler, scaler)
                    self._save_checkpoint(step, state)
                if step < total and self._out_of_time(began, device):
                    if step % save_every != 0:
                        state = _checkpoint_state(step, epoch, batches_done, best, optimizer, scheduler, scaler)
                        self._save_checkpoint(step, state)
                    minutes = round((time.monotonic() - began) / 60, 3)
                    self._log({"step": step, "epoch": epoch, "stopped": {"reason": "max_minutes", "minutes": minutes}})
                    bar.close()
                    barrier()
                    where = self.out / f"checkpoint-{step}"
                    raise TimeBudgetReached(f"time budget reached at step {step} of {total}; {where} written")
                if step >= total:
                    break
            else:
                epoch += 1
                batches_done = 0
                if not yielded:  # an empty epoch would loop forever
                    raise RuntimeError("the training task yielded no batch")
                continue
            break
        bar.close()
        if self.world_size > 1:
            spread = parameter_spread(model, device)
            self._log({"step": step, "ddp/world_size": self.world_size, "ddp/parameter_spread": spread})
            if spread > 0:
                logger.warning("parameters differ across DDP ranks after training (spread %.3g)", spread)
        model.eval()
        final = self._save_model("final")
        best_dir = self.out / "best"
        if not (self.args.select_metric and best_dir.is_dir()):
            best_dir = self._save_model("best") if self.is_main else best_dir
        elapsed = max(time.perf_counter() - started, 1e-9)
        if self.is_main:
            plot_curves(self.out / "metrics.jsonl", self.out / "curves.png")
        barrier()  # the other ranks must not read final/ or best/ before rank 0 has written them
        return TrainResult(final, best_dir, step, best, last_metrics, samples * self.world_size / elapsed)

    def _out_of_time(self, began: float, device: torch.device) -> bool:
        """Whether ``max_minutes`` has passed since ``began``; under DDP rank 0's clock decides for every process."""
        if self.args.max_minutes is None:
            return False
        over = time.monotonic() - began >= 60.0 * self.args.max_minutes
        if not is_distributed():
            return over
        flag = torch.tensor([float(over)], device=device)
        torch.distributed.broadcast(flag, src=0)
        return bool(flag.item())

    def _evaluate(self, step: int, epoch: int, best: float | None) -> float | None:
        if self.eval_fn is None or not self.is_main:
            return best
        was_training = self.model.training
        self.model.eval()
        metrics = self.eval_fn(self.model)
        self.model.train(was_training)
        self._log({"step": step, "epoch": epoch, **{f"eval/{k}": v for k, v in metrics.items()}})
        key = self.args.select_metric
        if key is not None:
            if key not in metrics:
                raise KeyError(f"select_metric {key!r} not among the validation metrics {sorted(metrics)}")
            value = float(metrics[key])
            if best is None or value > best:
                best = value
                self._save_model("best")
                logger.info("step %d: new best %s = %.4f", step, key, value)
        return best


def _adamw(model: nn.Module, args: TrainArgs) -> torch.optim.AdamW:
    """AdamW over the trainable parameters, without weight decay on biases and norms (1-d tensors)."""
    decay = [p for n, p in model.named_parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.requires_grad and p.ndim <= 1]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
    )


def _checkpoint_state(
    step: int, epoch: int, batches_done: int, best: float | None, optimizer, scheduler, scaler
) -> dict:
    """What a checkpoint needs beyond the model to resume exactly: position, optimizer, schedule, scaler, RNGs."""
    state = {
        "step": step,
        "epoch": epoch,
        "batches_done": batches_done,
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
        "best_metric": best,
        "cpu_rng": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    return state


def _restore_state(checkpoint: Path, optimizer, scheduler, scaler) -> tuple[int, int, int, float | None]:
    """Load a checkpoint's training state into ``optimizer``, ``scheduler``, ``scaler`` and the RNGs; returns
    ``(step, epoch, batches_done, best_metric)``."""
    state = torch.load(checkpoint / STATE_FILE, map_location="cpu", weights_only=True)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if "scaler" in state:
        scaler.load_state_dict(state["scaler"])
    step, epoch, batches_done = int(state["step"]), int(state["epoch"]), int(state["batches_done"])
    best = state.get("best_metric")
    best = None if best is None else float(best)
    if "cpu_rng" in state:  # dropout masks continue as in an uninterrupted run
        torch.set_rng_state(state["cpu_rng"])
    if "cuda_rng" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return step, epoch, batches_done, best


def _to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
