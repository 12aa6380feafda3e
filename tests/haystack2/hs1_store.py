"""Run by tests/haystack2/test_layer_parity.py with the Haystack 1.x interpreter (``.venv/bin/python``): the 1.x
``PhraseDocumentStore`` and ``PhraseRetriever`` over given documents, their results printed as JSON.

Usage: ``hs1_store.py MODEL_DIR DOCS_JSON QUERIES_JSON STORE_DIR [PHRASE_INDEX_DIR]``: a store in STORE_DIR (a
shared store directory) gets the documents; with PHRASE_INDEX_DIR it attaches that phrase index (built elsewhere,
e.g. by a Haystack 2 store), else it encodes the documents itself. STORE_DIR ``-`` with PHRASE_INDEX_DIR: the store is
opened from the phrase index directory (``PhraseDocumentStore.from_index``), its documents those of the index.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

UNITS = ("phrase", "passage", "document")
ANSWER_META = ("raw_score", "title", "phrase_document_id", "confidence")


def main(model_dir: str, docs_file: str, queries_file: str, store_dir: str, phrase_index_dir: str | None) -> None:
    import torch
    from haystack.schema import Document

    from dphr_haystack.index.phrase_index import PhraseIndex
    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

    torch.set_num_threads(1)
    with open(docs_file, encoding="utf-8") as handle:
        docs = [Document(content=d["content"], id=d["id"], meta=d["meta"]) for d in json.load(handle)]
    with open(queries_file, encoding="utf-8") as handle:
        queries = json.load(handle)
    if store_dir == "-":
        store = PhraseDocumentStore.from_index(phrase_index_dir, progress_bar=False)
        retriever = PhraseRetriever(document_store=store, model=model_dir, top_k=5, device="cpu")
        assert store.update_embeddings(retriever).encoded == 0
    else:
        store = PhraseDocumentStore(path=store_dir, progress_bar=False)
        retriever = PhraseRetriever(document_store=store, model=model_dir, top_k=5, device="cpu")
        store.write_documents(docs)
        if phrase_index_dir:
            store.attach_phrase_index(PhraseIndex.load(phrase_index_dir))
        else:
            store.update_embeddings(retriever)
    phrase_index = store.get_phrase_index()
    out = {
        "phrase_index": str(phrase_index.path),
        "passages": sorted(
            (p for p in phrase_index.passages if p["id"] in set(phrase_index.live_passage_ids())),
            key=lambda p: p["id"],
        ),
        "results": {},
    }
    for unit in UNITS:
        retriever.unit = unit
        per_query = []
        for query in queries:
            output, _ = retriever.run_query(query)
            per_query.append(
                {
                    "documents": [
                        {"id": d.id, "content": d.content, "score": d.score, "meta": d.meta}
                        for d in output["documents"]
                    ],
                    "answers": [
                        {
                            "text": a.answer,
                            "score": a.score,
                            "start": a.offsets_in_document[0].start,
                            "end": a.offsets_in_document[0].end,
                            "document_id": a.document_ids[0],
                            # a 1.x answer also carries its document's own meta (an empty title here); the
                            # phrase adds a title only where there is one, as in 2.x
                            "meta": {key: a.meta[key] for key in ANSWER_META if a.meta.get(key, "") != ""},
                        }
                        for a in output["answers"]
                    ],
                }
            )
        out["results"][unit] = per_query
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(*sys.argv[1:5], sys.argv[5] if len(sys.argv) > 5 else None)
