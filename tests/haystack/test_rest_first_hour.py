"""What a first hour with the REST app (pipelines/rest_api.yml, the tiny model, in this process) must not hit.

``/query`` answers with ``top_k`` *different* phrases and the passages holding them; a question over
``DPHR_MAX_QUERY_CHARS`` is refused before any work on ``/query``, ``/query-batch`` and ``/compare``, and a query
that is not a JSON string is 422 (never coerced); ``/docs`` loads nothing from another site and starting the app
tries no NLTK download; Haystack's own ``rest_api`` package, installed beside it, changes nothing it serves.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.haystack.conftest import PIPELINES

pytest.importorskip("fastapi", reason='the serve extra is not installed (pip install "dphr-haystack[serve]")')
httpx = pytest.importorskip("httpx")

pytestmark = pytest.mark.unit

# The same statement in several passages: ranked by passage, each would answer with the same phrase.
REPEATED = [f"Nairobi is the capital and largest city of Kenya. Source {i}." for i in range(4)]
OTHERS = [
    "Paris is the capital and most populous city of France.",
    "Hamlet is a tragedy written by William Shakespeare.",
]
ONE_MB_QUERY = ("Who wrote the play Hamlet in 1601 and where was it first performed? " * 15_000)[:1_000_000]


class Client:
    """Requests to an ASGI app in this process (httpx's ASGI transport: no server, no network)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                return await client.request(method, url, timeout=300, **kwargs)

        return asyncio.run(send())

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)


def _settings(tmp: Path, model_dir: Path, **given: Any) -> Any:
    from dphr_haystack.nodes.rest import RestSettings

    return RestSettings.from_env(
        {},
        pipeline_yaml=PIPELINES / "rest_api.yml",
        store_path=tmp / "store",
        upload_dir=tmp / "uploads",
        phrase_retriever_params={"model": str(model_dir), "device": "cpu"},
        **given,
    )


@pytest.fixture(scope="module")
def client(tmp_path_factory, tiny_model_dir) -> Client:
    """The app on a store holding the repeated statement and two other passages."""
    from dphr_haystack.nodes.rest import build_app

    app = build_app(_settings(tmp_path_factory.mktemp("first-hour"), tiny_model_dir))
    client = Client(app)
    text = "\n\n".join(REPEATED + OTHERS).encode()
    response = client.post("/file-upload", files={"files": ("kenya.txt", text)})
    assert response.status_code == 200 and response.json()["documents_added"] == 6, response.text
    return client


def _errors(response: httpx.Response) -> str:
    assert "Traceback" not in response.text
    return " ".join(response.json()["errors"])


# ----------------------------------------------------------------- 1. distinct phrase answers
@pytest.mark.parametrize("top_k", [3, 6])
def test_query_answers_top_k_different_phrases_with_their_passages(client, top_k):
    from dphr_haystack.answers import normalize_answer

    body = {"query": "What is the capital of Kenya?", "params": {"Retriever": {"top_k": top_k}}}
    response = client.post("/query", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    texts = [normalize_answer(a["answer"]) for a in result["answers"]]
    assert texts and len(set(texts)) == len(texts), [a["answer"] for a in result["answers"]]
    assert len(texts) == top_k
    documents = {doc["id"]: doc for doc in result["documents"]}
    assert 0 < len(result["documents"]) <= top_k and len(documents) == len(result["documents"])
    for answer in result["answers"]:  # each answer sits at its offsets in a passage the response returns
        (document_id,) = answer["document_ids"]
        span = answer["offsets_in_context"][0]
        assert documents[document_id]["content"] == answer["context"]
        assert answer["context"][span["start"] : span["end"]] == answer["answer"]


def test_query_batch_answers_each_query_with_different_phrases(client):
    from dphr_haystack.answers import normalize_answer

    questions = ["What is the capital of Kenya?", "Which city is the largest in Kenya?"]
    response = client.post("/query-batch", json={"queries": questions, "params": {"Retriever": {"top_k": 6}}})
    assert response.status_code == 200, response.text
    for result in response.json():
        texts = [normalize_answer(a["answer"]) for a in result["answers"]]
        assert texts and len(set(texts)) == len(texts), texts


# ----------------------------------------------------------------- 2. question length and type
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/query", {"query": ONE_MB_QUERY}),
        ("/query-batch", {"queries": ["Who wrote Hamlet?", ONE_MB_QUERY]}),
        ("/compare", {"query": ONE_MB_QUERY, "top_k": 3}),
    ],
)
def test_a_question_over_the_bound_is_refused_before_any_work(client, path, body):
    started = time.perf_counter()
    response = client.post(path, json=body)
    elapsed = time.perf_counter() - started
    assert response.status_code == 413, (path, response.status_code, response.text[:300])
    message = _errors(response)
    assert "DPHR_MAX_QUERY_CHARS=1000" in message and "1000000 characters" in message, message
    assert len(response.content) < 1_000, "the question is echoed back"
    assert elapsed < 5, f"{path} took {elapsed:.2f}s to refuse a 1 MB question"


def test_a_question_at_the_bound_is_answered(client):
    question = ("What is the capital of Kenya? " * 40)[:1_000]
    assert client.post("/query", json={"query": question}).status_code == 200
    assert client.post("/compare", json={"query": question, "top_k": 2}).status_code == 200
    assert client.post("/query-batch", json={"queries": [question]}).status_code == 200


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/query", {"query": 42}),
        ("/query", {"query": 4.2}),
        ("/query", {"query": True}),
        ("/query", {"query": ["Who wrote Hamlet?"]}),
        ("/query-batch", {"queries": ["Who wrote Hamlet?", 42]}),
        ("/compare", {"query": 42}),
        ("/compare", {"query": False, "top_k": 2}),
    ],
)
def test_a_query_that_is_not_a_string_is_422(client, path, body):
    response = client.post(path, json=body)
    assert response.status_code == 422, (path, body, response.text[:300])
    assert "quer" in _errors(response)


