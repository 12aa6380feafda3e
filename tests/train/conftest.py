"""Every train/ test runs its tiny models on one torch thread (see tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield
