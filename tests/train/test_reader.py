"""The reader stage: a QA reader on the student's windows, labels that line up, a teacher directory, the KL term
under the unified loss, and gold-window span accuracy."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from train.data import PassageWindows, build_features, collate, load_squad
from train.reader import ReaderModel, ReaderTask, best_spans, phrase_model_logits, reader_labels, span_metrics
from train.tasks import RCTask
from train.teacher import CrossEncoderTeacher, reader_inputs

pytestmark = pytest.mark.unit


@pytest.fixture
def sample(tiny_model):
    data = load_squad("builtin")
    windows = PassageWindows(tiny_model.tokenizer, tiny_model.config, data.passages)
    return data, windows, build_features(data, windows)


def test_reader_labels_point_at_the_student_gold_tokens(tiny_model, sample):
    data, _, features = sample
    batch = collate(
        features, [data.examples[f.example].question for f in features], tiny_model.tokenizer, tiny_model.config
    )
    inputs, align = reader_inputs(batch, 0, 512)
    starts, ends = reader_labels(batch, align)
    answered = 0
    for row, f in enumerate(features):
        if f.start == 0:
            assert starts[row] == ends[row] == 0
            continue
        answered += 1
        assert inputs["input_ids"][row, starts[row]] == f.input_ids[f.start]
        assert inputs["input_ids"][row, ends[row]] == f.input_ids[f.end]
        assert inputs["token_type_ids"][row, starts[row]] == 1  # inside the context segment
    assert answered > 0 and any(f.start == 0 for f in features)  # short windows: some miss their answer


def test_reader_starts_from_the_phrase_encoder_and_saves_a_teacher_directory(tiny_model, tmp_path):
    reader = ReaderModel.from_phrase_model(tiny_model, "phrase")
    body = getattr(reader.qa, reader.qa.base_model_prefix)
    copied = body.state_dict()
    for name, tensor in tiny_model.phrase_encoder.state_dict().items():
        if not name.startswith("pooler."):  # a QA model reads token states only: it has no pooler
            assert torch.equal(copied[name], tensor), name
    path = reader.save(tmp_path / "reader")
    loaded = ReaderModel.load(path)
    assert all(p.requires_grad for p in loaded.parameters())  # the trainer resumes from it
    for name, tensor in reader.qa.state_dict().items():
        assert torch.equal(loaded.qa.state_dict()[name], tensor), name
    teacher = CrossEncoderTeacher.load(path, tiny_model.tokenizer)  # what rc.teacher loads
    assert not any(p.requires_grad for p in teacher.model.parameters())
    with pytest.raises(ValueError, match="valid: phrase, base"):
        ReaderModel.from_phrase_model(tiny_model, "random")


def test_reader_task_learns_the_sample(tiny_model, sample):
    data, _, features = sample
    reader = ReaderModel.from_phrase_model(tiny_model, "phrase")
    task = ReaderTask(reader, data, features)
    batches = list(task.batches(0, batch_size=4, rank=0, world_size=1, seed=0))
    assert sum(len(b["start_positions"]) for b in batches) == task.num_batches(4, 1) * 4
    optimizer = torch.optim.AdamW(reader.parameters(), lr=3e-3)
    reader.train()
    losses = []
    for _ in range(15):
        total = 0.0
        for batch in batches:
            loss = task.step(reader, batch)["loss"]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        losses.append(total)
    assert losses[-1] < 0.5 * losses[0]


def test_best_spans_respect_order_and_length():
    start = torch.tensor([[0.0, 5.0, 0.0, 0.0, 9.0, 0.0]])
    end = torch.tensor([[0.0, 0.0, 0.0, 6.0, 0.0, 0.0]])
    assert best_spans(start, end, [1], [4], max_length=3) == [(1, 3)]  # (4, 3) ends before it starts
    assert best_spans(start, end, [1], [4], max_length=2) == [(4, 4)]  # (1, 3) is three tokens long
    assert best_spans(start, end, [2], [3], max_length=3) == [(2, 3)]  # only the span's window counts


def test_span_metrics_score_gold_logits_perfectly_and_count_questions(tiny_model, sample):
    data, _, features = sample

    def oracle(batch):
        n, width = batch["p_input_ids"].shape
        start = torch.zeros(n, width)
        end = torch.zeros(n, width)
        start[torch.arange(n), batch["start_positions"]] = 10.0
        end[torch.arange(n), batch["end_positions"]] = 10.0
        return start, end

    longest = max(f.end - f.start + 1 for f in features if f.start > 0)
    config = copy.deepcopy(tiny_model.config)
    config.max_answer_length = longest
    perfect = span_metrics(oracle, data, features, tiny_model.tokenizer, config)
    assert perfect["em"] == perfect["f1"] == 100.0
    config.max_answer_length = longest - 1  # the longest gold span can no longer be decoded
    assert span_metrics(oracle, data, features, tiny_model.tokenizer, config)["em"] < 100.0
    assert perfect["questions"] == sum(f.start > 0 for f in features)
    untrained = span_metrics(
        phrase_model_logits(tiny_model.eval()), data, features, tiny_model.tokenizer, tiny_model.config
    )
    assert 0.0 <= untrained["em"] <= untrained["f1"] < 100.0


def test_unified_loss_adds_the_kl_term_with_gradients(tiny_model, sample):
    data, windows, features = sample
    teacher = ReaderModel.from_phrase_model(tiny_model, "phrase").teacher()
    for p in teacher.model.parameters():
        p.requires_grad_(False)
    tiny_model.eval()

    def run(lambda_kl, with_teacher):
        tiny_model.zero_grad(set_to_none=True)
        task = RCTask(
            tiny_model,
            data,
            features,
            windows,
            loss="unified",
            pre_batch=0,
            batching="passage",
            teacher=teacher if with_teacher else None,
            lambda_kl=lambda_kl,
        )
        batch = next(iter(task.batches(0, batch_size=4, rank=0, world_size=1, seed=0)))
        out = task.step(tiny_model, batch)
        out["loss"].backward()
        return out, {n: p.grad.clone() for n, p in tiny_model.named_parameters() if p.grad is not None}

    with_kl, g_kl = run(3.0, True)
    plain, g_plain = run(0.0, False)
    assert with_kl["kl"].item() > 1e-4 and "kl" not in plain
    assert with_kl["loss"].item() == pytest.approx(plain["loss"].item() + 3.0 * with_kl["kl"].item(), rel=1e-5)
    assert sum((g_kl[n] - g_plain[n]).abs().sum().item() for n in g_kl if n.startswith("phrase_encoder.")) > 0
    with pytest.raises(ValueError, match="lambda_kl > 0"):
        RCTask(tiny_model, data, features, windows, loss="unified", teacher=teacher)
    with pytest.raises(ValueError, match="densephrases: loss_kwargs.lambda_kl"):
        RCTask(tiny_model, data, features, windows, loss="densephrases", lambda_kl=1.0)


@pytest.mark.parametrize("kind", ["bert", "mpnet"])
def test_recipe_trains_a_reader_then_distils_it(tmp_path, run_tiny_recipe, tiny_base_dir, tiny_mpnet_dir, kind):
    """On the BERT-shaped tiny base (MiniLM's family) and the MPNet-shaped one (all-mpnet-base-v2's)."""
    train = {"max_steps": 2, "lr": 1e-3, "log_every": 1, "progress": False}
    summary = run_tiny_recipe(
        {
            "stages": ["reader", "rc"],
            "model.base": str(tiny_mpnet_dir if kind == "mpnet" else tiny_base_dir),
            "reader.encoder_init": "base",
            "reader.train": {**train, "batch_size": 4},
            "rc.loss": "unified",
            "rc.batching": "passage",
            "rc.teacher": "reader",
            "rc.lambda_kl": 1.0,
            "rc.select_on": None,
            "rc.train": {**train, "batch_size": 2},
        }
    )
    reader = summary["stages"]["reader"]
    assert reader["steps"] == 2 and reader["encoder_init"] == "base"
    assert set(reader["gold_window_spans"]) == {"reader", "phrase_model"}
    assert json.loads((tmp_path / "run" / "reader" / "metrics.json").read_text())["steps"] == 2
    qa = json.loads((tmp_path / "run" / "reader" / "final" / "config.json").read_text())
    assert qa["architectures"] == ["MPNetForQuestionAnswering" if kind == "mpnet" else "BertForQuestionAnswering"]
    records = [json.loads(x) for x in (tmp_path / "run" / "rc" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2] and all(r["kl"] > 0 for r in records)


@pytest.fixture(scope="module")
def tiny_mpnet_dir(tmp_path_factory):
    """A tiny random MPNet (all-mpnet-base-v2's shape: <s>/</s> specials, no segment embeddings)."""
    from dphr_haystack.testing import make_tiny_base
    from tests.conftest import TINY_TEXTS
    from train.data import builtin_squad

    data = builtin_squad()
    texts = [p["context"] for a in data["data"] for p in a["paragraphs"]]
    texts += [q["question"] for a in data["data"] for p in a["paragraphs"] for q in p["qas"]]
    texts += [t for _, t in TINY_TEXTS]
    return make_tiny_base(tmp_path_factory.mktemp("tiny-mpnet"), texts, kind="mpnet")


def test_reader_rows_are_what_the_readers_tokenizer_pairs(tiny_model, tiny_mpnet_dir):
    """BERT reads ``[CLS] q [SEP] c [SEP]`` with segments; MPNet ``<s> q </s></s> c </s>`` without: the rows a reader
    trains on equal its tokenizer's own pair encoding, which is what Haystack's readers give it."""
    from dphr_haystack.model.config import PhraseModelConfig
    from dphr_haystack.model.phrase_model import PhraseModel

    mpnet = PhraseModel.from_base(tiny_mpnet_dir, PhraseModelConfig(max_passage_length=48, passage_stride=8))
    for model in (tiny_model, mpnet):
        data = load_squad("builtin")
        features = build_features(data, PassageWindows(model.tokenizer, model.config, data.passages))[:6]
        questions = [data.examples[f.example].question for f in features]
        batch = collate(features, questions, model.tokenizer, model.config)
        teacher = ReaderModel.from_phrase_model(model, "base").teacher()
        inputs, align = teacher.inputs(batch)
        assert ("token_type_ids" in inputs) == (model is tiny_model)
        for row, (feature, (cs, n_context, reader_cs, _)) in enumerate(zip(features, align, strict=True)):
            context = feature.input_ids[cs : cs + n_context]
            question = model.tokenizer(questions[row].rstrip("?"), add_special_tokens=False)["input_ids"]
            expected = model.tokenizer.build_inputs_with_special_tokens(question, context)
            got = inputs["input_ids"][row, : len(expected)].tolist()
            assert got == expected and got[reader_cs : reader_cs + n_context] == context
