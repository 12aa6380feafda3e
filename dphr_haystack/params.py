"""Numeric parameters: the ONE table of their allowed ranges, checked alike by the CLI, the Python API and YAML.

Every count, size and length a caller can set (``batch_size``, ``chunk_size``, ``top_k``, ``max_answer_length``, ...)
is listed in :data:`PARAMS` with its type and range. :func:`check_param` checks one value and raises
:class:`~dphr_haystack.errors.InvalidParameterError` naming the parameter, the value and the range; the library's
entry points (``PhraseSearcher``, ``add_passages``, ``dump_phrases``, ``PhraseModelConfig``, the
Haystack nodes) call it, and :func:`arg_type` turns an entry into an argparse ``type`` so the ``dphr`` command
refuses the same values with a one-line message instead of a traceback.

Example:
    >>> check_param("batch_size", 32)
    32
    >>> check_param("batch_size", 0)
    Traceback (most recent call last):
    ...
    dphr_haystack.errors.InvalidParameterError: batch_size=0 is out of range: an integer from 1 to 65,536
"""

from __future__ import annotations

import argparse
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

from .errors import InvalidParameterError

# Longest phrase the search pairs (subwords): DensePhrases' windows are at most 512 subwords.
MAX_ANSWER_LENGTH = 512


@dataclass(frozen=True)
class Range:
    """An allowed range: ``low`` ≤ value ≤ ``high`` (``low`` itself excluded with ``low_open``); None: unbounded."""

    kind: type  # int or float
    low: float | None = None
    high: float | None = None
    low_open: bool = False

    def contains(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or value <= self.high

    def describe(self) -> str:
        noun = "an integer" if self.kind is int else "a number"
        low = None if self.low is None else f"{self.low:,}"
        high = None if self.high is None else f"{self.high:,}"
        if low is not None and high is not None and not self.low_open:
            return f"{noun} from {low} to {high}"
        parts = []
        if low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {low}")
        if high is not None:
            parts.append(f"<= {high}")
        return f"{noun} {' and '.join(parts)}" if parts else noun


_BATCH = Range(int, 1, 65_536)
_PASSAGES = Range(int, 1, 100_000_000)  # passages per commit or per shard
PARAMS: dict[str, Range] = {
    # encoding
    "batch_size": _BATCH,
    "query_batch_size": _BATCH,
    "threads": Range(int, 1, 4_096),  # torch / FAISS intra-op threads (dphr_haystack._util.threads)
    # indexing and dumping
    "chunk_size": _PASSAGES,
    "shard_size": _PASSAGES,
    "num_workers": Range(int, 1, 100_000),
    "worker": Range(int, 0, 99_999),
    "max_retries": Range(int, 0, 100),
    "cpus_per_worker": Range(float, 0, 4_096, low_open=True),
    "gpus_per_worker": Range(float, 0, 1_024),
    # FAISS structures
    "key_vectors": Range(int, 1, 4_096),  # key vectors a passage (dphr_haystack.index.keys)
    "nlist": Range(int, 1, 16_777_216),
    "train_size": Range(int, 1, 1_000_000_000),
    "nprobe": Range(int, 1, 16_777_216),
    "ef_search": Range(int, 1, 1_000_000),
    # search and evaluation
    "top_k": Range(int, 1, 100_000),
    "top_k_join": Range(int, 1, 100_000),
    "top_k_answers": Range(int, 1, 100_000),
    "candidates": Range(int, 1, 1_000_000_000),
    "max_answer_length": Range(int, 1, MAX_ANSWER_LENGTH),
    "limit": Range(int, 1, 1_000_000_000),
    # model inputs (PhraseModelConfig)
    "max_passage_length": Range(int, 16, 8_192),
    "passage_stride": Range(int, 0, 4_095),
    "max_title_length": Range(int, 0, 512),
    "max_query_length": Range(int, 3, 512),
    "max_seq_len": Range(int, 1, 8_192),
    # storage
    "max_shard_mb": Range(float, 0, 1_000_000, low_open=True),
    "embedding_dim": Range(int, 1, 65_536),
    "lock_timeout": Range(float, 0, 31_536_000),  # seconds; a year at most
    # services
    "elasticsearch_port": Range(int, 1, 65_535),
}


def check_param(name: str, value, high: float | None = None, why: str = ""):
    """Return ``value`` when it is in the range :data:`PARAMS` gives ``name``; raise otherwise.

    Args:
        name: A key of :data:`PARAMS`.
        value: The value given (bool is not a number here; an integral float counts for an integer parameter).
        high: A tighter upper bound known only at the call (e.g. the model's passage window).
        why: What ``high`` is, for the message (``"the model's passage window"``).

    Raises:
        InvalidParameterError: ``value`` is not a number of the parameter's type or is outside its range; the
            message names the parameter, the value and the allowed range.
    """
    allowed = PARAMS[name]
    if high is not None and (allowed.high is None or high < allowed.high):
        allowed = Range(allowed.kind, allowed.low, high, allowed.low_open)
    number = _number(value, allowed.kind)
    if number is None:
        raise InvalidParameterError(f"{name}={value!r} is not {_article(allowed)}: {allowed.describe()}")
    if not allowed.contains(number):
        bound = f" ({why})" if why and high is not None and number > high else ""
        raise InvalidParameterError(f"{name}={value!r} is out of range: {allowed.describe()}{bound}")
    return number


def check_choice(name: str, value, choices):
    """``value`` if it is one of ``choices``, else InvalidParameterError naming the valid ones."""
    if value not in choices:
        raise InvalidParameterError(f"{name}={value!r}; valid: {', '.join(choices)}")
    return value


def check_probability(name: str, value) -> float:
    """``value`` as a float if it is a number from 0 to 1 (a bool or NaN is not), else InvalidParameterError naming
    ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise InvalidParameterError(f"{name}={value!r}; valid: a number from 0 to 1")
    return float(value)


# How a query is encoded: ``int8`` (the query side in int8 on the CPU; float32 elsewhere) or ``float32``.
QUERY_PRECISIONS = ("int8", "float32")


def check_query_precision(precision: str) -> str:
    """``precision`` if it is one of :data:`QUERY_PRECISIONS`, else InvalidParameterError."""
    return check_choice("query_precision", precision, QUERY_PRECISIONS)


def check_params(**values) -> None:
    """:func:`check_param` for each ``name=value`` given (None values are skipped: "use the default")."""
    for name, value in values.items():
        if value is not None:
            check_param(name, value)


def arg_type(name: str, none: int | float | None = None) -> Callable[[str], int | float]:
    """An argparse ``type`` for ``name``: parses the text and checks it, so a bad value ends the command with
    ``dphr <command>: error: argument --<flag>: <name>=... is out of range: ...`` (exit status 2). ``none``: the value
    the word ``none`` stands for (None: the word is refused)."""
    kind = PARAMS[name].kind

    def parse(text: str) -> int | float:
        if none is not None and text.strip().lower() == "none":
            return none
        try:
            value = kind(text)
        except ValueError:
            allowed = PARAMS[name]
            raise argparse.ArgumentTypeError(
                f"{name}={text!r} is not {_article(allowed)}: {allowed.describe()}"
            ) from None
        try:
            return check_param(name, value)
        except InvalidParameterError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = name  # argparse names the type in some messages
    return parse


def _number(value, kind: type) -> int | float | None:
    """``value`` as ``kind``, or None when it is not a finite number of that kind."""
    if isinstance(value, bool):  # numpy's bool_ is no number either (not numbers.Real)
        return None
    if kind is int:
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer():
            return int(value)
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and math.isfinite(value):
        return float(value)
    return None


def _article(allowed: Range) -> str:
    return "an integer" if allowed.kind is int else "a finite number"


__all__ = ["MAX_ANSWER_LENGTH", "PARAMS", "Range", "arg_type", "check_param", "check_params"]
