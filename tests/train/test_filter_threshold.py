"""The filter stage's threshold rule, its place in dphr_config.json, and ``dphr index``/``dphr dump`` taking it by
default."""

from __future__ import annotations

import json

import pytest

from dphr_haystack import PhraseModel, PhraseModelConfig
from dphr_haystack.errors import InvalidParameterError, ModelLoadError
from train.filter import choose_threshold, store_filter_threshold
from train.recipes import load_recipe

pytestmark = pytest.mark.unit


def _row(threshold, vectors, em, acc=0.5):
    return {"threshold": threshold, "vectors": vectors, "kept_fraction": vectors / 1000, "em@1": em, "acc@20": acc}


SWEEP = [
    _row(None, 1000, 0.40),
    _row(-2.0, 700, 0.41),
    _row(-1.0, 400, 0.395),
    _row(0.0, 150, 0.37),
    _row(1.0, 50, 0.20),
]


def test_smallest_index_within_the_allowed_drop():
    choice = choose_threshold(SWEEP, "em@1", max_drop=0.01)
    assert choice["threshold"] == -1.0 and choice["reference"] == 0.40 and choice["chosen"] == 0.395
    assert choose_threshold(SWEEP, "em@1", max_drop=0.05)["threshold"] == 0.0
    assert choose_threshold(SWEEP, "em@1", max_drop=0.0)["threshold"] == -2.0  # filtering may even help
    assert choose_threshold(SWEEP, "em@1", max_drop=1.0)["threshold"] == 1.0


def test_no_threshold_when_filtering_always_costs_too_much_or_there_is_no_signal():
    losing = [_row(None, 1000, 0.40), _row(-1.0, 400, 0.30), _row(0.0, 100, 0.10)]
    assert choose_threshold(losing, "em@1", 0.01)["threshold"] is None
    silent = [_row(None, 1000, 0.0), _row(0.0, 100, 0.0)]
    choice = choose_threshold(silent, "em@1", 0.01)
    assert choice["threshold"] is None and "no signal" in choice["rule"]


def test_reference_without_an_unfiltered_row_and_ties():
    rows = [_row(-3.0, 900, 0.40), _row(-2.0, 600, 0.395), _row(-1.0, 600, 0.395)]
    # reference: the largest index (-3); -2 and -1 tie on size and accuracy: the higher threshold wins
    assert choose_threshold(rows, "em@1", 0.01)["threshold"] == -1.0
    assert choose_threshold(rows, "acc@20", 0.0)["threshold"] == -1.0
    with pytest.raises(ValueError, match="valid: em@1, acc@20"):
        choose_threshold(rows, "acc@7")


def _budget_row(threshold, per_passage, em):
    return {**_row(threshold, int(per_passage * 100), em), "vectors_per_passage": per_passage}


# the shipped model's sweep shape: threshold 1.0 is the smallest within 1 EM point, 0.5 reads better
BUDGET_SWEEP = [
    _budget_row(None, 120.0, 0.310),
    _budget_row(0.0, 60.0, 0.312),
    _budget_row(0.5, 39.5, 0.305),
    _budget_row(0.75, 38.4, 0.305),
    _budget_row(1.0, 34.0, 0.300),
    _budget_row(2.0, 20.0, 0.240),
]


def test_vector_budget_picks_the_most_accurate_index_within_the_budget():
    assert choose_threshold(BUDGET_SWEEP, "em@1", max_drop=0.01)["threshold"] == 1.0  # the old rule
    choice = choose_threshold(BUDGET_SWEEP, "em@1", vector_budget=40)
    # 0.5 and 0.75 tie on EM: the smaller index wins
    assert choice["threshold"] == 0.75 and choice["chosen"] == 0.305 and choice["vectors_per_passage"] == 38.4
    assert "<= 40 vectors per passage" in choice["rule"] and choice["vector_budget"] == 40
    assert choose_threshold(BUDGET_SWEEP, "em@1", vector_budget=1000)["threshold"] == 0.0  # filtering may help
    assert choose_threshold(BUDGET_SWEEP, "em@1", vector_budget=30)["threshold"] == 2.0


def test_vector_budget_nothing_fits_or_rows_lack_the_count():
    choice = choose_threshold(BUDGET_SWEEP, "em@1", vector_budget=5)
    assert choice["threshold"] == 2.0 and "smallest index" in choice["rule"]
    with pytest.raises(ValueError, match="vectors_per_passage"):
        choose_threshold(SWEEP, "em@1", vector_budget=40)
    with pytest.raises(ValueError, match="vector_budget must be > 0"):
        choose_threshold(BUDGET_SWEEP, "em@1", vector_budget=0)


