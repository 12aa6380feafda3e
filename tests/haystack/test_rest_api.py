"""The REST app (``dphr_haystack.nodes.rest_api:app``, Haystack 1.x's REST endpoints) serving pipelines/rest_api.yml
over real HTTP: a text file uploaded through /file-upload becomes answerable through /query, filters apply, a delete
by filter persists, and concurrent queries all succeed. Skipped without the serve extra (FastAPI)."""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests._server import free_port, running_server
from tests.conftest import tiny_passages
from tests.haystack.conftest import PIPELINES, REPO

pytest.importorskip("fastapi", reason='the serve extra is not installed (pip install "dphr-haystack[serve]")')
requests = pytest.importorskip("requests")

pytestmark = pytest.mark.unit


@pytest.fixture
def server(tmp_path, tiny_model_dir):
    """uvicorn serving pipelines/rest_api.yml with the tiny model on a store directory under tmp_path."""
    port = free_port()
    env = {
        **os.environ,
        "PIPELINE_YAML_PATH": str(PIPELINES / "rest_api.yml"),
        "DOCUMENTSTORE_PARAMS_PATH": str(tmp_path / "store"),
        "RETRIEVER_PARAMS_MODEL": str(tiny_model_dir),
        "RETRIEVER_PARAMS_DEVICE": "cpu",
        "FILE_UPLOAD_PATH": str(tmp_path / "uploads"),
        "HAYSTACK_TELEMETRY_ENABLED": "False",
        "OMP_NUM_THREADS": "1",
    }
    command = [sys.executable, "-m", "uvicorn", "dphr_haystack.nodes.rest_api:app", "--host", "127.0.0.1"]
    with running_server([*command, "--port", str(port)], port, tmp_path / "server.log", REPO, env) as url:
        yield url, tmp_path / "store"


def _query(url: str, question: str, filters: dict | None = None) -> dict:
    params = {"Retriever": {"top_k": 3, **({"filters": filters} if filters else {})}}
    response = requests.post(f"{url}/query", json={"query": question, "params": params}, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_uploaded_text_is_answerable_filterable_and_deletable(server, tmp_path):
    from dphr_haystack.nodes import PhraseDocumentStore

    url, store_dir = server
    paragraphs = [p["text"] for p in tiny_passages()]
    upload = tmp_path / "notes.txt"
    upload.write_text("\n\n".join(paragraphs), encoding="utf-8")
    with upload.open("rb") as handle:
        response = requests.post(
            f"{url}/file-upload",
            files={"files": ("notes.txt", handle, "text/plain")},
            data={"meta": json.dumps({"source": "notes"})},
            timeout=300,
        )
    assert response.status_code == 200, response.text

    result = _query(url, "What is the capital of France?")
    assert result["answers"] and result["documents"]
    assert all(doc["content"].strip() in paragraphs for doc in result["documents"])
    assert all(answer["answer"] in answer["context"] for answer in result["answers"])
    assert _query(url, "What is the capital of France?", {"source": ["elsewhere"]})["documents"] == []

    with ThreadPoolExecutor(4) as pool:  # four concurrent clients
        results = list(pool.map(lambda q: _query(url, q), ["Who wrote Hamlet?", "capital of France", "rivers"] * 4))
    assert all(r["documents"] for r in results)

    deleted = requests.post(f"{url}/documents/delete_by_filters", json={"filters": {"source": ["notes"]}}, timeout=60)
    assert deleted.status_code == 200 and deleted.json() is True
    assert _query(url, "What is the capital of France?")["documents"] == []
    reopened = PhraseDocumentStore(path=str(store_dir))  # persisted: another process sees the deletion
    assert reopened.get_document_count() == 0 and reopened.get_phrase_document_count() == 0


def test_the_indexing_pipeline_of_another_process_feeds_the_server(server, tmp_path, tiny_model_dir, monkeypatch):
    """pipelines/indexing.yml, run here (another process than the server) on the server's store directory."""
    from haystack import Pipeline

    import dphr_haystack.nodes  # noqa: F401  (registers the nodes for Haystack's own loader)

    url, store_dir = server
    (tmp_path / "doc.txt").write_text(tiny_passages()[1]["text"], encoding="utf-8")
    for name, value in (
        ("DOCUMENTSTORE_PARAMS_PATH", str(store_dir)),
        ("RETRIEVER_PARAMS_MODEL", str(tiny_model_dir)),
        ("RETRIEVER_PARAMS_DEVICE", "cpu"),
    ):
        monkeypatch.setenv(name, value)
    indexing = Pipeline.load_from_yaml(PIPELINES / "indexing.yml", pipeline_name="indexing")
    indexing.run(file_paths=[tmp_path / "doc.txt"])
    assert indexing.get_document_store().get_phrase_document_count() == 1
    assert _query(url, "Who wrote Hamlet?")["documents"][0]["content"] == tiny_passages()[1]["text"]
