"""PhraseDocumentStore's phrases: encoded on request, gone with deleted or changed documents, persistent."""

from __future__ import annotations

import copy
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from haystack import Document
from haystack.document_stores.types import DuplicatePolicy

from dphr_haystack import DphrError, InvalidParameterError, ModelMismatchError, PhraseModel
from dphr_haystack.encode.add import add_passages
from dphr_haystack.haystack2 import PhraseDocumentStore

pytestmark = pytest.mark.unit


def _phrase_ids(store: PhraseDocumentStore, model, query: str = "capital of France", top_k: int = 50) -> set[str]:
    hits = store.search_phrases(model, [query], unit="passage", top_k=top_k)[0]
    return {doc.id for _, doc in hits}


def test_write_encodes_nothing_until_update_phrases(tiny_model, hs2_docs, one_torch_thread):
    store = PhraseDocumentStore(progress_bar=False)
    assert store.write_documents(hs2_docs) == 6
    assert store.phrase_count() == 0 and len(store.pending_documents()) == 6
    assert store.search_phrases(tiny_model, ["capital"])[0] == []
    assert store.update_phrases(tiny_model) == 6
    assert store.phrase_count() == 6 and store.pending_documents() == []
    assert store.update_phrases(tiny_model) == 0  # nothing left to encode
    assert _phrase_ids(store, tiny_model) == {d.id for d in hs2_docs}


def test_deleted_and_overwritten_documents_leave_the_phrase_results(tiny_model, hs2_docs, one_torch_thread):
    store = PhraseDocumentStore(progress_bar=False)
    store.write_documents(hs2_docs)
    store.update_phrases(tiny_model)
    store.delete_documents(["p0"])
    assert "p0" not in _phrase_ids(store, tiny_model) and store.phrase_count() == 5
    # same text: phrases kept; new text: phrases dropped until encoded again, then they are the new text's
    store.write_documents(
        [Document(id="p1", content=hs2_docs[1].content, meta=hs2_docs[1].meta)], DuplicatePolicy.OVERWRITE
    )
    assert store.phrase_count() == 5
    store.write_documents([Document(id="p2", content="Quokkas live on Rottnest Island.")], DuplicatePolicy.OVERWRITE)
    assert store.phrase_count() == 4 and [d.id for d in store.pending_documents()] == ["p2"]
    store.update_phrases(tiny_model)
    texts = {
        hit.best_phrase.passage_id: doc.content
        for hit, doc in store.search_phrases(tiny_model, ["island"], top_k=10)[0]
    }
    assert texts["p2"] == "Quokkas live on Rottnest Island."
    # a changed title (encoded with the text) drops phrases too; other meta does not
    store.update_by_filter({"field": "meta.topic", "operator": "==", "value": "book"}, {"rating": 5})
    assert store.phrase_count() == 5
    store.update_by_filter({"field": "meta.topic", "operator": "==", "value": "book"}, {"title": "Macbeth"})
    assert store.phrase_count() == 4
    store.delete_by_filter({"field": "meta.topic", "operator": "==", "value": "tech"})
    assert "p5" not in _phrase_ids(store, tiny_model)
    store.delete_all_documents()
    assert store.phrase_count() == 0 and store.search_phrases(tiny_model, ["capital"])[0] == []


def test_filters_restrict_phrase_search(tiny_model, hs2_docs, one_torch_thread):
    store = PhraseDocumentStore(progress_bar=False)
    store.write_documents(hs2_docs)
    store.update_phrases(tiny_model)
    only_nature = {"field": "meta.topic", "operator": "==", "value": "nature"}
    hits = store.search_phrases(tiny_model, ["river"], unit="passage", top_k=10, filters=only_nature)[0]
    assert {doc.id for _, doc in hits} == {"p2", "p4"}


