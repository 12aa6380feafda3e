"""The first hour with Haystack 2: the quickstart's indexing pipeline shows a progress bar with a total."""

from __future__ import annotations

from pathlib import Path

import pytest

PIPELINES = Path(__file__).resolve().parents[2] / "pipelines" / "haystack2"


@pytest.fixture
def bars(monkeypatch) -> list:
    """Every tqdm bar shown through ``tqdm.auto`` while the test runs (closing sets ``disable``: kept at opening)."""
    import tqdm.auto

    opened: list = []

    class Recorded(tqdm.auto.tqdm):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            if not self.disable:
                opened.append(self)

    monkeypatch.setattr(tqdm.auto, "tqdm", Recorded)
    return opened


def test_quickstart_indexing_bar_has_a_total(tiny_model_dir, hs2_docs, bars, one_torch_thread):
    from haystack import Pipeline

    from dphr_haystack.haystack2 import ALLOWED_MODULES
    from dphr_haystack.model.registry import DEFAULT_MODEL

    text = (PIPELINES / "indexing.yml").read_text()  # edited as examples/haystack2_quickstart.py edits it
    text = text.replace(f"model: {DEFAULT_MODEL}", f"model: {tiny_model_dir}")
    text = text.replace("index: dphr", "index: first-hour-bar")
    indexing = Pipeline.loads(text, allowed_modules=ALLOWED_MODULES)
    indexing.run({"indexer": {"documents": hs2_docs[:4]}})
    indexing.run({"indexer": {"documents": hs2_docs[4:]}})  # only the new documents are pending
    assert [(bar.total, bar.n) for bar in bars] == [(4, 4), (2, 2)]
