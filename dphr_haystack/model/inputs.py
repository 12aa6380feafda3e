"""Model inputs: passages become windows of ``[CLS] title [SEP] context [SEP]``; queries ``[CLS] q [SEP]``.

Long passages are split into windows of ``max_passage_length`` subwords overlapping by ``passage_stride``
context subwords. Each context token keeps the vector of the window where it has most context on both
sides (the BERT/SQuAD "max context" rule), so every token gets exactly one vector. With
``passage_stride_mode="step"`` windows start every ``passage_stride`` context subwords and every window's
context tokens are kept, in window order, as DensePhrases v1.0 dumps them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InvalidQueryError, ModelLoadError
from .config import PhraseModelConfig

# A fast tokenizer is a Rust object that every call with other truncation/padding settings mutates; two threads
# calling it at once fail with "RuntimeError: Already borrowed". Tokenising is cheap, so calls are serialised.
_TOKENIZER_LOCK = threading.Lock()


@dataclass
class TokenizedPassage:
    """A passage's context subwords with their character offsets, and its (truncated) title subwords."""

    context_ids: list[int]
    char_offsets: np.ndarray  # (n_context, 2) int32, [start, end) into the passage text
    title_ids: list[int]


@dataclass
class Window:
    """One encoder input. Context tokens ``owned`` take their vector from this window."""

    passage: int  # position of the passage in the batch it came from
    input_ids: list[int]
    token_type_ids: list[int]
    owned_context: np.ndarray  # context token indices whose vector comes from this window
    owned_positions: np.ndarray  # their positions inside input_ids
    rows: np.ndarray  # the passage's output rows these vectors fill (owned_context, except in step mode)
    context_first: int = 0  # context token index of the window's first context token
    context_start: int = 1  # position of that token inside input_ids


def tokenize_passages(
    tokenizer, texts: Sequence[str], titles: Sequence[str], config: PhraseModelConfig
) -> list[TokenizedPassage]:
    """Tokenise contexts (with offsets) and titles in one batched call each."""
    with _TOKENIZER_LOCK, _tokenizer_failures():
        enc = tokenizer(
            list(texts),
            add_special_tokens=False,
            return_offsets_mapping=True,
            return_attention_mask=False,
            verbose=False,
        )  # long passages are windowed, so no length warning
        if config.append_title and any(titles):
            title_ids = tokenizer(list(titles), add_special_tokens=False, return_attention_mask=False)["input_ids"]
        else:
            title_ids = [[] for _ in texts]
    out = []
    for ids, offsets, t_ids in zip(enc["input_ids"], enc["offset_mapping"], title_ids):
        out.append(
            TokenizedPassage(
                context_ids=list(ids),
                char_offsets=np.asarray(offsets, dtype=np.int32).reshape(-1, 2),
                title_ids=list(t_ids[: config.max_title_length]) if config.append_title else [],
            )
        )
    return out


@contextmanager
def _tokenizer_failures() -> Iterator[None]:
    """A damaged tokenizer file can make the Rust tokenizer panic (pyo3 PanicException, a BaseException) on some
    inputs: report that as ModelLoadError instead of letting it escape every ``except Exception``."""
    try:
        yield
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as exc:
        if isinstance(exc, Exception) and not type(exc).__module__.startswith(("pyo3", "tokenizers")):
            raise
        raise ModelLoadError(
            f"the model's tokenizer failed ({type(exc).__name__}: {exc}); its files are damaged"
        ) from exc


def build_windows(tokenizer, passages: Sequence[TokenizedPassage], config: PhraseModelConfig) -> list[Window]:
    """Split every tokenised passage into windows and say which output row each window's tokens fill.

    ``overlap`` mode: one row per context token, from its max-context window. ``step`` mode: windows start every
    ``passage_stride`` context tokens and the rows are every window's context tokens, in window order.
    """
    return [w for p_idx, tp in enumerate(passages) for w in passage_windows(tokenizer, tp, config, p_idx)]


def count_windows(tp: TokenizedPassage, config: PhraseModelConfig) -> int:
    """How many windows :func:`passage_windows` cuts ``tp`` into (without building them), in either stride mode."""
    n, room = len(tp.context_ids), _room(tp, config)
    if config.passage_stride_mode == "step":
        return len(range(0, max(n, 1), config.passage_stride))
    return len(_spans(n, room, config.passage_stride))


def count_rows(tp: TokenizedPassage, config: PhraseModelConfig) -> int:
    """How many output rows (vectors) the windows of ``tp`` give: one per context token, or with
    ``passage_stride_mode="step"`` one per token of every window."""
    n = len(tp.context_ids)
    if config.passage_stride_mode != "step":
        return n
    room = _room(tp, config)
    return sum(min(a + room, n) - a for a in range(0, max(n, 1), config.passage_stride))


