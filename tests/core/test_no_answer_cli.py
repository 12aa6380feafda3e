"""``dphr search --no-answer``: off by default and then the output is as before; on, a line "no answer in this
corpus (p=...)" with p = 1 − the top answer's confidence, before the results when that confidence is below
``--no-answer-threshold`` and after them otherwise, in every unit, and ``"no_answer": {"score", "top_confidence",
"holds_answer", "first"}`` in ``--json``; with a model whose calibration has a holds-answer, p = 1 − P(the corpus holds
an answer), placed by it. Bad thresholds and a model without a calibration are refused with status 2."""

from __future__ import annotations

import copy
import json

import pytest

from dphr_haystack.cli import main
from dphr_haystack.search_options import NO_ANSWER_THRESHOLD
from tests.conftest import tiny_passages
from tests.core.test_answers_every_unit import DOCUMENTED, QUESTION, save_calibrated, save_holding

pytestmark = pytest.mark.unit

UNITS = ["phrase", "passage", "document"]
NO_ANSWER = "no answer in this corpus"


def _index(tmp, model_dir) -> str:
    corpus = tmp / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(p) for p in tiny_passages()) + "\n", encoding="utf-8")
    assert main(["index", "--model", str(model_dir), "--corpus", str(corpus), "--out", str(tmp / "index")]) == 0
    return str(tmp / "index")


@pytest.fixture(scope="module")
def calibrated_index(tmp_path_factory, _tiny_model_session) -> str:
    tmp = tmp_path_factory.mktemp("no-answer-cli")
    return _index(tmp, save_calibrated(copy.deepcopy(_tiny_model_session), tmp / "calibrated"))


def _search(capsys, index: str, *args: str) -> str:
    capsys.readouterr()
    status = main(["search", "--index", index, "--top-k", "4", *args, QUESTION])
    out = capsys.readouterr()
    assert status == 0, out.err
    return out.out


def _json(capsys, index: str, *args: str) -> dict:
    return json.loads(_search(capsys, index, "--json", *args).strip().splitlines()[-1])


def _top_confidence(result: dict, unit: str) -> float:
    """The confidence of the first result's answer that does not copy the question (what "no answer" weighs)."""
    for row in result["results"]:
        phrase = {"phrase": row, "passage": row.get("best_phrase")}.get(unit) or row["best_passage"]["best_phrase"]
        if not phrase["copies_question"]:
            return phrase["confidence"]
    raise AssertionError("no answer in the results")


