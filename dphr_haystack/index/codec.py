"""How token vectors are stored: float16, or int8 with an offset and scale (DensePhrases' int8 scheme)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._util.lazy import require
from ..errors import InvalidParameterError

DTYPES = ("float16", "int8", "float32")
# int8 decodes as q / scale + offset in float32: outside these bounds it overflows, underflows or is meaningless
# (calibrate() gives scale = 127 / half the value range, at most 1.27e8)
SCALE_RANGE = (1e-6, 1e9)
OFFSET_LIMIT = 1e6


# float16 arrays of at least this many values are widened by torch: the same bits as numpy's cast and 6-13x faster on
# a CPU from 24k values up (0.28 against 2.65 ms p50 for the 2.0M values of 5,172 stored vectors, 2-core Intel Xeon:
# benchmarks/speed/half_widening.py), which a search of key vectors does for every passage it reads
TORCH_HALF_MIN = 1 << 14


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
        if not SCALE_RANGE[0] <= self.scale <= SCALE_RANGE[1]:
            raise InvalidParameterError(
                f"codec scale must be between {SCALE_RANGE[0]:g} and {SCALE_RANGE[1]:g}, got {self.scale!r:.40}"
            )
        if abs(self.offset) > OFFSET_LIMIT:
            raise InvalidParameterError(f"codec offset must be within ±{OFFSET_LIMIT:g}, got {self.offset!r:.40}")

    @classmethod
    def calibrate(cls, dtype: str, sample: np.ndarray) -> VectorCodec:
        """A codec for ``dtype``; for int8, offset/scale cover the 0.01–99.99th percentiles of ``sample``."""
        if dtype != "int8":
            return cls(dtype)
        if sample.size == 0:
            return cls("int8", -2.0, 20.0)
        lo, hi = np.percentile(sample.astype(np.float32), [0.01, 99.99])
        half = max(float(hi - lo) / 2.0, 1e-6)
        return cls("int8", float(lo + hi) / 2.0, min(max(127.0 / half, SCALE_RANGE[0]), SCALE_RANGE[1]))

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
        if stored.dtype == np.float16 and stored.size >= TORCH_HALF_MIN and stored.flags.writeable:
            return _half_to_float(stored)
        return np.asarray(stored, dtype=np.float32)

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "offset": self.offset, "scale": self.scale}


def _half_to_float(stored: np.ndarray) -> np.ndarray:
    """``stored`` (float16, writable: torch shares its memory) as float32, widened by torch."""
    torch = require("torch")
    return torch.from_numpy(np.ascontiguousarray(stored)).float().numpy()
