"""The package's shape: modules stay small and no module imports another module's private names.

The layers themselves (and the absence of import cycles) are checked by `lint-imports` in CI, from the contracts in
pyproject.toml; these two rules are ones import-linter does not check.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
PACKAGE = Path(__file__).resolve().parents[2] / "dphr_haystack"
MAX_MODULE_LINES = 600


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _module_name(path: Path) -> list[str]:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imported_module(path: Path, node: ast.ImportFrom) -> list[str]:
    """The absolute module name a ``from … import`` names, as a list of parts."""
    if node.level == 0:
        return (node.module or "").split(".")
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path)[:-1]
    base = package[: len(package) - (node.level - 1)]
    return base + (node.module.split(".") if node.module else [])


def _is_module(parts: list[str]) -> bool:
    target = PACKAGE.parent.joinpath(*parts)
    return target.with_suffix(".py").is_file() or (target / "__init__.py").is_file()


def test_no_module_is_longer_than_the_limit():
    lengths = {str(p.relative_to(PACKAGE)): len(p.read_text(encoding="utf-8").splitlines()) for p in _modules()}
    too_long = {name: n for name, n in lengths.items() if n > MAX_MODULE_LINES}
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines: {too_long}"


def test_no_module_imports_a_private_name_of_another_module():
    offenders = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            source = _imported_module(path, node)
            if source[:1] != ["dphr_haystack"]:
                continue
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and not _is_module([*source, alias.name]):
                    offenders.append(f"{path.relative_to(PACKAGE)}: from {'.'.join(source)} import {alias.name}")
    assert not offenders, "\n".join(offenders)


def test_the_checks_see_the_package():
    """Guards the two tests above against silently reading nothing."""
    names = {str(p.relative_to(PACKAGE)) for p in _modules()}
    assert {"search.py", "index/phrase_index.py", "nodes/retriever.py"} <= names
    assert _imported_module(PACKAGE / "index" / "merge.py", ast.parse("from ..errors import X").body[0]) == [
        "dphr_haystack",
        "errors",
    ]
    assert _is_module(["dphr_haystack", "_util", "atomic"]) and not _is_module(["dphr_haystack", "_util", "nope"])
