"""Run by tests/haystack2/test_store_database_hs2.py with the Haystack 1.x interpreter (``.venv/bin/python``): a 1.x
``PhraseDocumentStore`` opened on a store directory, its documents and phrase answers printed as JSON.

Usage: ``hs1_open.py MODEL_DIR STORE_DIR QUERIES_JSON [DOCS_JSON]``: with DOCS_JSON the store first gets those
documents and encodes their phrases (a directory made by the 1.x layer), else it only reads what is there.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def main(model_dir: str, store_dir: str, queries_file: str, docs_file: str | None) -> None:
    import torch
    from haystack.schema import Document

    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

    torch.set_num_threads(1)
    with open(queries_file, encoding="utf-8") as handle:
        queries = json.load(handle)
    store = PhraseDocumentStore(path=store_dir, progress_bar=False)
    retriever = PhraseRetriever(document_store=store, model=model_dir, top_k=5, device="cpu")
    retriever.unit = "phrase"
    if docs_file:
        with open(docs_file, encoding="utf-8") as handle:
            docs = [Document(content=d["content"], id=d["id"], meta=d["meta"]) for d in json.load(handle)]
        store.write_documents(docs)
        store.update_embeddings(retriever)
    documents = sorted(
        ({"id": d.id, "content": d.content, "meta": d.meta} for d in store.get_all_documents()), key=lambda d: d["id"]
    )
    answers = []
    for query in queries:
        output, _ = retriever.run_query(query)
        answers.append(
            [{"text": a.answer, "document_id": a.document_ids[0], "score": a.score} for a in output["answers"]]
        )
    json.dump({"documents": documents, "answers": answers}, sys.stdout)


if __name__ == "__main__":
    main(*sys.argv[1:4], sys.argv[4] if len(sys.argv) > 4 else None)
