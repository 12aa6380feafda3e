"""The float16 widening benchmark: every way timed on the same array, the same bits, the table it prints."""

from __future__ import annotations

import numpy as np

from benchmarks.speed.half_widening import WAYS, markdown, time_widening, widen


def test_every_way_widens_to_the_same_float32_values():
    stored = np.array([[0.0, -1.5, 65504.0, 6e-8], [np.inf, -np.inf, 1 / 3, -2.0]], dtype=np.float16)
    expected = stored.astype(np.float64).astype(np.float32)
    for way in WAYS:
        widened = widen(stored, way)
        assert widened.dtype == np.float32 and np.array_equal(widened, expected), way


def test_a_row_times_every_way_and_renders():
    row = time_widening(vectors=3, dim=5, repeats=4)
    assert row["vectors"] == 3 and row["values"] == 15 and row["same_bits"] is True
    assert all(row[way]["p50_ms"] > 0 for way in WAYS)
    assert row["numpy_over_torch_p50"] == row["numpy"]["p50_ms"] / row["torch"]["p50_ms"]
    table = markdown({"dim": 5, "repeats": 4, "threads": 1, "rows": [row]})
    assert "| 3 | 15 |" in table and table.count("\n") == 4
