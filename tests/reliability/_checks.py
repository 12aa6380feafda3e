"""Consistency checks shared by the reliability tests: a phrase index's invariants, a store's phrases vs documents."""

from __future__ import annotations

import math

import numpy as np

from dphr_haystack import DocumentHit, DphrError, PassageHit, PhraseHit, PhraseIndex

try:
    from haystack.errors import HaystackError
except ImportError:  # pragma: no cover - haystack is optional for the core
    HaystackError = DphrError  # type: ignore[misc, assignment]

TYPED_ERRORS = (DphrError, HaystackError)


def outcome_of(call, pipeline_run: bool = False) -> str:
    """Run ``call``; ``ok`` or the class name of a typed error with a message. Anything else propagates.

    ``pipeline_run``: Haystack's ``Pipeline.run`` re-raises a node's error as a bare ``Exception`` chained to it
    (its documented behaviour); that counts as typed when the node's own error is.
    """
    try:
        call()
    except TYPED_ERRORS as exc:
        assert str(exc).strip(), f"{type(exc).__name__} without a message"
        return type(exc).__name__
    except Exception as exc:
        if pipeline_run and type(exc) is Exception and isinstance(exc.__cause__, TYPED_ERRORS):
            return f"node:{type(exc.__cause__).__name__}"
        raise
    return "ok"


def assert_index_consistent(index: PhraseIndex) -> None:
    """The bookkeeping of a phrase index agrees with itself: rows, tokens, FAISS, live ids."""
    n = index.num_passages
    assert len(index.passages) == len(index.deleted) == len(index.first_token) == len(index.num_tokens) == n
    assert int(index.num_tokens.sum()) == len(index) == len(index.tokens)
    passages_of_tokens = index.tokens["passage"]
    expected = np.repeat(np.arange(n), index.num_tokens)
    assert np.array_equal(passages_of_tokens, expected), "tokens are not consecutive per passage"
    if n:
        assert np.array_equal(index.first_token, np.concatenate([[0], np.cumsum(index.num_tokens)[:-1]]))
    faiss_index = index.faiss_index
    if faiss_index is not None:
        assert faiss_index.ntotal == index.num_searched_vectors
    if index.key_vectors:  # each passage's keys (at most key_vectors of them) stand for rows of its own
        rows = index.storage.key_rows.view()
        assert len(rows) == len(index.storage.keys.view()) == index.num_searched_vectors
        assert np.array_equal(
            index.tokens["passage"][rows], np.repeat(np.arange(n), np.minimum(index.num_tokens, index.key_vectors))
        )
    live = index.live_passage_ids()
    assert len(live) == len(set(live)) == index.num_live_passages
    for pid in live:
        row = index.passage_row(pid)
        assert not index.deleted[row] and index.passages[row]["id"] == pid


def assert_store_consistent(store, index: str | None = None) -> None:
    """Every live phrase passage is a current text document with the same text and title (no orphans, no stale)."""
    index = index or store.index
    phrase_index = store.get_phrase_index(index)
    if phrase_index is None:
        return
    assert_index_consistent(phrase_index)
    try:
        docs = {d.id: d for d in store.get_all_documents(index=index)}
    except HaystackError:
        docs = {}
    for pid in phrase_index.live_passage_ids():
        assert pid in docs, f"phrases of {pid!r}, which is not a document"
        passage = store._to_passage(docs[pid])
        record = phrase_index.passages[phrase_index.passage_row(pid)]
        assert passage is not None and (passage["text"], passage["title"]) == (
            record["text"],
            record.get("title", ""),
        ), f"stale phrases for {pid!r}"


def check_hits(index: PhraseIndex, hits: list, top_k: int, finite: bool = True) -> None:
    """Hits are at most top_k, sorted by score, and every phrase is the passage slice it claims."""
    assert len(hits) <= top_k
    scores = [h.score for h in hits]
    if finite:
        assert all(math.isfinite(s) for s in scores)
        assert scores == sorted(scores, reverse=True)
    for hit in hits:
        phrase = (
            hit
            if isinstance(hit, PhraseHit)
            else (hit.best_phrase if isinstance(hit, PassageHit) else hit.best_passage.best_phrase)
        )
        assert isinstance(hit, (PhraseHit, PassageHit, DocumentHit))
        record = index.passages[phrase.passage_row]
        assert record["id"] == phrase.passage_id and not index.deleted[phrase.passage_row]
        assert record["text"][phrase.start : phrase.end] == phrase.text


def check_documents(store, docs: list, index: str | None = None) -> None:
    """Retrieved Documents are stored documents (when ``store`` is given) whose best phrase is a slice of their
    content (a stale phrase next to a changed text would not be)."""
    for doc in docs:
        if store is not None:
            stored = store.get_document_by_id(doc.id, index=index)
            assert stored is not None and stored.content == doc.content, f"{doc.id!r} is not the stored document"
        meta = doc.meta
        assert doc.content[meta["best_phrase_start"] : meta["best_phrase_end"]] == meta["best_phrase"]
