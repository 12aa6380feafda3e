"""One token search serving the search's first rounds (c, 2c candidates): exactly the results of a search per
round, on exact, IVF (with refine) and HNSW structures, with equal scores at the cut, in batches and alone; equal
scores kept in one order (the lower row first), so that copies of a passage need no search of their own."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest

from dphr_haystack import PhraseIndex, PhraseSearcher
from dphr_haystack.encode.add import add_passages
from dphr_haystack.index.structures import ranked_head, refine_exact
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
    if factory != "HNSW8":
        assert ahead_calls < len(calls)  # later rounds read the first search's rows, equal scores or not


def test_hnsw_results_depend_on_k_so_each_round_searches(tiny_model, tmp_path):
    index = _index(tiny_model, tmp_path, "HNSW8")
    assert index.search_token_rows(index.vectors(slice(0, 2)).astype(np.float32), 20) is None


def test_rows_for_a_count_are_those_of_a_search_for_it(tiny_model, tmp_path):
    index = _index(tiny_model, tmp_path, "IVF2,Flat", duplicates=True)
    queries = np.concatenate(tiny_model.encode_queries(QUERIES))
    searched = index.search_token_rows(queries, 16)
    assert searched is not None and searched.rows(32, np.arange(len(queries))) is None  # beyond the search
    for k in (1, 3, 4, 8, 16):  # at k = 1 every best row has its copy's equal score next to it
        rows, settled = searched.rows(k, np.arange(len(queries)))
        assert settled.all()
        _, expected = index.search_tokens(queries, k)
        assert rows.tolist() == expected.tolist()


def test_equal_scores_keep_the_lower_row_and_say_whether_the_rows_settle_the_cut():
    scores = np.array([[3.0, 2.0, 2.0, 1.0], [3.0, 2.0, 2.0, 2.0], [3.0, 2.0, -1.0, -1.0]], dtype=np.float32)
    ids = np.array([[1, 9, 4, 5], [1, 9, 4, 7], [1, 2, -1, -1]])
    top, rows, settled = ranked_head(scores, ids, 2)
    assert rows.tolist() == [[1, 4], [1, 4], [1, 2]] and top[:, 1].tolist() == [2.0, 2.0, 2.0]
    assert settled.tolist() == [True, False, True]  # the second's equal scores may go on past its last row
    assert ranked_head(scores, ids, 2, complete=True)[2].all()  # unless it holds every row
    assert ranked_head(scores, ids, 4)[2].all()
    assert ranked_head(scores, ids, 3)[1].tolist() == [[1, 4, 9], [1, 4, 7], [1, 2, -1]]


def test_refined_rows_keep_the_lower_row_among_equal_exact_scores():
    stored = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.5, 0.5]], dtype=np.float32)
    query = np.array([[1.0, 0.0]], dtype=np.float32)
    for candidates in ([[2, 3, 0, 1]], [[0, 1, 3, 2]], [[3, -1, 2, 0]]):
        _, rows = refine_exact(query, np.array(candidates), 2, stored, lambda v: v)
        assert rows.tolist() == [[0, 2]]


@pytest.mark.parametrize("factory", ["Flat", "IVF2,Flat"])
def test_more_equal_scores_than_the_rows_fetched_fetch_more(tiny_model, tmp_path, factory):
    index = PhraseIndex.create(tiny_model, path=tmp_path / "copies", faiss_factory=factory)
    one = tiny_passages()[0]
    add_passages(index, tiny_model, [{**one, "id": f"copy-{i}"} for i in range(40)], progress=False)
    if factory.startswith("IVF"):
        index.set_search_params(persist=False, nprobe=2)
    queries = np.concatenate(tiny_model.encode_queries(QUERIES[:2]))
    _, every = index.search_tokens(queries, len(index))
    scores, best = index.search_tokens(queries, 1)  # its 40 copies tie past the 17 rows first fetched
    assert (scores[:, 0] == index.search_tokens(queries, 2)[0][:, 1]).all()
    assert best[:, 0].tolist() == every[:, 0].tolist() == [min(r for r in row if r >= 0) for row in every[:, :40]]
    searched = index.search_token_rows(queries, 4)
    assert searched is not None
    assert not searched.rows(1, np.arange(len(queries)))[1].any()  # 20 rows fetched: the rounds search again