def test_vector_budget_is_held_to_the_corpus_sample_when_every_row_counts_one():
    # the sweep's hard subcorpus keeps fewer vectors per passage than a random sample of the corpus does
    sampled = [{**row, "sample_vectors_per_passage": 1.4 * row["vectors_per_passage"]} for row in BUDGET_SWEEP]
    choice = choose_threshold(sampled, "em@1", vector_budget=40)
    assert choice["threshold"] == 2.0 and choice["budget_count"] == "sample_vectors_per_passage"
    assert choice["sample_vectors_per_passage"] == pytest.approx(28.0) and "corpus sample" in choice["rule"]
    partly = [sampled[0], *BUDGET_SWEEP[1:]]  # a count on some rows only: the sweep's own count decides
    assert choose_threshold(partly, "em@1", vector_budget=40)["budget_count"] == "vectors_per_passage"
    assert choose_threshold(sampled, "em@1", max_drop=0.01)["budget_count"] is None


def test_recipe_rejects_a_negative_budget_sample(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("filter: {vector_budget: 40, budget_sample: -1}\n")
    with pytest.raises(ValueError, match="budget_sample"):
        load_recipe(bad)


def test_recipe_rejects_a_non_positive_vector_budget(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("filter: {vector_budget: -1}\n")
    with pytest.raises(ValueError, match="vector_budget"):
        load_recipe(bad)


def test_recipe_rejects_a_metric_the_sweep_does_not_report(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("filter: {choose_metric: acc@3}\nvalidate: {ks: [1, 5]}\n")
    with pytest.raises(ValueError, match="choose_metric"):
        load_recipe(bad)


def test_threshold_is_stored_in_the_model_config_and_used_by_dphr_index_and_dump(tiny_model, tmp_path, capsys):
    from dphr_haystack.cli import main as dphr
    from dphr_haystack.index.phrase_index import PhraseIndex
    from tests.conftest import tiny_passages

    model_dir = tmp_path / "model"
    tiny_model.save(model_dir)
    fingerprint = tiny_model.phrase_fingerprint()
    store_filter_threshold(model_dir, 0.25)
    loaded = PhraseModel.load(model_dir)
    assert loaded.config.filter_threshold == 0.25
    assert loaded.phrase_fingerprint() == fingerprint  # an index built before still matches the model
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in tiny_passages()))
    runs = {"default": [], "explicit": ["--filter-threshold", "-0.5"], "none": ["--filter-threshold", "none"]}
    sizes = {}
    for name, extra in runs.items():
        out = tmp_path / f"index-{name}"
        assert (
            dphr(
                [
                    "index",
                    "--model",
                    str(model_dir),
                    "--corpus",
                    str(corpus),
                    "--out",
                    str(out),
                    "--no-progress",
                    *extra,
                ]
            )
            == 0
        )
        index = PhraseIndex.load(out)
        sizes[name] = (index.filter_threshold, len(index))
        dump = tmp_path / f"dump-{name}"
        assert (
            dphr(
                [
                    "dump",
                    "--model",
                    str(model_dir),
                    "--corpus",
                    str(corpus),
                    "--out",
                    str(dump),
                    "--device",
                    "cpu",
                    "--no-progress",
                    *extra,
                ]
            )
            == 0
        )
        assert json.loads((dump / "dump.json").read_text())["filter_threshold"] == index.filter_threshold
    capsys.readouterr()
    assert sizes["default"][0] == 0.25 and sizes["explicit"][0] == -0.5 and sizes["none"][0] is None
    assert sizes["default"][1] <= sizes["explicit"][1] <= sizes["none"][1]
    store_filter_threshold(model_dir, None)
    assert PhraseModel.load(model_dir).config.filter_threshold is None


def test_config_rejects_a_non_numeric_threshold(tmp_path):
    with pytest.raises(InvalidParameterError, match="filter_threshold"):
        PhraseModelConfig(filter_threshold=float("nan"))
    path = tmp_path / "dphr_config.json"
    PhraseModelConfig().save(path)
    data = json.loads(path.read_text())
    data["filter_threshold"] = "high"
    path.write_text(json.dumps(data))
    with pytest.raises((ModelLoadError, InvalidParameterError), match="filter_threshold"):
        PhraseModelConfig.load(path)
