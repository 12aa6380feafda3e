"""`import dphr_haystack` and `dphr --help` load no torch, FAISS, transformers or Haystack; names load on use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
HEAVY = {"torch", "faiss", "transformers", "haystack"}


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return {name.split(".")[0] for name in out}


def test_importing_the_package_and_building_the_cli_parser_load_nothing_heavy():
    assert not _loaded_after("import dphr_haystack") & (HEAVY | {"numpy"})
    assert not _loaded_after("from dphr_haystack.cli import _parser\n_parser()") & HEAVY


def test_names_load_their_modules_on_first_use():
    import dphr_haystack
    from dphr_haystack.index.phrase_index import PhraseIndex
    from dphr_haystack.search import PhraseSearcher

    assert dphr_haystack.PhraseIndex is PhraseIndex and dphr_haystack.PhraseSearcher is PhraseSearcher
    assert {"PhraseModel", "PhraseRetriever", "read_corpus"} <= set(dir(dphr_haystack))
    assert set(dphr_haystack.__all__) <= set(dir(dphr_haystack))
    with pytest.raises(AttributeError):
        _ = dphr_haystack.NoSuchName
