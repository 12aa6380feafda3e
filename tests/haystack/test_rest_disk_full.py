"""The REST API (pipelines/rest_api.yml over real HTTP) on a store directory whose disk fills up.

The store lives on a small tmpfs (needs root and mount permission; skipped otherwise). An upload is committed (200);
the disk is filled so that the next upload fails: a JSON error (507 Insufficient Storage, saying the disk is full,
no traceback); space is freed and an upload succeeds again (200). Every ``/query`` answers 200 with documents of the
acknowledged uploads only, and after a server restart the same store serves the same answers and takes uploads.
"""

from __future__ import annotations

import errno
import os
import uuid
from pathlib import Path

import pytest

from tests.conftest import tiny_passages
from tests.haystack.test_rest_errors import _env, _serve
from tests.reliability._disk_full import small_tmpfs

pytest.importorskip("fastapi", reason='the serve extra is not installed (pip install "dphr-haystack[serve]")')
requests = pytest.importorskip("requests")

pytestmark = pytest.mark.unit

FIRST = [p["text"] for p in tiny_passages()[:3]]
FAILED = [
    "Zorblax harbour was paved with violet glass in the year of the long comet.",
    "The quindle orchestra of Mervtown plays only on the third moon of autumn.",
]
LATER = [p["text"] for p in tiny_passages()[3:]]
QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?", "Which river is the longest?", "harbour"]


@pytest.fixture
def small_fs(tmp_path):
    """An 8 MiB tmpfs for the store (needs root and mount permission; skipped otherwise)."""
    with small_tmpfs(tmp_path, "8m") as mount:
        yield mount


def _fill(mount: Path) -> Path:
    """Fill the file system with one file (nothing left free)."""
    filler = mount / f"filler-{uuid.uuid4().hex[:6]}"
    info = os.statvfs(mount)
    with filler.open("wb") as handle:
        try:
            handle.write(b"\0" * (info.f_bavail * info.f_frsize + 65536))
            handle.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def _upload(url: str, tmp: Path, paragraphs: list[str]) -> requests.Response:
    upload = tmp / f"upload-{uuid.uuid4().hex[:6]}.txt"
    upload.write_text("\n\n".join(paragraphs), encoding="utf-8")
    with upload.open("rb") as handle:
        return requests.post(f"{url}/file-upload", files={"files": (upload.name, handle, "text/plain")}, timeout=300)


def _found(url: str) -> list[list[str]]:
    """The document contents each question finds (every /query must answer 200)."""
    found = []
    for question in QUESTIONS:
        response = requests.post(
            f"{url}/query", json={"query": question, "params": {"Retriever": {"top_k": 50}}}, timeout=60
        )
        assert response.status_code == 200, f"/query {question!r}: {response.status_code} {response.text[:500]}"
        found.append(sorted(doc["content"].strip() for doc in response.json()["documents"]))
    return found


def test_upload_on_a_full_disk_is_a_507_and_loses_nothing(tmp_path, small_fs, tiny_model_dir):
    from dphr_haystack.nodes import PhraseDocumentStore

    store = small_fs / "store"
    env = _env(tmp_path, tiny_model_dir, DOCUMENTSTORE_PARAMS_PATH=str(store))
    with _serve(tmp_path, env) as url:
        first = _upload(url, tmp_path, FIRST)
        assert first.status_code == 200, first.text
        found_first = _found(url)
        assert {c for hits in found_first for c in hits} == set(FIRST), found_first

        filler = _fill(small_fs)
        failed = _upload(url, tmp_path, FAILED)
        assert failed.status_code == 507, f"{failed.status_code}: {failed.text[:1000]}"
        body = failed.json()
        assert "disk is full" in " ".join(body["errors"]).lower() and "Traceback" not in failed.text, body
        assert _found(url) == found_first, "a failed upload changed what /query finds"

        filler.unlink()
        later = _upload(url, tmp_path, LATER)
        assert later.status_code == 200, later.text
        found_later = _found(url)
        contents = {c for hits in found_later for c in hits}
        assert contents == set(FIRST + LATER), found_later
    reopened = PhraseDocumentStore(path=str(store))
    stored = {doc.content.strip() for doc in reopened.get_all_documents()}
    assert stored == set(FIRST + LATER), "the store on disk differs from the acknowledged uploads"
    assert reopened.get_phrase_document_count() == len(FIRST + LATER)

    (tmp_path / "server.log").rename(tmp_path / "server-1.log")
    with _serve(tmp_path, env) as url:  # a restart: both pipelines load from the store and answer the same
        assert _found(url) == found_later
        again = _upload(url, tmp_path, ["A lighthouse keeper counted the waves every night."])
        assert again.status_code == 200, again.text
        assert not {c for hits in _found(url) for c in hits} & set(FAILED)
    print(
        f"REST on a full disk: upload 1 -> {first.status_code}, full-disk upload -> {failed.status_code} "
        f"{body['errors'][0][:160]!r}, upload after freeing space -> {later.status_code}, "
        f"restart upload -> {again.status_code}; {len(QUESTIONS)} queries x 4 rounds all 200"
    )
