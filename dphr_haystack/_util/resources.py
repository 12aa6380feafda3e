"""Files that ship with the package: the YAML pipelines.

In the repository the pipelines live at the top level (``pipelines/``); a wheel installs the same files as
``dphr_haystack/pipelines/`` (``[tool.setuptools.package-dir]`` in ``pyproject.toml``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO_PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"


def pipelines_dir() -> Path:
    """The directory of the YAML pipelines: the installed ``dphr_haystack.pipelines``, else the repository's."""
    try:
        spec = importlib.util.find_spec("dphr_haystack.pipelines")
    except ImportError:
        spec = None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        if any(Path(location).glob("*.yml")):
            return Path(location)
    return REPO_PIPELINES
