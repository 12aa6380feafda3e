"""``dphr serve``: one command from an empty store directory to the REST API and web page (the tiny model).

It indexes ``--corpus`` into an empty store and then serves it; a restart on the same store serves what is there
without indexing again; bad queries get 4xx JSON; a missing ``serve`` extra or a port in use is a one-line error
before any model loads.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._server import free_port, running_server
from tests.conftest import tiny_passages
from tests.haystack.conftest import REPO

pytest.importorskip("fastapi", reason='the serve extra is not installed (pip install "dphr-haystack[serve]")')
requests = pytest.importorskip("requests")

pytestmark = pytest.mark.unit


@contextlib.contextmanager
def _dphr_serve(tmp: Path, *args: str, log_name: str = "serve.log") -> Iterator[tuple[str, Path]]:
    """``python -m dphr_haystack serve ARGS --port P`` until /initialized answers; yields its URL and log file."""
    port = free_port()
    log_file = tmp / log_name
    env = {**os.environ, "HAYSTACK_TELEMETRY_ENABLED": "False", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "dphr_haystack", "serve", *args, "--port", str(port)]
    with running_server(command, port, log_file, tmp, {**env, "PYTHONPATH": str(REPO)}, "dphr serve") as url:
        yield url, log_file


def test_dphr_serve_indexes_a_corpus_once_then_answers(tmp_path, tiny_model_dir):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(p) for p in tiny_passages()) + "\n", encoding="utf-8")
    args = ("--store", "store", "--corpus", str(corpus), "--model", str(tiny_model_dir), "--device", "cpu")
    with _dphr_serve(tmp_path, *args) as (url, log):
        assert "indexing 6 passages" in log.read_text()
        assert requests.get(f"{url}/store", timeout=30).json()["documents"] == 6
        body = {"query": "Who wrote Hamlet?", "params": {"Retriever": {"top_k": 6}}}
        answered = requests.post(f"{url}/query", json=body, timeout=60)
        assert answered.status_code == 200, answered.text
        texts = {p["text"] for p in tiny_passages()}
        assert answered.json()["answers"]  # different phrases, with the passages holding them
        assert answered.json()["documents"] and {d["content"] for d in answered.json()["documents"]} <= texts
        stored = requests.post(f"{url}/documents/get_by_filters", json={"filters": {}}, timeout=60).json()
        assert {d["content"] for d in stored} == texts
        empty = requests.post(f"{url}/query", json={"query": ""}, timeout=30)
        assert empty.status_code == 400 and empty.json() == {"errors": ["InvalidQueryError: the query is empty"]}
        zero = requests.post(f"{url}/query", json={"query": "x", "params": {"Retriever": {"top_k": 0}}}, timeout=30)
        assert zero.status_code == 400 and "top_k=0" in zero.json()["errors"][0], zero.text
        page = requests.get(f"{url}/", timeout=30)
        assert page.status_code == 200 and "<title>dphr" in page.text
    assert (tmp_path / "store").is_dir()  # --store is relative to the working directory

    with _dphr_serve(tmp_path, *args, log_name="again.log") as (url, log):  # the same store: not indexed again
        assert "already holds 6 documents" in log.read_text() and "indexing 6" not in log.read_text()
        assert requests.get(f"{url}/store", timeout=30).json()["documents"] == 6


def test_a_missing_serve_extra_is_one_line_naming_the_install_command(monkeypatch, capsys):
    from dphr_haystack.cli import main

    monkeypatch.setitem(sys.modules, "fastapi", None)  # import fastapi now fails, as where it is not installed
    assert main(["serve"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == 'dphr: error: dphr serve needs FastAPI: pip install "dphr-haystack[serve]"'


def test_a_port_in_use_fails_before_the_model_loads(capsys):
    from dphr_haystack.cli import main

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        started = time.monotonic()
        assert main(["serve", "--port", str(busy.getsockname()[1])]) == 2
    assert time.monotonic() - started < 5
    assert "cannot listen on 127.0.0.1" in capsys.readouterr().err
