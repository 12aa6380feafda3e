"""The quickstart runs on the corpus shipped with the package (no ../shared) and prints its score table."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.py"


def _quickstart():
    spec = importlib.util.spec_from_file_location("quickstart", QUICKSTART)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.integration
def test_quickstart_indexes_the_shipped_corpus_and_scores_every_pipeline(capsys):
    quickstart = _quickstart()
    assert quickstart.main(["--limit", "40", "--questions", "8", "--examples", "1"]) == 0
    out = capsys.readouterr().out
    assert "corpus: squad-dev, 40 of 1702 paragraphs" in out
    assert "indexed 40 paragraphs" in out and "top answer: " in out and "confidence " in out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ") and "yml" in line}
    assert set(rows) == {
        "phrase answers (phrase_qa.yml)",
        "phrase passages (phrase_passages.yml)",
        "BM25 (bm25.yml)",
        "BM25 + phrase RRF (hybrid_rrf.yml)",
    }
    number = r"\d+\.\d"
    assert re.fullmatch(
        rf"\|[^|]+\| {number} \| {number} \| {number} \| {number} \| {number} \|",
        rows["phrase answers (phrase_qa.yml)"],
    )
    assert re.fullmatch(rf"\|[^|]+\| – \| – \| {number} \| {number} \| {number} \|", rows["BM25 (bm25.yml)"])
    assert "total wall time:" in out


@pytest.mark.unit
def test_quickstart_refuses_bad_counts(capsys):
    quickstart = _quickstart()
    with pytest.raises(SystemExit):
        quickstart.main(["--questions", "0"])
    assert "at least 1" in capsys.readouterr().err
