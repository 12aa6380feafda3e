"""Distillation teacher: safe loading, logits aligned to the student's windows, a non-zero KL term with gradients."""

from __future__ import annotations

import json
import os
import pickle

import pytest
import torch

from dphr_haystack.errors import ModelLoadError
from train.data import PassageWindows, build_features, collate, load_squad
from train.tasks import RCTask
from train.teacher import MASKED_LOGIT, CrossEncoderTeacher, load_qa_model

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def teacher_dir(tiny_base_dir, tmp_path_factory):
    """A tiny random BertForQuestionAnswering on the tiny base's vocabulary, saved as safetensors."""
    import transformers

    config = transformers.BertConfig.from_pretrained(str(tiny_base_dir))
    torch.manual_seed(7)
    out = tmp_path_factory.mktemp("teacher")
    transformers.BertForQuestionAnswering(config).save_pretrained(str(out), safe_serialization=True)
    return out


@pytest.fixture
def batch_and_task(tiny_model, teacher_dir):
    data = load_squad("builtin")
    windows = PassageWindows(tiny_model.tokenizer, tiny_model.config, data.passages)
    features = build_features(data, windows)[:6]
    batch = collate(
        features, [data.examples[f.example].question for f in features], tiny_model.tokenizer, tiny_model.config
    )
    teacher = CrossEncoderTeacher.load(teacher_dir, tiny_model.tokenizer)
    return data, features, windows, batch, teacher


def test_teacher_logits_line_up_with_the_student_window(tiny_model, batch_and_task):
    _, features, _, batch, teacher = batch_and_task
    t_start, t_end = teacher.logits(batch)
    assert t_start.shape == batch["p_input_ids"].shape == t_end.shape
    tok = tiny_model.tokenizer
    for row, feature in enumerate(features):
        ids = feature.input_ids
        context = ids[feature.context_start : len(ids) - 1]
        question = [
            t
            for t, m in zip(batch["q_input_ids"][row].tolist(), batch["q_attention_mask"][row].tolist(), strict=True)
            if m
        ]
        direct_ids = torch.tensor([question + context + [tok.sep_token_id]])
        types = torch.tensor([[0] * len(question) + [1] * (len(context) + 1)])
        with torch.no_grad():
            direct = teacher.model(input_ids=direct_ids, token_type_ids=types)
        cs, n = feature.context_start, len(context)
        for aligned, raw in ((t_start, direct.start_logits[0]), (t_end, direct.end_logits[0])):
            torch.testing.assert_close(aligned[row, cs : cs + n], raw[len(question) : len(question) + n])
            torch.testing.assert_close(aligned[row, 0], raw[0])  # [CLS]
            torch.testing.assert_close(aligned[row, len(ids) - 1], raw[-1])  # final [SEP]
            assert (aligned[row, 1:cs] == MASKED_LOGIT).all()  # title and its [SEP]: unseen by the teacher
    assert features[0].context_start > 1, "the sample should have titles"


def test_kl_term_is_non_zero_and_trains_the_student(tiny_model, batch_and_task):
    data, features, windows, batch, teacher = batch_and_task

    def grads(lambda_kl: float, with_teacher: bool) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        tiny_model.zero_grad(set_to_none=True)
        task = RCTask(
            tiny_model,
            data,
            features,
            windows,
            loss="densephrases",
            pre_batch=0,
            loss_kwargs={"lambda_neg": 1.0, "lambda_flt": 1.0, "lambda_kl": lambda_kl},
            teacher=teacher if with_teacher else None,
        )
        out = task.step(tiny_model, batch)
        out["loss"].backward()
        return out, {n: p.grad.clone() for n, p in tiny_model.named_parameters() if p.grad is not None}

    tiny_model.eval()  # no dropout: both passes see the same student
    with_kl, g_kl = grads(2.0, True)
    without, g_plain = grads(0.0, False)
    assert with_kl["kl"].item() > 1e-3 and without["kl"].item() == 0.0
    assert with_kl["loss"].item() == pytest.approx(without["loss"].item() + 2.0 * with_kl["kl"].item(), rel=1e-5)
    for prefix in ("phrase_encoder.encoder", "query_start_encoder.encoder", "query_end_encoder.encoder"):
        diff = sum((g_kl[n] - g_plain[n]).abs().sum().item() for n in g_kl if n.startswith(prefix))
        assert diff > 0, f"the KL term sends no gradient to {prefix}"
    assert all(p.grad is None for p in teacher.model.parameters())  # the teacher stays frozen


def test_teacher_needs_the_densephrases_kl_term(tiny_model, batch_and_task):
    data, features, windows, _, teacher = batch_and_task
    with pytest.raises(ValueError, match="lambda_kl"):
        RCTask(tiny_model, data, features, windows, loss="unified", teacher=teacher)
    with pytest.raises(ValueError, match="lambda_kl"):
        RCTask(
            tiny_model, data, features, windows, loss="densephrases", loss_kwargs={"lambda_kl": 0.0}, teacher=teacher
        )


