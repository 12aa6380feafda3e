"""YAML alias bombs are refused before anything expands them: a 9×9 anchor chain in a Retriever parameter used to
stall ``load_pipeline`` for minutes and take >10 GB (Haystack's schema validation walks every expanded path). Every
YAML the project reads (pipelines, the REST API's pipeline file, ``dphr eval --set``, training recipes) goes through
the bounded reader, which refuses it with UnsafeYamlError naming the file, in well under 2 s. Ordinary anchors and the
shipped pipelines still load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dphr_haystack._util.safe_yaml import MAX_NODES, load_yaml, read_yaml
from dphr_haystack.errors import DphrError, UnsafeYamlError

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def bomb(depth: int = 9, width: int = 9) -> str:
    """A flow list of ``depth`` anchors, each listing the previous one ``width`` times: width**depth leaves."""
    levels = ["&l0 [" + ", ".join(["lol"] * width) + "]"]
    for level in range(1, depth):
        levels.append(f"&l{level} [" + ", ".join([f"*l{level - 1}"] * width) + "]")
    return "[" + ", ".join(levels) + "]"


def _pipeline_with_bomb(model_dir: Path, value: str) -> str:
    return f"""version: ignore
components:
  - name: DocumentStore
    type: PhraseDocumentStore
    params: {{progress_bar: false}}
  - name: Retriever
    type: PhraseRetriever
    params:
      document_store: DocumentStore
      model: {json.dumps(str(model_dir))}
      device: cpu
      filter_threshold: {value}
pipelines:
  - name: query
    nodes: [{{name: Retriever, inputs: [Query]}}]
"""


def test_bomb_is_refused_at_once_naming_the_file(tmp_path):
    file = tmp_path / "bomb.yml"
    file.write_text(f"components: {bomb()}\n")
    started = time.perf_counter()
    with pytest.raises(UnsafeYamlError, match=str(file)) as caught:
        read_yaml(file)
    assert time.perf_counter() - started < 2.0
    assert isinstance(caught.value, DphrError) and isinstance(caught.value, ValueError)
    assert "alias" in str(caught.value)


def test_expansion_just_under_the_bound_loads_and_just_over_is_refused():
    assert len(load_yaml(bomb(depth=4, width=10))) == 4  # 11,111 expanded nodes
    with pytest.raises(UnsafeYamlError, match=f"{MAX_NODES:,}"):
        load_yaml(bomb(depth=6, width=10))  # 1,111,111 expanded nodes


def test_recursive_document_is_refused():
    with pytest.raises(UnsafeYamlError, match="contains it"):
        load_yaml("a: &a [1, *a]")
    with pytest.raises(UnsafeYamlError, match="contains it"):
        load_yaml("a: &a {b: {c: *a}}")


def test_ordinary_anchors_load_like_safe_load():
    text = """
defaults: &defaults {top_k: 5, device: cpu, weights: [1.0, 1.1]}
components:
  - {name: A, type: PhraseRetriever, params: {<<: *defaults, unit: phrase}}
  - {name: B, type: PhraseRetriever, params: *defaults}
"""
    assert load_yaml(text) == yaml.safe_load(text)
    assert load_yaml("") is None and load_yaml("3") == 3


@pytest.mark.parametrize("text", ["!!python/object/apply:os.system ['true']", "a: !!python/name:os.system"])
def test_only_safe_types(text):
    with pytest.raises(yaml.YAMLError):
        load_yaml(text)


def test_shipped_yaml_files_read_alike():
    files = sorted((REPO / "pipelines").rglob("*.yml")) + sorted((REPO / "train" / "configs").glob("*.yaml"))
    assert files
    for file in files:
        assert read_yaml(file) == yaml.safe_load(file.read_text(encoding="utf-8")), file


def test_load_pipeline_refuses_a_bomb_in_a_retriever_parameter_fast(model_dir, tmp_path):
    """End to end, in a child process capped at 4 GiB and 120 s: were the bomb to reach Haystack's schema
    validation, the child would run out of memory or time instead of stalling this test run."""
    pytest.importorskip("haystack")
    file = tmp_path / "pipeline.yml"
    file.write_text(_pipeline_with_bomb(model_dir, bomb()))
    script = f"""
import resource, time
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from dphr_haystack.nodes import load_pipeline
from dphr_haystack.errors import UnsafeYamlError
started = time.perf_counter()
try:
    load_pipeline({str(file)!r})
except UnsafeYamlError as exc:
    print("REFUSED", time.perf_counter() - started, exc)
"""
    env = dict(os.environ, PYTHONPATH=str(REPO), HAYSTACK_TELEMETRY_ENABLED="False", HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    line = next((x for x in done.stdout.splitlines() if x.startswith("REFUSED")), None)
    assert line is not None, done.stderr[-2000:]
    seconds = float(line.split()[1])
    assert seconds < 2.0 and str(file) in line


def test_the_same_pipeline_without_the_bomb_loads(model_dir, tmp_path):
    pytest.importorskip("haystack")
    from dphr_haystack.nodes import load_pipeline

    file = tmp_path / "pipeline.yml"
    file.write_text(_pipeline_with_bomb(model_dir, "null"))
    assert load_pipeline(file).get_node("Retriever").filter_threshold is None


def test_rest_api_refuses_a_bomb_pipeline_file(tmp_path, monkeypatch):
    pytest.importorskip("haystack")
    import importlib

    file = tmp_path / "rest.yml"
    file.write_text(f"version: ignore\ncomponents: {bomb()}\npipelines: []\n")
    monkeypatch.setenv("PIPELINE_YAML_PATH", str(file))
    monkeypatch.delitem(sys.modules, "dphr_haystack.nodes.rest_api", raising=False)
    with pytest.raises(UnsafeYamlError, match=str(file)):
        importlib.import_module("dphr_haystack.nodes.rest_api")


def test_eval_set_overrides_and_training_recipes_are_bounded(tmp_path):
    from dphr_haystack.cli.eval import parse_overrides

    with pytest.raises(UnsafeYamlError, match="--set Retriever.top_k"):
        parse_overrides([f"Retriever.top_k={bomb()}"])
    assert parse_overrides(["Retriever.top_k=5"]) == {"Retriever": {"top_k": 5}}
    pytest.importorskip("train.schema")
    from train.cli import _parse_value
    from train.schema import load_recipe

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"output_dir: out\nstages: {bomb()}\n")
    with pytest.raises(UnsafeYamlError, match=str(recipe)):
        load_recipe(recipe)
    with pytest.raises(UnsafeYamlError):
        _parse_value(bomb())