def _error(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refusing an option value
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and "error:" in err
    return err


@pytest.mark.parametrize("unit", UNITS)
def test_off_by_default_the_output_is_as_before(capsys, calibrated_index, unit):
    text = _search(capsys, calibrated_index, "--unit", unit)
    assert NO_ANSWER not in text
    result = _json(capsys, calibrated_index, "--unit", unit)
    assert "no_answer" not in result and result["results"]


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize(("threshold", "first"), [("1.0", True), ("0.0", False)])
def test_no_answer_comes_first_below_the_threshold_and_last_otherwise(
    capsys, calibrated_index, unit, threshold, first
):
    plain = _json(capsys, calibrated_index, "--unit", unit)
    result = _json(capsys, calibrated_index, "--unit", unit, "--no-answer", "--no-answer-threshold", threshold)
    assert result["results"] == plain["results"]  # the results do not change
    top = _top_confidence(plain, unit)
    marker = result["no_answer"]
    assert set(marker) == {"score", "top_confidence", "holds_answer", "first"} and marker["holds_answer"] is None
    assert marker["first"] is first and marker["top_confidence"] == pytest.approx(top, abs=1e-12)
    assert marker["score"] == pytest.approx(1.0 - top, abs=1e-12)

    lines = _search(capsys, calibrated_index, "--unit", unit, "--no-answer", "--no-answer-threshold", threshold)
    lines = lines.rstrip("\n").splitlines()
    assert lines[0] == f"Q: {QUESTION}"
    shown = [i for i, line in enumerate(lines) if NO_ANSWER in line]
    assert shown == [1 if first else len(lines) - 1], lines
    assert f"(p={1.0 - top:.2f}; top answer's confidence {top:.2f})" in lines[shown[0]]
    assert len(lines) == len(plain["results"]) + 2  # the question, the results and the no-answer line


def test_the_default_threshold_places_it_by_the_top_confidence(capsys, calibrated_index):
    from dphr_haystack.search_options import NO_ANSWER_THRESHOLD

    result = _json(capsys, calibrated_index, "--no-answer")  # the default unit: passages
    assert result["no_answer"]["first"] is (_top_confidence(result, "passage") < NO_ANSWER_THRESHOLD)


@pytest.mark.parametrize("threshold", ["1.5", "-0.1", "half", "nan", ""])
def test_a_bad_threshold_is_refused(capsys, calibrated_index, threshold):
    err = _error(
        capsys, ["search", "--index", calibrated_index, "--no-answer", "--no-answer-threshold", threshold, "x"]
    )
    assert "no_answer_threshold" in err


def test_a_threshold_without_no_answer_is_refused(capsys, calibrated_index):
    err = _error(capsys, ["search", "--index", calibrated_index, "--no-answer-threshold", "0.5", "x"])
    assert "--no-answer" in err


def test_a_model_without_a_calibration_is_refused(capsys, tmp_path, tiny_model_dir):
    index = _index(tmp_path, tiny_model_dir)
    assert NO_ANSWER not in _search(capsys, index)  # off: as before
    err = _error(capsys, ["search", "--index", index, "--no-answer", QUESTION])
    assert "calibration" in err


@pytest.mark.parametrize("holds", [0.3, 0.7])  # either side of the default threshold, whatever the confidences
def test_a_holds_answer_scores_and_places_no_answer(capsys, tmp_path, _tiny_model_session, holds):
    index = _index(tmp_path, save_holding(copy.deepcopy(_tiny_model_session), tmp_path / "holding", holds))
    result = _json(capsys, index, "--unit", "phrase", "--no-answer")
    marker = result["no_answer"]
    assert marker["first"] is (holds < NO_ANSWER_THRESHOLD) and marker["holds_answer"] == pytest.approx(holds)
    assert marker["score"] == pytest.approx(1.0 - holds) and marker["top_confidence"] == _top_confidence(
        result, "phrase"
    )
    line = next(line for line in _search(capsys, index, "--no-answer").splitlines() if NO_ANSWER in line)
    assert f"(p={1.0 - holds:.2f}; P(the corpus holds an answer) {holds:.2f}, top answer's confidence" in line


@pytest.mark.parametrize(("holds", "documented"), DOCUMENTED)
def test_a_model_s_documented_threshold_places_no_answer_unless_the_search_gives_one(
    capsys, tmp_path, _tiny_model_session, holds, documented
):
    model_dir = save_holding(copy.deepcopy(_tiny_model_session), tmp_path / "holding", holds, documented)
    index = _index(tmp_path, model_dir)
    assert _json(capsys, index, "--unit", "phrase", "--no-answer")["no_answer"]["first"] is (holds < documented)
    given = _json(capsys, index, "--unit", "phrase", "--no-answer", "--no-answer-threshold", str(NO_ANSWER_THRESHOLD))
    assert given["no_answer"]["first"] is (holds < NO_ANSWER_THRESHOLD)


def test_no_answer_names_what_no_passage_writes(capsys, tmp_path, _tiny_model_session):
    from tests.core.test_corpus_words import save_reading_corpus

    index = _index(tmp_path, save_reading_corpus(copy.deepcopy(_tiny_model_session), tmp_path / "reading"))
    capsys.readouterr()
    assert main(["search", "--index", index, "--no-answer", "--json", "Who founded Quillfern?"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["no_answer"]["unwritten_names"] == ["Quillfern"] and result["no_answer"]["first"] is True
    assert main(["search", "--index", index, "--no-answer", "Who founded Quillfern?"]) == 0
    assert "no passage writes 'Quillfern'" in capsys.readouterr().out
    assert "unwritten_names" not in _json(capsys, index, "--no-answer")["no_answer"]  # "France" is written
