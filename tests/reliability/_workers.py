"""Writer and reader processes for the multi-process tests: ``python -m tests.reliability._workers ROLE ...``.

Each writer prints one JSON line at the end: the ids it committed and the ids it deleted. Each reader prints the
number of reads it made and the errors it met (none is allowed).
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _passages(writer: int, round_: int, per_round: int) -> list[dict]:
    return [
        {
            "id": f"w{writer}-r{round_}-{k}",
            "title": f"Writer {writer}",
            "text": f"Passage {k} of round {round_} from writer {writer} mentions Paris and the river Seine.",
        }
        for k in range(per_round)
    ]


def index_writer(index_dir: str, model_dir: str, writer: int, rounds: int, per_round: int) -> dict:
    """Add ``rounds`` chunks of passages to one index (a chunk per commit), deleting one passage every 3 rounds."""
    from dphr_haystack import PhraseIndex, PhraseModel
    from dphr_haystack.encode.add import add_passages

    model = PhraseModel.load(model_dir)
    index = PhraseIndex.load(index_dir, model=model, lock_timeout=120)
    added, deleted = [], []
    for round_ in range(rounds):
        batch = _passages(writer, round_, per_round)
        add_passages(index, model, batch, chunk_size=1, duplicates="fail", progress=False)
        added += [p["id"] for p in batch]
        if round_ % 3 == 2:
            index.delete_passages([batch[0]["id"]])
            deleted.append(batch[0]["id"])
    return {"added": added, "deleted": deleted}


def index_reader(index_dir: str, seconds: float) -> dict:
    """Load the index, then search and refresh it in a loop."""
    import numpy as np

    from dphr_haystack import PhraseIndex

    index = PhraseIndex.load(index_dir)
    reads, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        index.refresh()
        if len(index):
            index.search_tokens(np.asarray(index.vectors(slice(0, 1)), dtype=np.float32), 5)
        assert index.num_live_passages == len(index.live_passage_ids())
        PhraseIndex.load(index_dir)  # a fresh load racing the writers' commits
        reads += 1
    return {"reads": reads}


def store_writer(store_dir: str, model_dir: str, writer: int, rounds: int, per_round: int) -> dict:
    """Write documents and encode their phrases in one shared store, deleting one document every 3 rounds."""
    from haystack.schema import Document

    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

    store = PhraseDocumentStore(path=store_dir, progress_bar=False, lock_timeout=120)
    retriever = PhraseRetriever(document_store=store, model=model_dir, device="cpu")
    added, deleted = [], []
    for round_ in range(rounds):
        docs = [Document(content=p["text"], id=p["id"], meta={"writer": writer}) for p in _passages(writer, round_, 2)]
        store.write_documents(docs)
        store.update_embeddings(retriever)
        added += [d.id for d in docs]
        if round_ % 3 == 2:
            store.delete_documents(ids=[docs[0].id])
            deleted.append(docs[0].id)
    return {"added": added, "deleted": deleted}


def store_reader(store_dir: str, model_dir: str, seconds: float) -> dict:
    """Open the shared store and query it (BM25, phrases, counts) in a loop."""
    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

    store = PhraseDocumentStore(path=store_dir, progress_bar=False)
    retriever = PhraseRetriever(document_store=store, model=model_dir, device="cpu")
    reads, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        count = store.get_document_count()
        if count:
            store.query("Paris Seine", top_k=3)
            for doc in retriever.retrieve("Which river?", top_k=3):
                assert doc.content and doc.id.startswith("w"), doc
        reads += 1
    return {"reads": reads}


ROLES = {
    "index-writer": lambda a: index_writer(a[0], a[1], int(a[2]), int(a[3]), int(a[4])),
    "index-reader": lambda a: index_reader(a[0], float(a[1])),
    "store-writer": lambda a: store_writer(a[0], a[1], int(a[2]), int(a[3]), int(a[4])),
    "store-reader": lambda a: store_reader(a[0], a[1], float(a[2])),
}

if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    result = ROLES[sys.argv[1]](sys.argv[2:])
    sys.stdout.write(json.dumps(result) + "\n")
