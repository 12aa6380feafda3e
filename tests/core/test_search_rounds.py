"""One token search serving the search's first rounds (c, 2c candidates): exactly the results of a search per
round, on exact, IVF (with refine) and HNSW structures, with equal scores at the cut, in batches and alone."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest

from dphr_haystack import PhraseIndex, PhraseSearcher
from dphr_haystack.encode.add import add_passages
from dphr_haystack.index.rounds import clean_cut
from tests.conftest import tiny_passages

pytestmark = pytest.mark.unit
QUERIES = ["capital of france", "who wrote hamlet", "highest mountain", "river in africa", "python language"]


def _index(tiny_model, tmp_path, factory: str, duplicates: bool = False) -> PhraseIndex:
    index = PhraseIndex.create(tiny_model, path=tmp_path / factory.replace(",", "-"), faiss_factory=factory)
    passages = tiny_passages()
    if duplicates:  # the same text under other ids: equal vectors, so equal scores at any cut
        passages += [{**p, "id": f"{p['id']}-again"} for p in tiny_passages()]
    add_passages(index, tiny_model, passages, progress=False)
    if factory.startswith("IVF"):
        index.set_search_params(persist=False, nprobe=2, refine=2)
    return index


def _all_results(searcher: PhraseSearcher, model) -> list:
    qs, qe = model.encode_queries(QUERIES)
    out = []
    for unit, top_k in (("phrase", 10), ("phrase", 3), ("passage", 4), ("document", 2)):
        out.append(
            [[asdict(h) for h in hits] for hits in searcher.search_vectors(qs, qe, unit, top_k, questions=QUERIES)]
        )
        for i in range(len(QUERIES)):
            one = searcher.search_vectors(qs[i : i + 1], qe[i : i + 1], unit, top_k, questions=QUERIES[i : i + 1])
            out.append([asdict(h) for h in one[0]])
    return out


@pytest.mark.parametrize("factory", ["Flat", "SQfp16", "IVF2,Flat", "HNSW8"])
@pytest.mark.parametrize("duplicates", [False, True])
def test_results_equal_a_search_per_round(tiny_model, tmp_path, monkeypatch, factory, duplicates, one_torch_thread):
    index = _index(tiny_model, tmp_path, factory, duplicates)
    searcher = PhraseSearcher(index, tiny_model)
    calls: list[int] = []
    search = index.search_tokens
    monkeypatch.setattr(index, "search_tokens", lambda q, k: calls.append(k) or search(q, k))
    ahead = _all_results(searcher, tiny_model)
    ahead_calls = len(calls)
    monkeypatch.setattr(index, "search_token_rows", lambda queries, largest: None)
    calls.clear()
    assert _all_results(searcher, tiny_model) == ahead
    if factory != "HNSW8" and not duplicates:
        assert ahead_calls < len(calls)  # later rounds read the first search's rows


def test_hnsw_results_depend_on_k_so_each_round_searches(tiny_model, tmp_path):
    index = _index(tiny_model, tmp_path, "HNSW8")
    assert index.search_token_rows(index.vectors(slice(0, 2)).astype(np.float32), 20) is None


def test_rows_for_a_count_are_those_of_a_search_for_it(tiny_model, tmp_path):
    index = _index(tiny_model, tmp_path, "IVF2,Flat", duplicates=True)
    queries = np.concatenate(tiny_model.encode_queries(QUERIES))
    searched = index.search_token_rows(queries, 16)
    assert searched is not None and searched.rows(32, np.arange(len(queries))) is None  # beyond the search
    for k in (1, 3, 4, 8, 16):
        rows, clean = searched.rows(k, np.arange(len(queries)))
        if k == 1:  # every best row has its duplicate's equal score next to it
            assert not clean.any()
        _, expected = index.search_tokens(queries, k)
        for got, want, ok in zip(rows, expected, clean, strict=True):
            if ok:
                assert set(got.tolist()) == set(want.tolist())


def test_equal_scores_at_the_cut_are_not_clean():
    scores = np.array([[3.0, 2.0, 2.0, 1.0], [3.0, 2.5, 2.0, 1.0], [3.0, 2.0, 2.0, 2.0]], dtype=np.float32)
    ids = np.array([[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, -1, -1]])
    assert clean_cut(scores, ids, 2).tolist() == [False, True, True]  # a missing row beyond the cut is no tie
    assert clean_cut(scores, ids, 3).tolist() == [True, True, True]
    assert clean_cut(scores, ids, 4).tolist() == [True, True, True]