def test_the_question_bound_comes_from_the_environment():
    from dphr_haystack.errors import InvalidParameterError
    from dphr_haystack.nodes.rest import RestSettings

    assert RestSettings.from_env({}).max_query_chars == 1_000
    assert RestSettings.from_env({"DPHR_MAX_QUERY_CHARS": "20000"}).max_query_chars == 20_000
    with pytest.raises(InvalidParameterError, match="DPHR_MAX_QUERY_CHARS"):
        RestSettings.from_env({"DPHR_MAX_QUERY_CHARS": "0"})


def test_a_smaller_question_bound_is_applied(tmp_path, tiny_model_dir):
    from dphr_haystack.nodes.rest import build_app

    small = Client(build_app(_settings(tmp_path, tiny_model_dir, max_query_chars=20)))
    assert small.post("/query", json={"query": "Who wrote Hamlet, then"}).status_code == 413  # 22 characters
    assert small.post("/query", json={"query": "Who wrote Hamlet?"}).status_code == 200


# ----------------------------------------------------------------- 3. offline
_EXTERNAL = re.compile(r"(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}")


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_api_docs_load_nothing_from_another_site(client, page):
    response = client.get(page)
    if page == "/redoc" and response.status_code == 404:
        pytest.skip("no /redoc")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    html = response.text
    assert not _EXTERNAL.findall(html), _EXTERNAL.findall(html)
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
    assert any(a.endswith(".js") for a in assets), assets
    for asset in assets:
        got = client.get(asset)
        assert got.status_code == 200 and got.content, asset
    for url in re.findall(r"""url:\s*['"]([^'"]+)['"]|spec-url=['"]([^'"]+)['"]""", html):
        spec = client.get(next(u for u in url if u))
        assert spec.status_code == 200 and spec.json()["paths"]["/query"]


def test_starting_the_app_tries_no_nltk_download(tmp_path, tiny_model_dir, monkeypatch, capfd):
    """Haystack's PreProcessor asks NLTK to download punkt when it is missing; the served one needs none."""
    nltk_downloader = pytest.importorskip("nltk.downloader")
    from dphr_haystack.nodes.rest import build_app

    opened: list[Any] = []

    def no_network(url: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(url)
        raise OSError("no network in this test")

    monkeypatch.setattr(nltk_downloader, "urlopen", no_network)
    capfd.readouterr()
    build_app(_settings(tmp_path, tiny_model_dir))
    err = capfd.readouterr().err
    assert not opened, opened
    assert "nltk_data" not in err and "punkt" not in err, err[-2000:]


# ----------------------------------------------------------------- 4. beside Haystack's own rest_api package
def test_haystacks_rest_api_package_beside_it_changes_nothing_served(tmp_path, tiny_model_dir, monkeypatch):
    """A ``rest_api`` package (Haystack 1.x's REST API) whose config names another pipeline file is never read:
    the app serves the shipped rest_api.yml, and its pipelines are ``app.state.served``'s."""
    package = tmp_path / "site" / "rest_api"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('Haystack REST package: must not be imported')\n")
    (package / "config.py").write_text("PIPELINE_YAML_PATH = 'pipelines.haystack-pipeline.yml'\n")
    monkeypatch.syspath_prepend(str(package.parent))
    monkeypatch.delenv("PIPELINE_YAML_PATH", raising=False)
    monkeypatch.delitem(sys.modules, "rest_api", raising=False)
    from dphr_haystack.nodes import PhraseRetriever
    from dphr_haystack.nodes.rest import RestSettings, build_app

    settings = RestSettings.from_env(
        store_path=tmp_path / "store", phrase_retriever_params={"model": str(tiny_model_dir), "device": "cpu"}
    )
    assert settings.pipeline_yaml.samefile(PIPELINES / "rest_api.yml")  # not the other package's default file
    app = build_app(settings)
    assert "rest_api" not in sys.modules
    served = app.state.served
    assert isinstance(served.query.get_node("Retriever"), PhraseRetriever)
    assert served.document_store is served.query.get_document_store()
    assert Client(app).get("/store").json()["query_pipeline"] == "query"


def test_an_unknown_document_index_is_404_not_500(client):
    """Found by ``benchmarks.haystack.rest_malformed``: reading an index the store does not have was a 500."""
    for index in ("other", "../../etc"):
        response = client.post(f"/documents/get_by_filters?index={index}", json={"filters": {}})
        assert response.status_code == 404, response.text[:300]
        assert "does not exist" in _errors(response)


def test_an_upload_split_past_any_passage_is_400_not_500(client):
    """Found by ``benchmarks.haystack.rest_malformed``: ``split_length`` 10**30 crashed Haystack's PreProcessor."""
    response = client.post(
        "/file-upload",
        files={"files": ("a.txt", b"Nairobi is the capital of Kenya.\n", "text/plain")},
        data={"split_length": str(10**30)},
    )
    assert response.status_code in (400, 422), response.text[:300]


@pytest.mark.parametrize("top_k", ["5", 1.5, True])
def test_compare_refuses_a_top_k_that_is_not_a_whole_number(client, top_k):
    """Found by ``benchmarks.haystack.rest_malformed``: ``/compare`` coerced what ``/query`` refuses."""
    response = client.post("/compare", json={"query": "What is the capital of Kenya?", "top_k": top_k})
    assert response.status_code == 422, response.text[:300]
    assert "top_k" in _errors(response)
