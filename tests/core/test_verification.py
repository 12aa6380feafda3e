"""Answer verification: a reader's view of an answer span, the stored verification, and a search that asks for it
(the top answer's confidence becomes the verification's probability, every answer shifted alike) and only then."""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest

from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher
from dphr_haystack.encode.add import add_passages
from dphr_haystack.errors import InvalidParameterError, ModelLoadError
from dphr_haystack.fitting import fit_verification, fit_verified_holds
from dphr_haystack.hits import best_phrase
from dphr_haystack.model.calibration import (
    HOLDS_VERIFICATION_FEATURES,
    VERIFICATION_FEATURES,
    Calibration,
    Verification,
    VerifiedHoldsAnswer,
)
from dphr_haystack.verification import (
    SpanReader,
    load_reader,
    reader_dir,
    reader_reference,
    top_answer,
    verification_features,
    verification_reader,
)
from tests.conftest import tiny_passages
from tests.core.test_answers_every_unit import (
    CALIBRATION,
    QUESTION,
    holds_answer,
    save_calibrated,
    save_verified,
    verification,
)

pytestmark = pytest.mark.unit

CONTEXT = "Paris is the capital of France. Berlin is the capital of Germany, and Rome is the capital of Italy."


@pytest.fixture(scope="module")
def reader(tiny_reader_dir):
    return SpanReader(tiny_reader_dir)


@pytest.fixture(scope="module")
def verified_dir(tmp_path_factory, _tiny_model_session, tiny_reader_dir):
    path = tmp_path_factory.mktemp("verified") / "model"
    return save_verified(copy.deepcopy(_tiny_model_session), path, tiny_reader_dir)


@pytest.fixture(scope="module")
def verified_index(verified_dir):
    model = PhraseModel.load(verified_dir)
    index = PhraseIndex.create(model)
    add_passages(index, model, tiny_passages(), progress=False)
    return model, index


def test_a_view_scores_the_span_among_the_windows_spans(reader):
    start = CONTEXT.index("Berlin")
    view = reader.view("What is the capital of Germany?", CONTEXT, start, start + len("Berlin"))
    assert all(math.isfinite(v) for v in view.values())
    assert view.logp <= 0.0 and view.gap <= 0.0 and view.gap >= view.logp
    # the same span read twice is the same view; another span is another one
    assert reader.view("What is the capital of Germany?", CONTEXT, start, start + 6) == view
    other = CONTEXT.index("Rome")
    assert reader.view("What is the capital of Germany?", CONTEXT, other, other + 4) != view


def test_a_views_no_answer_score_is_cls_against_the_windows_best_span(reader):
    """``null`` = [CLS]'s start + end logit − the best span's (``span − gap``), read from the model directly."""
    import torch

    question = "What is the capital of Germany?"
    start = CONTEXT.index("Berlin")
    view = reader.view(question, CONTEXT, start, start + 6)
    encoded = reader.tokenizer(question, CONTEXT, return_tensors="pt")
    with torch.inference_mode():
        out = reader.model(**encoded)  # the tiny reader is BERT-shaped: it reads segment ids too
    cls = float(out.start_logits[0, 0] + out.end_logits[0, 0])
    assert view.null == pytest.approx(cls - (view.span - view.gap), abs=1e-4)
    assert reader.view("Where is Rome?", CONTEXT, start, start + 6).null != pytest.approx(view.null, abs=1e-6)


def test_a_span_far_into_a_long_passage_is_read_in_a_window_that_holds_it(reader):
    long = " ".join(["The river runs past the old mill and the bridge."] * 60) + " Berlin is in Germany."
    start = long.index("Berlin")
    assert len(reader.tokenizer(long)["input_ids"]) > reader.max_length  # more than one window
    view = reader.view("Where is Berlin?", long, start, start + 6)
    assert view is not None and view.gap <= 0.0


def test_a_span_outside_the_passage_is_refused_and_a_long_question_is_cut(reader):
    with pytest.raises(InvalidParameterError, match="outside a passage"):
        reader.view("Where?", CONTEXT, 5, len(CONTEXT) + 3)
    question = " ".join(["capital"] * 500) + "?"
    assert reader.view(question, CONTEXT, 0, 5) is not None


def test_a_missing_reader_names_what_was_looked_for(tmp_path):
    with pytest.raises(ModelLoadError, match="not found"):
        reader_dir(tmp_path / "nowhere")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError):
        SpanReader(tmp_path)


