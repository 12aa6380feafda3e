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


LAKE_TOWN = {
    "data": [
        {
            "title": "Velmora",
            "paragraphs": [
                {
                    "context": "Velmora was founded by the fisher Anna Brek in 1821 on the shore of Lake Tessin.",
                    "qas": [
                        {
                            "id": "q1",
                            "question": "Who founded Velmora on Lake Tessin?",
                            "answers": [{"text": "Anna Brek", "answer_start": 34}],
                        }
                    ],
                },
                {"context": "Velmora on Lake Tessin holds a market each summer; fishers sell their catch there."},
                {"context": "The town's school opened in 1902 and its bell still rings at noon."},
                {"context": "A statue of Anna Brek stands in the harbour of Velmora."},
            ],
        },
        {
            "title": "Tessin",
            "paragraphs": [
                {
                    "context": "Lake Tessin is deep and cold; the Morrow Basin beside it froze over in 1902.",
                    "qas": [
                        {
                            "id": "q2",
                            "question": "When did the Morrow Basin freeze over?",
                            "answers": [{"text": "1902", "answer_start": 71}],
                        }
                    ],
                }
            ],
        },
    ]
}


def test_near_misses_are_passages_of_the_questions_article_without_its_answer_most_alike_first():
    from train.data import near_miss_passages

    data = load_squad(LAKE_TOWN)
    ids = [p["id"] for p in data.passages]
    # the market paragraph shares "Velmora", "Lake", "Tessin"; the school one nothing; the statue holds the answer
    # and the other article's paragraph is not of the question's article
    assert near_miss_passages(data, 1.0) == [(0, ids[1])]
    assert near_miss_passages(data, 2.0) == [(0, ids[1]), (0, ids[2])]
    assert near_miss_passages(data, 5.0) == [(0, ids[1]), (0, ids[2])]
    assert near_miss_passages(data, 0.0) == []
    drawn = [len(near_miss_passages(data, 0.5, seed)) for seed in range(40)]
    assert set(drawn) == {0, 1} and 10 < sum(drawn) < 30  # a fraction draws which questions get one


def test_near_miss_features_cover_the_passages_windows_with_no_answer(tiny_model):
    from train.data import near_miss_features, near_miss_passages

    data = load_squad(LAKE_TOWN)
    windows = PassageWindows(tiny_model.tokenizer, tiny_model.config, data.passages)
    pairs = near_miss_passages(data, 2.0)
    features = near_miss_features(pairs, windows)
    expected = sum(len(windows.windows[windows.row[pid]]) for _, pid in pairs)
    assert len(features) == expected > 0
    assert all(f.start == f.end == 0 and f.example == 0 for f in features)
    assert {f.passage_id for f in features} == {pid for _, pid in pairs}


def test_no_answer_scores_tell_windows_where_the_reader_sees_no_answer(tiny_model, sample):
    from train.reader import no_answer_metrics, null_scores

    data, _, features = sample
    answered = [f for f in features if f.start > 0]

    def reads(no_answer: bool):
        def logits(batch):
            n, width = batch["p_input_ids"].shape
            start, end = torch.zeros(n, width), torch.zeros(n, width)
            start[torch.arange(n), batch["start_positions"]] = 4.0
            end[torch.arange(n), batch["end_positions"]] = 4.0
            start[:, 0] = end[:, 0] = 6.0 if no_answer else -6.0
            return start, end

        return logits

    config = copy.deepcopy(tiny_model.config)
    config.max_answer_length = 64
    sees = null_scores(reads(False), data, answered, tiny_model.tokenizer, config)
    sees_none = null_scores(reads(True), data, answered, tiny_model.tokenizer, config)
    assert sees == pytest.approx([-20.0] * len(answered)) and sees_none == pytest.approx([4.0] * len(answered))
    measured = no_answer_metrics(sees, sees_none)
    assert measured["auroc"] == 1.0 and measured["unanswerable_no_answer"] == 1.0
    assert measured["answered_no_answer"] == 0.0
    assert no_answer_metrics(sees, sees)["auroc"] == 0.5
    assert "auroc" not in no_answer_metrics(sees, [])


def test_a_reader_goes_on_training_from_a_reader_directory(tiny_model, tiny_reader_dir, sample):
    from dphr_haystack.verification import SpanReader

    reader = ReaderModel.from_reader(tiny_reader_dir, tiny_model.config)
    source = SpanReader(tiny_reader_dir).model.state_dict()
    assert all(torch.equal(reader.qa.state_dict()[k], v) for k, v in source.items())
    assert reader.qa.training and all(p.requires_grad for p in reader.parameters())
    assert reader.config == tiny_model.config and reader.config is not tiny_model.config
    data, _, features = sample
    batch = next(iter(ReaderTask(reader, data, features).batches(0, batch_size=4, rank=0, world_size=1, seed=0)))
    ReaderTask(reader, data, features).step(reader, batch)["loss"].backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in reader.parameters())


