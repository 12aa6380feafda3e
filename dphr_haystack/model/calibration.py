"""The confidence calibration a phrase model stores in its config: P(correct) from a phrase's score features.

The features themselves are computed by :func:`dphr_haystack.confidence.confidence_features` and the calibration
fitted by :func:`dphr_haystack.confidence.fit_calibration`; this module holds the stored form alone, so that the
model's config can check it without importing the query layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidParameterError

# The features a calibration weighs, in order (:func:`dphr_haystack.confidence.confidence_features` computes them).
FEATURES = ("score", "log_softmax", "log_agreement", "margin")


@dataclass(frozen=True)
class Calibration:
    """P(correct) = σ(w · standardised features + b), over :data:`FEATURES`.

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
        """P(correct) of each row of :func:`~dphr_haystack.confidence.confidence_features`: (n,) in [0, 1]."""
        x = (np.asarray(features, dtype=np.float64) - np.asarray(self.mean)) / np.asarray(self.scale)
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
        if features != FEATURES:
            raise InvalidParameterError(f"calibration over features {features}; this library computes {FEATURES}")
        if (
            any(len(v) != len(FEATURES) for v in values)
            or not all(math.isfinite(x) for x in (*values[0], *values[1], *values[2], bias))
            or min(values[2]) <= 0
        ):
            raise InvalidParameterError(f"calibration values must be {len(FEATURES)} finite numbers, scales > 0")
        return cls(values[0], bias, values[1], values[2], features)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """The logistic function, clipped so that no ``exp`` overflows."""
    return 1.0 / (1.0 + np.exp(-np.clip(x, -500, 500)))
