"""The shipped default model: name resolution (unit, on a tiny stand-in) and the real files (integration)."""

from __future__ import annotations

import pytest

from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher
from dphr_haystack.answers import exact_match
from dphr_haystack.encode.add import add_passages
from dphr_haystack.errors import ModelLoadError
from dphr_haystack.model import registry as shipped
from dphr_haystack.model.calibration import Calibration
from dphr_haystack.search_options import NO_ANSWER_THRESHOLD, no_answer_threshold

SIZE_BUDGET_BYTES = 40 * 10**6  # the shipped files, at most 40 MB in total
MIN_EM_AT_1 = 0.20  # measured 0.30 (18 of 60 questions) when shipped (the model before QSFT: 16); untrained: 0.0


@pytest.fixture
def stand_in(monkeypatch, tmp_path, tiny_model):
    """A tiny model installed as the shipped default under a temporary SHIPPED_DIR."""
    monkeypatch.setattr(shipped, "SHIPPED_DIR", tmp_path / "shipped_models")
    tiny_model.save(tmp_path / "shipped_models" / shipped.DEFAULT_MODEL)
    return tiny_model


@pytest.mark.unit
def test_shipped_names_and_alias_load_the_shipped_directory(stand_in):
    for name in (shipped.DEFAULT_MODEL, "default", shipped.DEFAULT_MODEL.upper(), " default "):
        assert shipped.is_shipped_name(name)
        assert PhraseModel.load(name).phrase_fingerprint() == stand_in.phrase_fingerprint()
    assert shipped.shipped_model_names() == [shipped.DEFAULT_MODEL]
    assert not shipped.is_shipped_name("minilm") and not shipped.is_shipped_name("models/x")


@pytest.mark.unit
def test_a_local_directory_wins_over_a_shipped_name(stand_in, tmp_path, tiny_model, monkeypatch):
    import torch

    shipped_fingerprint = stand_in.phrase_fingerprint()
    with torch.no_grad():  # tiny_model is the stand-in object: change it after it was saved as the shipped one
        next(tiny_model.phrase_encoder.parameters()).add_(1.0)
    tiny_model.save(tmp_path / "work" / "default")
    monkeypatch.chdir(tmp_path / "work")
    assert PhraseModel.load("default").phrase_fingerprint() == tiny_model.phrase_fingerprint()
    assert (
        PhraseModel.load(shipped.DEFAULT_MODEL).phrase_fingerprint()
        == shipped_fingerprint
        != tiny_model.phrase_fingerprint()
    )


@pytest.mark.unit
def test_missing_shipped_files_raise_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(shipped, "SHIPPED_DIR", tmp_path / "nothing-here")
    with pytest.raises(ModelLoadError, match="reinstall dphr-haystack"):
        PhraseModel.load("default")
    with pytest.raises(ModelLoadError, match="shipped here: none"):
        shipped.shipped_model_path(shipped.DEFAULT_MODEL)


@pytest.mark.unit
def test_haystack_loader_resolves_shipped_names(stand_in):
    pytest.importorskip("haystack")
    from dphr_haystack.model.registry import model_key
    from dphr_haystack.nodes import clear_model_cache, load_phrase_model

    clear_model_cache()
    try:
        assert (
            model_key("default")
            == model_key(shipped.DEFAULT_MODEL)
            == str(shipped.SHIPPED_DIR / shipped.DEFAULT_MODEL)
        )
        assert load_phrase_model("default", "cpu") is load_phrase_model(shipped.DEFAULT_MODEL, "cpu")
    finally:
        clear_model_cache()


# ----------------------------------------------------------------------------- the real shipped files
@pytest.fixture(scope="module")
def shipped_model(minilm_available):
    path = shipped.SHIPPED_DIR / shipped.DEFAULT_MODEL
    assert (path / "dphr_config.json").is_file(), f"the default model is missing from {path}"
    return PhraseModel.load("default")


@pytest.mark.integration
def test_shipped_files_fit_the_budget_and_load_offline(shipped_model):
    # the default, and the previous defaults one argument away (192-subword windows: faster to index on a CPU)
    assert {shipped.DEFAULT_MODEL, "dphr-minilm-squad-384", "dphr-minilm-squad"} <= set(shipped.shipped_model_names())
    for name in shipped.shipped_model_names():
        path = shipped.SHIPPED_DIR / name
        sizes = {f.name: f.stat().st_size for f in path.iterdir() if f.is_file()}
        assert sum(sizes.values()) <= SIZE_BUDGET_BYTES, (name, sizes)
        assert max(sizes.values()) <= 16 * 2**20  # every file moves between machines (16 MiB per file)
        assert (path / "MODEL_CARD.md").is_file()
        config = shipped_model.config if name == shipped.DEFAULT_MODEL else PhraseModel.load(name).config
        assert config.base_model == "minilm" and config.query_layout == "shared", name
        assert isinstance(config.filter_threshold, float) and config.calibration is not None, name


