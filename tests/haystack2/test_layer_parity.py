"""The Haystack 1.x and 2.x layers over one document layer: the same documents give the same passages, phrase hits,
scores and meta, and each layer's store serves a phrase index the other one built.

The two Haystacks cannot share an environment: the 1.x side runs as a script (``hs1_store.py``) with the Haystack
1.x interpreter ``.venv/bin/python`` and prints JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from haystack import Document

from dphr_haystack.haystack2 import PhraseDocumentStore, PhraseRetriever
from dphr_haystack.index.phrase_index import PhraseIndex
from dphr_haystack.model.cache import load_phrase_model

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
HS1_PYTHON = REPO / ".venv" / "bin" / "python"
HS1_SCRIPT = Path(__file__).with_name("hs1_store.py")
UNITS = ("phrase", "passage", "document")
QUERIES = ["What is the capital of France?", "who wrote hamlet", "Which river flows into the Mediterranean?"]


def _has_farm_haystack() -> bool:
    if not HS1_PYTHON.is_file():
        return False
    probe = "import importlib.metadata as m; m.distribution('farm-haystack')"
    return subprocess.run([str(HS1_PYTHON), "-c", probe], capture_output=True, timeout=120).returncode == 0


pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not _has_farm_haystack(), reason="needs the Haystack 1.x environment .venv with farm-haystack"),
]


def _documents() -> list[dict]:
    """The tiny passages with the meta the two layers once read differently: a numeric title, numeric and shared
    document groups, an empty title."""
    from tests.conftest import tiny_passages

    docs = [{"id": p["id"], "content": p["text"], "meta": {"title": p["title"]}} for p in tiny_passages()]
    docs[0]["meta"] = {"title": 2024, "document_id": 7}
    docs[1]["meta"]["document_id"] = "europe"
    docs[2]["meta"]["document_id"] = "europe"
    docs[3]["meta"]["title"] = ""
    return docs


def _run_hs1(tmp_path: Path, model_dir: Path, store_dir: Path, phrase_index_dir: Path | None = None) -> dict:
    docs_file, queries_file = tmp_path / "docs.json", tmp_path / "queries.json"
    docs_file.write_text(json.dumps(_documents()), encoding="utf-8")
    queries_file.write_text(json.dumps(QUERIES), encoding="utf-8")
    args = [str(HS1_PYTHON), str(HS1_SCRIPT), str(model_dir), str(docs_file), str(queries_file), str(store_dir)]
    if phrase_index_dir is not None:
        args.append(str(phrase_index_dir))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _hs2_store(path: Path | None = None) -> PhraseDocumentStore:
    store = PhraseDocumentStore(path=str(path) if path else None, progress_bar=False)
    store.write_documents([Document(id=d["id"], content=d["content"], meta=d["meta"]) for d in _documents()])
    return store


def _hs2_results(store: PhraseDocumentStore, model_dir: Path) -> dict:
    results = {}
    for unit in UNITS:
        retriever = PhraseRetriever(document_store=store, model=str(model_dir), top_k=5, unit=unit, device="cpu")
        per_query = []
        for query in QUERIES:
            output = retriever.run(query=query)
            per_query.append(
                {
                    "documents": [
                        {"id": d.id, "content": d.content, "score": d.score, "meta": d.meta}
                        for d in output["documents"]
                    ],
                    "answers": [
                        {
                            "text": a.data,
                            "score": a.score,
                            "start": a.document_offset.start,
                            "end": a.document_offset.end,
                            "document_id": a.document.id,
                            "meta": a.meta,
                        }
                        for a in output["answers"]
                    ],
                }
            )
        results[unit] = per_query
    return results


def _live_passages(index: PhraseIndex) -> list[dict]:
    live = set(index.live_passage_ids())
    return sorted((p for p in index.passages if p["id"] in live), key=lambda p: p["id"])


def _flat(value: dict, prefix: str = "") -> dict:
    flat = {}
    for key, item in value.items():
        if isinstance(item, dict):
            flat.update(_flat(item, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = item
    return flat


def _same(hs1: dict, hs2: dict) -> None:
    """Equal, floats to 1e-5 (the two environments run different transformers releases)."""
    one, two = _flat(json.loads(json.dumps(hs1))), _flat(json.loads(json.dumps(hs2)))
    assert one.keys() == two.keys()
    for key, value in one.items():
        if isinstance(value, float):
            assert two[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
        else:
            assert two[key] == value, key


def _assert_same_results(hs1: dict, hs2: dict) -> None:
    for unit in UNITS:
        for one, two in zip(hs1[unit], hs2[unit], strict=True):
            assert [d["id"] for d in one["documents"]] == [d["id"] for d in two["documents"]], unit
            assert [a["text"] for a in one["answers"]] == [a["text"] for a in two["answers"]], unit
            for d1, d2 in zip(one["documents"], two["documents"], strict=True):
                assert d1["content"] == d2["content"] and d1["meta"].keys() == d2["meta"].keys()
                _same(d1, d2)
            for a1, a2 in zip(one["answers"], two["answers"], strict=True):
                _same(a1, a2)


def test_both_layers_give_the_same_passages_hits_scores_and_meta(tiny_model_dir, tmp_path, one_torch_thread):
    hs1 = _run_hs1(tmp_path, tiny_model_dir, tmp_path / "hs1-store")
    store = _hs2_store()
    assert store.update_phrases(load_phrase_model(str(tiny_model_dir), "cpu")) == 6
    assert store.phrase_index is not None
    passages = _live_passages(store.phrase_index)
    assert [(p["title"], p["document_id"]) for p in passages] == [
        (p["title"], p["document_id"]) for p in hs1["passages"]
    ]
    assert passages[0]["title"] == "2024" and passages[0]["document_id"] == "7"
    assert [p["document_id"] for p in passages[1:3]] == ["europe", "europe"]
    for one, two in zip(hs1["passages"], passages, strict=True):
        assert {k: one.get(k) for k in ("id", "text", "title", "document_id")} == {
            k: two.get(k) for k in ("id", "text", "title", "document_id")
        }
    hs2 = _hs2_results(store, tiny_model_dir)
    assert any(q["answers"] for q in hs2["phrase"])
    _assert_same_results(hs1["results"], hs2)


def test_each_layer_serves_the_phrase_index_the_other_built(tiny_model_dir, tmp_path, one_torch_thread):
    # a Haystack 1.x store directory's phrase index, attached to a 2.x store: nothing left to encode
    hs1 = _run_hs1(tmp_path, tiny_model_dir, tmp_path / "hs1-store")
    built_by_hs1 = PhraseIndex.load(hs1["phrase_index"])
    store = _hs2_store()
    store.attach_phrase_index(built_by_hs1)
    assert store.pending_documents() == [] and store.phrase_count() == 6
    _assert_same_results(hs1["results"], _hs2_results(store, tiny_model_dir))
    # a Haystack 2 store's phrase index (the phrase folder of its directory), attached to a 1.x store
    persistent = _hs2_store(tmp_path / "hs2-store")
    persistent.update_phrases(load_phrase_model(str(tiny_model_dir), "cpu"))
    expected = _hs2_results(persistent, tiny_model_dir)
    folder = persistent.phrase_index.path
    persistent.close()
    attached = _run_hs1(tmp_path, tiny_model_dir, tmp_path / "hs1-attached", folder)
    assert attached["passages"] == _live_passages(PhraseIndex.load(folder))
    _assert_same_results(attached["results"], expected)


def test_both_layers_open_one_phrase_index_directory_as_their_store(tiny_model_dir, tmp_path, one_torch_thread):
    """An index built by ``dphr index`` (here: add_passages into an index directory), opened by a 1.x and a 2.x
    ``PhraseDocumentStore.from_index``: the same documents, phrase hits, scores and meta, nothing encoded, the
    directory unchanged."""
    from dphr_haystack.corpus import Passage
    from dphr_haystack.encode.add import add_passages

    model = load_phrase_model(str(tiny_model_dir), "cpu")
    index_dir = tmp_path / "idx"
    passages = [
        Passage(
            id=d["id"],
            text=d["content"],
            title=str(d["meta"].get("title") or ""),
            document_id=str(d["meta"].get("document_id") or ""),
        )
        for d in _documents()
    ]
    add_passages(PhraseIndex.create(model, path=index_dir), model, passages, progress=False)
    files = {f.name: f.read_bytes() for f in index_dir.iterdir() if f.is_file() and f.name != ".dphr.lock"}
    hs1 = _run_hs1(tmp_path, tiny_model_dir, Path("-"), index_dir)
    store = PhraseDocumentStore.from_index(index_dir, progress_bar=False)
    assert store.pending_documents() == [] and store.count_documents() == 6
    assert hs1["passages"] == _live_passages(PhraseIndex.load(index_dir))
    _assert_same_results(hs1["results"], _hs2_results(store, tiny_model_dir))
    assert {f.name: f.read_bytes() for f in index_dir.iterdir() if f.is_file() and f.name != ".dphr.lock"} == files
