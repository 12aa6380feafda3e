"""Published DensePhrases checkpoints behave as in DensePhrases.

Synthetic checkpoints in the exact published layouts: v1.0 full (``phrase_encoder.*``, ``query_start_encoder.*``,
``query_end_encoder.*``, ``filter_linear.*`` in ``pytorch_model.bin`` beside a BertConfig ``config.json`` with
``architectures: ["Encoder"]``) and v1.1 query-only (the same without ``phrase_encoder.*``), with a SpanBERT-style
tokenizer folder (``vocab.txt`` + ``config.json``, no ``tokenizer_config.json``). Expected vectors are computed
here directly from the encoders with DensePhrases' conventions, using the slow (Python) BERT tokenizer.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers

from dphr_haystack import ModelMismatchError, PhraseIndex, PhraseModel, PhraseSearcher, QueryOnlyCheckpointError
from dphr_haystack.cli import main as dphr
from dphr_haystack.corpus import Passage
from dphr_haystack.encode.add import add_passages
from dphr_haystack.encode.dump import encode_shard
from dphr_haystack.errors import InvalidParameterError
from dphr_haystack.index.codec import VectorCodec
from dphr_haystack.model import phrase_model as phrase_model_module
from dphr_haystack.testing import DENSEPHRASES_WORDS, make_densephrases_checkpoints

pytestmark = pytest.mark.unit

LONG_TEXT = " ".join(f"{w} {w.lower()}" for w in DENSEPHRASES_WORDS * 12)  # > 2 windows of 512 subwords
TEN_SUBWORD_TITLE = "Paris Louvre museum city France Egypt Nile London Hamlet Sea"
SHORT_TITLE = "Paris"


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A v1.0 full checkpoint, a v1.1 query-only checkpoint fine-tuned from it, the tokenizer folder, and the
    slow (Python) BERT tokenizer DensePhrases' own code would build from it (do_lower_case=False)."""
    made = make_densephrases_checkpoints(tmp_path_factory.mktemp("densephrases"))
    made["slow"] = transformers.BertTokenizer(str(made["tok_dir"] / "vocab.txt"), do_lower_case=False)
    return made


def _direct_dump(p, text: str, title: str, threshold: float = -2.0):
    """DensePhrases v1.0's dump of one passage, computed directly: [CLS] title[:10] [SEP] window [SEP], segment
    ids 1, windows starting every 500 context subwords with room 512 − |title| − 3, every window's context
    vectors concatenated, tokens kept when a filter logit exceeds the threshold (else the first one)."""
    slow = p["slow"]
    title_ids = slow.convert_tokens_to_ids(slow.tokenize(title))[:10]
    ctx_ids = slow.convert_tokens_to_ids(slow.tokenize(text))
    room = 512 - len(title_ids) - 3
    rows = []
    for start in range(0, len(ctx_ids), 500):
        window = ctx_ids[start : start + room]
        ids = torch.tensor([[slow.cls_token_id, *title_ids, slow.sep_token_id, *window, slow.sep_token_id]])
        with torch.no_grad():
            states = p["phrase"](input_ids=ids, token_type_ids=torch.ones_like(ids)).last_hidden_state[0]
        first = len(title_ids) + 2
        rows.append(states[first : first + len(window)])
    vectors = torch.cat(rows)
    with torch.no_grad():
        logits = p["filter"](vectors)
    keep = torch.nonzero((logits > threshold).any(dim=1)).flatten().numpy()
    if keep.size == 0:
        keep = np.zeros(1, dtype=np.int64)
    return vectors.numpy(), keep


def _direct_query(start_encoder, end_encoder, slow, question: str):
    """[CLS] q [SEP] (one trailing '?' stripped), segment 0, each encoder's [CLS] state."""
    question = question[:-1] if question.endswith("?") else question
    ids = torch.tensor([slow.encode(question)])
    with torch.no_grad():
        qs = start_encoder(input_ids=ids, token_type_ids=torch.zeros_like(ids)).last_hidden_state[0, 0]
        qe = end_encoder(input_ids=ids, token_type_ids=torch.zeros_like(ids)).last_hidden_state[0, 0]
    return qs.numpy(), qe.numpy()


@pytest.fixture(scope="module")
def imported(published):
    return PhraseModel.from_densephrases(published["full"], tokenizer=published["tok_dir"])


# ----------------------------------------------------------------------------- casing
def test_spanbert_tokenizer_folder_keeps_case(published, imported, tmp_path):
    plain = transformers.AutoTokenizer.from_pretrained(str(published["tok_dir"]), use_fast=True)
    # What transformers makes of this folder by default: a lower-casing tokenizer ("paris" is no entry).
    assert plain.tokenize("Paris is") == ["p", "##a", "##r", "##i", "##s", "is"]
    assert imported.tokenizer.tokenize("Paris is") == ["Paris", "is"]
    assert imported.config.do_lower_case is False
    imported.save(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "dphr_config.json").read_text())["do_lower_case"] is False
    reloaded = PhraseModel.load(tmp_path / "m")
    assert reloaded.tokenizer.tokenize("Paris is") == ["Paris", "is"]
    assert reloaded.phrase_fingerprint() == imported.phrase_fingerprint()


