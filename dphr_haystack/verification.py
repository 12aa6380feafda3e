"""Answer verification: a cross-attention reader reads the top phrase answer in its passage.

A phrase answer's confidence comes from vectors encoded without the question (and the answerability from how much
of the question the best passages hold): it cannot see whether the passage actually answers *this* question. A
question-answering reader can. When a search asks for it (``verify=True``), the reader named by the model's
calibration (:class:`~dphr_haystack.model.calibration.Verification`, fitted by ``python -m train.verifier``) reads
the question with the top answer's passage (one window of at most 384 subwords around the answer) and scores the
answer's span (:class:`ReaderView`: its start + end logit, its log-probability among the window's spans, its gap
to the window's best span and the window's no-answer score); the verification turns that view and the answer's
confidence into P(the answer is right), and every answer of the query moves its log-odds by the same amount
(their order stays), as the answerability does; a verification with a ``holds_answer`` also turns the search's
P(the corpus holds an answer) and the same view into that probability once read
(:mod:`dphr_haystack.corpus_judgement`). The cost is one reader pass a query (a MiniLM reader: ~26 ms on two CPU
threads).

The shipped reader (``dphr-minilm-squad-reader``, a MiniLM reader fine-tuned on SQuAD, int8 weights) lives beside
the shipped phrase models; a reader is any directory holding a ``transformers`` question-answering model (its
``config.json``, tokenizer and safetensors weights, single-file or the compact shards of
:mod:`dphr_haystack.model.weights`).
"""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._util.lazy import require
from .confidence import logit, shifted
from .errors import InvalidParameterError, ModelLoadError
from .hits import Hit, best_phrase
from .model.calibration import READER_PRECISIONS, Calibration, Verification
from .model.registry import SHIPPED_DIR
from .model.remote_code import TRUST_REMOTE_CODE, refuse_remote_code

if TYPE_CHECKING:
    from .index.phrase_index import PhraseIndex

SHIPPED_READER = "dphr-minilm-squad-reader"
READER_CONFIG = "config.json"
# Spans a window's log-probability and best span are taken over: at most this many subwords.
MAX_SPAN = 15
MAX_QUESTION = 64  # subwords of the question a reader reads
_NEG = -1e4


@dataclass(frozen=True)
class ReaderView:
    """A reader's view of one answer span: its start + end logit (``span``), its log-probability among the spans of
    at most :data:`MAX_SPAN` subwords of the window (``logp``), its gap to the best of them (``gap``, ≤ 0) and the
    window's no-answer score (``null``: [CLS]'s start + end logit minus the best span's; > 0 where a reader trained
    on passages without the answer finds none in the window)."""

    span: float
    logp: float
    gap: float
    null: float

    def values(self) -> tuple[float, float, float, float]:
        """The view in the order of :data:`~dphr_haystack.model.calibration.READER_VIEW_FEATURES`."""
        return (self.span, self.logp, self.gap, self.null)


def reader_dir(reader: str | Path) -> Path:
    """The directory of a reader reference: a directory, or the name of a reader shipped beside the phrase models.

    Raises:
        ModelLoadError: Neither a directory with a ``config.json`` nor a shipped reader.
    """
    for path in (Path(reader).expanduser(), SHIPPED_DIR / str(reader)):
        if (path / READER_CONFIG).is_file():
            return path
    raise ModelLoadError(
        f"reader {str(reader)!r} not found: neither a question-answering model directory nor a reader shipped in "
        f"{SHIPPED_DIR} ({SHIPPED_READER} ships with dphr-haystack)"
    )


def reader_reference(reader: str | Path) -> str:
    """How a verification records its reader: a shipped reader's name as is (it resolves anywhere), else the
    absolute directory (a relative one would resolve against whatever directory a later search runs in)."""
    path = reader_dir(reader).resolve()
    return path.name if path.parent == SHIPPED_DIR.resolve() else str(path)


