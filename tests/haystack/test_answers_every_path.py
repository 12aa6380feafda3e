"""The REST API and the command line give answers as the Haystack nodes do: each answer's score is a confidence in
[0, 1] and no answer is contained in its question (the nodes' own tests: test_answers_every_unit_hs1.py and, for
Haystack 2, tests/haystack2/test_answers_every_unit_hs2.py)."""

from __future__ import annotations

import json

import pytest

from dphr_haystack.cli import main
from tests.conftest import tiny_passages
from tests.core.test_answers_every_unit import QUESTION, real_copies, save_calibrated
from tests.haystack.test_rest_errors import _env, _serve

pytestmark = pytest.mark.unit


def _assert_trustworthy(answers: list[tuple[str, float]]) -> None:
    assert answers, "no answers"
    assert all(0.0 <= score <= 1.0 for _, score in answers), answers
    assert real_copies([text for text, _ in answers], QUESTION) == []


def test_rest_answers_are_confidences_that_never_copy_the_question(tmp_path, tiny_model):
    pytest.importorskip("fastapi", reason='the serve extra is not installed (pip install "dphr-haystack[serve]")')
    requests = pytest.importorskip("requests")
    model_dir = save_calibrated(tiny_model, tmp_path / "calibrated")
    text = "\n\n".join(p["text"] for p in tiny_passages()).encode()
    for unit in ("phrase", "passage", "document"):  # the retriever's unit is a node parameter: one server each
        tmp = tmp_path / unit
        tmp.mkdir()
        with _serve(tmp, _env(tmp, model_dir, RETRIEVER_PARAMS_UNIT=unit)) as url:
            upload = requests.post(f"{url}/file-upload", files={"files": ("notes.txt", text)}, timeout=300)
            assert upload.status_code == 200, upload.text
            body = {"query": QUESTION, "params": {"Retriever": {"top_k": 6}}}
            response = requests.post(f"{url}/query", json=body, timeout=120)
            assert response.status_code == 200, response.text
            _assert_trustworthy([(a["answer"], a["score"]) for a in response.json()["answers"]])
            response = requests.post(f"{url}/compare", json={"query": QUESTION, "top_k": 6}, timeout=120)
            assert response.status_code == 200, response.text
            column = next(c for c in response.json()["columns"] if c["name"] == "answers")
            _assert_trustworthy([(a["answer"], a["score"]) for a in column["answers"]])


def _cli_answers(result: dict, unit: str) -> list[tuple[str, float]]:
    """(answer, confidence) of each result of ``dphr search --json``; a result whose every phrase copies the
    question has no answer (it is printed as such)."""
    answers = []
    for row in result["results"]:
        phrase = {"phrase": row, "passage": row.get("best_phrase"), "document": None}[unit]
        if unit == "document":
            phrase = row["best_passage"]["best_phrase"]
        if not phrase["copies_question"]:
            answers.append((phrase["text"], row["confidence"]))
    return answers


def test_cli_answers_are_confidences_that_never_copy_the_question(tmp_path, tiny_model, capsys):
    model_dir = save_calibrated(tiny_model, tmp_path / "calibrated")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(p) for p in tiny_passages()) + "\n", encoding="utf-8")
    index = tmp_path / "index"
    assert main(["index", "--model", str(model_dir), "--corpus", str(corpus), "--out", str(index)]) == 0
    capsys.readouterr()
    for unit in ("phrase", "passage", "document"):
        assert main(["search", "--index", str(index), "--unit", unit, "--top-k", "6", "--json", QUESTION]) == 0
        result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        _assert_trustworthy(_cli_answers(result, unit))