def test_recorded_casing_is_applied_at_load_whatever_the_tokenizer_files_say(published, imported, tmp_path):
    imported.save(tmp_path / "m")
    lowering = transformers.AutoTokenizer.from_pretrained(str(published["tok_dir"]), use_fast=True)
    lowering.save_pretrained(str(tmp_path / "m"))  # tokenizer files that lower-case
    assert transformers.AutoTokenizer.from_pretrained(str(tmp_path / "m")).tokenize("Paris")[0] == "p"
    assert PhraseModel.load(tmp_path / "m").tokenizer.tokenize("Paris is") == ["Paris", "is"]


def test_lower_cased_import_when_asked(published):
    model = PhraseModel.from_densephrases(published["full"], tokenizer=published["tok_dir"], do_lower_case=True)
    assert model.tokenizer.tokenize("Paris is")[0] == "p"
    assert model.config.do_lower_case is True and model.config.truecase is False


def test_casing_changes_the_fingerprint(published, imported):
    lowered = PhraseModel.from_densephrases(published["full"], tokenizer=published["tok_dir"], do_lower_case=True)
    assert lowered.phrase_fingerprint() != imported.phrase_fingerprint()


# ----------------------------------------------------------------------------- dump settings and vectors
def test_import_records_densephrases_dump_settings(imported):
    c = imported.config
    assert (c.max_passage_length, c.passage_stride, c.passage_stride_mode) == (512, 500, "step")
    assert c.sep_after_empty_title is True and c.filter_threshold == -2.0
    assert (c.passage_token_type, c.max_title_length, c.max_query_length) == ("all_one", 10, 64)
    assert c.truecase is True


@pytest.mark.parametrize("title", [TEN_SUBWORD_TITLE, SHORT_TITLE], ids=["gap", "overlap"])
def test_dump_equals_densephrases_windows_title_segments_and_filter(published, imported, title):
    slow = published["slow"]
    assert len(slow.tokenize(LONG_TEXT)) > 1000
    expected, keep = _direct_dump(published, LONG_TEXT, title)
    # A 10-subword title leaves room for 499 context subwords: every 500th token has no vector, as in
    # DensePhrases; a 1-subword title gives 508, so 8 tokens per window boundary get two vectors.
    room = 512 - min(len(slow.tokenize(title)), 10) - 3
    assert len(expected) == sum(min(room, len(slow.tokenize(LONG_TEXT)) - s) for s in range(0, 1200, 500))
    encoded = imported.encode_passages([LONG_TEXT], [title])[0]
    np.testing.assert_allclose(encoded.vectors, expected, rtol=1e-4, atol=1e-4)
    shard = encode_shard(
        imported, [Passage("p", LONG_TEXT, title)], VectorCodec("float32"), imported.config.filter_threshold
    )
    assert 0 < len(keep) < len(expected)  # the filter drops some tokens and keeps others
    np.testing.assert_array_equal(shard.tokens["position"], keep)
    np.testing.assert_allclose(shard.vectors, expected[keep], rtol=1e-4, atol=1e-4)
    # Character offsets follow the kept rows: each stored row's text is its window token's subword.
    tokens = slow.tokenize(LONG_TEXT)
    token_of_row = [t for s in range(0, len(tokens), 500) for t in range(s, min(s + room, len(tokens)))]
    for stored, row in enumerate(keep):
        start, end = shard.tokens["char_start"][stored], shard.tokens["char_end"][stored]
        assert LONG_TEXT[start:end] == tokens[token_of_row[row]].removeprefix("##")


def test_untitled_passage_reads_cls_sep_context_sep(published, imported):
    text = "Paris is the capital of France ."
    slow = published["slow"]
    ids = slow.convert_tokens_to_ids(slow.tokenize(text))
    inputs = torch.tensor([[slow.cls_token_id, slow.sep_token_id, *ids, slow.sep_token_id]])
    with torch.no_grad():
        direct = published["phrase"](input_ids=inputs, token_type_ids=torch.ones_like(inputs)).last_hidden_state[0]
    got = imported.encode_passages([text], [""])[0].vectors
    np.testing.assert_allclose(got, direct[2 : 2 + len(ids)].numpy(), rtol=1e-5, atol=1e-5)


