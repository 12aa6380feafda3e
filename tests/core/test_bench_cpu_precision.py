"""The CPU precision benchmark's speed reading, on a hand-made trainer log (no model)."""

from __future__ import annotations

import pytest

from benchmarks.training.cpu_precision import steady_speed


def test_speed_is_read_after_the_warm_up_steps_from_the_cumulative_log():
    # Step 1 took 10 s (warm-up), every later step 2 s; 16 windows a step.
    elapsed = {1: 10.0, 2: 12.0, 3: 14.0, 4: 16.0}
    records = [{"step": k, "samples_per_s": k * 16 / t, "loss": 1.0} for k, t in elapsed.items()]
    speed = steady_speed(records, batch=16, warm_up=1)
    assert speed["s_per_step"] == pytest.approx(2.0) and speed["windows_per_s"] == pytest.approx(8.0)
    assert steady_speed(records, batch=16, warm_up=2)["s_per_step"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="warm-up"):
        steady_speed(records[:2], batch=16, warm_up=2)
