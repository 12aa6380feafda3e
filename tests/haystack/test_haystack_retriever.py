"""PhraseRetriever: Documents and Answers, units, batching, model loading and the model cache."""

from __future__ import annotations

import pytest
from haystack.schema import Answer, Document, Span

from dphr_haystack.errors import InvalidParameterError, InvalidQueryError, ModelLoadError
from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever, cached_models, clear_model_cache

pytestmark = pytest.mark.unit

QUERIES = ["What is the capital of France?", "Who wrote Hamlet?", "Where is Mount Everest?"]


def test_run_query_returns_extractive_answers_with_offsets(indexed_retriever):
    indexed_retriever.unit = "phrase"
    out, edge = indexed_retriever.run_query(QUERIES[0], top_k=4)
    assert edge == "output_1"
    answers, docs = out["answers"], out["documents"]
    assert len(answers) == 4 and all(isinstance(a, Answer) for a in answers)
    scores = [a.score for a in answers]
    assert scores == sorted(scores, reverse=True) and all(0.0 < s < 1.0 for s in scores)
    for answer in answers:
        assert answer.type == "extractive"
        (span,) = answer.offsets_in_document
        assert isinstance(span, Span) and answer.offsets_in_context == [span]
        assert answer.context[span.start : span.end] == answer.answer
        stored = indexed_retriever.document_store.get_document_by_id(answer.document_ids[0])
        assert stored.content[span.start : span.end] == answer.answer
    # unit=phrase: documents are the passages of the phrases, deduplicated, in phrase order
    expected = list(dict.fromkeys(a.document_ids[0] for a in answers))
    assert [d.id for d in docs] == expected


def test_passage_documents_carry_the_best_phrase(indexed_retriever):
    indexed_retriever.scale_score = False
    docs = indexed_retriever.retrieve(QUERIES[1], top_k=6)
    assert len(docs) == 6 and len({d.id for d in docs}) == 6
    for doc in docs:
        start, end = doc.meta["best_phrase_start"], doc.meta["best_phrase_end"]
        assert doc.content[start:end] == doc.meta["best_phrase"]
        # passage score = its best phrase's score; its answer (best_phrase) may score below a copy of the question
        assert doc.score >= doc.meta["best_phrase_score"] - 1e-4
        assert doc.meta["title"]  # the stored meta is kept
    assert [d.score for d in docs] == sorted((d.score for d in docs), reverse=True)
    out, _ = indexed_retriever.run_query(QUERIES[1], top_k=6)
    assert [a.answer for a in out["answers"]] == [d.meta["best_phrase"] for d in docs]


def test_document_unit_groups_passages_by_the_document_id_field(tiny_retriever, haystack_docs):
    for doc in haystack_docs:
        doc.meta["document_id"] = "europe" if doc.id in ("p0", "p1") else doc.id
    tiny_retriever.document_store.index_documents(haystack_docs, tiny_retriever)
    tiny_retriever.unit = "document"
    docs = tiny_retriever.retrieve("capital city", top_k=6)
    groups = [d.meta["phrase_document_id"] for d in docs]
    assert len(docs) == 5 and len(set(groups)) == 5 and "europe" in groups
    passage = PhraseRetriever(
        document_store=tiny_retriever.document_store, model=tiny_retriever.model, unit="passage", device="cpu", top_k=6
    ).retrieve("capital city")
    best_europe = next(d for d in passage if d.id in ("p0", "p1"))
    assert next(d for d in docs if d.meta["phrase_document_id"] == "europe").id == best_europe.id


def test_retrieve_batch_matches_single_queries(indexed_retriever):
    batch = indexed_retriever.retrieve_batch(QUERIES, batch_size=2)
    single = [indexed_retriever.retrieve(q) for q in QUERIES]
    assert [[d.id for d in ds] for ds in batch] == [[d.id for d in ds] for ds in single]
    out, _ = indexed_retriever.run_query_batch(QUERIES, filters=[None, {"title": "Hamlet"}, None])
    assert len(out["documents"]) == len(out["answers"]) == 3
    assert [d.id for d in out["documents"][1]] == ["p3"]


def test_empty_store_gives_empty_results(tiny_retriever):
    assert tiny_retriever.retrieve("anything") == []
    assert tiny_retriever.retrieve_batch(["a", "b"]) == [[], []]
    tiny_retriever.document_store.write_documents([Document("Not yet encoded.")])  # no update_embeddings yet
    out, _ = tiny_retriever.run_query("anything")
    assert out == {"documents": [], "answers": []}


def test_bad_input_raises_typed_errors(indexed_retriever, tmp_path):
    with pytest.raises(InvalidQueryError):
        indexed_retriever.retrieve("   ")
    with pytest.raises(InvalidParameterError):
        PhraseRetriever(document_store=PhraseDocumentStore(), model=indexed_retriever.model, unit="sentence")
    with pytest.raises(InvalidParameterError, match="PhraseDocumentStore"):
        from haystack.document_stores import InMemoryDocumentStore

        PhraseRetriever(document_store=InMemoryDocumentStore(), model=indexed_retriever.model)
    missing = tmp_path / "no" / "such-model"
    with pytest.raises(ModelLoadError, match=str(missing)):
        PhraseRetriever(model=str(missing))
    with pytest.raises(ModelLoadError, match="org/absent-model"):
        PhraseRetriever(model="org/absent-model")  # HF_HUB_OFFLINE=1: no download, a clear error