def test_a_reader_that_asks_to_run_its_own_code_is_refused(tmp_path, tiny_reader_dir):
    import json
    import shutil

    from dphr_haystack.errors import RemoteCodeError

    shutil.copytree(tiny_reader_dir, tmp_path / "reader")
    config = json.loads((tmp_path / "reader" / "config.json").read_text())
    config["auto_map"] = {"AutoModelForQuestionAnswering": "evil.Model"}
    (tmp_path / "reader" / "config.json").write_text(json.dumps(config))
    with pytest.raises(RemoteCodeError):
        SpanReader(tmp_path / "reader")


def test_the_shipped_reader_is_found_by_name_and_recorded_so(tmp_path, tiny_reader_dir, monkeypatch):
    assert (reader_dir("dphr-minilm-squad-reader") / "config.json").is_file()
    assert reader_reference("dphr-minilm-squad-reader") == "dphr-minilm-squad-reader"
    assert reader_reference(reader_dir("dphr-minilm-squad-reader")) == "dphr-minilm-squad-reader"
    monkeypatch.chdir(tiny_reader_dir.parent)  # a relative directory is recorded absolute
    assert reader_reference(tiny_reader_dir.name) == str(tiny_reader_dir.resolve())


def test_a_verification_is_stored_and_read_back_and_malformed_ones_are_refused(tiny_reader_dir):
    stored = dataclasses.replace(CALIBRATION, verification=verification(tiny_reader_dir))
    assert Calibration.from_dict(stored.to_dict()) == stored
    assert Calibration.from_dict(CALIBRATION.to_dict()).verification is None
    data = stored.to_dict()["verification"]
    with pytest.raises(InvalidParameterError, match="verification"):
        Verification.from_dict({**data, "weights": [1.0]})
    with pytest.raises(InvalidParameterError, match="reader"):
        Verification.from_dict({**data, "reader": ""})
    with pytest.raises(InvalidParameterError, match="features"):
        Verification.from_dict({**data, "features": ["a", "b", "c", "d", "e"]})
    with pytest.raises(InvalidParameterError, match="a weight, a mean and a scale"):
        dataclasses.replace(stored.verification, weights=(1.0, 2.0))


def test_a_verification_stored_before_the_no_answer_score_weighs_the_view_it_was_fitted_on():
    """One fitted over the top answer's confidence and the span's view alone (no ``reader_null``) reads the first
    columns of today's features: the no-answer score changes nothing for it."""
    old = Verification.from_dict(
        {
            "reader": "some-reader",
            "features": list(VERIFICATION_FEATURES[:-1]),
            "weights": [0.6, 0.9, 0.4, 0.3],
            "bias": -0.2,
            "mean": [0.0, 0.0, -3.0, -1.0],
            "scale": [1.5, 2.0, 1.0, 1.0],
        }
    )
    assert old.features == ("top_logit", "reader_span", "reader_logp", "reader_gap")
    rows = np.array([[0.5, 2.0, -1.0, -0.5, -3.0], [0.5, 2.0, -1.0, -0.5, 4.0]])
    z = (np.array([0.5, 2.0, -1.0, -0.5]) - np.array([0.0, 0.0, -3.0, -1.0])) / np.array([1.5, 2.0, 1.0, 1.0])
    expected = 1 / (1 + math.exp(-(z @ np.array([0.6, 0.9, 0.4, 0.3]) - 0.2)))
    assert old.probability(rows) == pytest.approx([expected, expected])
    assert VerifiedHoldsAnswer.from_dict({**old.to_dict(), "features": list(HOLDS_VERIFICATION_FEATURES[:-2])})


def test_a_verified_holds_answer_stored_before_the_names_feature_reads_its_first_columns():
    """One fitted over the search's holds-answer and the reader's view (no ``all_names_in_corpus``) ignores the
    names column of today's features."""
    old = VerifiedHoldsAnswer(
        (0.5, -0.8, 0.3, 0.2, -0.4), 0.1, (0.0,) * 5, (1.0,) * 5, HOLDS_VERIFICATION_FEATURES[:-1]
    )
    assert VerifiedHoldsAnswer.from_dict(old.to_dict()) == old
    rows = np.array([[0.5, 2.0, -1.0, -0.5, -3.0, 0.0], [0.5, 2.0, -1.0, -0.5, -3.0, 1.0]])
    assert old.probability(rows)[0] == old.probability(rows)[1] == old.probability(rows[:, :5])[0]
    with pytest.raises(InvalidParameterError, match="features"):  # the names without the no-answer score: foreign
        features = (*HOLDS_VERIFICATION_FEATURES[:-2], HOLDS_VERIFICATION_FEATURES[-1])
        VerifiedHoldsAnswer.from_dict({**old.to_dict(), "features": list(features)})


