"""train.verifier: the reader's views gathered as the searcher reads the top answer, the fitted verification that a
verifying searcher then applies, its place in the model config, and the compact export of a reader."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from dphr_haystack import PhraseModel, PhraseSearcher
from dphr_haystack.confidence import KNOWN_FEATURES, fit_calibration
from dphr_haystack.model.calibration import READER_VIEW_FEATURES
from dphr_haystack.verification import SpanReader
from train.answerability import fit_table, gather
from train.answerability_cases import Case, Question
from train.calibrate import write_calibrated
from train.verifier import export_reader, fit, fit_holds, verification_inputs, verified_probability

pytestmark = pytest.mark.unit


def _cases(sample) -> list[Case]:
    title = {p["id"]: p["document_id"] for p in sample.passages}
    examples = sample.examples
    questions = [Question(ex.question, tuple(ex.answers), title[ex.passage_id], ex.passage_id) for ex in examples]
    return [Case(q, "all", i % 3 != 0) for i, q in enumerate(questions)]


def test_the_fitted_verification_is_what_a_verifying_searcher_applies(
    sample_index, tiny_model, tiny_reader_dir, tmp_path
):
    sample, index = sample_index
    x = np.random.default_rng(0).normal(size=(100, len(KNOWN_FEATURES)))
    calibration = fit_calibration(x, x[:, 4] > 0, names=KNOWN_FEATURES, depth=5)
    cases = _cases(sample)
    reader = SpanReader(tiny_reader_dir)
    table = gather(index, tiny_model, calibration, cases, batch_size=4, progress=False, reader=reader)
    assert table.views.shape == (len(cases), len(READER_VIEW_FEATURES)) and np.isfinite(table.views).all()
    table.correct[::2] = True  # labels with both classes
    table.correct[1::2] = False
    calibration = dataclasses.replace(calibration, answerability=fit_table(table))
    verification = fit(table, calibration, str(tiny_reader_dir))
    assert verification.reader == str(tiny_reader_dir)
    expected = verified_probability(verification, verification_inputs(table, calibration))
    verified = dataclasses.replace(calibration, verification=verification)
    served = PhraseSearcher(index, tiny_model, calibration=verified, verify=True)
    for i, case in enumerate(cases[:4]):
        hit = served.search(case.question.question, top_k=1, unit="phrase")[0]
        assert hit.text == table.texts[i]  # the same answer, its confidence the verification's
        assert hit.confidence == pytest.approx(expected[i], abs=1e-9)
    # with a holds-answer, the verification's own: what a verifying searcher gives every answer
    verified = dataclasses.replace(verified, holds_answer=fit_table(table, unanswerable_weight=1.0, holds=True))
    holding = fit_holds(table, verified)
    inputs = verification_inputs(table, verified, holds=True)
    assert holding.features[-1] == "all_names_in_corpus" and np.isin(inputs[:, -1], (0.0, 1.0)).any()
    expected = verified_probability(holding, inputs)
    verified = dataclasses.replace(verified, verification=dataclasses.replace(verification, holds_answer=holding))
    served = PhraseSearcher(index, tiny_model, calibration=verified, verify=True)
    for i, case in enumerate(cases[:4]):
        hit = served.search(case.question.question, top_k=1, unit="phrase")[0]
        assert hit.holds_answer == pytest.approx(expected[i], abs=1e-9)
    # stored with the model
    tiny_model.save(tmp_path / "model")
    write_calibrated(tmp_path / "model", tmp_path / "out", verified.to_dict())
    config = json.loads((tmp_path / "out" / "dphr_config.json").read_text())["calibration"]
    assert config["verification"]["reader"] == str(tiny_reader_dir)
    assert PhraseModel.load(tmp_path / "out").config.calibration == verified.to_dict()


@pytest.mark.parametrize(("dtype", "tolerance"), [("float16", 0.05), ("int8", 0.5)])
def test_an_exported_reader_reads_as_the_original(tmp_path, tiny_reader_dir, dtype, tolerance):
    summary = export_reader(tiny_reader_dir, tmp_path / "reader", dtype)
    assert "model.safetensors.index.json" in summary["files"]
    original, exported = SpanReader(tiny_reader_dir), SpanReader(tmp_path / "reader")
    context = "Paris is the capital of France. Berlin is the capital of Germany."
    start = context.index("Berlin")
    a = original.view("What is the capital of Germany?", context, start, start + 6)
    b = exported.view("What is the capital of Germany?", context, start, start + 6)
    assert abs(a.span - b.span) < tolerance and abs(a.logp - b.logp) < tolerance
