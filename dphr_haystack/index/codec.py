"""How token vectors are stored: float16, or int8 with an offset and scale (DensePhrases' int8 scheme)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidParameterError

DTYPES = ("float16", "int8", "float32")


@dataclass(frozen=True)
class VectorCodec:
    """Encodes float32 vectors to the stored dtype and back.

    int8 follows DensePhrases: ``q = round(clip((x − offset)·scale, −128, 127))``, ``x ≈ q/scale + offset``
    (DensePhrases fixes offset −2, scale 20 for BERT-base; :meth:`calibrate` fits them to the data instead).
    """

    dtype: str = "float16"
    offset: float = 0.0
    scale: float = 1.0

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise InvalidParameterError(f"vector dtype {self.dtype!r}; valid: {', '.join(DTYPES)}")
        for name in ("offset", "scale"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InvalidParameterError(f"codec {name} must be a finite number, got {value!r:.40}")
        if self.scale <= 0:
            raise InvalidParameterError(f"int8 scale must be > 0, got {self.scale}")

    @classmethod
    def calibrate(cls, dtype: str, sample: np.ndarray) -> VectorCodec:
        """A codec for ``dtype``; for int8, offset/scale cover the 0.01–99.99th percentiles of ``sample``."""
        if dtype != "int8":
            return cls(dtype)
        if sample.size == 0:
            return cls("int8", -2.0, 20.0)
        lo, hi = np.percentile(sample.astype(np.float32), [0.01, 99.99])
        half = max(float(hi - lo) / 2.0, 1e-6)
        return cls("int8", float(lo + hi) / 2.0, 127.0 / half)

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    def encode(self, vectors: np.ndarray) -> np.ndarray:
        if self.dtype == "int8":
            return np.clip(np.rint((vectors - self.offset) * self.scale), -128, 127).astype(np.int8)
        return vectors.astype(self.numpy_dtype)

    def decode(self, stored: np.ndarray) -> np.ndarray:
        if self.dtype == "int8":
            return stored.astype(np.float32) / np.float32(self.scale) + np.float32(self.offset)
        return np.asarray(stored, dtype=np.float32)

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "offset": self.offset, "scale": self.scale}