class SpanReader:
    """A question-answering model that scores given answer spans in their passages (thread safe, no gradients), on
    the CPU in float32 or, with ``precision="bfloat16"``, under bfloat16 autocast (weights stay float32)."""

    def __init__(
        self, reader: str | Path, max_length: int = 384, stride: int = 128, precision: str = "float32"
    ) -> None:
        if precision not in READER_PRECISIONS:
            raise InvalidParameterError(f"reader precision {precision!r}; valid: {', '.join(READER_PRECISIONS)}")
        transformers = require("transformers")
        torch = require("torch")
        from .model.weights import read_weights

        path = reader_dir(reader)
        refuse_remote_code(path)  # a reader is read as data: no code of its own runs
        try:
            config = transformers.AutoConfig.from_pretrained(str(path), trust_remote_code=TRUST_REMOTE_CODE)
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(path), trust_remote_code=TRUST_REMOTE_CODE)
            model = transformers.AutoModelForQuestionAnswering.from_config(config, trust_remote_code=TRUST_REMOTE_CODE)
            missing, unexpected = model.load_state_dict(read_weights(path), strict=False)
        except (OSError, ValueError, KeyError) as exc:
            raise ModelLoadError(f"cannot load the reader in {path}: {exc}") from exc
        missing = [k for k in missing if not k.endswith("position_ids")]
        if missing or unexpected:
            raise ModelLoadError(
                f"the weights in {path} do not fit its config: missing {missing[:3]}, unexpected {unexpected[:3]}"
            )
        self.model = model.eval().to(torch.float32)
        self._inputs = set(inspect.signature(model.forward).parameters)  # MPNet takes no token_type_ids
        self._tokenizing = threading.Lock()
        self.path = path
        self.max_length = max_length
        self.stride = stride
        self.precision = precision
        self._torch = torch

    def view(self, question: str, context: str, start: int, end: int) -> ReaderView | None:
        """The reader's view of ``context[start:end]`` as the answer to ``question``; None when the span holds no
        subword of the context (an empty span)."""
        if not 0 <= start < end <= len(context):
            raise InvalidParameterError(f"answer span {start}:{end} outside a passage of {len(context)} characters")
        with self._tokenizing:  # a fast tokenizer called from two threads at once fails ("Already borrowed")
            question = self._short_question(question)
            encoded = self.tokenizer(
                question,
                context,
                truncation="only_second",
                max_length=self.max_length,
                stride=self.stride,
                return_overflowing_tokens=True,
                return_offsets_mapping=True,
            )
        best: tuple[float, int, list[int]] | None = None  # (room around the span, window, its span tokens)
        for w in range(len(encoded["input_ids"])):
            in_context = [s == 1 for s in encoded.sequence_ids(w)]
            offsets = encoded["offset_mapping"][w]
            tokens = [i for i, (a, b) in enumerate(offsets) if in_context[i] and b > start and a < end]
            if not tokens:
                continue
            first = in_context.index(True)
            last = len(in_context) - 1 - in_context[::-1].index(True)
            room = min(tokens[0] - first, last - tokens[-1])
            if best is None or room > best[0]:
                best = (room, w, tokens)
        if best is None:
            return None
        _, w, tokens = best
        torch = self._torch
        inputs = {
            k: torch.tensor([encoded[k][w]])
            for k in ("input_ids", "attention_mask", "token_type_ids")
            if k in encoded and k in self._inputs
        }
        mask = torch.tensor([s == 1 for s in encoded.sequence_ids(w)])
        with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16, enabled=self.precision == "bfloat16"):
            out = self.model(**inputs)
        start_logits, end_logits = out.start_logits[0].float(), out.end_logits[0].float()  # bfloat16 under autocast
        starts = torch.where(mask, start_logits, torch.tensor(_NEG))
        ends = torch.where(mask, end_logits, torch.tensor(_NEG))
        n = len(starts)
        ones = torch.ones(n, n, dtype=torch.bool)
        allowed = torch.triu(ones) & ~torch.triu(ones, diagonal=MAX_SPAN)
        spans = torch.where(allowed, starts[:, None] + ends[None, :], torch.tensor(_NEG))
        score, best = float(starts[tokens[0]] + ends[tokens[-1]]), float(spans.max())
        null = float(start_logits[0] + end_logits[0]) - best  # position 0: [CLS]
        return ReaderView(score, score - float(torch.logsumexp(spans.flatten(), 0)), score - best, null)

    def _short_question(self, question: str) -> str:
        """``question`` cut to its first :data:`MAX_QUESTION` subwords (a reader window must hold some passage)."""
        encoded = self.tokenizer(question, add_special_tokens=False, return_offsets_mapping=True)
        offsets = encoded["offset_mapping"]
        return question[: offsets[MAX_QUESTION - 1][1]] if len(offsets) > MAX_QUESTION else question


_READERS: dict[tuple[str, str], SpanReader] = {}  # (reference or directory, precision) → reader
_READERS_LOCK = threading.Lock()


def load_reader(reader: str | Path, precision: str = "float32") -> SpanReader:
    """The :class:`SpanReader` of ``reader`` in ``precision``, loaded once per process (a reference seen before is
    not looked up on disk again: searches call this for every batch)."""
    with _READERS_LOCK:
        found = _READERS.get((str(reader), precision))
        if found is None:
            path = str(reader_dir(reader).resolve())
            found = _READERS.get((path, precision)) or SpanReader(path, precision=precision)
            _READERS[(path, precision)] = _READERS[(str(reader), precision)] = found
        return found


def verification_reader(verification: Verification) -> SpanReader:
    """The verification's reader, in the precision it was fitted with (loaded once per process)."""
    return load_reader(verification.reader, verification.reader_precision)


