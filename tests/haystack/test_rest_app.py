"""The REST app's own endpoints and settings (pipelines/rest_api.yml over real HTTP, the tiny model).

Besides Haystack's endpoints (test_rest_api.py, test_rest_errors.py): ``/file-upload`` says how many passages it
added, ``/compare`` runs phrase answers, BM25, phrase passages and the hybrid on the served store with a latency per
column, ``/query-batch`` answers each query as ``/query`` does, ``/store`` counts the documents, ``GET /`` serves the
web page under a strict Content-Security-Policy, only ``DPHR_CORS_ORIGINS`` may call the API from other pages, unknown
paths are JSON errors, and a pipeline file whose store has no ``path`` still answers what was uploaded (the indexing
and query pipelines share one store).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import tiny_passages
from tests.haystack.conftest import PIPELINES
from tests.haystack.test_rest_errors import _env, _serve

pytest.importorskip("fastapi", reason='the serve extra is not installed (pip install "dphr-haystack[serve]")')
requests = pytest.importorskip("requests")

pytestmark = pytest.mark.unit

TEXT = "\n\n".join(p["text"] for p in tiny_passages()).encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model_dir):
    """One server for the module with the six tiny passages uploaded; yields its URL and the upload's answer."""
    tmp = tmp_path_factory.mktemp("rest-app")
    with _serve(tmp, _env(tmp, tiny_model_dir, DPHR_CORS_ORIGINS="http://allowed.test")) as url:
        response = requests.post(f"{url}/file-upload", files={"files": ("notes.txt", TEXT)}, timeout=300)
        assert response.status_code == 200, response.text
        yield url, response.json()


def test_an_upload_says_how_many_passages_it_added(server):
    url, answer = server
    first = {key: value for key, value in answer.items() if key != "file_reports"}
    reports = answer["file_reports"]
    assert first == {"files": ["notes.txt"], "documents_added": 6, "documents_total": 6}
    assert [(r["file"], r["passages"], r["documents_added"], r["encoding"]) for r in reports] == [
        ("notes.txt", 6, 6, "utf-8")
    ]
    again = requests.post(f"{url}/file-upload", files={"files": ("again.txt", TEXT)}, timeout=300)
    assert again.status_code == 200, again.text
    assert again.json()["documents_added"] == 0 and again.json()["documents_total"] == 6  # the same passages
    assert again.json()["file_reports"][0]["already_stored"] == 6
    info = requests.get(f"{url}/store", timeout=30).json()
    assert info["documents"] == 6 and info["phrase_documents"] == 6 and info["compare"] and info["indexing"]


def test_compare_runs_four_pipelines_on_the_served_store(server):
    url, _ = server
    response = requests.post(f"{url}/compare", json={"query": "Who wrote Hamlet?", "top_k": 3}, timeout=120)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["query"] == "Who wrote Hamlet?" and body["top_k"] == 3
    columns = {c["name"]: c for c in body["columns"]}
    assert [c["name"] for c in body["columns"]] == ["answers", "bm25", "passages", "hybrid"]
    texts = {p["text"] for p in tiny_passages()}
    for column in body["columns"]:
        assert column["ms"] > 0 and column["title"] and column["pipeline"].endswith(".yml")
        assert 0 < len(column["documents"]) <= 3, column
        assert all(doc["content"] in texts and "embedding" not in doc for doc in column["documents"])
    answers = columns["answers"]["answers"]
    assert answers
    for answer in answers:  # the phrase sits at its offsets in its passage
        span = answer["offsets_in_context"][0]
        assert answer["context"][span["start"] : span["end"]] == answer["answer"]
    assert columns["bm25"]["documents"][0]["content"] == tiny_passages()[3]["text"]  # BM25 finds the Hamlet passage
    assert all("best_phrase" in doc["meta"] for doc in columns["passages"]["documents"])
    assert not columns["bm25"]["answers"]


def test_compare_applies_filters_and_refuses_bad_requests(server):
    url, _ = server
    filtered = requests.post(
        f"{url}/compare", json={"query": "Who wrote Hamlet?", "filters": {"name": ["elsewhere.txt"]}}, timeout=120
    )
    assert filtered.status_code == 200, filtered.text
    assert all(not c["documents"] for c in filtered.json()["columns"])
    for body, status in (
        ({"query": "  "}, 400),
        ({"query": "x", "top_k": 0}, 422),
        ({"query": "x", "top_k": 51}, 422),
        ({"query": "x", "bogus": 1}, 422),
        ({"query": "x", "filters": {"name": {"$nope": 1}}}, 400),
    ):
        response = requests.post(f"{url}/compare", json=body, timeout=60)
        assert response.status_code == status, (body, response.text)
        assert response.json()["errors"] and "Traceback" not in response.text


def test_query_batch_answers_each_query_like_query(server):
    url, _ = server
    questions = ["Who wrote Hamlet?", "What is the capital of France?"]
    params = {"Retriever": {"top_k": 2}}
    batch = requests.post(f"{url}/query-batch", json={"queries": questions, "params": params}, timeout=120)
    assert batch.status_code == 200, batch.text
    singles = [
        requests.post(f"{url}/query", json={"query": q, "params": params}, timeout=60).json() for q in questions
    ]
    assert [r["query"] for r in batch.json()] == questions
    for got, single in zip(batch.json(), singles, strict=True):
        assert [d["id"] for d in got["documents"]] == [d["id"] for d in single["documents"]]
        assert [a["answer"] for a in got["answers"]] == [a["answer"] for a in single["answers"]]
    for body, status in (({"queries": []}, 422), ({"queries": ["ok", " "]}, 400), ({"queries": "x"}, 422)):
        response = requests.post(f"{url}/query-batch", json=body, timeout=60)
        assert response.status_code == status, (body, response.text)
        assert response.json()["errors"]