def test_query_vectors_equal_densephrases(published, imported):
    question = "Who wrote Hamlet?"
    qs, qe = imported.encode_queries([question], truecase=False)
    want_s, want_e = _direct_query(published["q_start"], published["q_end"], published["slow"], question)
    np.testing.assert_allclose(qs[0], want_s, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(qe[0], want_e, rtol=1e-5, atol=1e-5)


def test_dump_settings_are_overridable(published):
    model = PhraseModel.from_densephrases(
        published["full"],
        tokenizer=published["tok_dir"],
        config_overrides={"filter_threshold": None, "passage_stride_mode": "overlap", "passage_stride": 128},
    )
    assert model.config.filter_threshold is None and model.config.passage_stride_mode == "overlap"
    encoded = model.encode_passages([LONG_TEXT], [SHORT_TITLE])[0]
    assert len(encoded.vectors) == len(published["slow"].tokenize(LONG_TEXT))  # one vector per token


# ----------------------------------------------------------------------------- precision
def test_queries_are_encoded_in_float32_even_under_autocast(published, imported, monkeypatch):
    question = "Who wrote Hamlet"
    want_s, _ = _direct_query(published["q_start"], published["q_end"], published["slow"], question)
    monkeypatch.setattr(phrase_model_module, "_autocast", lambda device: torch.autocast("cpu", dtype=torch.bfloat16))
    passages = imported.encode_passages(["Paris is the capital of France ."], [""])[0].vectors
    reference = PhraseModel.from_densephrases(published["full"], tokenizer=published["tok_dir"])
    monkeypatch.undo()
    full = reference.encode_passages(["Paris is the capital of France ."], [""])[0].vectors
    assert np.abs(passages - full).max() > 1e-4  # passages did run under bf16 autocast
    monkeypatch.setattr(phrase_model_module, "_autocast", lambda device: torch.autocast("cpu", dtype=torch.bfloat16))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # even a caller's autocast does not reach the queries
        qs, _ = imported.encode_queries([question], truecase=False)
    np.testing.assert_allclose(qs[0], want_s, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- query-only checkpoints
def test_query_only_checkpoint_needs_a_phrase_side(published):
    with pytest.raises(QueryOnlyCheckpointError, match="phrase_model"):
        PhraseModel.from_densephrases(published["query_only"], tokenizer=published["tok_dir"])
    with pytest.raises(QueryOnlyCheckpointError):
        PhraseModel.load(published["query_only"])


def test_query_only_checkpoint_queries_an_existing_index(published, imported, tmp_path):
    imported.save(tmp_path / "phrase-model")
    passages = [
        {"id": "a", "title": "Hamlet", "text": "William Shakespeare wrote Hamlet in London ."},
        {"id": "b", "title": "", "text": "Nile flows north into Mediterranean Sea ."},
    ]
    index = PhraseIndex.create(imported, filter_threshold=imported.config.filter_threshold)
    add_passages(index, imported, passages, progress=False)
    query_model = PhraseModel.from_densephrases(
        published["query_only"],
        phrase_model=tmp_path / "phrase-model",
        phrase_fingerprint=index.model_fingerprint,
    )
    assert query_model.phrase_fingerprint() == imported.phrase_fingerprint()
    assert query_model.tokenizer.tokenize("Paris is") == ["Paris", "is"]
    assert query_model.config.filter_threshold == -2.0 and query_model.config.truecase is True
    qs, qe = query_model.encode_queries(["Who wrote Hamlet?"], truecase=False)
    want_s, want_e = _direct_query(published["ft_start"], published["ft_end"], published["slow"], "Who wrote Hamlet?")
    np.testing.assert_allclose(qs[0], want_s, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(qe[0], want_e, rtol=1e-5, atol=1e-5)
    old_s, _ = imported.encode_queries(["Who wrote Hamlet?"], truecase=False)
    assert not np.allclose(old_s, qs)  # the fine-tuned query side, not the original one
    hits = PhraseSearcher(index, query_model).search("Who wrote Hamlet?", top_k=3, unit="phrase")
    assert hits and all(h.passage_id in {"a", "b"} for h in hits)
    # Saved, it loads as a complete model directory.
    query_model.save(tmp_path / "combined")
    again = PhraseModel.load(tmp_path / "combined")
    np.testing.assert_allclose(again.encode_queries(["Who wrote Hamlet?"], truecase=False)[0], qs, atol=1e-6)


def test_query_only_checkpoint_fingerprint_mismatch_is_refused(published, imported, tmp_path):
    other = PhraseModel.from_densephrases(
        published["full"], tokenizer=published["tok_dir"], config_overrides={"max_title_length": 5}
    )
    with pytest.raises(ModelMismatchError, match="fingerprint"):
        PhraseModel.from_densephrases(
            published["query_only"], phrase_model=imported, phrase_fingerprint=other.phrase_fingerprint()
        )
    with pytest.raises(ModelMismatchError):
        PhraseModel.from_densephrases(published["full"], tokenizer=published["tok_dir"], phrase_model=other)


# ----------------------------------------------------------------------------- truecasing
def test_lowercase_queries_are_truecased_for_the_cased_model(imported):
    truecased = imported.encode_queries(["who is paris?"])
    written = imported.encode_queries(["Who is Paris?"], truecase=False)
    as_given = imported.encode_queries(["who is paris?"], truecase=False)
    np.testing.assert_allclose(truecased[0], written[0], atol=1e-6)
    assert not np.allclose(as_given[0], written[0], atol=1e-3)
    # A query with any capital is the user's own casing: left alone.
    np.testing.assert_allclose(
        imported.encode_queries(["who is Paris"])[0], imported.encode_queries(["who is Paris"], truecase=False)[0]
    )


def test_truecasing_is_off_by_default_for_uncased_models(tiny_model):
    assert tiny_model.config.truecase is False
    np.testing.assert_array_equal(
        tiny_model.encode_queries(["who wrote hamlet"])[0], tiny_model.encode_queries(["Who wrote Hamlet"])[0]
    )  # the tiny model lower-cases: both read the same


def _hamlet_index(model):
    passages = [
        {"id": "a", "title": "Hamlet", "text": "William Shakespeare wrote Hamlet in London ."},
        {"id": "b", "title": "", "text": "Nile flows north into Mediterranean Sea ."},
    ]
    index = PhraseIndex.create(model, filter_threshold=None)
    add_passages(index, model, passages, progress=False)
    return index


def test_searcher_truecases_with_the_indexed_corpus(imported):
    index = _hamlet_index(imported)
    caser = PhraseSearcher(index, imported)
    plain = PhraseSearcher(index, imported, truecase=False)
    assert caser.search("who wrote hamlet", top_k=5, unit="phrase") == plain.search(
        "Who wrote Hamlet", top_k=5, unit="phrase"
    )
    assert [h.score for h in plain.search("who wrote hamlet", top_k=5, unit="phrase")] != [
        h.score for h in plain.search("Who wrote Hamlet", top_k=5, unit="phrase")
    ]
    assert PhraseSearcher(index, imported, truecase=True).truecase is True
    with pytest.raises(InvalidParameterError):
        PhraseSearcher(index, imported, truecase="yes")


def test_cli_imports_indexes_and_searches_with_densephrases_settings(published, tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        "\n".join(
            json.dumps(p)
            for p in (
                {"id": "a", "title": "Hamlet", "text": "William Shakespeare wrote Hamlet in London ."},
                {"id": "b", "title": "", "text": "Nile flows north into Mediterranean Sea ."},
            )
        )
    )
    base = ["model", "import-densephrases", "--tokenizer", str(published["tok_dir"])]
    assert dphr([*base, "--checkpoint", str(published["full"]), "--out", str(tmp_path / "m")]) == 0
    saved = json.loads((tmp_path / "m" / "dphr_config.json").read_text())
    assert saved["do_lower_case"] is False and saved["truecase"] is True and saved["filter_threshold"] == -2.0
    assert (
        dphr(
            [
                "index",
                "--model",
                str(tmp_path / "m"),
                "--corpus",
                str(corpus),
                "--out",
                str(tmp_path / "i"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert PhraseIndex.load(tmp_path / "i").filter_threshold == -2.0
    assert (
        dphr(
            [
                "model",
                "import-densephrases",
                "--checkpoint",
                str(published["query_only"]),
                "--out",
                str(tmp_path / "q"),
            ]
        )
        == 2
    )
    assert "phrase-model" in capsys.readouterr().err
    query_only = ["model", "import-densephrases", "--checkpoint", str(published["query_only"])]
    assert (
        dphr(
            [
                *query_only,
                "--phrase-model",
                str(tmp_path / "m"),
                "--index",
                str(tmp_path / "i"),
                "--out",
                str(tmp_path / "q"),
            ]
        )
        == 0
    )
    capsys.readouterr()

    def search(*args):
        assert dphr(["search", "--index", str(tmp_path / "i"), "--model", str(tmp_path / "q"), "--json", *args]) == 0
        return [r["score"] for r in json.loads(capsys.readouterr().out)["results"]]

    assert search("who wrote hamlet") == search("--no-truecase", "Who wrote Hamlet")
    assert search("--no-truecase", "who wrote hamlet") != search("Who wrote Hamlet")
    lowered = ["--set", "filter_threshold=null", "--set", "truecase=false", "--lowercase"]
    assert dphr([*base, "--checkpoint", str(published["full"]), *lowered, "--out", str(tmp_path / "l")]) == 0
    saved = json.loads((tmp_path / "l" / "dphr_config.json").read_text())
    assert saved["filter_threshold"] is None and saved["truecase"] is False and saved["do_lower_case"] is True
