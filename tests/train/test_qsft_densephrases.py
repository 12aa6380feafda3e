"""Query-side fine-tuning as DensePhrases does it: raw anchored candidates, zero padding in the softmax,
probabilities clamped at 1e-7, and CuratedTREC's regular-expression answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import yaml

from dphr_haystack.encode.add import add_passages
from dphr_haystack.evaluation.questions import read_questions
from dphr_haystack.index.phrase_index import PhraseIndex
from dphr_haystack.model.phrase_model import PhraseModel
from train.data import load_squad
from train.losses import QuerySideLoss
from train.qsft import QsftTask, anchored_candidates
from train.recipes import load_recipe, run_stage

pytestmark = pytest.mark.unit


# ----------------------------------------------------------------------------- the loss
def _densephrases_reference(qs, qe, cs, ce, targets):
    """DensePhrases' train_query: softmax over all K candidates (padding included), −log clamp(Σ_T p, 1e-7, 1)
    for the phrase, start and end logits, each averaged over the queries with targets."""
    start_logits = torch.einsum("bd,bkd->bk", qs, cs)
    end_logits = torch.einsum("bd,bkd->bk", qe, ce)
    logits = start_logits + end_logits
    terms = []
    for lg in (logits, start_logits, end_logits):
        per = [-torch.log(torch.softmax(row, -1)[t].sum().clamp(1e-7, 1)) for row, t in zip(lg, targets) if t.any()]
        terms.append(sum(per) / len(per))
    return sum(terms)


def test_clamped_loss_with_zero_padding_matches_densephrases():
    g = torch.Generator().manual_seed(0)
    B, K, d = 3, 6, 4
    qs, qe = (torch.randn(B, d, generator=g, dtype=torch.float64).requires_grad_(True) for _ in range(2))
    cs, ce = torch.randn(B, K, d, generator=g, dtype=torch.float64), torch.randn(B, K, d, generator=g).double()
    cs[1, 4:], ce[1, 4:] = 0.0, 0.0  # zero-vector padding
    cs[2, 0] = cs[2, 0] * 0 - 30.0 * qs[2].detach()  # a target far below the rest: clamped at 1e-7
    targets = torch.tensor([[0, 1, 0, 0, 1, 0], [0, 0, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    out = QuerySideLoss(min_prob=1e-7)(qs, qe, cs, ce, torch.ones(B, K), phrase_targets=targets)
    ref = _densephrases_reference(qs, qe, cs, ce, targets)
    torch.testing.assert_close(out["loss"], ref)
    for a, b in zip(
        torch.autograd.grad(out["loss"], [qs, qe], retain_graph=True), torch.autograd.grad(ref, [qs, qe]), strict=True
    ):
        torch.testing.assert_close(a, b)
    # The unclamped loss differs exactly where a target set's probability fell below 1e-7.
    free = QuerySideLoss()(qs, qe, cs, ce, torch.ones(B, K), phrase_targets=targets)["loss"]
    assert free.item() > out["loss"].item() + 1.0
    with pytest.raises(ValueError, match="min_prob"):
        QuerySideLoss(min_prob=0.0)
    assert math.isclose(-math.log(1e-7), 16.118, rel_tol=1e-4)


# ----------------------------------------------------------------------------- candidates
@pytest.fixture
def tiny_index(tiny_model):
    index = PhraseIndex.create(tiny_model, faiss_factory="Flat")
    add_passages(index, tiny_model, load_squad("builtin").passages, progress=False)
    return index


def test_anchored_candidates_are_densephrases_raw_search(tiny_model, tiny_index):
    qs, qe = tiny_model.encode_queries(["Who wrote Hamlet?", "How far is the Moon?"])
    k, L = 7, 10
    found = anchored_candidates(tiny_index, qs, qe, k, L)
    vectors = tiny_index.vectors(np.arange(len(tiny_index)))
    tokens = tiny_index.tokens
    for i, per_query in enumerate(found):
        # Brute force: the exact top-k start and end tokens, each with its best partner within L positions.
        expected = []
        for anchors, from_start in (
            (np.argsort(-(vectors @ qs[i]))[:k], True),
            (np.argsort(-(vectors @ qe[i]))[:k], False),
        ):
            for a in anchors:
                best = None
                for o in range(L):
                    s, e = (a, a + o) if from_start else (a - o, a)
                    if s < 0 or e >= len(tokens) or tokens["passage"][s] != tokens["passage"][e]:
                        continue
                    if not 0 <= tokens["position"][e] - tokens["position"][s] < L:
                        continue
                    score = float(vectors[s] @ qs[i] + vectors[e] @ qe[i])
                    if best is None or score > best[0]:
                        best = (score, int(s), int(e))
                expected.append(best)
        assert len(per_query) == 2 * k  # duplicates are kept, nothing is merged
        assert sorted((round(c[0], 4), c[1], c[2]) for c in per_query) == sorted(
            (round(c[0], 4), c[1], c[2]) for c in expected
        )
        assert [c[0] for c in per_query] == sorted((c[0] for c in per_query), reverse=True)


def _trec_file(tmp_path):
    path = tmp_path / "curatedtrec-train.qa.csv"
    rows = [  # patterns that any phrase starting with a letter (first two) or the Moon (third) matches
        "Which word comes first?\t['[a-z]']",
        "How far is the Moon?\t['384,?400 ?km', '[a-z]+']",
        "What is Earth's only natural satellite?\t['(the )?moon']",
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_densephrases_candidates_pad_with_zeros_and_regex_answers_give_positives(tiny_model, tiny_index, tmp_path):
    examples = read_questions(_trec_file(tmp_path))
    assert all(ex.regex for ex in examples)
    qs, qe = tiny_model.encode_queries([ex.question for ex in examples])
    answers = [ex.answers for ex in examples]
    task = QsftTask(tiny_model, examples, tiny_index, top_k=40, candidates="densephrases")
    regex = [task.regex(ex) for ex in task.examples]
    cand = task.candidates(qs, qe, answers, [""] * 3, regex)
    assert cand["cand_start"].shape == (3, 80, tiny_index.dim) and bool(cand["cand_mask"].all())
    found = anchored_candidates(tiny_index, qs, qe, 40, task.searcher.max_answer_length)
    for i, per_query in enumerate(found):
        assert torch.count_nonzero(cand["cand_start"][i].abs().sum(dim=1)) == len(per_query)
        assert not cand["cand_start"][i, len(per_query) :].any()  # zero-vector padding
    assert cand["phrase_targets"].any(dim=1).sum() >= 2  # the regexes match retrieved phrases
    exact = QsftTask(tiny_model, examples, tiny_index, top_k=40, candidates="densephrases", answer_match="exact")
    plain = exact.candidates(qs, qe, answers, [""] * 3, [exact.regex(ex) for ex in exact.examples])
    assert not plain["phrase_targets"].any()  # a pattern is no answer text
    phrases = QsftTask(tiny_model, examples, tiny_index, top_k=40)
    ours = phrases.candidates(qs, qe, answers, [""] * 3, regex)
    assert ours["cand_start"].shape[1] == 40 and ours["phrase_targets"].any(dim=1).sum() >= 2
    with pytest.raises(ValueError, match="candidates"):
        QsftTask(tiny_model, examples, tiny_index, candidates="dense")
    with pytest.raises(ValueError, match="answer_match"):
        QsftTask(tiny_model, examples, tiny_index, answer_match="fuzzy")


def _recipe(tmp_path, model_dir, index_dir, **qsft):
    raw = {
        "output_dir": str(tmp_path / "run"),
        "stages": ["qsft"],
        "data": {"train": "builtin", "dev": "builtin"},
        "qsft": {
            "init": str(model_dir),
            "index": str(index_dir),
            "top_k": 20,
            "train": {"max_steps": 2, "batch_size": 3, "lr": 1.0e-2, "progress": False, "log_every": 1},
            **qsft,
        },
    }
    path = tmp_path / "qsft.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_recipe(path)


def test_recipe_trains_with_densephrases_candidates_on_curatedtrec_questions(tiny_model, tmp_path):
    model_dir, index_dir = tmp_path / "model", tmp_path / "index"
    tiny_model.save(model_dir)
    add_passages(
        PhraseIndex.create(tiny_model, path=index_dir), tiny_model, load_squad("builtin").passages, progress=False
    )
    recipe = _recipe(tmp_path, model_dir, index_dir, candidates="densephrases", questions=str(_trec_file(tmp_path)))
    result = run_stage(recipe, "qsft")
    assert result["candidates"] == "densephrases" and result["answer_match"] == "auto" and result["steps"] == 2
    before, after = PhraseModel.load(model_dir), PhraseModel.load(result["final"])
    assert before.phrase_fingerprint() == after.phrase_fingerprint()
    changed = [n for n, p in after.named_parameters() if not torch.equal(p, dict(before.named_parameters())[n])]
    assert changed and all(n.startswith(("query_start_encoder.", "query_end_encoder.")) for n in changed)
    for bad, match in (
        ({"candidates": "dense"}, "qsft.candidates"),
        ({"answer_match": "fuzzy"}, "qsft.answer_match"),
        ({"questions": "q.csv", "index": None}, "qsft.questions needs qsft.index"),
    ):
        with pytest.raises(ValueError, match=match):
            _recipe(tmp_path, model_dir, index_dir, **bad)
