"""The one YAML reader: safe types only, and anchors/aliases bounded before anything walks the document.

``yaml.safe_load`` runs no code, but YAML aliases let a few hundred bytes stand for billions of nodes: nine anchors
each listing the previous one nine times (``a: &a [x, x, ...]``, ``b: &b [*a, *a, ...]``, ...) load in
microseconds as shared Python objects, and whatever walks them afterwards (Haystack's JSON-schema validation of a
pipeline, ``copy.deepcopy``, ``json.dumps``) visits every one of the 9⁹ paths. :func:`load_yaml` composes the
document's node graph first, counts the nodes it stands for once expanded (each shared node counted once per
reference, in time linear in the graph), and refuses a document whose expansion exceeds :data:`MAX_NODES` or that
contains itself, with :class:`~dphr_haystack.errors.UnsafeYamlError` naming the file. Ordinary anchors (a value
reused a few times) still load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import UnsafeYamlError

# Nodes (mappings, sequences, scalars) a document may stand for once its aliases are expanded. A pipeline or training
# recipe has a few hundred; Haystack's schema validation of 100,000 takes about a second.
MAX_NODES = 100_000


def load_yaml(text: str, source: str | Path = "<string>", max_nodes: int = MAX_NODES) -> Any:
    """Parse YAML ``text`` with safe types only, refusing alias expansions beyond ``max_nodes`` nodes.

    Args:
        text: The YAML document.
        source: What ``text`` came from (a file name), for error messages.
        max_nodes: The most nodes the document may stand for once every alias is expanded.

    Raises:
        UnsafeYamlError: The document's aliases expand beyond ``max_nodes`` nodes, or an alias refers to a node that
            contains it (a recursive document).
        yaml.YAMLError: ``text`` is not valid YAML (as ``yaml.safe_load`` raises it).
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded = _expanded_size(node, max_nodes, source)
        if expanded > max_nodes:
            raise UnsafeYamlError(
                f"{source}: its YAML aliases expand to more than {max_nodes:,} nodes (an alias bomb?); refused before "
                "anything reads it: write the repeated values out instead of aliasing them"
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_yaml(path: str | Path, max_nodes: int = MAX_NODES) -> Any:
    """:func:`load_yaml` of a UTF-8 file; errors name ``path``. OSError and UnicodeDecodeError pass through."""
    path = Path(path)
    return load_yaml(path.read_text(encoding="utf-8"), source=path, max_nodes=max_nodes)


def _expanded_size(root: yaml.Node, limit: int, source: str | Path) -> int:
    """Nodes ``root`` stands for with every alias expanded (stops counting past ``limit``); iterative, memoised by
    node identity, so a bomb costs time linear in its text."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            total = 1 + sum(sizes[id(child)] for child in _children(node))
            sizes[key] = min(total, limit + 1)
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise UnsafeYamlError(
                f"{source}: a YAML alias refers to a node that contains it (line {node.start_mark.line + 1}): a "
                "recursive document is refused"
            )
        on_path.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in on_path:
                raise UnsafeYamlError(
                    f"{source}: a YAML alias refers to a node that contains it (line {child.start_mark.line + 1}): "
                    "a recursive document is refused"
                )
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
