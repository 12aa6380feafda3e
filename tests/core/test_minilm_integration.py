"""End to end on the real offline all-MiniLM-L6-v2 and 20 SQuAD dev paragraphs."""

from __future__ import annotations

import pytest

from dphr_haystack import PhraseIndex, PhraseModel, PhraseSearcher
from dphr_haystack.encode.add import add_passages

pytestmark = pytest.mark.integration


def test_minilm_phrase_index_end_to_end(minilm_available, squad_dev_paragraphs, tmp_path):
    model = PhraseModel.from_base("minilm")
    assert model.hidden_size == 384 and model.config.max_passage_length == 384
    model.save(tmp_path / "model")
    model = PhraseModel.load(tmp_path / "model")
    index = PhraseIndex.create(model, path=tmp_path / "index", model_path=str(tmp_path / "model"))
    passages = [{k: p[k] for k in ("id", "title", "text")} for p in squad_dev_paragraphs]
    add_passages(index, model, passages, batch_size=16, progress=False)
    assert index.num_passages == 20 and len(index) > 20 * 50
    index = PhraseIndex.load(tmp_path / "index", model=model)
    searcher = PhraseSearcher(index, model)
    questions = [qa["question"] for p in squad_dev_paragraphs[:5] for qa in p["qas"][:2]]
    by_id = {p["id"]: p["text"] for p in passages}
    for unit in ("phrase", "passage", "document"):
        results = searcher.search_batch(questions, unit=unit, top_k=5)
        assert all(len(hits) == 5 for hits in results)
    for hits in searcher.search_batch(questions, unit="phrase", top_k=5):
        for hit in hits:
            assert hit.text == by_id[hit.passage_id][hit.start : hit.end] and hit.end - hit.start > 0
