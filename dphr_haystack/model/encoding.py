"""Passage encoding: tokenised passages → windows → batches → one vector per output row, in passage order.

:meth:`PhraseModel.encode_passages <dphr_haystack.model.phrase_model.PhraseModel.encode_passages>` and
:meth:`~dphr_haystack.model.phrase_model.PhraseModel.iter_encoded_pieces` run these functions with the model's
own batch encoder (a :data:`WindowEncoder`): this module decides which windows go together and where each window's
vectors land, the model only runs its phrase encoder and filter on a batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .config import PhraseModelConfig
from .inputs import TokenizedPassage, Window, build_windows, count_windows, passage_windows

# Phrase-encoder states and filter logits of a batch of windows: (B, L, d) and (B, L, 2) float32.
WindowEncoder = Callable[[Sequence[Window]], tuple[np.ndarray, np.ndarray]]


@dataclass
class EncodedPassage:
    """Token vectors of one passage's context, in token order, with filter logits and char offsets."""

    vectors: np.ndarray  # (n, d) float32
    filter_logits: np.ndarray  # (n, 2) float32: start, end
    char_offsets: np.ndarray  # (n, 2) int32


@dataclass
class EncodedPiece:
    """Token vectors of a run of one passage's output rows (``positions``: the rows, as in :class:`EncodedPassage`:
    the context token indices, except with ``passage_stride_mode="step"``, where every window's tokens are rows)."""

    positions: np.ndarray  # (k,) int64, consecutive
    vectors: np.ndarray  # (k, d) float32
    filter_logits: np.ndarray  # (k, 2) float32: start, end
    char_offsets: np.ndarray  # (k, 2) int32


def encode_tokenized(
    tokenizer: Any,
    config: PhraseModelConfig,
    encode_batch: WindowEncoder,
    hidden_size: int,
    tokenized: Sequence[TokenizedPassage],
    batch_size: int,
) -> list[EncodedPassage]:
    """Every output row of each passage: windows of all passages sorted by length, ``batch_size`` at a time."""
    windows = build_windows(tokenizer, tokenized, config)
    d = hidden_size
    # Output rows per passage: one per context token, or (step windows) one per token of every window.
    token_of_row = [np.arange(len(tp.context_ids)) for tp in tokenized]
    if config.passage_stride_mode == "step":
        token_of_row = [np.zeros(0, dtype=np.int64) for _ in tokenized]
        for window in windows:
            token_of_row[window.passage] = np.concatenate([token_of_row[window.passage], window.owned_context])
    vectors = [np.zeros((len(rows), d), dtype=np.float32) for rows in token_of_row]
    logits = [np.zeros((len(rows), 2), dtype=np.float32) for rows in token_of_row]
    order = sorted(range(len(windows)), key=lambda i: -len(windows[i].input_ids))
    for b in range(0, len(order), batch_size):
        batch = [windows[i] for i in order[b : b + batch_size]]
        states_np, filt_np = encode_batch(batch)
        for row, window in enumerate(batch):
            vectors[window.passage][window.rows] = states_np[row, window.owned_positions]
            logits[window.passage][window.rows] = filt_np[row, window.owned_positions]
    return [
        EncodedPassage(v, f, tp.char_offsets[rows])
        for v, f, tp, rows in zip(vectors, logits, tokenized, token_of_row, strict=True)
    ]


def iter_encoded_pieces(
    tokenizer: Any,
    config: PhraseModelConfig,
    encode_batch: WindowEncoder,
    hidden_size: int,
    tokenized: Sequence[TokenizedPassage],
    batch_size: int,
) -> Iterator[tuple[int, EncodedPiece]]:
    """``(passage index, piece)`` in passage and row order, memory bounded by ``batch_size`` windows.

    Consecutive passages of at most ``batch_size`` windows are encoded together by :func:`encode_tokenized` (one
    piece per passage); a longer passage is encoded ``batch_size`` windows at a time, one piece per batch.
    """
    run: list[int] = []
    for p_idx, tp in enumerate(tokenized):
        if count_windows(tp, config) <= batch_size:
            run.append(p_idx)
            continue
        yield from _run_pieces(tokenizer, config, encode_batch, hidden_size, tokenized, run, batch_size)
        run = []
        yield from _long_passage_pieces(tokenizer, config, encode_batch, tp, p_idx, batch_size)
    yield from _run_pieces(tokenizer, config, encode_batch, hidden_size, tokenized, run, batch_size)


def _run_pieces(
    tokenizer: Any,
    config: PhraseModelConfig,
    encode_batch: WindowEncoder,
    hidden_size: int,
    tokenized: Sequence[TokenizedPassage],
    run: list[int],
    batch_size: int,
) -> Iterator[tuple[int, EncodedPiece]]:
    if not run:
        return
    encoded = encode_tokenized(tokenizer, config, encode_batch, hidden_size, [tokenized[i] for i in run], batch_size)
    for p_idx, enc in zip(run, encoded):
        positions = np.arange(len(enc.vectors), dtype=np.int64)
        yield p_idx, EncodedPiece(positions, enc.vectors, enc.filter_logits, enc.char_offsets)


def _long_passage_pieces(
    tokenizer: Any,
    config: PhraseModelConfig,
    encode_batch: WindowEncoder,
    tp: TokenizedPassage,
    p_idx: int,
    batch_size: int,
) -> Iterator[tuple[int, EncodedPiece]]:
    # The windows' rows, in window order, are consecutive from 0 in both stride modes (model/inputs.py), so a
    # batch of consecutive windows fills one consecutive run of rows.
    expected = 0  # the next output row a piece must start with
    batch: list[Window] = []
    windows = passage_windows(tokenizer, tp, config, p_idx)
    while True:
        window = next(windows, None)
        if window is not None:
            batch.append(window)
            if len(batch) < batch_size:
                continue
        if not batch:
            break
        states, filt = encode_batch(batch)
        rows = np.concatenate([w.rows for w in batch]).astype(np.int64, copy=False)
        if len(rows) and (rows[0] != expected or np.any(np.diff(rows) != 1)):
            raise RuntimeError(f"windows fill output rows out of order at row {expected}")  # never expected
        expected += len(rows)
        tokens = np.concatenate([w.owned_context for w in batch])
        vectors = np.concatenate([states[row, w.owned_positions] for row, w in enumerate(batch)])
        logits = np.concatenate([filt[row, w.owned_positions] for row, w in enumerate(batch)])
        batch = []
        del states, filt
        yield p_idx, EncodedPiece(rows, vectors, logits, tp.char_offsets[tokens])
    if config.passage_stride_mode == "overlap" and expected != len(tp.context_ids):
        raise RuntimeError(f"windows own {expected} of {len(tp.context_ids)} context tokens")  # never expected
