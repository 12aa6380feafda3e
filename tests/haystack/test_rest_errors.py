"""The REST API (pipelines/rest_api.yml over real HTTP) answers bad requests with 4xx JSON and keeps serving.

Malformed ``/query`` bodies and upload file names are client errors (``{"errors": [...]}``, no traceback); an
upload over ``DPHR_MAX_UPLOAD_BYTES`` or with a passage over ``DPHR_MAX_UPLOAD_PASSAGE_CHARS`` is 413; a failed
upload leaves nothing in ``FILE_UPLOAD_PATH``; node parameters overridden through the environment in their
string form (``DOCUMENTSTORE_PARAMS_PROGRESS_BAR=false``) are coerced, and a server whose query pipeline cannot be
built refuses to start instead of saying it is initialized.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._server import free_port, running_server
from tests.conftest import tiny_passages
from tests.haystack.conftest import PIPELINES, REPO

pytest.importorskip("fastapi", reason='the serve extra is not installed (pip install "dphr-haystack[serve]")')
requests = pytest.importorskip("requests")

pytestmark = pytest.mark.unit

MAX_BYTES = 32_768
MAX_PASSAGE = 4_000


def _env(tmp: Path, model_dir: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PIPELINE_YAML_PATH": str(PIPELINES / "rest_api.yml"),
        "DOCUMENTSTORE_PARAMS_PATH": str(tmp / "store"),
        "RETRIEVER_PARAMS_MODEL": str(model_dir),
        "RETRIEVER_PARAMS_DEVICE": "cpu",
        "FILE_UPLOAD_PATH": str(tmp / "uploads"),
        "HAYSTACK_TELEMETRY_ENABLED": "False",
        "OMP_NUM_THREADS": "1",
        **extra,
    }


@contextlib.contextmanager
def _serve(tmp: Path, env: dict[str, str]) -> Iterator[str]:
    """uvicorn serving the app with ``env``; yields its URL once /initialized answers."""
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "dphr_haystack.nodes.rest_api:app", "--host", "127.0.0.1"]
    with running_server([*command, "--port", str(port)], port, tmp / "server.log", REPO, env) as url:
        yield url


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model_dir) -> Iterator[tuple[str, Path]]:
    """One server for the module, with small upload bounds and the six tiny passages uploaded."""
    tmp = tmp_path_factory.mktemp("rest-errors")
    env = _env(
        tmp,
        tiny_model_dir,
        DPHR_MAX_UPLOAD_BYTES=str(MAX_BYTES),
        DPHR_MAX_UPLOAD_PASSAGE_CHARS=str(MAX_PASSAGE),
    )
    with _serve(tmp, env) as url:
        text = "\n\n".join(p["text"] for p in tiny_passages()).encode()
        response = requests.post(f"{url}/file-upload", files={"files": ("notes.txt", text)}, timeout=300)
        assert response.status_code == 200, response.text
        yield url, tmp / "uploads"


def _assert_client_error(response, status: int | None = None) -> None:
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:500])
    if status is not None:
        assert response.status_code == status, response.text[:300]
    assert "Traceback" not in response.text, response.text[:500]
    body = response.json()
    assert isinstance(body, dict) and (body.get("errors") or body.get("detail")), body


def _assert_still_serving(url: str) -> None:
    response = requests.post(
        f"{url}/query", json={"query": "Who wrote Hamlet?", "params": {"Retriever": {"top_k": 2}}}, timeout=60
    )
    assert response.status_code == 200, response.text[:500]
    assert response.json()["documents"]


# ----------------------------------------------------------------- malformed /query bodies
BAD_QUERIES = {
    "empty query": {"query": ""},
    "blank query": {"query": "   "},
    "query null": {"query": None},
    "no query": {},
    "extra field": {"query": "x", "bogus": 1},
    "top_k 0": {"query": "x", "params": {"Retriever": {"top_k": 0}}},
    "top_k -1": {"query": "x", "params": {"Retriever": {"top_k": -1}}},
    "top_k x": {"query": "x", "params": {"Retriever": {"top_k": "x"}}},
    "top_k float": {"query": "x", "params": {"Retriever": {"top_k": 2.5}}},
    "top_k huge": {"query": "x", "params": {"Retriever": {"top_k": 10**12}}},
    "top_k bool": {"query": "x", "params": {"Retriever": {"top_k": True}}},
    "missing node": {"query": "x", "params": {"Nope": {"top_k": 3}}},
    "params list": {"query": "x", "params": [1]},
    "params string": {"query": "x", "params": "x"},
    "node params list": {"query": "x", "params": {"Retriever": [1]}},
    "node params string": {"query": "x", "params": {"Retriever": "x"}},
    "unknown node param": {"query": "x", "params": {"Retriever": {"bogus": 1}}},
    "global top_k bad": {"query": "x", "params": {"top_k": -3}},
    "filters list": {"query": "x", "params": {"Retriever": {"filters": [1]}}},
    "filters string": {"query": "x", "params": {"Retriever": {"filters": "x"}}},
    "unit bad": {"query": "x", "params": {"Retriever": {"unit": "bogus"}}},
    "max_answer_length 0": {"query": "x", "params": {"Retriever": {"max_answer_length": 0}}},
    "debug not a bool": {"query": "x", "debug": "x"},
}


@pytest.mark.parametrize("case", list(BAD_QUERIES))
def test_malformed_query_bodies_are_client_errors(server, case):
    url, _ = server
    _assert_client_error(requests.post(f"{url}/query", json=BAD_QUERIES[case], timeout=60))
    _assert_still_serving(url)


def test_typed_errors_keep_haystacks_error_shape(server):
    url, _ = server
    response = requests.post(f"{url}/query", json=BAD_QUERIES["top_k 0"], timeout=60)
    assert response.status_code == 400 and "top_k" in response.json()["errors"][0]


# ----------------------------------------------------------------- uploads
@pytest.mark.parametrize("name", ["../x.txt", "a/b.txt", "..", "a\\b.txt", "."])
def test_upload_file_names_with_path_separators_are_refused(server, name):
    url, uploads = server
    response = requests.post(f"{url}/file-upload", files={"files": (name, b"Paris is in France.")}, timeout=60)
    _assert_client_error(response, 400)
    assert not any(uploads.iterdir()) and not (uploads.parent / "x.txt").exists()
    _assert_still_serving(url)


def test_an_empty_file_is_refused(server):
    url, uploads = server
    response = requests.post(f"{url}/file-upload", files={"files": ("empty.txt", b"")}, timeout=60)
    _assert_client_error(response, 400)
    assert not any(uploads.iterdir())


def test_an_upload_just_over_the_limit_is_413(server):
    url, uploads = server
    started = time.monotonic()
    body = (b"Paris is the capital of France.\n\n" * (MAX_BYTES // 33 + 1))[: MAX_BYTES + 1]
    response = requests.post(f"{url}/file-upload", files={"files": ("big.txt", body)}, timeout=60)
    _assert_client_error(response, 413)
    assert time.monotonic() - started < 10
    assert not any(uploads.iterdir())
    _assert_still_serving(url)


def test_a_request_over_the_limit_without_a_length_is_413(server):
    """A chunked body (no Content-Length) is counted as it arrives."""
    url, _ = server

    def chunks():
        for _ in range(MAX_BYTES // 1024 + 2):
            yield b"x" * 1024

    response = requests.post(f"{url}/query", data=chunks(), headers={"content-type": "application/json"}, timeout=60)
    _assert_client_error(response, 413)
    _assert_still_serving(url)


def test_a_passage_over_the_bound_is_413_before_encoding(server):
    url, uploads = server
    line = ("word " * (MAX_PASSAGE // 5 + 10)).encode()
    response = requests.post(f"{url}/file-upload", files={"files": ("line.txt", line)}, timeout=60)
    _assert_client_error(response, 413)
    assert not any(uploads.iterdir())


@pytest.mark.parametrize(
    "data",
    [
        {"additional_params": "{not json"},
        {"meta": "{not json"},
        {"meta": "[1]"},
        {"split_by": "no-such-unit"},
    ],
)
def test_a_failed_upload_leaves_no_file(server, data):
    url, uploads = server
    response = requests.post(
        f"{url}/file-upload", files={"files": ("ok.txt", b"Paris is in France.")}, data=data, timeout=60
    )
    assert not any(uploads.iterdir()), sorted(p.name for p in uploads.iterdir())
    assert response.status_code >= 400 and "Traceback" not in response.text, response.text[:500]
    assert response.json()["errors"]
    _assert_still_serving(url)


# ----------------------------------------------------------------- environment overrides
def test_string_overrides_of_typed_parameters_are_coerced(tmp_path, tiny_model_dir):
    env = _env(
        tmp_path,
        tiny_model_dir,
        DOCUMENTSTORE_PARAMS_PROGRESS_BAR="false",
        RETRIEVER_PARAMS_TOP_K="2",
        RETRIEVER_PARAMS_WHOLE_WORDS="true",
    )
    with _serve(tmp_path, env) as url:
        text = "\n\n".join(p["text"] for p in tiny_passages()).encode()
        assert requests.post(f"{url}/file-upload", files={"files": ("n.txt", text)}, timeout=300).status_code == 200
        response = requests.post(f"{url}/query", json={"query": "Who wrote Hamlet?"}, timeout=60)
        assert response.status_code == 200, response.text[:800]
        assert 0 < len(response.json()["documents"]) <= 2


@pytest.mark.parametrize(
    ("name", "value"),
    [("DOCUMENTSTORE_PARAMS_PROGRESS_BAR", "maybe"), ("RETRIEVER_PARAMS_TOP_K", "0"), ("RETRIEVER_PARAMS_TOP_K", "x")],
)
def test_a_server_that_could_not_answer_refuses_to_start(tmp_path, tiny_model_dir, name, value):
    done = subprocess.run(
        [sys.executable, "-c", "import dphr_haystack.nodes.rest_api"],
        cwd=REPO,
        env=_env(tmp_path, tiny_model_dir, **{name: value}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    assert name in done.stderr, done.stderr[-2000:]
