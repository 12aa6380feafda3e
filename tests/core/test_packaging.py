"""Packaging: the wheel's explicit package list is complete, and the YAML pipelines are found."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from dphr_haystack._util.resources import pipelines_dir

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.unit
def test_every_subpackage_is_in_the_wheel_and_train_is_not():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "dphr_haystack").rglob("__init__.py")}
    assert found <= listed
    assert "dphr_haystack.pipelines" in listed
    assert not any(name == "train" or name.startswith("train.") for name in listed)


@pytest.mark.unit
def test_pipelines_are_found_from_a_checkout():
    names = {p.name for p in pipelines_dir().glob("*.yml")}
    assert {"phrase_qa.yml", "indexing.yml", "hybrid_rrf.yml"} <= names