def test_model_cache_shares_one_model(tiny_model_dir):
    clear_model_cache()
    first = PhraseRetriever(model=str(tiny_model_dir), device="cpu")
    second = PhraseRetriever(model=str(tiny_model_dir) + "/", device="cpu")
    assert first.phrase_model is second.phrase_model
    assert cached_models() == [(str(tiny_model_dir.resolve()), "cpu")]
    clear_model_cache()
    assert cached_models() == []
    assert PhraseRetriever(model=str(tiny_model_dir), device="cpu").phrase_model is not first.phrase_model


def test_plain_encoder_directory_builds_an_untrained_phrase_model(tiny_base_dir, caplog):
    retriever = PhraseRetriever(model=str(tiny_base_dir), device="cpu")
    assert retriever.phrase_model.hidden_size == 32


def test_filter_threshold_defaults_to_the_models_own(tiny_model, tmp_path, haystack_docs):
    tiny_model.config.filter_threshold = 0.25
    tiny_model.save(tmp_path / "filtered-model")
    model = str(tmp_path / "filtered-model")
    clear_model_cache()
    try:
        default = PhraseRetriever(document_store=PhraseDocumentStore(progress_bar=False), model=model, device="cpu")
        assert default.filter_threshold == 0.25
        default.document_store.index_documents(haystack_docs, default)
        assert default.document_store.get_phrase_index().filter_threshold == 0.25
        assert PhraseRetriever(model=model, filter_threshold=None, device="cpu").filter_threshold is None
        assert PhraseRetriever(model=model, filter_threshold=-1.5, device="cpu").filter_threshold == -1.5
        with pytest.raises(InvalidParameterError, match="'model', a number or None"):
            PhraseRetriever(model=model, filter_threshold="none", device="cpu")
    finally:
        clear_model_cache()


def test_whole_words_answers_never_cut_a_word(tiny_retriever):
    # 'zxqvb', 'qwzz' and 'vvkjx' are not in the tiny vocab, so WordPiece splits them into single characters.
    text = "The zxqvb code of Paris was qwzz found in vvkjx valleys of 1990s Europe."
    tiny_retriever.document_store.index_documents(
        [Document(content=text, id="w", meta={"title": "w"})], tiny_retriever
    )
    tiny_retriever.unit = "phrase"

    def cuts(answer: Answer) -> bool:
        span = answer.offsets_in_document[0]
        return any(0 < i < len(text) and text[i - 1].isalnum() and text[i].isalnum() for i in (span.start, span.end))

    answers = {}
    for whole_words in (True, False):
        tiny_retriever.whole_words = whole_words
        answers[whole_words] = [
            a for q in QUERIES + ["zxqvb code", "valleys"] for a in tiny_retriever.run_query(q, top_k=30)[0]["answers"]
        ]
    assert answers[True] and not any(cuts(a) for a in answers[True])
    assert any(cuts(a) for a in answers[False])  # the setting is what keeps them whole
    with pytest.raises(InvalidParameterError, match="whole_words"):
        PhraseRetriever(model=tiny_retriever.model, whole_words="yes", device="cpu")


def test_answers_skip_question_copies_and_carry_the_calibrated_confidence(tiny_model_dir, haystack_docs, tmp_path):
    import json
    import shutil

    from dphr_haystack import PhraseSearcher
    from dphr_haystack.confidence import FEATURES, copies_question, question_words
    from dphr_haystack.spans import AnswerFolder, trim_span

    calibrated = tmp_path / "calibrated"
    shutil.copytree(tiny_model_dir, calibrated)
    config = json.loads((calibrated / "dphr_config.json").read_text())
    config["calibration"] = {
        "features": list(FEATURES),
        "weights": [0.5, 1.0, 0.5, 1.0],
        "bias": -1.0,
        "mean": [0.0] * 4,
        "scale": [1.0] * 4,
    }
    (calibrated / "dphr_config.json").write_text(json.dumps(config))
    store = PhraseDocumentStore()
    retriever = PhraseRetriever(document_store=store, model=str(calibrated), unit="phrase", device="cpu")
    store.index_documents(haystack_docs, retriever)
    plain = PhraseRetriever(
        document_store=store, model=str(calibrated), unit="phrase", device="cpu", skip_question_copies=False
    )
    # A question made of the words of likely answers, so that some phrase answers copy it.
    seeds = [a.answer for a in plain.run_query("capital city", top_k=5)[0]["answers"]]
    question = f"Which {' '.join(seeds)} is it?"
    words = question_words(question)
    # the raw spans, best first: copies are skipped first, then the answers trimmed and folded (dphr_haystack.spans)
    spans = PhraseSearcher(
        store.get_phrase_index(), plain.phrase_model, skip_question_copies=False, calibration=None, tidy_answers=False
    ).search(question, unit="phrase", top_k=500)
    assert any(copies_question(h.text, words) for h in spans)
    content = {d.id: d.content for d in haystack_docs}
    folder, expected = AnswerFolder(), []
    for h in spans:
        start, end = trim_span(content[h.passage_id], h.start, h.end)
        text = content[h.passage_id][start:end]
        if not copies_question(text, words) and folder.keep(text, h.passage_id, start, end):
            expected.append(text)
    answers = retriever.run_query(question, top_k=5)[0]["answers"]
    assert [a.answer for a in answers] == expected[:5]
    for answer in answers:
        assert answer.score == answer.meta["confidence"] and 0.0 <= answer.score <= 1.0
    with pytest.raises(InvalidParameterError, match="skip_question_copies"):
        PhraseRetriever(document_store=store, model=str(calibrated), skip_question_copies="yes")