def verification_of(calibration: Calibration | None, model_name: str = "the model") -> Verification:
    """The calibration's verification; InvalidParameterError naming the fix when there is none."""
    verification = getattr(calibration, "verification", None)
    if verification is None:
        raise InvalidParameterError(
            f"verify=True needs a model whose calibration has a verification ({model_name} has none): fit one with "
            "python -m train.verifier, or use the shipped default model"
        )
    return verification


def check_verification(calibration: Calibration | None, model_name: str = "the model") -> None:
    """InvalidParameterError unless ``calibration`` has a verification, ModelLoadError when its reader is not found:
    what ``verify=True`` is refused for before any search."""
    reader_dir(verification_of(calibration, model_name).reader)


def check_verify_model(phrase_model: Any, name: str) -> None:
    """:func:`check_verification` of ``phrase_model``'s stored calibration (the front ends' check at init)."""
    stored = getattr(getattr(phrase_model, "config", None), "calibration", None)
    check_verification(Calibration.from_dict(stored) if stored else None, repr(name))


def verification_features(
    probability: float, view: ReaderView, unwritten_names: tuple[str, ...] | None = None
) -> np.ndarray:
    """The :data:`~dphr_haystack.model.calibration.VERIFICATION_FEATURES` of a top answer from its confidence (the
    first 5 of the 6), or the :data:`~dphr_haystack.model.calibration.HOLDS_VERIFICATION_FEATURES` from P(the corpus
    holds an answer): that probability's log-odds, the reader's view and whether the corpus writes every name of the
    question (none ``unwritten_names``; NaN: unknown)."""
    names = np.nan if unwritten_names is None else float(not unwritten_names)
    return np.array([logit(probability), *view.values(), names], dtype=np.float64)


def top_answer(hits: list[Hit]) -> int | None:
    """The position in ``hits`` of the query's top answer (the most confident, the first of equals; copies of the
    question never): None when no hit has a confident answer."""
    best: tuple[float, int] | None = None
    for i, hit in enumerate(hits):
        phrase = best_phrase(hit)
        if phrase.confidence is None or phrase.copies_question:
            continue
        if best is None or phrase.confidence > best[0]:
            best = (float(phrase.confidence), i)
    return None if best is None else best[1]


def read_top_answer(reader: SpanReader, question: str, hits: list[Hit], index: PhraseIndex) -> ReaderView | None:
    """The reader's view of the query's top answer (:func:`top_answer`); None without one."""
    at = top_answer(hits)
    return None if at is None else _read(reader, question, best_phrase(hits[at]), index)


def verified(
    hits: list[Hit], question: str, index: PhraseIndex, verification: Verification, reader: SpanReader
) -> list[Hit]:
    """``hits`` with every answer's confidence moved so that the top answer's is the verification's P(right), and
    their P(the corpus holds an answer) the verification's too (when it has a ``holds_answer`` and the search gave
    one)."""
    at = top_answer(hits)
    if at is None:
        return hits
    top = best_phrase(hits[at])
    view = _read(reader, question, top, index)
    if view is None:
        return hits
    p = float(verification.probability(verification_features(top.confidence, view)[None, :])[0])
    shift = logit(p) - logit(top.confidence)
    holds = top.holds_answer
    if verification.holds_answer is not None and holds is not None:
        features = verification_features(holds, view, top.unwritten_names)
        holds = float(verification.holds_answer.probability(features[None, :])[0])
    return [_shifted_hit(hit, shift, holds) for hit in hits]


def _read(reader: SpanReader, question: str, phrase: Any, index: PhraseIndex) -> ReaderView | None:
    """The reader's view of ``phrase`` in its passage; None for an empty span."""
    if phrase.end <= phrase.start:
        return None
    return reader.view(question, index.passages[phrase.passage_row]["text"], phrase.start, phrase.end)


def verify_batch(
    results: list[list[Hit]], questions: list[str], index: PhraseIndex, calibration: Calibration | None
) -> list[list[Hit]]:
    """Each query's hits :func:`verified` by the calibration's verification and its reader (loaded once)."""
    verification = verification_of(calibration)
    reader = verification_reader(verification)
    return [verified(hits, q, index, verification, reader) for hits, q in zip(results, questions, strict=True)]


def _shifted_hit(hit: Any, shift: float, holds: float | None) -> Any:
    """A hit whose answer's confidence (if any) has its log-odds moved by ``shift`` and whose answer's P(the corpus
    holds an answer) is ``holds``."""
    if hasattr(hit, "best_passage"):
        return replace(hit, best_passage=_shifted_hit(hit.best_passage, shift, holds))
    if hasattr(hit, "best_phrase"):
        return replace(hit, best_phrase=_shifted_hit(hit.best_phrase, shift, holds))
    if hit.confidence is None or hit.copies_question:
        return hit
    return replace(hit, confidence=shifted(hit.confidence, shift), holds_answer=holds)
