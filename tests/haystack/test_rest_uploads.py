"""``/file-upload`` with what a new user uploads (the shipped rest_api.yml in process through httpx's ASGI
transport, the tiny model): binary files are refused, Latin-1 text keeps its characters, a repeated paragraph is
stored once, a re-upload keeps the stored meta and says why nothing was added, bad upload parameters are 4xx naming
the parameter, and every file has its own count.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import tiny_passages

pytest.importorskip("fastapi", reason='the serve extra is not installed (pip install "dphr-haystack[serve]")')
httpx = pytest.importorskip("httpx")

pytestmark = pytest.mark.unit

TEXT = "\n\n".join(p["text"] for p in tiny_passages())
MAX_PASSAGE = 4_000


class AsgiClient:
    """A synchronous client of an ASGI app in this process (what Starlette's TestClient does; the installed
    Starlette's TestClient does not run with the installed httpx)."""

    def __init__(self, app) -> None:
        self.transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)

    def post(self, path: str, **kwargs):
        async def send():
            async with httpx.AsyncClient(transport=self.transport, base_url="http://test") as http:
                return await http.post(path, timeout=600, **kwargs)

        return asyncio.run(send())


@pytest.fixture(scope="module")
def app_and_store(tmp_path_factory, tiny_model_dir) -> Iterator[tuple[AsgiClient, object, Path]]:
    """The shipped REST app over a store directory, with the tiny model; yields (client, store, uploads folder)."""
    from dphr_haystack.nodes.rest.app import build_app
    from dphr_haystack.nodes.rest.settings import RestSettings

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    tmp = tmp_path_factory.mktemp("rest-uploads")
    settings = RestSettings(
        store_path=tmp / "store",
        upload_dir=tmp / "uploads",
        max_passage_chars=MAX_PASSAGE,
        phrase_retriever_params={"model": str(tiny_model_dir), "device": "cpu"},
    )
    app = build_app(settings)
    yield AsgiClient(app), app.state.served.document_store, tmp / "uploads"


@pytest.fixture
def client(app_and_store):
    client, store, uploads = app_and_store
    store.delete_documents()
    yield client
    assert not any(uploads.iterdir()), sorted(p.name for p in uploads.iterdir())


def _store(app_and_store):
    return app_and_store[1]


def _upload(client, *files: tuple[str, bytes] | tuple[str, bytes, str], **data: str):
    return client.post("/file-upload", files=[("files", f) for f in files], data=data or None)


def _refused(response, status: set[int], *words: str) -> str:
    assert response.status_code in status, (response.status_code, response.text[:500])
    errors = response.json()["errors"]
    message = " ".join(errors)
    assert "Traceback" not in message
    for word in words:
        assert word in message, message
    return message


# ----------------------------------------------------------------- 1. binary files
def test_binary_files_are_refused_naming_the_file(client, app_and_store):
    noise = random.Random(7).randbytes(20_000)
    png = b"\x89PNG\r\n\x1a\n" + random.Random(8).randbytes(3_000)
    message = _refused(_upload(client, ("noise.bin", noise)), {400, 415}, "noise.bin")
    assert "binary" in message or "not text" in message
    _refused(_upload(client, ("picture.png", png, "image/png")), {400, 415}, "picture.png")
    # a text file beside a binary one: nothing of either is indexed
    _refused(_upload(client, ("ok.txt", TEXT.encode()), ("noise.bin", noise)), {400, 415}, "noise.bin")
    # a binary content type or a known binary extension, even where the bytes would decode
    _refused(_upload(client, ("photo.jpg", b"plain words here")), {400, 415}, "photo.jpg")
    _refused(_upload(client, ("notes.txt", b"plain words here", "image/png")), {400, 415}, "notes.txt")
    assert _store(app_and_store).get_document_count() == 0


# ----------------------------------------------------------------- 2. encodings
def test_latin1_text_keeps_its_characters_and_says_how_it_was_read(client, app_and_store):
    text = "Le café de la gare ouvre à six heures.\n\nLa crème brûlée coûte cinq euros."
    response = _upload(client, ("menu.txt", text.encode("latin-1")))
    assert response.status_code == 200, response.text
    stored = {d.content for d in _store(app_and_store).get_all_documents()}
    assert stored == set(text.split("\n\n")), stored
    report = response.json()["file_reports"][0]
    assert report["file"] == "menu.txt" and report["encoding"] == "cp1252" and report["notes"], report


def test_kept_files_are_the_uploaded_bytes(client, app_and_store):
    data = "Le café est fermé le lundi.".encode("latin-1")
    response = client.post("/file-upload?keep_files=true", files=[("files", ("kept.txt", data))])
    assert response.status_code == 200, response.text
    kept = list(app_and_store[2].iterdir())
    assert [p.name.split("_", 1)[1] for p in kept] == ["kept.txt"] and kept[0].read_bytes() == data
    kept[0].unlink()


def test_utf8_with_a_bom_is_read_as_utf8(client, app_and_store):
    response = _upload(client, ("bom.txt", "\ufeffUn café.\n\nDeux cafés.".encode()))
    assert response.status_code == 200, response.text
    assert response.json()["file_reports"][0]["encoding"] == "utf-8"
    assert {d.content for d in _store(app_and_store).get_all_documents()} == {"Un café.", "Deux cafés."}


def test_bytes_of_no_text_encoding_are_refused(client, app_and_store):
    # 0x81 is undefined in Windows-1252 and invalid UTF-8: neither reading is right
    _refused(_upload(client, ("odd.txt", b"caf\xe9 \x81 ok")), {400, 415}, "odd.txt", "UTF-8")
    assert _store(app_and_store).get_document_count() == 0


