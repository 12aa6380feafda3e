"""BM25 + haystack-ai 3.x's extractive reader (transformers-haystack), the baseline benchmarks.quality.reader_baseline
measures beside phrase answers, on a tiny random reader: it reads only what BM25 hands it."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip(
    "haystack_integrations.components.readers.transformers", reason="transformers-haystack not installed"
)

from benchmarks.quality.reader_baseline import haystack2_reader_pipeline, haystack2_run  # noqa: E402
from dphr_haystack.haystack2 import PhraseDocumentStore  # noqa: E402

pytestmark = pytest.mark.unit


def test_bm25_reader_answers_from_the_passages_bm25_found(tiny_reader_dir, hs2_docs, one_torch_thread):
    store = PhraseDocumentStore(index=f"reader-{uuid.uuid4()}", progress_bar=False)
    store.write_documents(hs2_docs)
    pipeline = haystack2_reader_pipeline(store, str(tiny_reader_dir))
    query = "Who wrote the tragedy Hamlet?"

    def inputs(k: int):
        return lambda question: {"bm25": {"query": question, "top_k": k}, "reader": {"query": question}}

    answers, documents = haystack2_run(pipeline, inputs(1), "reader", "bm25")(query)
    assert [d[0] for d in documents] == ["p3"] and answers
    for text, score, doc_id in answers:
        assert doc_id == "p3" and text and text in hs2_docs[3].content and 0.0 <= score <= 1.0
    wider, documents = haystack2_run(pipeline, inputs(6), "reader", "bm25")(query)
    assert len(documents) > 1 and {doc_id for _, _, doc_id in wider} <= {d[0] for d in documents}
