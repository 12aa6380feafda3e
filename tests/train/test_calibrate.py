"""train.calibrate: fit a confidence on questions with known answers and store it with the model."""

from __future__ import annotations

import json

import pytest

from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher
from dphr_haystack.confidence import CONFIDENCE_DEPTH, KNOWN_FEATURES
from dphr_haystack.encode.add import add_passages
from train.calibrate import RANKED_CALIBRATION, calibrate, write_calibrated
from train.data import RCData, RCExample, load_squad

pytestmark = pytest.mark.unit


def test_calibrate_fits_reports_and_stores_the_confidence(tiny_model, tmp_path):
    sample = load_squad("builtin")
    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, sample.passages, progress=False)
    searcher = PhraseSearcher(index, tiny_model, calibration=None)
    # Gold answers: the model's own top phrase for every other question, so there are right and wrong answers.
    tops = [
        hits[0].text for hits in searcher.search_batch([ex.question for ex in sample.examples], top_k=1, unit="phrase")
    ]
    examples = [
        RCExample(ex.qid, ex.question, [top if i % 2 == 0 else "no such answer"], [0], ex.passage_id)
        for i, (ex, top) in enumerate(zip(sample.examples, tops, strict=True))
    ]
    calibration, report = calibrate(
        tiny_model, RCData(sample.passages, examples), index, holdout=0.25, outside=examples[:3]
    )
    assert report["questions"] == len(examples)
    assert report["em@1"] == pytest.approx(0.5)
    assert report["fit_questions"] + report["held_out_questions"] == len(examples)
    assert 0.0 <= report["held_out_auroc"] <= 1.0
    assert set(report["held_out_em@1"]) == {"by score", "by confidence"}
    assert report["out_of_corpus"]["questions"] == 3
    # an answer ranker over every feature, and a calibration of its top answers
    assert report["ranker"] and calibration["ranker"]["features"] == list(KNOWN_FEATURES)
    assert calibration["features"] == list(RANKED_CALIBRATION)
    assert calibration["depth"] == CONFIDENCE_DEPTH  # the searchers rank as many phrase answers
    shallow, _ = calibrate(tiny_model, RCData(sample.passages, examples), index, holdout=0.25, depth=5)
    assert shallow["depth"] == 5 and shallow != calibration
    plain, plain_report = calibrate(tiny_model, RCData(sample.passages, examples), index, holdout=0.25, ranked=False)
    assert "ranker" not in plain and plain["features"] == list(KNOWN_FEATURES) and not plain_report["ranker"]
    assert plain_report["held_out_em@1"]["by confidence"] == plain_report["held_out_em@1"]["by score"]
    model_dir = tmp_path / "model"
    tiny_model.save(model_dir)
    write_calibrated(model_dir, tmp_path / "calibrated", calibration)
    assert json.loads((model_dir / "dphr_config.json").read_text()).get("calibration") is None
    loaded = PhraseModel.load(tmp_path / "calibrated")
    assert loaded.config.calibration == calibration
    hit = PhraseSearcher(index, loaded).search(sample.examples[0].question, top_k=1, unit="phrase")[0]
    assert 0.0 <= hit.confidence <= 1.0
    with pytest.raises(FileExistsError):
        write_calibrated(model_dir, tmp_path / "calibrated", calibration)


def test_ranked_candidates_give_the_searchers_top_answer_and_confidence(tiny_model):
    import numpy as np

    from dphr_haystack.confidence import answer_confidences, fit_calibration, question_words
    from train.calibrate import candidate_searcher, ranked_candidates

    sample = load_squad("builtin")
    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, sample.passages, progress=False)
    x = np.random.default_rng(0).normal(size=(100, len(KNOWN_FEATURES)))
    questions = [ex.question for ex in sample.examples]
    for depth in (CONFIDENCE_DEPTH, 3):  # the searcher gathers as many candidates as the calibration's depth
        calibration = fit_calibration(x, x[:, 4] > 0, names=KNOWN_FEATURES, depth=depth)
        # the calibration is fitted on the top answer by score
        served = PhraseSearcher(index, tiny_model, calibration=calibration, ranking="score").search_batch(
            questions, top_k=1, unit="phrase"
        )
        ranked = ranked_candidates(candidate_searcher(index, tiny_model), questions, depth=depth)
        checked = 0
        for question, hits, candidates in zip(questions, served, ranked, strict=True):
            if not candidates:  # every span of the first tokens copies the question: the searcher looks further
                continue
            checked += 1
            assert hits[0].text == candidates[0].text
            asked = question_words(question)
            expected = answer_confidences(calibration, candidates, [0], asked, index.passages)[0]
            assert hits[0].confidence == pytest.approx(expected)
        assert checked >= len(questions) // 2