def test_persistent_store_reopens_with_documents_and_phrases(tiny_model, hs2_docs, tmp_path, one_torch_thread):
    path = str(tmp_path / "store")
    store = PhraseDocumentStore(path=path, progress_bar=False)
    store.write_documents(hs2_docs)
    store.update_phrases(tiny_model)
    store.delete_documents(["p3"])
    before = store.search_phrases(tiny_model, ["Who wrote Hamlet?"], unit="phrase", top_k=5)[0]
    with pytest.raises(InvalidParameterError, match="already open"):
        PhraseDocumentStore(path=path)
    data = store.to_dict()
    assert PhraseDocumentStore.from_dict(data) is store  # the live store of that path
    del store
    reopened = PhraseDocumentStore.from_dict(data)
    assert reopened.count_documents() == 5 and reopened.phrase_count() == 5
    after = reopened.search_phrases(tiny_model, ["Who wrote Hamlet?"], unit="phrase", top_k=5)[0]
    assert [(h.text, round(h.score, 4), d.id) for h, d in after] == [
        (h.text, round(h.score, 4), d.id) for h, d in before
    ]
    assert {d.id: d for d in reopened.filter_documents()} == {d.id: d for d in hs2_docs if d.id != "p3"}


def test_reopen_after_a_crash_between_phrase_and_document_commits(tiny_model, hs2_docs, tmp_path, one_torch_thread):
    """Phrases whose document the database lacks (phrase files commit before the database) are left out on open;
    documents without phrases are encoded again."""
    path = tmp_path / "store"
    store = PhraseDocumentStore(path=str(path), progress_bar=False)
    store.write_documents(hs2_docs)
    store.update_phrases(tiny_model)
    store.close()
    raw = sqlite3.connect(path / "store.sqlite3")
    raw.execute("DELETE FROM documents WHERE id = 'p4'")  # as if the process died before the database commit
    raw.commit()
    raw.close()
    reopened = PhraseDocumentStore(path=str(path), progress_bar=False)
    assert reopened.count_documents() == 5 and reopened.phrase_count() == 5
    assert "p4" not in _phrase_ids(reopened, tiny_model)


def test_an_other_model_is_refused(tiny_model, hs2_docs, one_torch_thread):
    store = PhraseDocumentStore(progress_bar=False)
    store.write_documents(hs2_docs)
    store.update_phrases(tiny_model)
    other = copy.deepcopy(tiny_model)
    with torch.no_grad():
        next(other.phrase_encoder.parameters()).add_(0.01)
    with pytest.raises(ModelMismatchError):
        store.search_phrases(other, ["capital"])
    with pytest.raises(ModelMismatchError):
        store.update_phrases(other)


@pytest.mark.parametrize(
    "kwargs",
    [{"phrase_dtype": "float64"}, {"faiss_factory": ""}, {"title_field": 3}, {"path": ""}],
)
def test_bad_parameters_raise_typed_errors(kwargs):
    with pytest.raises(InvalidParameterError) as info:
        PhraseDocumentStore(**kwargs)
    assert isinstance(info.value, DphrError) and isinstance(info.value, ValueError)


def test_documents_without_text_are_stored_but_not_encoded(tiny_model, one_torch_thread):
    store = PhraseDocumentStore(progress_bar=False)
    store.write_documents(
        [Document(id="e", content="   "), Document(id="n", meta={"a": 1}), Document(id="t", content="Text here.")]
    )
    assert store.update_phrases(tiny_model) == 1 and store.count_documents() == 3
    assert store.update_phrases(tiny_model) == 0


_KILLED_RUN = """
import os, sys
from haystack import Document
import dphr_haystack.haystack2.phrase_updates as updates
from dphr_haystack import PhraseModel
from dphr_haystack.haystack2 import PhraseDocumentStore

encode_shard = updates.encode_shard  # encodes one chunk (committed after it returns)
calls = []

def dying_encode_shard(*args):
    calls.append(1)
    if len(calls) == 2:
        os._exit(17)  # killed while encoding the second chunk: after the first chunk's commit
    return encode_shard(*args)

updates.encode_shard = dying_encode_shard
store = PhraseDocumentStore(path=sys.argv[1], progress_bar=False)
store.write_documents([Document(id=f"d{i}", content=f"Document number {i} is about Paris.") for i in range(6)])
store.update_phrases(PhraseModel.load(sys.argv[2]), chunk_size=2)
"""


