"""The shipped phrase model through a Haystack 2 pipeline: the same answers and scores as the core."""

from __future__ import annotations

import pytest
from haystack import Document

from dphr_haystack import DEFAULT_MODEL, PhraseIndex, PhraseModel, PhraseSearcher
from dphr_haystack.encode.add import add_passages
from dphr_haystack.haystack2 import PhraseDocumentStore, PhraseIndexer
from dphr_haystack.haystack2.pipelines import phrase_qa_pipeline

pytestmark = pytest.mark.integration

PARAGRAPHS = {
    "Eiffel Tower": "The Eiffel Tower is a wrought-iron lattice tower in Paris. It was designed by the company of "
    "Gustave Eiffel and completed in 1889 for the World's Fair.",
    "Amazon River": "The Amazon River in South America is the largest river by discharge volume of water in the "
    "world. It flows into the Atlantic Ocean.",
    "Marie Curie": "Marie Curie was a physicist and chemist who conducted pioneering research on radioactivity. "
    "She was the first woman to win a Nobel Prize.",
}
QUESTIONS = {  # the right answers
    "When was the Eiffel Tower completed?": ("1889",),
    "Which ocean does the Amazon flow into?": ("Atlantic Ocean", "Atlantic"),
}


def test_shipped_model_answers_like_the_core(minilm_available, one_torch_thread):
    store = PhraseDocumentStore(progress_bar=False)
    docs = [Document(id=title, content=text, meta={"title": title}) for title, text in PARAGRAPHS.items()]
    PhraseIndexer(document_store=store, progress_bar=False).run(documents=docs)
    pipeline = phrase_qa_pipeline(store, top_k=3)

    model = PhraseModel.load(DEFAULT_MODEL)
    index = PhraseIndex.create(model, filter_threshold=model.config.filter_threshold)
    add_passages(index, model, [{"id": t, "title": t, "text": x} for t, x in PARAGRAPHS.items()], progress=False)
    searcher = PhraseSearcher(index, model)
    for question, expected in QUESTIONS.items():
        answers = pipeline.run({"retriever": {"query": question}})["retriever"]["answers"]
        assert answers[0].data in expected
        core = searcher.search(question, unit="phrase", top_k=3)
        assert [(a.data, a.document.id) for a in answers] == [(h.text, h.passage_id) for h in core]
        assert [a.meta["raw_score"] for a in answers] == pytest.approx([h.score for h in core], rel=1e-5)
