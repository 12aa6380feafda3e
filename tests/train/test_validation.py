"""Training-time validation scores as ``dphr eval`` does: on the same index and questions, the same numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dphr_haystack.cli import main as dphr
from dphr_haystack.evaluation import question_metrics, read_results, report_stem
from dphr_haystack.model.loading import load_model
from dphr_haystack.search import PhraseSearcher
from tests.conftest import tiny_passages
from train.data import RCData, RCExample
from train.validation import Validator, build_index, evaluate_index

pytestmark = pytest.mark.unit

QUESTIONS = [
    "What is the capital of France?",
    "Who wrote Hamlet?",
    "Where is the Nile?",
    "What is the highest mountain?",
    "Who created Python?",
    "What is Berlin known for?",
]


def _examples(model, passages) -> list[RCExample]:
    """Gold answers the index finds for some questions and not for others, so no metric is trivially 0 or 1: the
    top phrase (questions 0 and 3), the first words of the top passage (1 and 4) or words found nowhere (2 and 5)."""
    searcher = PhraseSearcher(build_index(model, passages), model)
    phrases = searcher.search_batch(QUESTIONS, unit="phrase", top_k=20)
    ranked = searcher.search_batch(QUESTIONS, unit="passage", top_k=20)
    examples = []
    for i, question in enumerate(QUESTIONS):
        if i % 3 == 0:
            answer = phrases[i][0].text
        elif i % 3 == 1:
            answer = " ".join(ranked[i][0].text.split()[:4])
        else:
            answer = "zzqx found nowhere"
        examples.append(RCExample(f"q{i}", question, [answer], [0], passages[0]["id"]))
    return examples


@pytest.mark.parametrize("ks", [(1, 5, 20), (1, 3)])
def test_validation_numbers_equal_dphr_eval(tmp_path, tiny_model_dir, ks):
    model = load_model(tiny_model_dir)
    passages = tiny_passages()
    data = RCData(passages, _examples(model, passages))
    validator = Validator(data, {"all": [p["id"] for p in passages]}, ks=ks)

    scores = validator(model)
    index = validator.index_for(model, "all")
    assert {f"all/{key}": value for key, value in evaluate_index(index, model, data.examples, ks).items()} == {
        key: value for key, value in scores.items() if key != "all/passages"
    }
    assert 0 < scores["all/em@1"] < 1 and 0 < scores["all/acc@1"] < 1

    index.save(tmp_path / "index")
    questions = tmp_path / "questions.jsonl"
    lines = [json.dumps({"question": ex.question, "answer": ex.answers}) for ex in data.examples]
    questions.write_text("\n".join(lines) + "\n")
    argv = ["eval", "--index", str(tmp_path / "index"), "--model", str(tiny_model_dir), "--questions", str(questions)]
    out = tmp_path / "eval"
    assert dphr([*argv, "--top-k", str(max(ks)), "--name", "dev", "--out", str(out), "--no-progress"]) == 0
    reported = json.loads((out / f"{report_stem('dev')}.summary.json").read_text())["metrics"]
    # acc@k for a k the summary does not list (it has 1, 5 and 20), from the per-question results it wrote
    results = read_results(out / f"{report_stem('dev')}.predictions.jsonl")
    per_question = question_metrics(results, max(ks), has_answers=True, has_passages=True, ks=ks)

    assert scores["all/em@1"] == reported["phrase_em@1"]
    for k in ks:
        assert scores[f"all/acc@{k}"] == reported.get(
            f"passage_acc@{k}", float(np.mean(per_question[f"passage_acc@{k}"]))
        )


def test_validation_ranks_by_phrase_score_so_a_calibration_changes_nothing(tiny_model_dir, monkeypatch):
    """Training checkpoints carry no calibration and the shipped model does: both are measured by phrase score."""
    import copy

    import train.validation as validation
    from dphr_haystack._util.io import read_json
    from dphr_haystack.model.registry import shipped_model_path

    model = load_model(tiny_model_dir)
    passages = tiny_passages()
    data = RCData(passages, _examples(model, passages))
    subcorpora = {"all": [p["id"] for p in passages]}
    rankings = []

    def searcher(*args, **kwargs):
        rankings.append(kwargs.get("ranking", "confidence"))
        return PhraseSearcher(*args, **kwargs)

    monkeypatch.setattr(validation, "PhraseSearcher", searcher)
    calibrated = copy.deepcopy(model)
    calibrated.config.calibration = read_json(shipped_model_path("dphr-minilm-squad") / "dphr_config.json")[
        "calibration"
    ]
    assert Validator(data, subcorpora)(calibrated) == Validator(data, subcorpora)(model)
    assert rankings == ["score", "score"]