def test_a_process_killed_while_encoding_reopens_consistent(tiny_model_dir, tmp_path, one_torch_thread):
    path = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _KILLED_RUN, str(path), str(tiny_model_dir)], env=env, timeout=300)
    assert done.returncode == 17
    store = PhraseDocumentStore(path=str(path), progress_bar=False)
    assert store.count_documents() == 6 and store.phrase_count() == 2 and len(store.pending_documents()) == 4
    model = PhraseModel.load(tiny_model_dir)
    assert store.update_phrases(model) == 4 and store.phrase_count() == 6
    assert len(store.search_phrases(model, ["Paris"], unit="passage", top_k=6)[0]) == 6


def _index_built_elsewhere(model, docs, path):
    """A phrase index of ``docs`` built as ``dphr index`` or the 1.x SQuAD-open-small benchmark build theirs."""
    from dphr_haystack import PhraseIndex

    index = PhraseIndex.create(model, path=path, filter_threshold=model.config.filter_threshold)
    records = [{"id": d.id, "text": d.content, "title": d.meta["title"]} for d in docs]
    add_passages(index, model, records, batch_size=4, chunk_size=4, progress=False)
    return index


def _ranking(store, model, query="capital of France"):
    hits = store.search_phrases(model, [query])[0]
    return [(hit.best_phrase.text, round(hit.score, 4), doc.id) for hit, doc in hits]


def test_attach_phrase_index_serves_an_index_built_elsewhere_without_encoding(
    tiny_model, hs2_docs, tmp_path, one_torch_thread, monkeypatch
):
    from dphr_haystack import PhraseIndex

    _index_built_elsewhere(tiny_model, hs2_docs, tmp_path / "built")
    manifest = (tmp_path / "built" / "manifest.json").read_bytes()
    reference = PhraseDocumentStore(progress_bar=False)
    reference.write_documents(hs2_docs)
    reference.update_phrases(tiny_model)

    store = PhraseDocumentStore(progress_bar=False)
    store.write_documents(hs2_docs)
    monkeypatch.setattr(type(tiny_model), "encode_passages", lambda *a, **k: pytest.fail("phrases re-encoded"))
    store.attach_phrase_index(PhraseIndex.load(tmp_path / "built", model=tiny_model))
    assert store.phrase_count() == 6 and store.pending_documents() == []
    assert store.update_phrases(tiny_model) == 0
    assert _ranking(store, tiny_model) == _ranking(reference, tiny_model)
    assert (tmp_path / "built" / "manifest.json").read_bytes() == manifest  # searching wrote nothing there

    # a store with a path keeps its own copy, which it reopens with
    persistent = PhraseDocumentStore(path=str(tmp_path / "store"), progress_bar=False)
    persistent.write_documents(hs2_docs)
    persistent.attach_phrase_index(PhraseIndex.load(tmp_path / "built"))
    persistent.delete_documents(["p0"])
    assert persistent.phrase_count() == 5 and (tmp_path / "built" / "manifest.json").read_bytes() == manifest
    persistent.close()
    reopened = PhraseDocumentStore(path=str(tmp_path / "store"), progress_bar=False)
    assert reopened.phrase_count() == 5 and reopened.pending_documents() == []
    assert _ranking(reopened, tiny_model) == [r for r in _ranking(reference, tiny_model) if r[2] != "p0"][:5]