class _MakesADirectory:
    """Unpickling this calls os.makedirs(path): what a hostile checkpoint could do."""

    def __init__(self, path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (os.makedirs, (self.path,))


def test_teacher_loading_refuses_pickles_and_foreign_vocabularies(tiny_model, teacher_dir, tmp_path):
    # A pytorch_model.bin that would run code when unpickled is refused, and nothing runs.
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "config.json").write_text((teacher_dir / "config.json").read_text())
    marker = tmp_path / "pwned"
    (evil / "pytorch_model.bin").write_bytes(pickle.dumps({"qa_outputs.weight": _MakesADirectory(marker)}, protocol=2))
    with pytest.raises(ModelLoadError, match="refused"):
        load_qa_model(evil)
    assert not marker.exists()
    # No weights at all.
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text((teacher_dir / "config.json").read_text())
    with pytest.raises(ModelLoadError, match="neither"):
        load_qa_model(empty)
    # A teacher whose tokenizer differs from the student's cannot be aligned token by token.
    other = tmp_path / "other"
    other.mkdir()
    for name in ("config.json", "model.safetensors"):
        (other / name).write_bytes((teacher_dir / name).read_bytes())
    (other / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "other", "words"]))
    with pytest.raises(ModelLoadError, match="vocabulary"):
        CrossEncoderTeacher.load(other, tiny_model.tokenizer)


def test_recipe_rc_stage_distils_from_a_teacher_directory(teacher_dir, tmp_path, run_tiny_recipe):
    overrides = {
        "stages": ["rc"],
        "rc.loss": "densephrases",
        "rc.teacher": str(teacher_dir),
        "rc.select_on": None,
        "rc.loss_kwargs": {"lambda_neg": 4.0, "lambda_flt": 1.0, "lambda_kl": 1.0},
        "rc.train": {"max_steps": 2, "batch_size": 4, "lr": 1e-3, "log_every": 1, "progress": False},
    }
    result = run_tiny_recipe(overrides, "rc")
    assert result["steps"] == 2 and result["teacher"] == str(teacher_dir)
    records = [json.loads(line) for line in (tmp_path / "run" / "rc" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2] and all(r["kl"] > 0 for r in records)


def test_reader_rows_fit_the_position_embeddings_of_each_family():
    import transformers

    from train.teacher import usable_positions

    assert usable_positions(transformers.BertConfig(max_position_embeddings=512)) == 512
    mpnet = transformers.MPNetConfig(max_position_embeddings=514, pad_token_id=1)  # all-mpnet-base-v2's values
    assert usable_positions(mpnet) == 512  # positions start past the padding id


def _copy_reader(source, target, vocab=None, lower_case=True):
    """A copy of a reader directory, its tokenizer rebuilt from ``vocab.txt`` (optionally another vocab / casing)."""
    target.mkdir()
    for path in source.iterdir():
        if path.name != "tokenizer.json":
            (target / path.name).write_bytes(path.read_bytes())
    if vocab is not None:
        (target / "vocab.txt").write_text("\n".join(vocab) + "\n")
    config = json.loads((target / "tokenizer_config.json").read_text())
    (target / "tokenizer_config.json").write_text(json.dumps({**config, "do_lower_case": lower_case}))
    return target


def test_an_mpnet_teacher_reads_the_student_windows_in_its_own_vocabulary(
    tiny_model, batch_and_task, tiny_mpnet_reader_dir, tmp_path
):
    """MPNet's vocabulary is the student's behind four specials of its own: the ids are translated, specials by
    their role, so the teacher reads ``<s> q </s></s> context </s>`` as its own tokenizer writes it."""
    _, features, _, batch, _ = batch_and_task
    teacher = CrossEncoderTeacher.load(tiny_mpnet_reader_dir, tiny_model.tokenizer)
    assert teacher.id_map is not None and not teacher.use_token_types
    student = tiny_model.tokenizer
    tensors, _ = teacher.inputs(batch)
    for row, feature in enumerate(features):
        q_ids = [t for t, m in zip(batch["q_input_ids"][row].tolist(), batch["q_attention_mask"][row].tolist()) if m]
        context = feature.input_ids[feature.context_start : len(feature.input_ids) - 1]
        n = int(tensors["attention_mask"][row].sum())
        written = teacher.tokenizer.convert_ids_to_tokens(tensors["input_ids"][row, :n].tolist())
        words = student.convert_ids_to_tokens(q_ids[1:-1]), student.convert_ids_to_tokens(context)
        assert written == ["<s>", *words[0], "</s>", "</s>", *words[1], "</s>"]
        assert "[UNK]" not in words[0] + words[1]  # the comparison is of real words
    t_start, t_end = teacher.logits(batch)
    assert t_start.shape == batch["p_input_ids"].shape and torch.isfinite(t_start[:, 0]).all()
    with torch.no_grad():
        direct = teacher.model(input_ids=tensors["input_ids"][:1], attention_mask=tensors["attention_mask"][:1])
    torch.testing.assert_close(t_end[0, 0], direct.end_logits[0, 0])

    vocab = (tiny_mpnet_reader_dir / "vocab.txt").read_text().split()
    lacking = _copy_reader(tiny_mpnet_reader_dir, tmp_path / "lacking", [t for t in vocab if t != "the"])
    with pytest.raises(ModelLoadError, match="lacks 1 of its tokens"):
        CrossEncoderTeacher.load(lacking, student)
    cased = _copy_reader(tiny_mpnet_reader_dir, tmp_path / "cased", lower_case=False)
    with pytest.raises(ModelLoadError, match="do not tokenise alike"):
        CrossEncoderTeacher.load(cased, student)
