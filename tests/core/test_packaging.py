"""Packaging: the wheel's explicit package list and package data cover every shipped file, the
``haystack_integrations`` namespace packages are in it, and the YAML pipelines are found."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from dphr_haystack._util.resources import pipelines_dir

ROOT = Path(__file__).resolve().parents[2]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = CONFIG["tool"]["setuptools"]
LISTED: list[str] = SETUPTOOLS["packages"]
PACKAGE_DIRS: dict[str, str] = SETUPTOOLS.get("package-dir", {})
PACKAGE_DATA: dict[str, list[str]] = SETUPTOOLS.get("package-data", {})
# The folders the wheel is built from, as the packages they install as.
SOURCES = {"dphr_haystack": "dphr_haystack", "dphr_haystack.pipelines": "pipelines"}
NAMESPACES = {
    "haystack_integrations",
    "haystack_integrations.components",
    "haystack_integrations.components.retrievers",
    "haystack_integrations.components.writers",
    "haystack_integrations.document_stores",
}
INTEGRATIONS = {
    "haystack_integrations.components.retrievers.dense_phrases",
    "haystack_integrations.components.writers.dense_phrases",
    "haystack_integrations.document_stores.dense_phrases",
}


def _folder(package: str) -> Path:
    """The repository folder a package is built from (``package-dir`` mappings applied, as setuptools does)."""
    mapped = [name for name in PACKAGE_DIRS if package == name or package.startswith(f"{name}.")]
    if not mapped:
        return ROOT.joinpath(*package.split("."))
    base = max(mapped, key=len)
    return ROOT / PACKAGE_DIRS[base] / Path(*package[len(base) :].split(".")[1:])


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def _importable_folders() -> set[str]:
    """Every folder of the sources that Python could import as a package and that holds files (setuptools warns
    about those absent from ``packages``)."""
    found = set()
    for package, source in {**SOURCES, "haystack_integrations": "haystack_integrations"}.items():
        for folder in [ROOT / source, *(p for p in (ROOT / source).rglob("*") if p.is_dir())]:
            parts = folder.relative_to(ROOT / source).parts
            if "__pycache__" in parts or not all(part.isidentifier() for part in parts):
                continue
            if any(p.is_file() for p in folder.iterdir()):
                found.add(".".join([package, *parts]))
    return found


@pytest.mark.unit
def test_every_importable_folder_is_a_listed_package_and_train_is_not():
    assert _importable_folders() <= set(LISTED)
    for package in LISTED:
        assert _folder(package).is_dir(), package
        parent = package.rpartition(".")[0]
        assert not parent or parent in LISTED, f"{package}: its parent {parent} is not listed"
    assert "dphr_haystack.pipelines" in LISTED and "dphr_haystack.pipelines.haystack2" in LISTED
    assert not any(name == "train" or name.startswith("train.") for name in LISTED)


@pytest.mark.unit
def test_package_data_covers_every_shipped_file():
    """Each file under the sources is a module of a listed package or matches its nearest listed package's
    ``package-data`` globs (as setuptools globs them), so the wheel holds every shipped file."""
    covered = set()
    for package in LISTED:
        folder = _folder(package)
        covered |= {p for p in folder.glob("*.py")}
        for pattern in PACKAGE_DATA.get(package, []):
            covered |= {p for p in folder.glob(pattern) if p.is_file()}
    shipped = _files(ROOT / "dphr_haystack") | _files(ROOT / "pipelines") | _files(ROOT / "haystack_integrations")
    assert sorted(str(p.relative_to(ROOT)) for p in shipped - covered) == []
    for package in PACKAGE_DATA:
        assert package in LISTED, f"package-data names {package}, which is not a listed package"


@pytest.mark.unit
def test_the_shipped_data_is_in_the_package_data():
    """The model, the corpus, the web page and both sets of pipelines (a glob that stopped matching shows here)."""
    shipped = {
        "dphr_haystack/shipped_models/dphr-minilm-squad-distilled/model.safetensors.index.json",
        "dphr_haystack/shipped_datasets/squad-dev/dev-v1.1-public.json.gz",
        "dphr_haystack/shipped_datasets/squad-dev/LICENSE",
        "dphr_haystack/nodes/rest/web/index.html",
        "pipelines/phrase_qa.yml",
        "pipelines/haystack2/phrase_qa.yml",
    }
    for name in shipped:
        file = ROOT / name
        package = next(p for p in sorted(LISTED, key=len, reverse=True) if file.is_relative_to(_folder(p)))
        patterns = PACKAGE_DATA.get(package, [])
        assert any(file in _folder(package).glob(pattern) for pattern in patterns), name


@pytest.mark.unit
def test_haystack_integrations_are_namespace_packages_in_the_wheel():
    assert NAMESPACES | INTEGRATIONS <= set(LISTED)
    assert {p for p in LISTED if p.startswith("haystack_integrations")} == NAMESPACES | INTEGRATIONS
    for package in NAMESPACES:
        assert not (_folder(package) / "__init__.py").exists(), f"{package} must stay a namespace package"
    for package in INTEGRATIONS:
        assert (_folder(package) / "__init__.py").is_file(), package


@pytest.mark.unit
def test_the_licence_is_an_spdx_expression_with_its_files():
    project = CONFIG["project"]
    assert isinstance(project["license"], str)
    for pattern in project.get("license-files", []):
        assert list(ROOT.glob(pattern)), pattern
    requires = CONFIG["build-system"]["requires"]
    assert any(r.replace(" ", "").startswith("setuptools>=") for r in requires)


@pytest.mark.unit
def test_pipelines_are_found_from_a_checkout():
    names = {p.name for p in pipelines_dir().glob("*.yml")}
    assert {"phrase_qa.yml", "indexing.yml", "hybrid_rrf.yml"} <= names
    assert {"phrase_qa.yml", "indexing.yml"} <= {p.name for p in (pipelines_dir() / "haystack2").glob("*.yml")}
