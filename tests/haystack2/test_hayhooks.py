"""The Haystack 2 pipelines served by a real Hayhooks server (``hayhooks_pipelines/``), over HTTP.

One server process for the module: both pipelines deploy at startup from its pipelines directory (Hayhooks sets them
up in parallel threads), the indexing one again over HTTP (``/deploy_files``); both open one store directory
(``DPHR_STORE_PATH``), so what the indexing pipeline writes the query pipeline answers from. The shipped model, on
four one-sentence documents.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("hayhooks") is None:
    pytest.skip("hayhooks is not installed (bash scripts/setup.sh --haystack2 installs it)", allow_module_level=True)

import requests  # noqa: E402 (a dependency of hayhooks)

WRAPPERS = Path(__file__).resolve().parents[2] / "hayhooks_pipelines"
PIPELINES = ("dphr_phrase_qa", "dphr_indexing")
STARTUP_TIMEOUT_S = 180.0
REQUEST_TIMEOUT_S = 120.0

DOCUMENTS = [
    {"id": "eiffel", "content": "The Eiffel Tower was completed in 1889 for the World's Fair in Paris.",
     "meta": {"title": "Eiffel Tower"}},
    {"id": "python", "content": "Python is a programming language created by Guido van Rossum.",
     "meta": {"title": "Python"}},
    {"id": "moon", "content": "Neil Armstrong was the first person to walk on the Moon, in 1969.",
     "meta": {"title": "Moon landing"}},
    {"id": "everest", "content": "Mount Everest is the highest mountain on Earth, at 8,849 metres.",
     "meta": {"title": "Mount Everest"}},
]  # fmt: skip

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


class Server:
    """A running ``hayhooks run`` process: its base URL and its log."""

    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.process = process
        self.log = log

    def post(self, path: str, payload: Any) -> requests.Response:
        return requests.post(f"{self.url}{path}", json=payload, timeout=REQUEST_TIMEOUT_S)

    def get(self, path: str) -> requests.Response:
        return requests.get(f"{self.url}{path}", timeout=REQUEST_TIMEOUT_S)

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Ends the server and whatever it started (its own process group)."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"hayhooks exited with {process.returncode}:\n{log.read_text(errors='replace')}")
        try:
            if requests.get(f"{url}/status", timeout=5).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"hayhooks not ready after {STARTUP_TIMEOUT_S:.0f} s:\n{log.read_text(errors='replace')}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``hayhooks run`` on a free loopback port, the query pipeline in its pipelines directory."""
    root = tmp_path_factory.mktemp("hayhooks")
    pipelines = root / "pipelines"
    for name in PIPELINES:
        (pipelines / name).mkdir(parents=True)
        (pipelines / name / "pipeline_wrapper.py").write_bytes((WRAPPERS / name / "pipeline_wrapper.py").read_bytes())
    port = _free_port()
    env = {
        **os.environ,
        "HAYSTACK_TELEMETRY_ENABLED": "False",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "DPHR_STORE_PATH": str(root / "store"),
    }
    env.pop("DPHR_MODEL", None)
    log = root / "hayhooks.log"
    # The console script beside the interpreter (`python -m hayhooks` runs nothing in hayhooks 2.1.0).
    script = Path(sys.executable).with_name("hayhooks")
    cli = [str(script)] if script.is_file() else [sys.executable, "-c", "import hayhooks.cli as c; c.hayhooks_cli()"]
    command = [*cli, "run", "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*command, "--pipelines-dir", str(pipelines)],
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, process, log)
        yield Server(url, process, log)
    finally:
        _stop(process)


@pytest.fixture(autouse=True)
def _server_log_on_failure(server: Server) -> Iterator[None]:
    """Prints what the server logged during a test (pytest shows it when the test fails)."""
    start = len(server.log_text())
    yield
    print(f"--- hayhooks log ---\n{server.log_text()[start:]}")


@pytest.fixture(scope="module")
def deployed(server: Server) -> Server:
    """Both pipelines deployed from the pipelines directory at startup, then the indexing one deployed again over
    HTTP (as ``hayhooks pipeline deploy-files --overwrite`` does), onto the store the query pipeline holds open."""
    assert set(PIPELINES) <= set(server.get("/status").json()["pipelines"]), "not deployed at startup"
    files = {"pipeline_wrapper.py": (WRAPPERS / "dphr_indexing" / "pipeline_wrapper.py").read_text(encoding="utf-8")}
    response = server.post("/deploy_files", {"name": "dphr_indexing", "files": files, "overwrite": True})
    assert response.status_code == 200, response.text
    assert response.json() == {"name": "dphr_indexing", "success": True, "endpoint": "/dphr_indexing/run"}
    return server


def test_both_pipelines_are_deployed_and_documented(deployed: Server) -> None:
    status = deployed.get("/status")
    assert status.status_code == 200
    assert {"dphr_phrase_qa", "dphr_indexing"} <= set(status.json()["pipelines"])
    paths = deployed.get("/openapi.json").json()["paths"]
    assert {"/dphr_phrase_qa/run", "/dphr_indexing/run"} <= set(paths)
    assert deployed.get("/docs").status_code == 200


