"""A cross-encoder teacher for the distillation term of the DensePhrases objective (Lee et al. 2021a).

DensePhrases distils a span reader that reads ``[CLS] question [SEP] context [SEP]`` jointly into the phrase
model: L_kl = ½[KL(softmax(t^s) ‖ softmax(l^s)) + KL(softmax(t^e) ‖ softmax(l^e))]. The teacher here is any
``AutoModelForQuestionAnswering`` directory (e.g. a BERT/SpanBERT reader fine-tuned on SQuAD, keys
``bert.*`` + ``qa_outputs.*``). It reads the student's own windows, so its logits line up with the student's
positions token for token: context tokens take the teacher's logit of the same token, [CLS] and the final
[SEP] take the teacher's [CLS] and [SEP] logits, and title positions get −1e4 (as in DensePhrases).

Weights load without unpickling: ``model.safetensors`` (sharded or not) through ``use_safetensors=True``, or
``pytorch_model.bin`` through ``torch.load(weights_only=True)``. The teacher must write the student's tokens:
the same vocabulary, or one that holds every student token under other ids and splits text the same way
(all-mpnet-base-v2's is BERT's uncased vocabulary behind four specials of its own, so a base-size MPNet reader
teaches a MiniLM student: :func:`vocabulary_map` translates the ids, special tokens by their role).
Re-tokenising across vocabularies is not supported; a directory without tokenizer files is assumed to use the
student's tokenizer, as the DensePhrases teachers do.
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
_SPECIAL_ROLES = ("cls_token", "sep_token", "pad_token", "unk_token", "mask_token")
# Texts both tokenizers must split into the same tokens before a teacher reads translated ids: case, accents,
# digits and punctuation, which a vocabulary's own normaliser decides.
_PROBE_TEXTS = (
    "The Normans (Norman: Nourmands) conquered England in 1066, São Paulo's café costs 3.50 €.",
    "naïve Müller – ÅNGSTRÖM’s “quoted” text; e-mail: x@y.org (#42) 1,234.5%",
)


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


def vocabulary_map(student_tokenizer, teacher_tokenizer) -> torch.Tensor | None:
    """Each student token id's teacher id (a long tensor indexed by student id), or None for equal vocabularies.

    Tokens map by their text, special tokens by their role ([CLS] to MPNet's ``<s>``, [SEP] to ``</s>``...).

    Raises:
        ModelLoadError: A student token has no teacher id, or the two tokenizers split a probe text differently.
    """
    student, teacher = student_tokenizer.get_vocab(), teacher_tokenizer.get_vocab()
    if student == teacher:
        return None
    by_role = {
        getattr(student_tokenizer, role): getattr(teacher_tokenizer, role)
        for role in _SPECIAL_ROLES
        if getattr(student_tokenizer, role, None) and getattr(teacher_tokenizer, role, None)
    }
    missing = [token for token in student if by_role.get(token, token) not in teacher]
    if missing:
        raise ModelLoadError(
            f"the teacher has another vocabulary than the student and lacks {len(missing)} of its tokens "
            f"(e.g. {missing[:5]}): both must tokenise alike (re-tokenising across vocabularies is not supported)"
        )
    for text in _PROBE_TEXTS:
        if student_tokenizer.tokenize(text) != teacher_tokenizer.tokenize(text):
            raise ModelLoadError(
                f"the teacher's tokenizer splits {text!r} otherwise than the student's: its vocabulary holds the "
                f"student's tokens, but the two do not tokenise alike"
            )
    table = torch.zeros(max(student.values()) + 1, dtype=torch.long)
    for token, index in student.items():
        table[index] = teacher[by_role.get(token, token)]
    return table


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

    def __init__(self, model: torch.nn.Module, tokenizer, id_map: torch.Tensor | None = None) -> None:
        """``tokenizer``: the teacher's own (its pair layout and padding); ``id_map``: student id → teacher id
        (:func:`vocabulary_map`), None when the two share a vocabulary."""
        self.model = model
        self.tokenizer = tokenizer
        self.id_map = id_map
        self.max_length = usable_positions(model.config)
        self.use_token_types = takes_token_types(model)
        self.pair_separators = pair_separator_ids(tokenizer)

    @classmethod
    def load(cls, path: str | Path, student_tokenizer) -> CrossEncoderTeacher:
        """Load the reader at ``path``; it must write the student's tokens (:func:`vocabulary_map`)."""
        path = Path(path)
        model = load_qa_model(path)
        tokenizer, id_map = student_tokenizer, None
        if any((path / name).is_file() for name in _TOKENIZER_FILES):
            transformers = require("transformers")
            own = transformers.AutoTokenizer.from_pretrained(str(path), trust_remote_code=TRUST_REMOTE_CODE)
            try:
                id_map = vocabulary_map(student_tokenizer, own)
            except ModelLoadError as exc:
                raise ModelLoadError(f"the teacher at {path}: {exc}") from exc
            tokenizer = own if id_map is not None else student_tokenizer
        vocab_size = getattr(model.config, "vocab_size", None)
        needed = int(id_map.max()) + 1 if id_map is not None else len(student_tokenizer)
        if isinstance(vocab_size, int) and needed > vocab_size:
            raise ModelLoadError(
                f"the teacher at {path} embeds {vocab_size} tokens, the student's tokens need {needed}"
            )
        translated = " (the student's token ids translated to its vocabulary)" if id_map is not None else ""
        logger.info("distillation teacher: %s (%s)%s", path, type(model).__name__, translated)
        return cls(model, tokenizer, id_map)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device: torch.device | str) -> CrossEncoderTeacher:
        self.model.to(device)
        return self

    def inputs(self, batch: dict[str, Any]) -> tuple[dict[str, torch.Tensor], list[tuple[int, int, int, int]]]:
        """Teacher inputs ``[CLS] q [SEP] context [SEP]`` per row and each row's alignment (:func:`reader_inputs`)."""
        if self.id_map is not None:  # the student's ids in the teacher's vocabulary (read as lists below: on the CPU)
            batch = {**batch, **{key: self.id_map[batch[key].cpu()] for key in ("q_input_ids", "p_input_ids")}}
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