# ----------------------------------------------------------------- 3. repeated passages
def test_a_repeated_paragraph_is_stored_once_not_refused(client, app_and_store):
    parts = ["Paris is the capital of France.", "* * *", "Berlin is the capital of Germany.", "* * *", "The end."]
    response = _upload(client, ("story.txt", "\n\n".join(parts).encode()))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["documents_added"] == 4
    report = body["file_reports"][0]
    assert report["passages"] == 5 and report["documents_added"] == 4 and report["repeated"] == 1, report
    assert _store(app_and_store).get_document_count() == 4


def test_a_file_is_refused_before_anything_is_encoded(client, app_and_store, monkeypatch):
    from dphr_haystack.nodes.document_store import PhraseDocumentStore

    def no_encoding(*_args, **_kwargs):
        raise AssertionError("phrases were encoded for a refused upload")

    monkeypatch.setattr(PhraseDocumentStore, "stage_phrases", no_encoding)
    long = ("word " * (MAX_PASSAGE // 5 + 10)).strip()
    _refused(_upload(client, ("ok.txt", TEXT.encode()), ("long.txt", long.encode())), {413}, "long.txt")
    _refused(_upload(client, ("ok.txt", TEXT.encode()), ("x.png", b"\x89PNG\r\n\x00")), {400, 415}, "x.png")


def test_a_sentence_split_without_nltk_data_is_a_400(client, app_and_store):
    nltk = pytest.importorskip("nltk")
    try:
        nltk.data.find("tokenizers/punkt_tab")
        pytest.skip("NLTK's punkt_tab is installed: sentence splits work here")
    except LookupError:
        pass
    response = _upload(client, ("ok.txt", TEXT.encode()), split_by="sentence", split_length="2")
    _refused(response, {400}, "split_by sentence", "punkt")
    assert _store(app_and_store).get_document_count() == 0


# ----------------------------------------------------------------- 4. re-uploads
def test_a_reupload_keeps_the_stored_meta_and_says_why_nothing_was_added(client, app_and_store):
    first = _upload(client, ("notes.txt", TEXT.encode()), meta=json.dumps({"source": "wiki"}))
    assert first.status_code == 200 and first.json()["documents_added"] == 6, first.text
    again = _upload(client, ("renamed.txt", TEXT.encode()))
    assert again.status_code == 200, again.text
    metas = [d.meta for d in _store(app_and_store).get_all_documents()]
    assert all(m.get("source") == "wiki" and m["name"] == "notes.txt" for m in metas), metas
    body = again.json()
    assert body["documents_added"] == 0 and body["documents_total"] == 6
    report = body["file_reports"][0]
    assert report["already_stored"] == 6 and report["documents_added"] == 0
    assert "already stored" in " ".join(report["notes"]), report


# ----------------------------------------------------------------- 5. parameters
BAD_PARAMS = {
    "split_length 0": ({"split_length": "0"}, "split_length"),
    "split_length -5": ({"split_length": "-5"}, "split_length"),
    "split_by unknown": ({"split_by": "chapter"}, "split_by"),
    "overlap over the split": ({"split_by": "word", "split_length": "5", "split_overlap": "9"}, "split_overlap"),
    "overlap negative": ({"split_overlap": "-1"}, "split_overlap"),
    "unknown node": ({"additional_params": json.dumps({"Nope": {"x": 1}})}, "Nope"),
    "global param": ({"additional_params": json.dumps({"top_k": 3})}, "top_k"),
    "top_k for an upload": ({"additional_params": json.dumps({"Retriever": {"top_k": 0}})}, "top_k"),
    "node params not an object": ({"additional_params": json.dumps({"PreProcessor": [1]})}, "PreProcessor"),
    "split_length in params": (
        {"additional_params": json.dumps({"PreProcessor": {"split_length": 0}})},
        "split_length",
    ),
    "unknown preprocessor param": ({"additional_params": json.dumps({"PreProcessor": {"bogus": 1}})}, "bogus"),
    "meta 100,000 deep": ({"meta": '{"a":' * 100_000 + "1" + "}" * 100_000}, "meta"),
    "meta 900 deep": ({"meta": '{"a":' * 900 + "1" + "}" * 900}, "meta"),
    "sentence boundary with passages": (
        {"split_respect_sentence_boundary": "true"},
        "split_respect_sentence_boundary",
    ),
}


@pytest.mark.parametrize("case", list(BAD_PARAMS))
def test_bad_upload_parameters_are_client_errors_naming_the_parameter(client, app_and_store, case):
    data, name = BAD_PARAMS[case]
    response = _upload(client, ("ok.txt", TEXT.encode()), **data)
    _refused(response, {400, 422}, name)
    assert _store(app_and_store).get_document_count() == 0


# ----------------------------------------------------------------- 6. one count per file
def test_each_file_of_an_upload_has_its_own_count(client, app_and_store):
    passages = TEXT.split("\n\n")
    one = "\n\n".join(passages[:2]).encode()
    two = "\n\n".join(passages[1:5]).encode()  # its first passage is also in one.txt
    response = _upload(client, ("one.txt", one), ("two.txt", two))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["files"] == ["one.txt", "two.txt"] and body["documents_added"] == 5 and body["documents_total"] == 5
    reports = {r["file"]: r for r in body["file_reports"]}
    assert reports["one.txt"]["documents_added"] == 2 and reports["one.txt"]["passages"] == 2
    assert reports["two.txt"]["documents_added"] == 3 and reports["two.txt"]["repeated"] == 1
