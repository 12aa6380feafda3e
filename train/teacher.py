"""A cross-encoder teacher for the distillation term of the DensePhrases objective (Lee et al. 2021a).

DensePhrases distils a span reader that reads ``[CLS] question [SEP] context [SEP]`` jointly into the phrase
model: L_kl = ½[KL(softmax(t^s) ‖ softmax(l^s)) + KL(softmax(t^e) ‖ softmax(l^e))]. The teacher here is any
``AutoModelForQuestionAnswering`` directory (e.g. a BERT/SpanBERT reader fine-tuned on SQuAD, keys
``bert.*`` + ``qa_outputs.*``). It reads the student's own windows, so its logits line up with the student's
positions token for token: context tokens take the teacher's logit of the same token, [CLS] and the final
[SEP] take the teacher's [CLS] and [SEP] logits, and title positions get −1e4 (as in DensePhrases).

Weights load without unpickling: ``model.safetensors`` (sharded or not) through ``use_safetensors=True``, or
``pytorch_model.bin`` through ``torch.load(weights_only=True)``. The teacher must share the student's
vocabulary (re-tokenising across vocabularies is not supported); a directory without tokenizer files is
assumed to use the student's tokenizer, as the DensePhrases teachers do.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from dphr_haystack._util.lazy import require
from dphr_haystack.errors import ModelLoadError
from dphr_haystack.model.remote_code import TRUST_REMOTE_CODE, refuse_remote_code

logger = logging.getLogger(__name__)

MASKED_LOGIT = -1e4  # title positions: what DensePhrases gives positions the teacher does not see
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model")


# Models whose position ids start past the padding id (RoBERTa's scheme): max_position_embeddings − (pad id + 1) usable
_OFFSET_POSITIONS = ("mpnet", "roberta", "xlm-roberta", "camembert")


def usable_positions(config) -> int:
    """The longest input a model's position embeddings take (all-mpnet-base-v2: 514 embeddings, 512 positions)."""
    positions = int(getattr(config, "max_position_embeddings", 512))
    if getattr(config, "model_type", "") in _OFFSET_POSITIONS:
        positions -= int(getattr(config, "pad_token_id", None) or 0) + 1
    return positions


def takes_token_types(model: torch.nn.Module) -> bool:
    """Whether a model reads segment ids: BERT-style models do; MPNet's forward has no ``token_type_ids``."""
    forward = inspect.signature(model.forward).parameters
    return "token_type_ids" in forward and getattr(model.config, "type_vocab_size", 2) >= 2


def pair_separator_ids(tokenizer) -> list[int]:
    """The ids a tokenizer puts between a pair's first text and its [SEP] and the second text: none for BERT
    (``[CLS] a [SEP] b [SEP]``), one ``</s>`` for MPNet and RoBERTa (``<s> a </s></s> b </s>``)."""
    encoded = tokenizer("a", "b")  # a fast tokenizer's template (transformers 4 and 5) around two one-token texts
    sequences, ids = encoded.sequence_ids(0), encoded["input_ids"]
    first_end = max(i for i, s in enumerate(sequences) if s == 0)
    second_start = min(i for i, s in enumerate(sequences) if s == 1)
    return list(ids[first_end + 2 : second_start])


def load_qa_model(path: str | Path) -> torch.nn.Module:
    """An ``AutoModelForQuestionAnswering`` from a local directory, in eval mode with gradients off."""
    transformers = require("transformers")
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"teacher directory {path} has no config.json")
    refuse_remote_code(path)
    try:
        config = transformers.AutoConfig.from_pretrained(str(path), trust_remote_code=TRUST_REMOTE_CODE)
    except Exception as exc:
        raise ModelLoadError(f"cannot read the teacher config in {path}: {exc}") from exc
    if (path / "model.safetensors").is_file() or (path / "model.safetensors.index.json").is_file():
        try:
            model = transformers.AutoModelForQuestionAnswering.from_pretrained(
                str(path), use_safetensors=True, trust_remote_code=TRUST_REMOTE_CODE
            )
        except Exception as exc:
            raise ModelLoadError(f"cannot load the teacher in {path}: {exc}") from exc
    elif (path / "pytorch_model.bin").is_file():
        try:
            state = torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception as exc:
            raise ModelLoadError(
                f"refused to load {path / 'pytorch_model.bin'}: not a plain tensor checkpoint ({exc})"
            ) from exc
        if not isinstance(state, dict):
            raise ModelLoadError(f"{path / 'pytorch_model.bin'}: expected a state dict, got {type(state).__name__}")
        model = transformers.AutoModelForQuestionAnswering.from_config(config, trust_remote_code=TRUST_REMOTE_CODE)
        result = model.load_state_dict(state, strict=False)
        missing = [k for k in result.missing_keys if not k.endswith(("position_ids", "token_type_ids"))]
        if missing:
            raise ModelLoadError(
                f"{path / 'pytorch_model.bin'}: not a question-answering model (missing {missing[:5]})"
            )
    else:
        raise ModelLoadError(f"teacher directory {path} has neither model.safetensors nor pytorch_model.bin")
    model.eval()
    for param in model.parameters():
        param.requires_grad_(False)
    return model


