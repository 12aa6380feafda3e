"""The components under the ``haystack_integrations`` namespace: the same classes, saved under names that haystack-ai
loads without an allowlist; every shipped Haystack 2 pipeline loads with a plain ``Pipeline.loads`` and round-trips;
the names saved before still load (with the allowlist where haystack-ai has one)."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from haystack import Pipeline
from haystack.core.component import component

import dphr_haystack.haystack2 as hs2
from dphr_haystack import DEFAULT_MODEL
from dphr_haystack.haystack2.pipelines import PIPELINES, STORE_INDEX
from haystack_integrations.components.retrievers.dense_phrases import PhraseRetriever
from haystack_integrations.components.writers.dense_phrases import PhraseIndexer
from haystack_integrations.document_stores.dense_phrases import PhraseDocumentStore

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "pipelines" / "haystack2"
FILES = sorted(FOLDER.glob("*.yml"))
# Each public class, its haystack_integrations module and the name pipelines saved it under before.
PUBLIC = [
    (PhraseDocumentStore, "haystack_integrations.document_stores.dense_phrases", "document_store"),
    (PhraseRetriever, "haystack_integrations.components.retrievers.dense_phrases", "retriever"),
    (PhraseIndexer, "haystack_integrations.components.writers.dense_phrases", "indexer"),
]
LEGACY = {f"{module}.{cls.__name__}": f"dphr_haystack.haystack2.{old}.{cls.__name__}" for cls, module, old in PUBLIC}
# haystack-ai 3 loads classes from allow-listed modules only; 2.x has no allowlist (and no such argument).
HAS_ALLOWLIST = "allowed_modules" in inspect.signature(Pipeline.loads).parameters


def _type_names(data: Any) -> set[str]:
    """Every dotted ``type`` value in a pipeline's data (classes; not ``type: single`` of a device)."""
    if isinstance(data, dict):
        found = {data["type"]} if isinstance(data.get("type"), str) and "." in data["type"] else set()
        return found.union(*(_type_names(v) for v in data.values()))
    if isinstance(data, list):
        return set().union(*(_type_names(v) for v in data))
    return set()


def _legacy_text(text: str) -> str:
    for current, legacy in LEGACY.items():
        text = text.replace(current, legacy)
    return text