def passage_windows(tokenizer, tp: TokenizedPassage, config: PhraseModelConfig, p_idx: int = 0) -> Iterator[Window]:
    """The windows of one passage, in order, built one at a time (a long passage never holds all of them).

    In both stride modes the windows' ``rows``, taken in window order, are consecutive from 0: ``overlap`` windows of
    equal length own consecutive runs of context tokens (rows = the owned tokens), ``step`` windows keep every
    context token they hold.
    """
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    prefix = _prefix(tp, config, cls_id, sep_id)
    room = config.max_passage_length - len(prefix) - 1
    n = len(tp.context_ids)
    if config.passage_stride_mode == "step":
        yield from _step_windows(p_idx, tp, prefix, room, sep_id, config)
        return
    spans = _spans(n, room, config.passage_stride)
    # Max-context rule: score(token, window) = min(left, right) + 0.01 * window length; ties go to the
    # earlier window. One pass over the windows, O(passage length) memory however long the passage.
    best_window = np.zeros(n, dtype=np.int64)
    if len(spans) > 1:
        best_score = np.full(n, -1.0)
        for w_idx, (a, b) in enumerate(spans):
            k = np.arange(a, b)
            score = np.minimum(k - a, b - 1 - k) + 0.01 * (b - a)
            better = score > best_score[a:b]
            best_score[a:b][better] = score[better]
            best_window[a:b][better] = w_idx
        del best_score
    for w_idx, (a, b) in enumerate(spans):
        ids = prefix + list(tp.context_ids[a:b]) + [sep_id]
        types = _token_types(len(prefix), b - a, config)
        owned = np.nonzero(best_window[a:b] == w_idx)[0] + a
        positions = owned - a + len(prefix)
        yield Window(p_idx, ids, types, owned, positions, owned, a, len(prefix))


def _prefix(tp: TokenizedPassage, config: PhraseModelConfig, cls_id: int, sep_id: int) -> list[int]:
    """``[CLS] title [SEP]``; untitled: ``[CLS]``, or ``[CLS] [SEP]`` with ``sep_after_empty_title``."""
    if tp.title_ids:
        return [cls_id, *tp.title_ids, sep_id]
    return [cls_id, sep_id] if config.sep_after_empty_title else [cls_id]


def _room(tp: TokenizedPassage, config: PhraseModelConfig) -> int:
    """Context subwords per window: the window length less [CLS], the title and its [SEP] (or the [SEP] of an
    empty title with ``sep_after_empty_title``), and the final [SEP]."""
    if tp.title_ids:
        prefix = len(tp.title_ids) + 2
    else:
        prefix = 2 if config.sep_after_empty_title else 1
    return config.max_passage_length - prefix - 1


def _spans(n: int, room: int, stride: int) -> list[tuple[int, int]]:
    """[start, end) context ranges of the overlap-mode windows of an ``n``-subword context."""
    step = max(1, room - stride)
    starts = list(range(0, max(1, n - room + step), step))
    if starts[-1] + room < n:
        starts.append(n - room)
    return [(s, min(s + room, n)) for s in starts]


def _step_windows(
    p_idx: int, tp: TokenizedPassage, prefix: list[int], room: int, sep_id: int, config: PhraseModelConfig
) -> Iterator[Window]:
    """DensePhrases v1.0 windows: starts 0, stride, 2·stride, … while below the passage length; each holds up to
    ``room`` context tokens, all of which are kept (twice where windows overlap, never where they leave a gap).
    Built one at a time, like :func:`passage_windows`."""
    n, stride = len(tp.context_ids), config.passage_stride
    row = 0
    for a in range(0, max(n, 1), stride):
        b = min(a + room, n)
        ids = prefix + list(tp.context_ids[a:b]) + [sep_id]
        owned = np.arange(a, b)
        rows = np.arange(row, row + (b - a))
        row += b - a
        types = _token_types(len(prefix), b - a, config)
        yield Window(p_idx, ids, types, owned, owned - a + len(prefix), rows, a, len(prefix))


def _token_types(prefix_len: int, n_context: int, config: PhraseModelConfig) -> list[int]:
    total = prefix_len + n_context + 1
    if config.passage_token_type == "all_one":
        return [1] * total
    if config.passage_token_type == "pair":
        return [0] * prefix_len + [1] * (n_context + 1)
    return [0] * total


def pad_batch(
    sequences: Sequence[Sequence[int]], types: Sequence[Sequence[int]], pad_id: int
) -> dict[str, torch.Tensor]:
    """Right-pad a batch into input_ids / token_type_ids / attention_mask tensors."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    tt = torch.zeros((len(sequences), width), dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, (seq, typ) in enumerate(zip(sequences, types)):
        ids[row, : len(seq)] = torch.as_tensor(seq)
        tt[row, : len(typ)] = torch.as_tensor(typ)
        mask[row, : len(seq)] = 1
    return {"input_ids": ids, "token_type_ids": tt, "attention_mask": mask}


def is_valid_unicode(text: str) -> bool:
    """False when ``text`` cannot be encoded as UTF-8 (a lone surrogate, e.g. from JSON ``"\\ud800"``)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def normalize_query(query: str, config: PhraseModelConfig) -> str:
    """Validate a query and apply the DensePhrases conventions (one trailing '?' stripped)."""
    if not isinstance(query, str):
        raise InvalidQueryError(f"a query must be a string, got {type(query).__name__}")
    if not is_valid_unicode(query):
        raise InvalidQueryError(f"a query must be valid Unicode text (it holds a lone surrogate): {query[:40]!r}")
    text = query.strip()
    if config.strip_question_mark and text.endswith("?"):
        text = text[:-1].rstrip()
    if not text or not any(ch.isprintable() and not ch.isspace() for ch in text):
        raise InvalidQueryError(f"empty query after normalisation: {query[:40]!r}")
    return text


def tokenize_queries(tokenizer, queries: Sequence[str], config: PhraseModelConfig) -> dict[str, torch.Tensor]:
    """``[CLS] q [SEP]`` with segment 0, truncated to ``max_query_length``."""
    texts = [normalize_query(q, config) for q in queries]
    with _TOKENIZER_LOCK, _tokenizer_failures():
        enc = tokenizer(
            texts,
            max_length=config.max_query_length,
            truncation=True,
            padding=True,
            return_tensors="pt",
            return_token_type_ids=True,
        )
    return {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
