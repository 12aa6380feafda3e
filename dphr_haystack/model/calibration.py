"""The confidence calibration a phrase model stores in its config: P(correct) from a phrase's features.

The features themselves are computed by :func:`dphr_haystack.confidence.answer_features` and the calibration
fitted by :func:`dphr_haystack.confidence.fit_calibration`; this module holds the stored form alone, so that the
model's config can check it without importing the query layer. A calibration names the features it weighs, in its
order: one stored over today's four score features (:data:`FEATURES`) computes exactly what it always did, one
over more of :data:`KNOWN_FEATURES` computes those too. A calibration may carry an :class:`AnswerRanker`, a linear
score of the answer features fitted to put a query's right answer first: its features :data:`RANKER_FEATURES` then
read each answer's place in that ranking, and the searchers order answers by it. A calibration may also carry an
:class:`Answerability`: P(the top answer is right *given the corpus searched*) from features of the whole query
(:data:`QUERY_FEATURES`: how confident its top answer is, how much of the question the best passages hold, how many
passages were searched); every answer's log-odds then shift by the same amount so that the top answer's confidence
is that probability (the order of a query's answers stays as it was). A calibration may carry a
:class:`Verification` too: a question-answering reader that reads the top answer in its passage, and P(right) from
the answerability's confidence and the reader's view of the span (:data:`VERIFICATION_FEATURES`), applied the same
way when a search asks for it (:mod:`dphr_haystack.verification`).

Whether the corpus holds an answer at all is a question of its own: a calibration may carry ``holds_answer``, a
second :class:`Answerability` over the same query features fitted on that label (P(the corpus holds an answer to the
question), which scores Haystack's "no answer"), and a verification its :class:`VerifiedHoldsAnswer`, the same
probability once the reader has read the top answer (:data:`HOLDS_VERIFICATION_FEATURES`). Each may name the
threshold of that probability below which a search answers "no answer" first (``no_answer_threshold``, chosen where
it was fitted): a search that passes none takes it (:meth:`Calibration.documented_no_answer_threshold`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidParameterError
from ..params import check_probability

# The score features of a phrase within its query's ranked candidates (:func:`dphr_haystack.confidence.
# confidence_features`), in order: what every calibration before the answer features weighed.
FEATURES = ("score", "log_softmax", "log_agreement", "margin")
# Features of the answer's text, passage and question (:func:`dphr_haystack.confidence.answer_features`).
ANSWER_FEATURES = (
    "window_support",
    "support_gap",
    "answer_words",
    "agreeing_passages",
    "score_spread",
    "sentence_support",
    "support_distance",
    "type_match",
    "question_overlap",
    "best_score",
)
# Every feature of a candidate on its own: what a calibration or an answer ranker may name.
KNOWN_FEATURES = FEATURES + ANSWER_FEATURES
# An answer's place among its query's candidates as an answer ranker scores them: only a calibration with a ranker.
RANKER_FEATURES = ("rank_score", "rank_log_softmax")
# The query feature that reads the whole corpus searched (its words: :mod:`dphr_haystack.corpus_words`).
CORPUS_FEATURE = "all_names_in_corpus"
# Features of a whole query's search (:func:`dphr_haystack.confidence.query_features`): what an
# :class:`Answerability` weighs to tell a question whose answer the corpus holds from one it does not.
QUERY_FEATURES = (
    "top_logit",
    "top_support",
    "best_support",
    "best_title_support",
    "window_support",
    "sentence_support",
    "log_passages",
    "best_score",
    "top_name_support",
    "best_name_support",
    "has_names",
    CORPUS_FEATURE,
)
# A reader's view of the top answer's span in its passage (:class:`dphr_haystack.verification.ReaderView`): its
# score, log-probability and gap to the window's best span, and the window's no-answer score.
READER_VIEW_FEATURES = ("reader_span", "reader_logp", "reader_gap", "reader_null")
# What a :class:`Verification` weighs: the top answer's confidence as log-odds and the reader's view.
VERIFICATION_FEATURES = ("top_logit", *READER_VIEW_FEATURES)
# How a verification's reader computes: float32, or bfloat16 autocast on the CPU (reads 1.4x faster for MiniLM, 1.8x
# for MPNet on an AVX512-BF16 CPU: benchmarks/speed/reader_precision.py); a verification is fitted with, and reads
# with, one of them.
READER_PRECISIONS = ("float32", "bfloat16")
# What a :class:`VerifiedHoldsAnswer` weighs: P(the corpus holds an answer) of the search as log-odds, the reader's
# view of the top answer's span and whether the corpus writes every name of the question.
HOLDS_VERIFICATION_FEATURES = ("holds_logit", *READER_VIEW_FEATURES, CORPUS_FEATURE)
# The query features that read a question's names (:func:`dphr_haystack.question_words.question_names`).
NAME_FEATURES = ("top_name_support", "best_name_support", "has_names", CORPUS_FEATURE)
# How many ranked candidate phrases a calibration's features look at (their reference list) and its ranker orders;
# a calibration stored without a depth was fitted on the first 10.
CONFIDENCE_DEPTH = 20
STORED_DEPTH = 10


# A standardised feature counts at most this many scales from its mean: a linear score does not extrapolate far past
# the data it was fitted on. On a two-passage corpus the reference list's score spread (its candidates' scores
# reach into the other, unrelated passage) lay 43 scales above the mean of the open corpus the default was
# calibrated on, and made "Paris" a 0.86-confident answer to "When was the Eiffel Tower completed?" (0.04 within 5);
# on SQuAD-open-small no top answer's calibration features and few candidates lie that far.
Z_LIMIT = 5.0


def standardised(features: np.ndarray, mean: tuple[float, ...], scale: tuple[float, ...]) -> np.ndarray:
    """``(features − mean) / scale`` within ±:data:`Z_LIMIT`, a NaN feature counted at its mean (0)."""
    m = np.asarray(mean)
    x = np.asarray(features, dtype=np.float64)
    return np.clip((np.where(np.isnan(x), m, x) - m) / np.asarray(scale), -Z_LIMIT, Z_LIMIT)


@dataclass(frozen=True)
class AnswerRanker:
    """A linear score ``w · standardised features`` of a query's candidate answers, fitted so that the query's right
    answers come first (:func:`dphr_haystack.fitting.fit_ranker`)."""

    weights: tuple[float, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    features: tuple[str, ...]

    def scores(self, features: np.ndarray) -> np.ndarray:
        """The rank score of each row of :func:`~dphr_haystack.confidence.answer_features` over :attr:`features`."""
        return standardised(features, self.mean, self.scale) @ np.asarray(self.weights)

    def to_dict(self) -> dict[str, Any]:
        return {
            "features": list(self.features),
            "weights": list(self.weights),
            "mean": list(self.mean),
            "scale": list(self.scale),
        }

    @classmethod
    def from_dict(cls, data: Any) -> AnswerRanker:
        """Read a stored ranker; InvalidParameterError on a malformed or foreign one."""
        features, values = _read_linear(data, "answer ranker", ("weights", "mean", "scale"))
        return cls(values[0], values[1], values[2], check_features(features))


@dataclass(frozen=True)
class Answerability:
    """A probability of the whole query = σ(w · standardised query features + b) over the named
    :data:`QUERY_FEATURES` (:func:`dphr_haystack.fitting.fit_answerability`); NaN counts at the mean. As a
    calibration's ``answerability``: P(the query's top answer is right, given the corpus searched); as its
    ``holds_answer``: P(the corpus holds an answer to the question)."""

    weights: tuple[float, ...]
    bias: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    features: tuple[str, ...]

    def __post_init__(self) -> None:
        check_query_features(self.features)

    def probability(self, features: np.ndarray) -> np.ndarray:
        """The probability of each row of :func:`~dphr_haystack.confidence.query_features` over :attr:`features`."""
        return sigmoid(standardised(features, self.mean, self.scale) @ np.asarray(self.weights) + self.bias)

    def query_probability(self, features: np.ndarray) -> np.ndarray:
        """The probability of each row of all :data:`QUERY_FEATURES` (in that order): the columns it weighs read."""
        return self.probability(np.asarray(features)[:, [QUERY_FEATURES.index(n) for n in self.features]])

    def to_dict(self) -> dict[str, Any]:
        return _linear_dict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Answerability:
        """Read a stored answerability; InvalidParameterError on a malformed or foreign one."""
        features, values = _read_linear(data, "answerability", ("weights", "mean", "scale", "bias"))
        return cls(values[0], values[3][0], values[1], values[2], check_query_features(features))


def check_verified_features(model: Any, expected: tuple[str, ...], what: str, older: int = 1) -> None:
    """InvalidParameterError unless the linear ``model`` weighs ``expected`` or, as stored before its last ``older``
    features were added (the reader's no-answer score, then the corpus's names), its first columns but at most those,
    with a weight, mean and scale each."""
    if model.features not in [expected[: len(expected) - k] for k in range(older + 1)]:
        raise InvalidParameterError(f"{what} over features {model.features}: expected {', '.join(expected)}")
    if not len(model.weights) == len(model.mean) == len(model.scale) == len(model.features):
        raise InvalidParameterError(f"{what} needs a weight, a mean and a scale for each of {model.features}")


def _verified_probability(model: Any, features: np.ndarray) -> np.ndarray:
    """σ(w · standardised features + b) of a verification's linear ``model`` over the first columns of ``features``
    (as many as it weighs)."""
    x = np.asarray(features, dtype=np.float64)[:, : len(model.features)]
    return sigmoid(standardised(x, model.mean, model.scale) @ np.asarray(model.weights) + model.bias)


def check_stored_threshold(threshold: Any, what: str) -> float | None:
    """A stored ``no_answer_threshold``: None or a number in [0, 1] (as a float); InvalidParameterError otherwise."""
    return None if threshold is None else check_probability(f"{what} no_answer_threshold", threshold)


@dataclass(frozen=True)
class VerifiedHoldsAnswer:
    """P(the corpus holds an answer) = σ(w · standardised :data:`HOLDS_VERIFICATION_FEATURES` + b) once a reader has
    read the top answer (:func:`dphr_haystack.fitting.fit_verified_holds`)."""

    weights: tuple[float, ...]
    bias: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    features: tuple[str, ...] = HOLDS_VERIFICATION_FEATURES

    def __post_init__(self) -> None:
        check_verified_features(self, HOLDS_VERIFICATION_FEATURES, "verified holds-answer", older=2)

    def probability(self, features: np.ndarray) -> np.ndarray:
        """P(the corpus holds an answer) of each row of :data:`HOLDS_VERIFICATION_FEATURES` (the first columns,
        one stored before the corpus's names or the reader's no-answer score were read); a NaN names feature (a
        question without names) counts at its mean."""
        return _verified_probability(self, features)

    def to_dict(self) -> dict[str, Any]:
        return _linear_dict(self)

    @classmethod
    def from_dict(cls, data: Any) -> VerifiedHoldsAnswer:
        """Read a stored one; InvalidParameterError on a malformed or foreign one."""
        features, values = _read_linear(data, "verified holds-answer", ("weights", "mean", "scale", "bias"))
        return cls(values[0], values[3][0], values[1], values[2], features)


@dataclass(frozen=True)
class Verification:
    """P(the top answer is right) = σ(w · standardised :data:`VERIFICATION_FEATURES` + b) once ``reader`` (a shipped
    reader's name or a question-answering model directory) has read the top answer in its passage
    (:func:`dphr_haystack.fitting.fit_verification`), computing in ``reader_precision`` (one of
    :data:`READER_PRECISIONS`: the precision it was fitted with). ``no_answer_threshold``: P(the corpus holds an
    answer), verified, below which a verified search answers "no answer" first unless it passes its own (None: the
    calibration's)."""

    reader: str
    weights: tuple[float, ...]
    bias: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    features: tuple[str, ...] = VERIFICATION_FEATURES
    holds_answer: VerifiedHoldsAnswer | None = None
    reader_precision: str = "float32"
    no_answer_threshold: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "no_answer_threshold", check_stored_threshold(self.no_answer_threshold, "verification")
        )
        if not isinstance(self.reader, str) or not self.reader:
            raise InvalidParameterError(f"verification reader must be a non-empty string, got {self.reader!r}")
        if self.reader_precision not in READER_PRECISIONS:
            raise InvalidParameterError(
                f"verification reader_precision {self.reader_precision!r}; valid: {', '.join(READER_PRECISIONS)}"
            )
        check_verified_features(self, VERIFICATION_FEATURES, "verification")

    def probability(self, features: np.ndarray) -> np.ndarray:
        """P(right) of each row of :data:`VERIFICATION_FEATURES` (the first columns, one stored before the reader's
        no-answer score was read)."""
        return _verified_probability(self, features)

    def to_dict(self) -> dict[str, Any]:
        out = {"reader": self.reader, **_linear_dict(self)}
        if self.holds_answer is not None:
            out["holds_answer"] = self.holds_answer.to_dict()
        if self.reader_precision != "float32":  # a verification stored before the option reads as float32
            out["reader_precision"] = self.reader_precision
        if self.no_answer_threshold is not None:
            out["no_answer_threshold"] = self.no_answer_threshold
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Verification:
        """Read a stored verification; InvalidParameterError on a malformed or foreign one."""
        features, values = _read_linear(data, "verification", ("weights", "mean", "scale", "bias"))
        stored = data.get("holds_answer")
        holds = VerifiedHoldsAnswer.from_dict(stored) if stored is not None else None
        precision = str(data.get("reader_precision", "float32"))
        reader, threshold = str(data.get("reader", "")), data.get("no_answer_threshold")
        return cls(reader, values[0], values[3][0], values[1], values[2], features, holds, precision, threshold)


@dataclass(frozen=True)
class Calibration:
    """P(correct) = σ(w · standardised features + b), over the named ``features`` (default :data:`FEATURES`).

    A feature that cannot be computed for an answer (NaN: say, a question feature when the question text is not
    known) counts at its mean, adding nothing to the sum. ``depth``: how many ranked candidates the features look
    at and the searchers rank phrase answers among (:data:`CONFIDENCE_DEPTH`; a stored calibration without one: 10).
    ``no_answer_threshold``: P(the corpus holds an answer) below which a search answers "no answer" first unless it
    passes its own (None: the searchers' default).

    Example:
        >>> calibration = fit_calibration(features, correct)
        >>> calibration.confidence(confidence_features([31.0, 29.5], ["Denver Broncos", "Carolina Panthers"]))
    """

    weights: tuple[float, ...]
    bias: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    features: tuple[str, ...] = FEATURES
    ranker: AnswerRanker | None = None
    depth: int = CONFIDENCE_DEPTH
    answerability: Answerability | None = None
    verification: Verification | None = None
    holds_answer: Answerability | None = None
    no_answer_threshold: float | None = None

    def __post_init__(self) -> None:
        check_features(self.features, ranked=self.ranker is not None)
        object.__setattr__(
            self, "no_answer_threshold", check_stored_threshold(self.no_answer_threshold, "calibration")
        )
        if isinstance(self.depth, bool) or not isinstance(self.depth, int) or self.depth < 1:
            raise InvalidParameterError(f"calibration depth must be a positive integer, got {self.depth!r}")

    def confidence(self, features: np.ndarray) -> np.ndarray:
        """P(correct) of each row of :func:`~dphr_haystack.confidence.answer_features` over :attr:`features`:
        (n,) in [0, 1]."""
        return sigmoid(standardised(features, self.mean, self.scale) @ np.asarray(self.weights) + self.bias)

    def documented_no_answer_threshold(self, verify: bool) -> float | None:
        """The threshold a search that passes none places "no answer" by: with ``verify``, the verification's
        (its P(the corpus holds an answer) is the verified one), else, or where it names none, this calibration's;
        None where neither names one."""
        verified = self.verification.no_answer_threshold if verify and self.verification is not None else None
        return verified if verified is not None else self.no_answer_threshold

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "features": list(self.features),
            "weights": list(self.weights),
            "bias": self.bias,
            "mean": list(self.mean),
            "scale": list(self.scale),
            "depth": self.depth,
        }
        if self.ranker is not None:
            out["ranker"] = self.ranker.to_dict()
        if self.answerability is not None:
            out["answerability"] = self.answerability.to_dict()
        if self.verification is not None:
            out["verification"] = self.verification.to_dict()
        if self.holds_answer is not None:
            out["holds_answer"] = self.holds_answer.to_dict()
        if self.no_answer_threshold is not None:
            out["no_answer_threshold"] = self.no_answer_threshold
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Calibration:
        """Read a stored calibration; InvalidParameterError on a malformed or foreign one."""
        features, values = _read_linear(data, "calibration", ("weights", "mean", "scale", "bias"))
        ranker = AnswerRanker.from_dict(data["ranker"]) if data.get("ranker") is not None else None
        stored = data.get("answerability")
        answerability = Answerability.from_dict(stored) if stored is not None else None
        depth = data.get("depth", STORED_DEPTH)
        stored = data.get("verification")
        verification = Verification.from_dict(stored) if stored is not None else None
        stored = data.get("holds_answer")
        holds = Answerability.from_dict(stored) if stored is not None else None
        return cls(
            values[0],
            values[3][0],
            values[1],
            values[2],
            features,
            ranker,
            depth,
            answerability,
            verification,
            holds,
            data.get("no_answer_threshold"),
        )


