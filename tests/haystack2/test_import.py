"""With haystack-ai installed, 'import dphr_haystack' works and leaves the Haystack 1.x nodes alone."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def test_import_dphr_haystack_beside_haystack_ai():
    code = (
        "import importlib.metadata as m, sys, dphr_haystack\n"
        "assert m.distribution('haystack-ai')\n"
        "assert 'PhraseRetriever' not in dphr_haystack.__all__ and 'dphr_haystack.nodes' not in sys.modules\n"
        "from dphr_haystack.haystack2 import PhraseDocumentStore, PhraseIndexer, PhraseRetriever\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_haystack1_names_point_to_the_haystack2_components():
    code = "try:\n    from dphr_haystack import PhraseRetriever\nexcept ImportError as exc:\n    print(exc)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "haystack-ai" in out.stdout and "from dphr_haystack.haystack2 import" in out.stdout