def test_a_fitted_verification_weighs_the_reader_where_it_tells_right_from_wrong():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, len(VERIFICATION_FEATURES)))
    right = x[:, 1] + 0.2 * rng.normal(size=400) > 0  # the reader's span score decides
    fitted = fit_verification(x, right, "some-reader")
    assert fitted.reader == "some-reader" and fitted.features == VERIFICATION_FEATURES
    assert abs(fitted.weights[1]) == max(abs(w) for w in fitted.weights) and fitted.weights[1] > 0
    with pytest.raises(InvalidParameterError, match="columns"):
        fit_verification(x[:, :3], right, "some-reader")


def test_warming_a_verifying_searcher_loads_its_reader(verified_index, monkeypatch):
    model, index = verified_index
    loaded = []
    monkeypatch.setattr("dphr_haystack.search.verification_reader", loaded.append)
    PhraseSearcher(index, model).warm_up()
    assert loaded == []
    PhraseSearcher(index, model, verify=True).warm_up()
    assert loaded == [Calibration.from_dict(model.config.calibration).verification]


def test_a_verified_search_moves_every_confidence_by_the_same_log_odds(verified_index, reader):
    model, index = verified_index
    plain = PhraseSearcher(index, model, unit="phrase", top_k=5).search(QUESTION)
    checked = PhraseSearcher(index, model, unit="phrase", top_k=5, verify=True).search(QUESTION)
    assert [(h.text, h.passage_id, h.start) for h in checked] == [(h.text, h.passage_id, h.start) for h in plain]
    top = plain[top_answer(plain)]
    view = reader.view(QUESTION, index.passages[top.passage_row]["text"], top.start, top.end)
    stored = Calibration.from_dict(model.config.calibration).verification
    expected = float(stored.probability(verification_features(top.confidence, view)[None, :])[0])
    assert checked[top_answer(checked)].confidence == pytest.approx(expected, abs=1e-9)

    def logit(p):
        return math.log(p / (1 - p))

    shifts = [logit(c.confidence) - logit(p.confidence) for c, p in zip(checked, plain, strict=True)]
    assert max(shifts) - min(shifts) < 1e-6 and abs(shifts[0]) > 1e-6


@pytest.mark.parametrize(("question", "unwritten"), [(QUESTION, ()), ("Who wrote Quillfern?", ("Quillfern",))])
def test_a_verified_holds_answer_reads_the_view_and_the_names_and_is_stored(
    tmp_path, _tiny_model_session, tiny_reader_dir, reader, question, unwritten
):
    holds = VerifiedHoldsAnswer(
        (0.5, -0.8, 0.3, 0.2, -0.4, 1.5), 0.1, (0.0, 0.0, -3.0, -1.0, -2.0, 0.5), (1.5, 2.0, 1.0, 1.0, 2.0, 0.5)
    )
    search_holds = dataclasses.replace(holds_answer(0.4), features=("all_names_in_corpus",))  # weight 0: reads it
    stored = dataclasses.replace(
        CALIBRATION,
        verification=dataclasses.replace(verification(tiny_reader_dir), holds_answer=holds),
        holds_answer=search_holds,
    )
    assert Calibration.from_dict(stored.to_dict()) == stored
    with pytest.raises(InvalidParameterError, match="features"):
        VerifiedHoldsAnswer.from_dict({**holds.to_dict(), "features": [*VERIFICATION_FEATURES, "all_names_in_corpus"]})
    model = copy.deepcopy(_tiny_model_session)
    model.config = dataclasses.replace(model.config, calibration=stored.to_dict())
    index = PhraseIndex.create(model)
    add_passages(index, model, tiny_passages(), progress=False)
    plain = PhraseSearcher(index, model, unit="phrase", top_k=5).search(question)
    checked = PhraseSearcher(index, model, unit="phrase", top_k=5, verify=True).search(question)
    assert [h.holds_answer for h in plain] == pytest.approx([0.4] * len(plain))
    assert {h.unwritten_names for h in plain} == {unwritten}  # "France" is written, "Quillfern" nowhere
    top = plain[top_answer(plain)]
    view = reader.view(question, index.passages[top.passage_row]["text"], top.start, top.end)
    expected = float(holds.probability(verification_features(0.4, view, unwritten)[None, :])[0])
    unnamed = float(holds.probability(verification_features(0.4, view)[None, :])[0])  # the names at their mean
    assert [h.holds_answer for h in checked] == pytest.approx([expected] * len(checked))
    assert abs(expected - 0.4) > 1e-3 and abs(expected - unnamed) > 1e-3


def test_a_fitted_verified_holds_answer_weighs_what_tells_answerable_questions_apart():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(400, len(HOLDS_VERIFICATION_FEATURES)))
    holds = x[:, 0] + 0.5 * x[:, 3] + 0.2 * rng.normal(size=400) > 0
    fitted = fit_verified_holds(x, holds)
    assert fitted.features == HOLDS_VERIFICATION_FEATURES and fitted.weights[0] > fitted.weights[3] > 0
    with pytest.raises(InvalidParameterError, match="columns"):
        fit_verified_holds(x[:, :2], holds)