def _linear_dict(model: Any) -> dict[str, Any]:
    """The stored form of a linear model's features, weights, bias, mean and scale."""
    return {
        "features": list(model.features),
        "weights": list(model.weights),
        "bias": model.bias,
        "mean": list(model.mean),
        "scale": list(model.scale),
    }


def _read_linear(data: Any, what: str, keys: tuple[str, ...]) -> tuple[tuple[str, ...], list[tuple[float, ...]]]:
    """The feature names and the numbers under ``keys`` (one per feature; ``bias`` one) of a stored linear model."""
    try:
        features = tuple(str(f) for f in data["features"])
        values = [tuple(float(v) for v in (data[k] if k != "bias" else [data[k]])) for k in keys]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidParameterError(f"malformed {what} {data!r}: {exc}") from exc
    sizes = [1 if k == "bias" else len(features) for k in keys]
    if (
        any(len(v) != n for v, n in zip(values, sizes, strict=True))
        or not all(math.isfinite(x) for v in values for x in v)
        or min(values[keys.index("scale")], default=1.0) <= 0
    ):
        raise InvalidParameterError(
            f"{what} values must be {len(features)} finite numbers each (one per feature), scales > 0"
        )
    return features, values


def check_features(features: tuple[str, ...], ranked: bool = False) -> tuple[str, ...]:
    """``features`` if it names known features (with ``ranked``, also :data:`RANKER_FEATURES`), each once;
    InvalidParameterError otherwise."""
    known = KNOWN_FEATURES + RANKER_FEATURES if ranked else KNOWN_FEATURES
    unknown = [f for f in features if f not in known]
    if not features or unknown or len(set(features)) != len(features):
        needs_ranker = [f for f in unknown if f in RANKER_FEATURES]
        raise InvalidParameterError(
            f"calibration over features {features}: expected distinct names among {', '.join(known)}"
            + (f" ({', '.join(needs_ranker)} need an answer ranker)" if needs_ranker else "")
            + (
                f" ({', '.join(f for f in unknown if f not in needs_ranker)} unknown to this library)"
                if set(unknown) - set(needs_ranker)
                else ""
            )
        )
    return features


def check_query_features(features: tuple[str, ...]) -> tuple[str, ...]:
    """``features`` if it names :data:`QUERY_FEATURES`, each once; InvalidParameterError otherwise."""
    unknown = [f for f in features if f not in QUERY_FEATURES]
    if not features or unknown or len(set(features)) != len(features):
        raise InvalidParameterError(
            f"answerability over features {features}: expected distinct names among {', '.join(QUERY_FEATURES)}"
        )
    return features


def sigmoid(x: np.ndarray) -> np.ndarray:
    """The logistic function, clipped so that no ``exp`` overflows."""
    return 1.0 / (1.0 + np.exp(-np.clip(x, -500, 500)))