def test_indexed_documents_are_answered(deployed: Server) -> None:
    indexed = deployed.post("/dphr_indexing/run", {"documents": DOCUMENTS})
    assert indexed.status_code == 200, indexed.text
    assert indexed.json() == {"result": {"documents_written": 4, "phrases_encoded": 4}}

    for question, text, document_id in [
        ("When was the Eiffel Tower completed?", "1889", "eiffel"),
        ("Who created Python?", "Guido van Rossum", "python"),
    ]:
        response = deployed.post("/dphr_phrase_qa/run", {"question": question, "top_k": 3})
        assert response.status_code == 200, response.text
        print(response.text)
        result = response.json()["result"]
        assert result["question"] == question
        answers = result["answers"]
        assert 1 <= len(answers) <= 3
        best = answers[0]
        assert (best["text"], best["document_id"]) == (text, document_id)
        content = next(d["content"] for d in DOCUMENTS if d["id"] == document_id)
        assert content[best["start"] : best["end"]] == text
        assert best["meta"]["title"] == next(d["meta"]["title"] for d in DOCUMENTS if d["id"] == document_id)
        scores = [a["score"] for a in answers]
        assert all(0.0 <= s <= 1.0 for s in scores)
        assert scores == sorted(scores, reverse=True)
        assert best["score"] > 0.5
        assert not any(a["no_answer"] for a in answers)  # only when asked


def test_no_answer_comes_when_asked(deployed: Server) -> None:
    indexed = deployed.post("/dphr_indexing/run", {"documents": DOCUMENTS})
    assert indexed.status_code == 200, indexed.text
    question = {"question": "Who created Python?", "top_k": 3}
    plain = deployed.post("/dphr_phrase_qa/run", question).json()["result"]["answers"]
    for threshold, first in [(1.0, True), (0.0, False)]:
        response = deployed.post(
            "/dphr_phrase_qa/run", {**question, "no_answer": True, "no_answer_threshold": threshold}
        )
        assert response.status_code == 200, response.text
        answers = response.json()["result"]["answers"]
        marker = answers[0] if first else answers[-1]
        assert marker["no_answer"] and marker["text"] == "" and marker["document_id"] is None
        # the shipped model says how likely the documents hold an answer: "no answer" is scored by that
        holds = plain[0]["meta"]["holds_answer"]
        assert all(a["meta"]["holds_answer"] == holds for a in plain)
        assert marker["score"] == pytest.approx(1.0 - holds) and marker["meta"]["holds_answer"] == holds
        assert [a for a in answers if not a["no_answer"]] == plain
    refused = deployed.post("/dphr_phrase_qa/run", {**question, "no_answer": True, "no_answer_threshold": 1.5})
    assert refused.status_code == 422, refused.text


def test_the_shipped_reader_verifies_when_asked(deployed: Server) -> None:
    indexed = deployed.post("/dphr_indexing/run", {"documents": DOCUMENTS})
    assert indexed.status_code == 200, indexed.text
    question = {"question": "Who created Python?", "top_k": 3}
    plain = deployed.post("/dphr_phrase_qa/run", question).json()["result"]["answers"]
    response = deployed.post("/dphr_phrase_qa/run", {**question, "verify": True})
    assert response.status_code == 200, response.text
    verified = response.json()["result"]["answers"]
    assert [a["text"] for a in verified] == [a["text"] for a in plain]
    assert verified[0]["score"] != plain[0]["score"] and verified[0]["text"] == "Guido van Rossum"
    assert deployed.post("/dphr_phrase_qa/run", question).json()["result"]["answers"] == plain  # only when asked
    refused = deployed.post("/dphr_phrase_qa/run", {**question, "verify": "often"})
    assert refused.status_code == 422, refused.text


@pytest.mark.parametrize(
    ("path", "payload"),
    [
        ("/dphr_phrase_qa/run", {}),  # no question
        ("/dphr_phrase_qa/run", {"question": 42}),  # not a string
        ("/dphr_phrase_qa/run", {"question": "   "}),  # empty
        ("/dphr_phrase_qa/run", {"question": "Who?", "top_k": 0}),
        ("/dphr_phrase_qa/run", {"question": "Who?", "filters": {"field": "meta.title", "operator": "~", "value": 1}}),
        ("/dphr_indexing/run", {}),  # no documents
        ("/dphr_indexing/run", {"documents": "The Eiffel Tower."}),  # not a list
        ("/dphr_indexing/run", {"documents": [{"meta": {"title": "no content"}}]}),
        ("/dphr_indexing/run", {"documents": [{"content": ""}]}),
    ],
)
def test_bad_requests_are_client_errors(deployed: Server, path: str, payload: dict[str, Any]) -> None:
    response = deployed.post(path, payload)
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["detail"]
