"""Haystack 2.x/3.x quickstart: index three paragraphs, ask through the phrase QA and hybrid YAML pipelines.

    .venv-hs2/bin/python examples/haystack2_quickstart.py               # the shipped dphr-minilm-squad model
    .venv-hs2/bin/python examples/haystack2_quickstart.py --model DIR   # another phrase model directory
    .venv-hs2/bin/python examples/haystack2_quickstart.py --store DIR   # keep the store in DIR (reused next time)

Runs in the Haystack 2 environment (``bash scripts/setup.sh --haystack2``), offline.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from haystack import Document, Pipeline

from dphr_haystack import DEFAULT_MODEL
from dphr_haystack.haystack2 import ALLOWED_MODULES, PhraseDocumentStore

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines" / "haystack2"
SAMPLE = [
    (
        "Eiffel Tower",
        "The Eiffel Tower is a wrought-iron lattice tower in Paris. It was designed by the company of "
        "Gustave Eiffel and completed in 1889 for the World's Fair.",
        "When was the Eiffel Tower completed?",
    ),
    (
        "Amazon River",
        "The Amazon River in South America is the largest river by discharge volume of water in the "
        "world. It flows into the Atlantic Ocean.",
        "Which ocean does the Amazon flow into?",
    ),
    (
        "Marie Curie",
        "Marie Curie was a physicist and chemist who conducted pioneering research on radioactivity. "
        "She was the first woman to win a Nobel Prize.",
        "What did Marie Curie research?",
    ),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="phrase model name or directory")
    parser.add_argument("--store", default=None, help="keep the store in this directory")
    args = parser.parse_args()

    # The YAML pipelines name the in-memory store "dphr"; a --store directory replaces it in every one of them.
    def load(name: str):
        text = (PIPELINES / f"{name}.yml").read_text()
        text = text.replace(f"model: {DEFAULT_MODEL}", f"model: {args.model}")
        if args.store:
            text = text.replace("index: dphr", "index: null").replace(
                "path: null", f"path: {Path(args.store).resolve()}"
            )
        return Pipeline.loads(text, allowed_modules=ALLOWED_MODULES)  # load_pipeline(file) for an unedited file

    indexing, qa, hybrid = load("indexing"), load("phrase_qa"), load("hybrid_rrf")
    store: PhraseDocumentStore = qa.get_component("retriever").document_store  # one store, shared by all three
    docs = [Document(id=title, content=text, meta={"title": title}) for title, text, _ in SAMPLE]
    started = time.perf_counter()
    written = indexing.run({"indexer": {"documents": docs}})["indexer"]
    print(
        f"indexed: {written} in {time.perf_counter() - started:.1f}s; store holds {store.count_documents()} documents"
    )

    for _, _, question in SAMPLE:
        answers = qa.run({"retriever": {"query": question, "top_k": 3}})["retriever"]["answers"]
        best = answers[0]
        kind = "confidence" if "confidence" in best.meta else "score"
        print(f"\nQ: {question}\n   phrase QA: {best.data!r} ({kind} {best.score:.3f}, from {best.document.id!r})")
        out = hybrid.run({"bm25": {"query": question}, "phrase": {"query": question}})
        print("   hybrid RRF passages:", [d.id for d in out["joiner"]["documents"][:3]])


if __name__ == "__main__":
    main()