def _run_fresh(code: str) -> str:
    """``code`` in a new interpreter from the repository root (nothing imported yet); its stdout."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_the_namespace_modules_re_export_the_same_classes():
    assert (PhraseDocumentStore, PhraseRetriever, PhraseIndexer) == (
        hs2.PhraseDocumentStore,
        hs2.PhraseRetriever,
        hs2.PhraseIndexer,
    )
    for cls, module, _ in PUBLIC:
        assert cls.__module__ == module
        assert getattr(sys.modules[module], cls.__name__) is cls


def test_components_are_registered_under_both_names():
    for cls, module, _ in PUBLIC[1:]:
        current = f"{module}.{cls.__name__}"
        assert component.registry[current] is cls
        assert component.registry[LEGACY[current]] is cls


def test_the_shared_levels_are_namespace_packages():
    base = ROOT / "haystack_integrations"
    for level in ["", "components", "components/retrievers", "components/writers", "document_stores"]:
        assert (base / level).is_dir() and not (base / level / "__init__.py").exists(), level
    for _, module, _ in PUBLIC:
        assert (ROOT / Path(*module.split(".")) / "__init__.py").is_file()


def test_the_public_names_hold_whatever_is_imported_first():
    """Built from ``dphr_haystack.haystack2`` alone, a pipeline still saves the haystack_integrations names."""
    out = _run_fresh(
        """
        from haystack import Pipeline
        from dphr_haystack.haystack2.pipelines import PIPELINES, default_store
        text = PIPELINES["hybrid_rrf"](default_store()).dumps()
        assert "dphr_haystack" not in text
        assert Pipeline.loads(text).dumps() == text
        print("ok")
        """
    )
    assert out.strip() == "ok"


def test_to_dict_writes_the_public_names():
    store = PhraseDocumentStore(index=f"names-{uuid.uuid4()}")
    retriever = PhraseRetriever(document_store=store)
    indexer = PhraseIndexer(document_store=store)
    assert store.to_dict()["type"] == "haystack_integrations.document_stores.dense_phrases.PhraseDocumentStore"
    assert retriever.to_dict()["type"] == "haystack_integrations.components.retrievers.dense_phrases.PhraseRetriever"
    assert indexer.to_dict()["type"] == "haystack_integrations.components.writers.dense_phrases.PhraseIndexer"
    assert retriever.to_dict()["init_parameters"]["document_store"] == store.to_dict()


def test_shipped_files_name_haystack_and_haystack_integrations_only():
    assert {f.stem for f in FILES} == set(PIPELINES)
    names = set().union(*(_type_names(yaml.safe_load(f.read_text())) for f in FILES))
    assert {n for n in names if not n.startswith(("haystack.", "haystack_integrations."))} == set()
    assert set(LEGACY) <= names


@pytest.mark.parametrize("file", FILES, ids=lambda f: f.name)
def test_shipped_file_loads_with_a_plain_pipeline_loads_and_round_trips(file):
    text = file.read_text()
    pipeline = Pipeline.loads(text)  # no allowlist argument
    dumped = pipeline.dumps()
    assert dumped == text
    assert Pipeline.loads(dumped).dumps() == text


def test_shipped_files_load_in_a_fresh_interpreter():
    """Haystack imports the haystack_integrations modules itself; nothing of the project is imported first."""
    out = _run_fresh(
        f"""
        import sys
        from pathlib import Path
        from haystack import Pipeline
        assert not any(m.startswith(("dphr_haystack", "haystack_integrations")) for m in sys.modules)
        for file in sorted(Path({str(FOLDER)!r}).glob("*.yml")):
            text = file.read_text()
            assert Pipeline.loads(Pipeline.loads(text).dumps()).dumps() == text, file.name
            print(file.name)
        """
    )
    assert out.split() == [f.name for f in FILES]


def test_pipelines_built_in_python_dump_and_load_without_an_allowlist():
    out = _run_fresh(
        """
        import haystack_integrations.components.retrievers.dense_phrases
        from haystack import Pipeline
        from dphr_haystack.haystack2.pipelines import PIPELINES, default_store
        store = default_store()
        for name, build in PIPELINES.items():
            text = build(store).dumps()
            assert "dphr_haystack" not in text, name
            loaded = Pipeline.loads(text)
            assert loaded.dumps() == text, name
        print("ok")
        """
    )
    assert out.strip() == "ok"


@pytest.mark.parametrize("file", FILES, ids=lambda f: f.name)
def test_files_saved_under_the_former_names_still_load(file):
    text = _legacy_text(file.read_text())
    assert "haystack_integrations" not in text
    if HAS_ALLOWLIST:
        from haystack.core.errors import DeserializationError

        with pytest.raises(DeserializationError, match="allowlist"):
            Pipeline.loads(text)
        pipeline = Pipeline.loads(text, allowed_modules=hs2.ALLOWED_MODULES)
        assert hs2.load_pipeline(file.name).dumps() == file.read_text()
    else:
        pipeline = Pipeline.loads(text)
    assert pipeline.dumps() == file.read_text()  # saved again under the public names


def test_a_store_dict_under_the_former_name_deserialises():
    index = f"legacy-{uuid.uuid4()}"
    data = {"type": "dphr_haystack.haystack2.document_store.PhraseDocumentStore", "init_parameters": {"index": index}}
    store = PhraseDocumentStore.from_dict(data)
    assert isinstance(store, PhraseDocumentStore) and store.index == index


def test_index_then_answer_through_the_shipped_files(tiny_model_dir, hs2_docs, one_torch_thread):
    index = f"namespace-{uuid.uuid4()}"

    def load(name: str) -> Pipeline:
        text = (FOLDER / f"{name}.yml").read_text()
        text = text.replace(f"model: {DEFAULT_MODEL}", f"model: {tiny_model_dir}")
        return Pipeline.loads(text.replace(f"index: {STORE_INDEX}", f"index: {index}"))

    out = load("indexing").run({"indexer": {"documents": hs2_docs}})
    assert out["indexer"] == {"documents_written": 6, "phrases_encoded": 6}
    qa = load("phrase_qa")
    assert isinstance(qa.get_component("retriever"), PhraseRetriever)
    result = qa.run({"retriever": {"query": "What is the capital of France?", "top_k": 3}})
    assert len(result["retriever"]["answers"]) == 3
    hybrid = load("hybrid_rrf").run({"bm25": {"query": "Paris"}, "phrase": {"query": "Paris"}})
    assert hybrid["joiner"]["documents"]