@pytest.fixture(scope="module")
def densephrases_model_dir(tmp_path_factory):
    """A synthetic cased DensePhrases checkpoint imported and saved (truecasing on by default)."""
    from dphr_haystack import PhraseModel
    from dphr_haystack.testing import make_densephrases_checkpoints

    made = make_densephrases_checkpoints(tmp_path_factory.mktemp("densephrases"))
    out = tmp_path_factory.mktemp("densephrases-model")
    PhraseModel.from_densephrases(made["full"], tokenizer=made["tok_dir"]).save(out)
    return out


def test_truecase_is_a_yaml_parameter_defaulting_to_the_model(densephrases_model_dir):
    from haystack.errors import PipelineSchemaError

    from dphr_haystack.nodes import load_pipeline
    from tests.haystack.test_haystack_pipelines import PIPELINES

    docs = [
        Document("William Shakespeare wrote Hamlet in London .", id="a"),
        Document("Nile flows north into Mediterranean Sea .", id="b"),
    ]

    def answers(truecase, query):
        params = {"model": str(densephrases_model_dir), "device": "cpu", "truecase": truecase}
        pipeline = load_pipeline(
            PIPELINES / "phrase_qa.yml", overrides={"DocumentStore": {"progress_bar": False}, "Retriever": params}
        )
        retriever = pipeline.get_node("Retriever")
        assert retriever.truecase is truecase
        retriever.document_store.index_documents(docs, retriever)
        return [(a.answer, a.meta["raw_score"]) for a in pipeline.run(query=query)["answers"]]

    written = answers(False, "Who wrote Hamlet?")
    assert answers(None, "who wrote hamlet?") == written  # the model's default: truecased
    assert answers(True, "who wrote hamlet?") == written
    assert answers(False, "who wrote hamlet?") != written
    with pytest.raises(PipelineSchemaError):
        load_pipeline(
            PIPELINES / "phrase_qa.yml",
            overrides={"Retriever": {"model": str(densephrases_model_dir), "truecase": "x"}},
        )


def test_passage_scoring_is_a_yaml_parameter_ranking_as_the_searcher(tiny_model_dir, haystack_docs):
    from haystack.errors import PipelineSchemaError

    from dphr_haystack import PhraseSearcher
    from dphr_haystack.nodes import load_pipeline
    from tests.haystack.test_haystack_pipelines import PIPELINES

    def pipeline(scoring: str):
        params = {"model": str(tiny_model_dir), "device": "cpu", "passage_scoring": scoring, "scale_score": False}
        return load_pipeline(
            PIPELINES / "phrase_passages.yml",
            overrides={"DocumentStore": {"progress_bar": False}, "Retriever": params},
        )

    summed = pipeline("logsumexp")
    retriever = summed.get_node("Retriever")
    assert retriever.passage_scoring == "logsumexp"
    retriever.document_store.index_documents(haystack_docs, retriever)
    docs = summed.run(query="capital city", params={"Retriever": {"top_k": 6}})["documents"]
    searcher = PhraseSearcher(
        retriever.document_store.get_phrase_index(), retriever.phrase_model, passage_scoring="logsumexp"
    )
    hits = searcher.search("capital city", unit="passage", top_k=6)
    assert [d.id for d in docs] == [h.passage_id for h in hits]
    assert [d.score for d in docs] == pytest.approx([h.score for h in hits])
    assert all(d.score >= d.meta["best_phrase_score"] - 1e-6 for d in docs)  # every phrase counts, not the best
    with pytest.raises(PipelineSchemaError):
        pipeline("sum")


def test_scale_score_must_be_a_flag(indexed_retriever, tiny_model_dir):
    with pytest.raises(InvalidParameterError, match="scale_score"):
        indexed_retriever.retrieve(QUERIES[0], scale_score="x")
    with pytest.raises(InvalidParameterError, match="scale_score"):
        PhraseRetriever(document_store=indexed_retriever.document_store, model=str(tiny_model_dir), scale_score="no")
