"""A cross-attention reader trained on the phrase model's own windows: the distillation teacher.

DensePhrases (Lee et al. 2021a) distils a span reader that reads ``[CLS] question [SEP] context [SEP]``
jointly into the phrase model. The reader here is an ``AutoModelForQuestionAnswering`` on the phrase model's
base (MiniLM by default), trained on the same windows and gold positions as the phrase model, so that
:class:`train.teacher.CrossEncoderTeacher` can load the saved directory and hand its logits, position for
position, to the student. ``init="phrase"`` starts its encoder from the trained phrase encoder (the span
knowledge is already there: cheaper on a CPU budget), ``init="base"`` from the pre-trained base, as DensePhrases
does.

:func:`span_metrics` measures a reader and a phrase model alike on gold windows (the answer's window, both
decoding the best context span within ``max_answer_length``), which says whether a teacher is worth distilling.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from dphr_haystack._util.lazy import require
from dphr_haystack.errors import ModelLoadError
from dphr_haystack.fitting import auroc
from dphr_haystack.model.config import PhraseModelConfig
from dphr_haystack.model.phrase_model import PhraseModel
from dphr_haystack.model.registry import resolve_base
from dphr_haystack.model.remote_code import TRUST_REMOTE_CODE

from .data import Feature, RCData, collate, per_question
from .tasks import bucketed_batches, epoch_order
from .teacher import CrossEncoderTeacher, load_qa_model

logger = logging.getLogger(__name__)

INITS = ("phrase", "base")
WINDOW_CONFIG = "dphr_windows.json"  # the phrase model config whose windows the reader was trained on


class ReaderModel(nn.Module):
    """A QA reader (``qa``: an ``AutoModelForQuestionAnswering``) with the student's tokenizer and window settings.

    Example:
        >>> reader = ReaderModel.from_phrase_model(PhraseModel.load("runs/gpu-converge/rc/final"))
        >>> reader.save("runs/reader/final")      # a teacher directory for ``rc.teacher``
    """

    def __init__(self, qa: nn.Module, tokenizer, config: PhraseModelConfig) -> None:
        super().__init__()
        self.qa = qa
        self.tokenizer = tokenizer
        self.config = config

    @classmethod
    def from_phrase_model(cls, model: PhraseModel, init: str = "phrase") -> ReaderModel:
        """A reader on ``model``'s base whose encoder starts from the phrase encoder (``phrase``) or the base."""
        transformers = require("transformers")
        if init not in INITS:
            raise ValueError(f"reader init {init!r}; valid: {', '.join(INITS)}")
        if init == "base":
            base = model.config.base_model
            if not base:
                raise ModelLoadError("the phrase model records no base_model: use init='phrase'")
            try:
                qa = transformers.AutoModelForQuestionAnswering.from_pretrained(
                    resolve_base(base), trust_remote_code=TRUST_REMOTE_CODE
                )
            except (OSError, ValueError) as exc:
                raise ModelLoadError(f"cannot load the reader base {base!r}: {exc}") from exc
        else:
            encoder_config = copy.deepcopy(model.phrase_encoder.config)
            qa = transformers.AutoModelForQuestionAnswering.from_config(
                encoder_config, trust_remote_code=TRUST_REMOTE_CODE
            )
            body = getattr(qa, qa.base_model_prefix)
            result = body.load_state_dict(model.phrase_encoder.state_dict(), strict=False)
            missing = [k for k in result.missing_keys if not k.startswith("pooler.")]
            if missing:
                raise ModelLoadError(f"the phrase encoder does not fit a {type(qa).__name__}: missing {missing[:5]}")
        return cls(qa, model.tokenizer, copy.deepcopy(model.config))

    @classmethod
    def from_reader(cls, reader: str | Path, config: PhraseModelConfig) -> ReaderModel:
        """A trainable copy of a question-answering reader (a directory, or a reader shipped beside the phrase
        models, compact int8 weights read back to float32) that reads ``config``'s windows: training goes on
        from what it already reads."""
        from dphr_haystack.verification import SpanReader

        loaded = SpanReader(reader)
        qa = loaded.model.train()
        for param in qa.parameters():
            param.requires_grad_(True)
        return cls(qa, loaded.tokenizer, copy.deepcopy(config))

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu") -> ReaderModel:
        """A reader saved by :meth:`save` (trainable: the trainer resumes from it)."""
        transformers = require("transformers")
        path = Path(path)
        if not (path / WINDOW_CONFIG).is_file():
            raise ModelLoadError(f"{path / WINDOW_CONFIG} is missing: not a reader saved by ReaderModel.save")
        qa = load_qa_model(path)
        qa.train()
        for param in qa.parameters():
            param.requires_grad_(True)
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(path), trust_remote_code=TRUST_REMOTE_CODE)
        return cls(qa, tokenizer, PhraseModelConfig.load(path / WINDOW_CONFIG)).to(device)

    def save(self, path: str | Path) -> Path:
        """Write a teacher directory: safetensors weights, config, tokenizer and the window settings."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.qa.save_pretrained(str(path), safe_serialization=True)
        self.tokenizer.save_pretrained(str(path))
        self.config.save(path / WINDOW_CONFIG)
        return path

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"reader": list(self.parameters())}

    def teacher(self) -> CrossEncoderTeacher:
        """This reader as a distillation teacher (logits aligned to the student's windows)."""
        return CrossEncoderTeacher(self.qa, self.tokenizer)


def reader_labels(batch: dict[str, Any], align: Sequence[tuple[int, int, int, int]]) -> tuple[torch.Tensor, ...]:
    """The gold student positions of a per-question batch moved into the reader's inputs (0 = [CLS]: no answer)."""
    out = []
    for positions in (batch["start_positions"], batch["end_positions"]):
        moved = []
        for pos, (context_start, n_context, reader_start, _) in zip(positions.tolist(), align, strict=True):
            inside = pos > 0 and context_start <= pos < context_start + n_context
            moved.append(reader_start + pos - context_start if inside else 0)
        out.append(torch.tensor(moved, dtype=torch.long))
    return out[0], out[1]


class ReaderTask:
    """Trains a :class:`ReaderModel` on (question, window) features: cross-entropy of the gold start and end.

    Batches are ``batch_size`` features, length-bucketed (``bucket_batches`` batches per sorted run) so that
    padding stays small.
    """

    def __init__(self, reader: ReaderModel, data: RCData, features: Sequence[Feature], bucket_batches: int = 50):
        self.tokenizer, self.config = reader.tokenizer, reader.config
        self.layout = reader.teacher()  # builds [CLS] q [SEP] context [SEP] rows as the teacher will read them
        self.data, self.features = data, list(features)
        self.bucket_batches = bucket_batches
        # bucketing key: window subwords plus ~4 characters per question subword (no tokenising of every question)
        self.lengths = [len(f.input_ids) + len(data.examples[f.example].question) // 4 for f in self.features]

    def num_batches(self, batch_size: int, world_size: int) -> int:
        return max(1, len(self.features) // (batch_size * world_size))

    def batches(self, epoch: int, batch_size: int, rank: int, world_size: int, seed: int) -> Iterator[dict[str, Any]]:
        per_step = batch_size * world_size
        order = epoch_order(len(self.features), epoch, seed)
        order = order[: max(1, len(order) // per_step) * per_step]
        for units in bucketed_batches(order, self.lengths, per_step, self.bucket_batches, seed, epoch):
            feats = [self.features[i] for i in units[rank::world_size]]
            if not feats:
                continue
            questions = [self.data.examples[f.example].question for f in feats]
            batch = collate(feats, questions, self.tokenizer, self.config)
            inputs, align = self.layout.inputs(batch)
            starts, ends = reader_labels(batch, align)
            yield {**{f"r_{k}": v for k, v in inputs.items()}, "start_positions": starts, "end_positions": ends}

    def step(self, model: ReaderModel, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        inputs = {k[2:]: v for k, v in batch.items() if k.startswith("r_")}
        out = model.qa(**inputs, start_positions=batch["start_positions"], end_positions=batch["end_positions"])
        return {"loss": out.loss}


# ----------------------------------------------------------------------------- gold-window span accuracy
def best_spans(
    start_logits: torch.Tensor, end_logits: torch.Tensor, first: Sequence[int], last: Sequence[int], max_length: int
) -> list[tuple[int, int]]:
    """Per row, the (start, end) with first ≤ start ≤ end ≤ last, end − start < max_length, maximising s + e."""
    spans = []
    for row, (lo, hi) in enumerate(zip(first, last, strict=True)):
        s, e = start_logits[row, lo : hi + 1].float(), end_logits[row, lo : hi + 1].float()  # (n,), (n,)
        n = len(s)
        scores = s[:, None] + e[None, :]  # (n, n)
        offsets = torch.arange(n)
        allowed = (offsets[None, :] >= offsets[:, None]) & (offsets[None, :] - offsets[:, None] < max_length)
        best = int(torch.argmax(scores.masked_fill(~allowed, float("-inf"))))
        spans.append((lo + best // n, lo + best % n))
    return spans


def _span_f1(pred: tuple[int, int], gold: tuple[int, int]) -> float:
    overlap = min(pred[1], gold[1]) - max(pred[0], gold[0]) + 1
    if overlap <= 0:
        return 0.0
    precision, recall = overlap / (pred[1] - pred[0] + 1), overlap / (gold[1] - gold[0] + 1)
    return 2 * precision * recall / (precision + recall)


def phrase_model_logits(model: PhraseModel) -> Callable[[dict[str, Any]], tuple[torch.Tensor, torch.Tensor]]:
    """Start/end logits of a phrase model over each question's own window: q_start·h_t and q_end·h_t."""

    def logits(batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        device = model.device
        states = model.phrase_states(
            batch["p_input_ids"].to(device), batch["p_attention_mask"].to(device), batch["p_token_type_ids"].to(device)
        )  # (B, L, d)
        q_start, q_end = model.query_vectors(batch["q_input_ids"].to(device), batch["q_attention_mask"].to(device))
        return torch.einsum("bd,bld->bl", q_start, states), torch.einsum("bd,bld->bl", q_end, states)

    return logits


def best_context_spans(
    logits_fn: Callable[[dict[str, Any]], tuple[torch.Tensor, torch.Tensor]],
    data: RCData,
    features: Sequence[Feature],
    tokenizer,
    config: PhraseModelConfig,
    batch_size: int = 32,
) -> Iterator[tuple[Feature, torch.Tensor, torch.Tensor, tuple[int, int]]]:
    """Each feature with its window's start and end logits (L,) and its best context span (after the title, before
    the final [SEP], at most ``config.max_answer_length`` long), read in batches without gradients."""
    for b in range(0, len(features), batch_size):
        chunk = features[b : b + batch_size]
        batch = collate(chunk, [data.examples[f.example].question for f in chunk], tokenizer, config)
        with torch.no_grad():
            start_logits, end_logits = (x.cpu() for x in logits_fn(per_question(batch)))
        first = [f.context_start for f in chunk]
        last = [len(f.input_ids) - 2 for f in chunk]
        spans = best_spans(start_logits, end_logits, first, last, config.max_answer_length)
        for row, (f, span) in enumerate(zip(chunk, spans, strict=True)):
            yield f, start_logits[row], end_logits[row], span


def null_scores(
    logits_fn: Callable[[dict[str, Any]], tuple[torch.Tensor, torch.Tensor]],
    data: RCData,
    features: Sequence[Feature],
    tokenizer,
    config: PhraseModelConfig,
) -> list[float]:
    """Per feature, the no-answer score of its window: [CLS]'s start + end logit minus the best context span's (the
    SQuAD 2.0 convention; > 0: the reader finds no answer in the window)."""
    return [
        float(start[0] + end[0] - start[s] - end[e])
        for _, start, end, (s, e) in best_context_spans(logits_fn, data, features, tokenizer, config)
    ]


def no_answer_metrics(answered: Sequence[float], unanswerable: Sequence[float]) -> dict[str, float]:
    """How well no-answer scores (:func:`null_scores`) tell windows that do not answer their question (near misses,
    questions asked of another entity) from the windows holding the answer: AUROC (ties count half) and the share
    of each side on the no-answer side of 0."""
    a, n = np.asarray(answered, dtype=np.float64), np.asarray(unanswerable, dtype=np.float64)
    if len(a) == 0 or len(n) == 0:
        return {"answered": len(a), "unanswerable": len(n)}
    return {
        "answered": len(a),
        "unanswerable": len(n),
        "auroc": auroc(np.concatenate([n, a]), np.arange(len(n) + len(a)) < len(n)),
        "unanswerable_no_answer": float((n > 0).mean()),
        "answered_no_answer": float((a > 0).mean()),
    }


def span_metrics(
    logits_fn: Callable[[dict[str, Any]], tuple[torch.Tensor, torch.Tensor]],
    data: RCData,
    features: Sequence[Feature],
    tokenizer,
    config: PhraseModelConfig,
) -> dict[str, float]:
    """Exact match and token F1 (%) of the best context span against the gold span, on answerable windows.

    ``logits_fn`` maps a per-question batch to (B, L) start and end logits over the student's window positions
    (:func:`phrase_model_logits`, or ``ReaderModel.teacher().logits``). Spans are decoded within the context
    (after the title, before the final [SEP]) with ``config.max_answer_length``.
    """
    feats = [f for f in features if f.start > 0]
    exact = f1 = 0.0
    for f, _, _, span in best_context_spans(logits_fn, data, feats, tokenizer, config):
        exact += span == (f.start, f.end)
        f1 += _span_f1(span, (f.start, f.end))
    n = max(1, len(feats))
    return {"em": 100.0 * exact / n, "f1": 100.0 * f1 / n, "questions": len(feats)}
