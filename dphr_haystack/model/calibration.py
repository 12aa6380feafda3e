"""The confidence calibration a phrase model stores in its config: P(correct) from a phrase's features.

The features themselves are computed by :func:`dphr_haystack.confidence.answer_features` and the calibration
fitted by :func:`dphr_haystack.confidence.fit_calibration`; this module holds the stored form alone, so that the
model's config can check it without importing the query layer. A calibration names the features it weighs, in its
order: one stored over today's four score features (:data:`FEATURES`) computes exactly what it always did, one
over more of :data:`KNOWN_FEATURES` computes those too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidParameterError

# The score features of a phrase within its query's ranked candidates (:func:`dphr_haystack.confidence.
# confidence_features`), in order: what every calibration before the answer features weighed.
FEATURES = ("score", "log_softmax", "log_agreement", "margin")
# Features of the answer's text, passage and question (:func:`dphr_haystack.confidence.answer_features`).
ANSWER_FEATURES = ("window_support", "support_gap", "answer_words", "agreeing_passages", "score_spread")
# Every feature a calibration may name.
KNOWN_FEATURES = FEATURES + ANSWER_FEATURES


@dataclass(frozen=True)
class Calibration:
    """P(correct) = σ(w · standardised features + b), over the named ``features`` (default :data:`FEATURES`).

    A feature that cannot be computed for an answer (NaN: say, a question feature when the question text is not
    known) counts at its mean, adding nothing to the sum.

    Example:
        >>> calibration = fit_calibration(features, correct)
        >>> calibration.confidence(confidence_features([31.0, 29.5], ["Denver Broncos", "Carolina Panthers"]))
    """

    weights: tuple[float, ...]
    bias: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    features: tuple[str, ...] = FEATURES

    def confidence(self, features: np.ndarray) -> np.ndarray:
        """P(correct) of each row of :func:`~dphr_haystack.confidence.answer_features` over :attr:`features`:
        (n,) in [0, 1]."""
        mean = np.asarray(self.mean)
        x = np.asarray(features, dtype=np.float64)
        x = (np.where(np.isnan(x), mean, x) - mean) / np.asarray(self.scale)
        return sigmoid(x @ np.asarray(self.weights) + self.bias)

    def to_dict(self) -> dict[str, Any]:
        return {
            "features": list(self.features),
            "weights": list(self.weights),
            "bias": self.bias,
            "mean": list(self.mean),
            "scale": list(self.scale),
        }

    @classmethod
    def from_dict(cls, data: Any) -> Calibration:
        """Read a stored calibration; InvalidParameterError on a malformed or foreign one."""
        try:
            features = tuple(str(f) for f in data["features"])
            values = [tuple(float(v) for v in data[k]) for k in ("weights", "mean", "scale")]
            bias = float(data["bias"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidParameterError(f"malformed calibration {data!r}: {exc}") from exc
        check_features(features)
        if (
            any(len(v) != len(features) for v in values)
            or not all(math.isfinite(x) for x in (*values[0], *values[1], *values[2], bias))
            or min(values[2]) <= 0
        ):
            raise InvalidParameterError(
                f"calibration values must be {len(features)} finite numbers each (one per feature), scales > 0"
            )
        return cls(values[0], bias, values[1], values[2], features)


def check_features(features: tuple[str, ...]) -> tuple[str, ...]:
    """``features`` if it names known features, each once; InvalidParameterError otherwise."""
    unknown = [f for f in features if f not in KNOWN_FEATURES]
    if not features or unknown or len(set(features)) != len(features):
        raise InvalidParameterError(
            f"calibration over features {features}: expected distinct names among {', '.join(KNOWN_FEATURES)}"
            + (f" ({', '.join(unknown)} unknown to this library)" if unknown else "")
        )
    return features


def sigmoid(x: np.ndarray) -> np.ndarray:
    """The logistic function, clipped so that no ``exp`` overflows."""
    return 1.0 / (1.0 + np.exp(-np.clip(x, -500, 500)))