def test_attach_phrase_index_refuses_an_index_of_other_documents(tiny_model, hs2_docs, tmp_path, one_torch_thread):
    from dphr_haystack import PhraseIndex

    index = _index_built_elsewhere(tiny_model, hs2_docs, tmp_path / "built")
    store = PhraseDocumentStore(progress_bar=False)
    store.write_documents(hs2_docs[1:])
    with pytest.raises(InvalidParameterError, match=r"1 passages of the phrase index .* e\.g\. \['p0'\]"):
        store.attach_phrase_index(index)
    store.write_documents([Document(id="p0", content="Another text.", meta=hs2_docs[0].meta)])
    with pytest.raises(InvalidParameterError, match=r"1 passages .* differ from them .* e\.g\. \['p0'\]"):
        store.attach_phrase_index(index)
    assert store.phrase_index is None
    with pytest.raises(InvalidParameterError, match="expected a PhraseIndex"):
        store.attach_phrase_index(str(tmp_path / "built"))
    # documents the index lacks stay pending (and are encoded into it on request)
    subset = PhraseDocumentStore(progress_bar=False)
    subset.write_documents(hs2_docs)
    subset.attach_phrase_index(_index_built_elsewhere(tiny_model, hs2_docs[:4], None))
    assert [d.id for d in subset.pending_documents()] == ["p4", "p5"]
    assert subset.update_phrases(tiny_model) == 2 and subset.phrase_count() == 6
    assert isinstance(subset.phrase_index, PhraseIndex)


def test_a_reopened_or_opened_store_builds_new_indexes_as_it_was_created(tiny_model, hs2_docs, tmp_path, caplog):
    path = str(tmp_path / "store")
    PhraseDocumentStore(path=path, phrase_key_vectors=2, phrase_dtype="int8").close()  # documents come later
    reopened = PhraseDocumentStore(path=path, progress_bar=False)
    assert (reopened.phrase_key_vectors, reopened.phrase_dtype) == (2, "int8")  # recorded when it was created
    reopened.write_documents(hs2_docs)
    reopened.update_phrases(tiny_model)
    index = reopened.phrase_index
    assert index.key_vectors == 2 and index.codec.dtype == "int8"
    opened = PhraseDocumentStore(phrase_index=str(index.path), progress_bar=False)
    assert (opened.phrase_key_vectors, opened.phrase_dtype) == (2, "int8")  # the index's own
    opened.delete_documents([d.id for d in hs2_docs])
    opened.write_documents(hs2_docs[:2])
    opened.update_phrases(tiny_model)
    assert opened.phrase_index.key_vectors == 2
    reopened.close()
    asking = PhraseDocumentStore(path=path, progress_bar=False, phrase_key_vectors=3)
    asking.write_documents([Document(id="new", content="A new passage about the river Seine.")])
    with caplog.at_level("WARNING"):
        assert asking.update_phrases(tiny_model) == 1
    assert "keeps phrase_key_vectors=2 (the store asks for 3)" in caplog.text
    assert asking.phrase_index.key_vectors == 2


def test_a_store_of_key_vectors_searches_them_and_reopens_with_them(tiny_model, hs2_docs, tmp_path, one_torch_thread):
    path = str(tmp_path / "store")
    store = PhraseDocumentStore(path=path, progress_bar=False, phrase_key_vectors=2)
    assert store.to_dict()["init_parameters"]["phrase_key_vectors"] == 2
    store.write_documents(hs2_docs)
    store.update_phrases(tiny_model)
    index = store.phrase_index
    assert index.key_vectors == 2 and index.num_searched_vectors == 12 < len(index)
    store.delete_documents(["p3"])
    before = store.search_phrases(tiny_model, ["Who wrote Hamlet?"], unit="phrase", top_k=5)[0]
    assert len(before) == 5 and all(d.id != "p3" for _, d in before)
    data = store.to_dict()
    del store, index
    reopened = PhraseDocumentStore.from_dict(data)
    assert reopened.phrase_index.key_vectors == 2 and reopened.phrase_count() == 5
    after = reopened.search_phrases(tiny_model, ["Who wrote Hamlet?"], unit="phrase", top_k=5)[0]
    assert [(h.text, d.id) for h, d in after] == [(h.text, d.id) for h, d in before]
    with pytest.raises(InvalidParameterError, match="key_vectors"):
        PhraseDocumentStore(phrase_key_vectors=0)