def test_validation_errors_keep_fastapis_detail_beside_errors(server):
    url, _ = server
    response = requests.post(f"{url}/query", json={"query": None}, timeout=30)
    assert response.status_code == 422
    body = response.json()
    assert body["errors"] == ["query: none is not an allowed value"] and body["detail"][0]["loc"] == ["body", "query"]
    missing = requests.get(f"{url}/no-such-endpoint", timeout=30)
    assert missing.status_code == 404 and missing.json() == {"errors": ["Not Found"]}


def test_the_web_page_is_served_with_a_strict_content_security_policy(server):
    url, _ = server
    page = requests.get(f"{url}/", timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy and "unsafe-inline" not in policy
    assert 'src="web/app.js"' in page.text and "<script>" not in page.text  # no inline script
    for asset, kind in (("web/app.js", "text/javascript"), ("web/style.css", "text/css")):
        response = requests.get(f"{url}/{asset}", timeout=30)
        assert response.status_code == 200 and response.headers["content-type"].startswith(kind), asset
    script = requests.get(f"{url}/web/app.js", timeout=30).text
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script and "document.write" not in script


def test_a_store_without_a_path_answers_its_uploads(tmp_path, tiny_model_dir):
    """The indexing pipeline shares the query pipeline's store object: no shared directory is needed."""
    config = yaml.safe_load((PIPELINES / "rest_api.yml").read_text())
    for component in config["components"]:
        component.get("params", {}).pop("path", None)
    file = tmp_path / "in-memory.yml"
    file.write_text(yaml.safe_dump(config))
    env = _env(tmp_path, tiny_model_dir, PIPELINE_YAML_PATH=str(file))
    env.pop("DOCUMENTSTORE_PARAMS_PATH")
    with _serve(tmp_path, env) as url:
        upload = requests.post(f"{url}/file-upload", files={"files": ("n.txt", TEXT)}, timeout=300)
        assert upload.status_code == 200 and upload.json()["documents_added"] == 6, upload.text
        texts = {p["text"] for p in tiny_passages()}
        body = {"query": "Who wrote Hamlet?", "params": {"Retriever": {"top_k": 6}}}
        found = requests.post(f"{url}/query", json=body, timeout=60).json()
        assert len(found["answers"]) == 6  # six different phrases, from the passages returned (each once)
        assert found["documents"] and {d["content"] for d in found["documents"]} <= texts
        stored = requests.post(f"{url}/documents/get_by_filters", json={"filters": {}}, timeout=60).json()
        assert {d["content"] for d in stored} == texts


def test_only_the_configured_origins_may_call_the_api_from_their_pages(server):
    url, _ = server
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    allowed = requests.options(f"{url}/query", headers={"Origin": "http://allowed.test", **preflight}, timeout=30)
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == "http://allowed.test"
    other = requests.options(f"{url}/query", headers={"Origin": "http://elsewhere.test", **preflight}, timeout=30)
    assert "access-control-allow-origin" not in other.headers


# ----------------------------------------------------------------- settings (no server)
def test_environment_overrides_are_typed_and_a_bad_one_names_its_variable(tmp_path):
    from dphr_haystack.errors import InvalidParameterError
    from dphr_haystack.nodes.rest.settings import RestSettings, env_overrides

    config = yaml.safe_load((PIPELINES / "rest_api.yml").read_text())
    environ = {
        "DOCUMENTSTORE_PARAMS_PROGRESS_BAR": "off",
        "DOCUMENTSTORE_PARAMS_PATH": str(tmp_path),
        "RETRIEVER_PARAMS_TOP_K": "3",
        "RETRIEVER_PARAMS_MAX_ANSWER_LENGTH": "null",
        "RETRIEVER_PARAMS_FILTER_THRESHOLD": "model",
        "UNRELATED_PARAMS_X": "1",
    }
    assert env_overrides(config, environ) == {
        "DocumentStore": {"progress_bar": False, "path": str(tmp_path)},
        "Retriever": {"top_k": 3, "max_answer_length": None, "filter_threshold": "model"},
    }
    with pytest.raises(InvalidParameterError, match="RETRIEVER_PARAMS_TOP_K='many'"):
        env_overrides(config, {"RETRIEVER_PARAMS_TOP_K": "many"})
    with pytest.raises(InvalidParameterError, match="DPHR_MAX_UPLOAD_BYTES"):
        RestSettings.from_env({"DPHR_MAX_UPLOAD_BYTES": "-1"})
    settings = RestSettings.from_env({"QUERY_PIPELINE_NAME": "bm25", "ROOT_PATH": "/api/"}, concurrency=2)
    assert (settings.query_pipeline, settings.root_path, settings.concurrency) == ("bm25", "/api", 2)
    assert settings.pipeline_yaml.name == "rest_api.yml" and settings.pipeline_yaml.is_file()


def test_a_query_pipeline_the_file_does_not_declare_stops_the_start_up(tmp_path):
    from dphr_haystack.errors import InvalidParameterError
    from dphr_haystack.nodes.rest import RestSettings, load_served_pipelines

    settings = RestSettings(pipeline_yaml=PIPELINES / "rest_api.yml", query_pipeline="nope")
    with pytest.raises(InvalidParameterError, match="declares no pipeline 'nope'.*bm25, indexing, query"):
        load_served_pipelines(settings)
    with pytest.raises(InvalidParameterError, match="does not exist"):
        load_served_pipelines(RestSettings(pipeline_yaml=Path(tmp_path / "missing.yml")))