@pytest.mark.integration
def test_shipped_model_answers_squad_questions_the_untrained_one_cannot(shipped_model, squad_dev_paragraphs):
    """Open-domain over 20 SQuAD dev paragraphs: the trained model finds answers, the untrained base does not."""
    passages = [{k: p[k] for k in ("id", "title", "text")} for p in squad_dev_paragraphs]
    questions = [
        (qa["question"], [a["text"] for a in qa["answers"]]) for p in squad_dev_paragraphs for qa in p["qas"][:3]
    ]

    def em_at_1(model: PhraseModel) -> float:
        index = PhraseIndex.create(model)
        add_passages(index, model, passages, batch_size=16, progress=False)
        hits = PhraseSearcher(index, model).search_batch([q for q, _ in questions], unit="phrase", top_k=1)
        return sum(bool(h) and exact_match(h[0].text, answers) for h, (_, answers) in zip(hits, questions)) / len(
            questions
        )

    trained = em_at_1(shipped_model)
    untrained = em_at_1(PhraseModel.from_base("minilm", shipped_model.config))
    assert trained >= MIN_EM_AT_1, (trained, untrained)
    assert trained >= untrained + 0.15, (trained, untrained)


@pytest.mark.integration
def test_the_shipped_reader_verifies_the_shipped_default(shipped_model, squad_dev_paragraphs):
    """The default's verification names the shipped reader, which fits the budget and, over 20 SQuAD dev paragraphs,
    keeps every answer while it moves the confidences of right answers above those of wrong ones on average."""
    from dphr_haystack.verification import reader_dir

    verification = Calibration.from_dict(shipped_model.config.calibration).verification
    assert verification is not None and verification.reader == "dphr-minilm-squad-reader"
    # it says whether the corpus holds an answer, with and without the reader
    assert Calibration.from_dict(shipped_model.config.calibration).holds_answer is not None
    assert verification.holds_answer is not None
    files = [f for f in reader_dir(verification.reader).iterdir() if f.is_file()]
    assert sum(f.stat().st_size for f in files) <= SIZE_BUDGET_BYTES and max(f.stat().st_size for f in files) <= 2**24
    passages = [{k: p[k] for k in ("id", "title", "text")} for p in squad_dev_paragraphs]
    questions = [(qa["question"], [a["text"] for a in qa["answers"]]) for p in squad_dev_paragraphs for qa in p["qas"]]
    index = PhraseIndex.create(shipped_model)
    add_passages(index, shipped_model, passages, batch_size=16, progress=False)
    texts = [q for q, _ in questions]
    plain = PhraseSearcher(index, shipped_model, unit="phrase", top_k=1).search_batch(texts)
    checked = PhraseSearcher(index, shipped_model, unit="phrase", top_k=1, verify=True).search_batch(texts)
    assert [h[0].text for h in checked] == [h[0].text for h in plain]
    right = [exact_match(h[0].text, answers) for h, (_, answers) in zip(plain, questions)]
    assert any(right) and not all(right)

    def gap(results) -> float:
        values = [h[0].confidence for h in results]
        good = [v for v, r in zip(values, right) if r]
        bad = [v for v, r in zip(values, right) if not r]
        return sum(good) / len(good) - sum(bad) / len(bad)

    assert gap(checked) > gap(plain)


@pytest.mark.integration
def test_the_shipped_default_says_whether_the_shipped_corpus_holds_an_answer(shipped_model):
    """Over the first 20 shipped SQuAD paragraphs (Super Bowl 50), questions they answer get P(the corpus holds an
    answer) above the model's threshold for the search and "no answer" last; questions about what they never
    mention, below it and "no answer" first, with and without the reader; a harder outside question, below the
    answerable ones."""
    from dphr_haystack import read_corpus
    from dphr_haystack.documents.results import NoAnswer, retrieved, with_no_answer

    passages = [{"id": p.id, "title": p.title, "text": p.text} for p in list(read_corpus("squad-dev"))[:20]]
    index = PhraseIndex.create(shipped_model)
    add_passages(index, shipped_model, passages, batch_size=16, progress=False)
    answered = ["Which NFL team won Super Bowl 50?", "Where was Super Bowl 50 played?"]
    unanswered = ["Who painted the Mona Lisa?", "What is the capital of Kenya?"]
    # a question with a year, over paragraphs full of years: ranked below the answerable ones, not always below 0.4
    harder = "When did the Normans conquer England?"
    for verify in (False, True):
        searcher = PhraseSearcher(index, shipped_model, unit="phrase", top_k=3, verify=verify)
        hits = searcher.search_batch([*answered, *unanswered, harder])
        holds = [h[0].holds_answer for h in hits]
        threshold = no_answer_threshold(searcher.search_options, searcher.calibration)
        assert min(holds[: len(answered)]) > threshold > max(holds[len(answered) : -1]), (verify, holds)
        assert holds[-1] < min(holds[: len(answered)]), (verify, holds)
        hits = hits[:-1]
        for results, expected_first in zip(hits, [False] * len(answered) + [True] * len(unanswered), strict=True):
            _, answers = retrieved([(hit, None) for hit in results], lambda _: None, True)
            assert isinstance(with_no_answer(answers, threshold)[0], NoAnswer) is expected_first


@pytest.mark.integration
def test_the_shipped_default_documents_the_thresholds_its_fits_chose(shipped_model):
    """The thresholds a search of the shipped default places "no answer" by are those the fit's rule chooses from
    its holds-answer's and its verification's sweeps (their reports in benchmarks/results)."""
    import json
    from pathlib import Path

    from train.answerability import choose_threshold

    results = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    calibration = Calibration.from_dict(shipped_model.config.calibration)
    for verify, report in ((False, "holds_answer_fit.json"), (True, "verifier_fit.json")):
        chosen = choose_threshold(json.loads((results / report).read_text())["threshold_sweep"])
        assert chosen is not None and calibration.documented_no_answer_threshold(verify) == chosen, (verify, chosen)
    assert calibration.documented_no_answer_threshold(False) == NO_ANSWER_THRESHOLD  # the constant is its choice
