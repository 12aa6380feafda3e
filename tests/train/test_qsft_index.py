"""Query-side fine-tuning against an existing on-disk phrase index (``qsft.index``)."""

from __future__ import annotations

import pytest
import torch
import yaml

from dphr_haystack.encode.add import add_passages
from dphr_haystack.errors import ModelMismatchError
from dphr_haystack.index.phrase_index import PhraseIndex
from dphr_haystack.model.phrase_model import PhraseModel
from train.data import load_squad
from train.recipes import load_recipe, run_stage

pytestmark = pytest.mark.unit


def _recipe(tmp_path, model_dir, index_dir, label_strategy="phrase"):
    raw = {
        "output_dir": str(tmp_path / "run"),
        "stages": ["qsft"],
        "data": {"train": "builtin", "dev": "builtin"},
        "qsft": {
            "init": str(model_dir),
            "index": str(index_dir),
            "top_k": 5,
            "label_strategy": label_strategy,
            "train": {"max_steps": 3, "batch_size": 4, "lr": 1.0e-2, "progress": False, "log_every": 1},
        },
    }
    path = tmp_path / "qsft.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_recipe(path)


@pytest.fixture
def model_and_index(tiny_model, tmp_path):
    model_dir, index_dir = tmp_path / "model", tmp_path / "index"
    tiny_model.save(model_dir)
    index = PhraseIndex.create(tiny_model, path=index_dir)
    add_passages(index, tiny_model, load_squad("builtin").passages, progress=False)
    return model_dir, index_dir


def test_qsft_trains_the_query_side_against_a_given_index(tmp_path, model_and_index):
    model_dir, index_dir = model_and_index
    result = run_stage(_recipe(tmp_path, model_dir, index_dir), "qsft")
    assert result["index"] == str(index_dir) and result["steps"] == 3
    before, after = PhraseModel.load(model_dir), PhraseModel.load(result["final"])
    assert before.phrase_fingerprint() == after.phrase_fingerprint()  # the index still matches the model
    changed = [n for n, p in after.named_parameters() if not torch.equal(p, dict(before.named_parameters())[n])]
    assert changed and all(n.startswith(("query_start_encoder.", "query_end_encoder.")) for n in changed)


def test_qsft_index_refuses_document_labels(tmp_path, model_and_index):
    model_dir, index_dir = model_and_index
    with pytest.raises(ValueError, match="label_strategy: phrase"):
        run_stage(_recipe(tmp_path, model_dir, index_dir, "phrase,doc"), "qsft")


def test_qsft_index_of_another_phrase_encoder_is_refused(tmp_path, model_and_index, tiny_model):
    model_dir, index_dir = model_and_index
    with torch.no_grad():
        next(tiny_model.phrase_encoder.parameters()).add_(1.0)
    other = tmp_path / "other-model"
    tiny_model.save(other)
    with pytest.raises(ModelMismatchError, match="another phrase encoder"):
        run_stage(_recipe(tmp_path, other, index_dir), "qsft")