@pytest.mark.parametrize("unit", ["passage", "document"])
def test_every_unit_is_verified_through_its_best_phrase(verified_index, unit):
    model, index = verified_index
    plain = PhraseSearcher(index, model, unit=unit, top_k=3).search(QUESTION)
    checked = PhraseSearcher(index, model, unit=unit, top_k=3, verify=True).search(QUESTION)
    assert [best_phrase(h).text for h in checked] == [best_phrase(h).text for h in plain]
    assert [best_phrase(h).confidence for h in checked] != [best_phrase(h).confidence for h in plain]


def test_verify_needs_a_model_with_a_verification(tmp_path, _tiny_model_session):
    model = PhraseModel.load(save_calibrated(copy.deepcopy(_tiny_model_session), tmp_path / "calibrated"))
    index = PhraseIndex.create(model)
    add_passages(index, model, tiny_passages(), progress=False)
    with pytest.raises(InvalidParameterError, match="train.verifier"):
        PhraseSearcher(index, model, verify=True)
    searcher = PhraseSearcher(index, model)
    assert searcher.search(QUESTION)  # without verify nothing is asked of the calibration


def test_a_reader_loads_once_per_process(tiny_reader_dir):
    assert load_reader(tiny_reader_dir) is load_reader(str(tiny_reader_dir))
    fast = load_reader(tiny_reader_dir, "bfloat16")
    assert fast is load_reader(str(tiny_reader_dir), "bfloat16") and fast is not load_reader(tiny_reader_dir)
    assert (fast.precision, load_reader(tiny_reader_dir).precision) == ("bfloat16", "float32")


def test_a_bfloat16_reader_reads_the_float32_view_to_within_its_rounding(reader, tiny_reader_dir):
    fast = SpanReader(tiny_reader_dir, precision="bfloat16")
    start = CONTEXT.index("Berlin")
    exact = reader.view("What is the capital of Germany?", CONTEXT, start, start + 6)
    rounded = fast.view("What is the capital of Germany?", CONTEXT, start, start + 6)
    assert rounded != exact  # it did compute in bfloat16
    assert rounded.values() == pytest.approx(exact.values(), abs=0.05)
    assert all(
        p.dtype.is_floating_point and p.dtype == exact_p.dtype
        for p, exact_p in zip(fast.model.parameters(), reader.model.parameters(), strict=True)
    )  # the weights stay float32
    with pytest.raises(InvalidParameterError, match="precision 'float16'"):
        SpanReader(tiny_reader_dir, precision="float16")


def test_a_verification_keeps_its_readers_precision_and_a_stored_one_without_it_reads_float32(tiny_reader_dir):
    fast = dataclasses.replace(verification(tiny_reader_dir), reader_precision="bfloat16")
    assert Verification.from_dict(fast.to_dict()) == fast
    plain = verification(tiny_reader_dir).to_dict()
    assert "reader_precision" not in plain  # a float32 one is stored as before the option existed
    assert Verification.from_dict(plain).reader_precision == "float32"
    with pytest.raises(InvalidParameterError, match="reader_precision 'half'"):
        Verification.from_dict({**plain, "reader_precision": "half"})
    assert verification_reader(fast) is load_reader(tiny_reader_dir, "bfloat16")


def test_verified_searches_from_many_threads_equal_serial_ones(verified_index):
    from concurrent.futures import ThreadPoolExecutor

    model, index = verified_index
    searcher = PhraseSearcher(index, model, unit="phrase", top_k=3, verify=True)
    questions = [QUESTION, "Who wrote Hamlet?", "When was the Eiffel Tower completed?", "Who created Python?"] * 4
    serial = [searcher.search(q) for q in questions]
    with ThreadPoolExecutor(max_workers=8) as pool:
        threaded = list(pool.map(searcher.search, questions))
    assert [[(h.text, h.confidence) for h in hits] for hits in threaded] == [
        [(h.text, h.confidence) for h in hits] for hits in serial
    ]


def test_a_verification_whose_reader_is_gone_is_refused_before_searching(tmp_path, _tiny_model_session):
    model = PhraseModel.load(save_verified(copy.deepcopy(_tiny_model_session), tmp_path / "m", tmp_path / "gone"))
    index = PhraseIndex.create(model)
    add_passages(index, model, tiny_passages(), progress=False)
    with pytest.raises(ModelLoadError, match="not found"):
        PhraseSearcher(index, model, verify=True)
    assert PhraseSearcher(index, model).search(QUESTION)  # without verify the reader is not needed