def test_recipe_trains_a_reader_on_near_misses_from_a_reader(tmp_path, run_tiny_recipe, tiny_reader_dir):
    data = tmp_path / "lake.json"
    data.write_text(json.dumps(LAKE_TOWN))
    summary = run_tiny_recipe(
        {
            "stages": ["reader"],
            "data.train": str(data),
            "data.dev": str(data),
            "reader.start": str(tiny_reader_dir),
            "reader.near_misses": 1.0,
            "reader.swapped_names": 1.0,
            "reader.answer_removed": 1.0,
            "reader.train": {"max_steps": 2, "batch_size": 2, "lr": 1e-3, "log_every": 1, "progress": False},
        }
    )
    reader = summary["stages"]["reader"]
    assert reader["init"] == str(tiny_reader_dir) and reader["encoder_init"] is None
    assert reader["near_miss_features"] > 0 and reader["swapped_name_features"] > 0 and reader["steps"] == 2
    for measured in (reader["no_answer"], reader["start_reader"]["no_answer"]):
        assert set(measured) == {"near_misses", "swapped_names", "answer_removed"}
        for name in ("near_misses", "swapped_names"):
            found = measured[name]
            assert found["answered"] == 2 and found["unanswerable"] >= 1 and 0.0 <= found["auroc"] <= 1.0
    assert (
        reader["start_reader"]["gold_window_spans"]["questions"] == reader["gold_window_spans"]["reader"]["questions"]
    )


RELEASES = (
    "Ledgerline is made by Quillfern. Version 1.0 came out on 9 September 2015. Version 2.0 followed in April "
    "2018! Version 3.0 was released in May 2021. The newest version is 4.7.2 from Quillfern"
)


def test_a_question_is_asked_of_its_passage_less_the_sentences_that_state_its_answer():
    from train.data import RCData, RCExample, answer_removed_passages, sentence_spans

    assert [RELEASES[a:b] for a, b in sentence_spans(RELEASES)][1:3] == [
        "Version 1.0 came out on 9 September 2015.",
        "Version 2.0 followed in April 2018!",
    ]
    assert sentence_spans("One. ") == [(0, 4)] and sentence_spans("") == []
    passage = {"id": "p", "document_id": "ledger", "title": "Ledgerline", "text": RELEASES}
    examples = [
        RCExample("q3", "When was version 3.0 released?", ["May 2021"], [RELEASES.index("May 2021")], "p"),
        # its answer also written in a sentence that stays (the last one): no passage for it
        RCExample("q2", "Who makes Ledgerline?", ["Quillfern"], [RELEASES.index("Quillfern")], "p"),
        # two answers in two sentences: both go
        RCExample(
            "q1",
            "Which?",
            ["Version 1.0", "Version 2.0"],
            [RELEASES.index(v) for v in ("Version 1", "Version 2")],
            "p",
        ),
    ]
    data = RCData([passage], examples)
    grown, pairs = answer_removed_passages(data, 1.0)
    assert grown.examples == examples and grown.passages[0] == passage
    assert pairs == [(0, "p#without-q3"), (2, "p#without-q1")]
    without_3, without_1 = grown.passages[1:]
    assert without_3["text"] == RELEASES.replace(" Version 3.0 was released in May 2021.", "")
    assert without_3["document_id"] == without_3["id"] == "p#without-q3" and without_3["title"] == "Ledgerline"
    assert "1.0" not in without_1["text"] and "2.0" not in without_1["text"] and "Quillfern." in without_1["text"]
    assert answer_removed_passages(data, 0.0) == (data, [])
    # a passage of one sentence keeps too little to be asked
    short = RCData([{**passage, "text": "Version 3.0 was released in May 2021."}], examples[:1])
    assert answer_removed_passages(short, 1.0) == (short, [])


def test_a_question_is_asked_of_another_entity_its_passage_does_not_name():
    from train.data import _name_runs, swapped_name_examples

    assert _name_runs("Which NFL team won Super Bowl 50 for Duke Anselm of Harrowgate's town?") == [
        "NFL",
        "Super Bowl 50",
        "Duke Anselm",
        "Harrowgate",
    ]
    assert _name_runs("Who is it?") == [] and _name_runs("Velmora?") == []
    data = load_squad(LAKE_TOWN)
    swapped = swapped_name_examples(data, 1.0)
    # Velmora and Lake Tessin are written in the first passage, the Morrow Basin (the other article's) is not; the
    # second passage writes Lake Tessin (so it is never swapped in) but not Velmora
    first, second = swapped
    assert first.question in {"Who founded Morrow Basin on Lake Tessin?", "Who founded Velmora on Morrow Basin?"}
    assert second.question == "When did the Velmora freeze over?"
    assert [ex.passage_id for ex in swapped] == [data.passages[0]["id"], data.passages[-1]["id"]]
    assert [ex.qid for ex in swapped] == ["q1-swapped", "q2-swapped"]
    assert swapped_name_examples(data, 0.0) == []


@pytest.mark.parametrize(
    ("key", "value"), [("reader.near_misses", -1.0), ("reader.swapped_names", 1.5), ("reader.answer_removed", -0.1)]
)
def test_a_recipe_refuses_unanswerable_shares_out_of_range(key, value):
    from train.recipes import load_recipe

    with pytest.raises(ValueError, match=key.split(".")[1]):
        load_recipe("train/configs/cpu_reader_unanswerable.yaml", {key: value})