def reader_inputs(
    batch: dict[str, Any],
    pad_id: int,
    max_length: int,
    use_token_types: bool = True,
    pair_separators: Sequence[int] = (),
) -> tuple[dict[str, torch.Tensor], list[tuple[int, int, int, int]]]:
    """Reader inputs ``[CLS] q [SEP] context [SEP]`` for each row of a per-question batch, and each row's alignment.

    ``pair_separators`` go between the question's [SEP] and the context where the tokenizer pairs texts so (MPNet
    and RoBERTa: ``<s> q </s></s> context </s>``, see :func:`pair_separator_ids`), so a reader reads what its
    tokenizer gives it in Haystack. The alignment tuple is (student context start, context length, reader context
    start, student final [SEP] position). A row longer than ``max_length`` keeps its whole context and shortens
    the question.
    """
    extra = list(pair_separators)
    q_ids, q_mask = batch["q_input_ids"].tolist(), batch["q_attention_mask"].tolist()
    p_ids, p_mask = batch["p_input_ids"].tolist(), batch["p_attention_mask"].tolist()
    context_starts = batch["p_context_start"].tolist()
    rows, types, align = [], [], []
    for qi, qm, pi, pm, cs in zip(q_ids, q_mask, p_ids, p_mask, context_starts, strict=True):
        question = [t for t, m in zip(qi, qm, strict=True) if m]  # [CLS] q [SEP]
        n_real = sum(pm)
        context = pi[cs : n_real - 1]  # up to the final [SEP]
        overflow = len(question) + len(extra) + len(context) + 1 - max_length
        if overflow > 0:  # keep the whole context; shorten the question
            question = question[: max(2, len(question) - overflow - 1)] + [question[-1]]
            context = context[: max_length - len(question) - len(extra) - 1]
        question = question + extra
        rows.append(question + context + [pi[n_real - 1]])
        types.append([0] * len(question) + [1] * (len(context) + 1))
        align.append((cs, len(context), len(question), n_real - 1))
    width = max(len(r) for r in rows)
    input_ids = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], dtype=torch.long)
    attention = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], dtype=torch.long)
    token_types = torch.tensor([t + [0] * (width - len(t)) for t in types], dtype=torch.long)
    tensors = {"input_ids": input_ids, "attention_mask": attention}
    if use_token_types:
        tensors["token_type_ids"] = token_types
    return tensors, align


class CrossEncoderTeacher:
    """Start/end logits of a frozen QA reader over the student's windows, aligned to the student's positions.

    Example:
        >>> teacher = CrossEncoderTeacher.load("models/spanbert-squad-reader", student.tokenizer)
        >>> t_start, t_end = teacher.logits(batch)   # (B, L) each, like the student's window logits
    """

    def __init__(self, model: torch.nn.Module, tokenizer) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = usable_positions(model.config)
        self.use_token_types = takes_token_types(model)
        self.pair_separators = pair_separator_ids(tokenizer)

    @classmethod
    def load(cls, path: str | Path, student_tokenizer) -> CrossEncoderTeacher:
        """Load the reader at ``path``; its vocabulary must equal the student's."""
        path = Path(path)
        model = load_qa_model(path)
        if any((path / name).is_file() for name in _TOKENIZER_FILES):
            transformers = require("transformers")
            teacher_vocab = transformers.AutoTokenizer.from_pretrained(
                str(path), trust_remote_code=TRUST_REMOTE_CODE
            ).get_vocab()
            if teacher_vocab != student_tokenizer.get_vocab():
                raise ModelLoadError(
                    f"the teacher at {path} has another vocabulary than the student: both must "
                    f"tokenise alike (re-tokenising across vocabularies is not supported)"
                )
        vocab_size = getattr(model.config, "vocab_size", None)
        if isinstance(vocab_size, int) and len(student_tokenizer) > vocab_size:
            raise ModelLoadError(
                f"the teacher at {path} embeds {vocab_size} tokens, the student's tokenizer has "
                f"{len(student_tokenizer)}"
            )
        logger.info("distillation teacher: %s (%s)", path, type(model).__name__)
        return cls(model, student_tokenizer)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device: torch.device | str) -> CrossEncoderTeacher:
        self.model.to(device)
        return self

    def inputs(self, batch: dict[str, Any]) -> tuple[dict[str, torch.Tensor], list[tuple[int, int, int, int]]]:
        """Teacher inputs ``[CLS] q [SEP] context [SEP]`` per row and each row's alignment (:func:`reader_inputs`)."""
        return reader_inputs(
            batch, self.tokenizer.pad_token_id or 0, self.max_length, self.use_token_types, self.pair_separators
        )

    @torch.no_grad()
    def logits(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher start and end logits on the student's window positions: two float32 (B, L) tensors."""
        tensors, align = self.inputs(batch)
        device = self.device
        out = self.model(**{k: v.to(device) for k, v in tensors.items()})
        t_start, t_end = out.start_logits.float(), out.end_logits.float()  # (B, Lt)
        B, L = batch["p_input_ids"].shape
        aligned = [torch.full((B, L), MASKED_LOGIT, device=device) for _ in range(2)]  # (B, L) each
        for row, (cs, n_context, teacher_cs, final_sep) in enumerate(align):
            for target, source in zip(aligned, (t_start, t_end), strict=True):
                target[row, 0] = source[row, 0]  # [CLS]: the answer is not in this window
                target[row, cs : cs + n_context] = source[row, teacher_cs : teacher_cs + n_context]
                target[row, final_sep] = source[row, teacher_cs + n_context]
        return aligned[0], aligned[1]
