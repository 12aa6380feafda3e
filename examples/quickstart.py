"""Quickstart: index SQuAD dev paragraphs, ask questions through phrase_qa.yml and a BM25+phrase hybrid.

    .venv/bin/python examples/quickstart.py              # a few hundred paragraphs, ~1-2 minutes on 2 cores
    .venv/bin/python examples/quickstart.py --limit 50   # quicker
    .venv/bin/python examples/quickstart.py --model DIR  # another phrase model directory ('minilm': untrained)

The default phrase model is ``dphr-minilm-squad``, trained from all-MiniLM-L6-v2 on SQuAD and shipped inside the
package (see its MODEL_CARD.md): everything runs offline. It is a small CPU-trained model, so expect some wrong
answers; the hybrid pipeline adds BM25's lexical matching.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SQUAD_DEV = REPO.parent / "shared" / "data" / "squad" / "dev-v1.1-public.json.gz"
UNTRAINED_NOTE = (
    "NOTE: model 'minilm' is an UNTRAINED phrase model (all-MiniLM-L6-v2 copied into the three "
    "encoders), so its phrase answers are not meaningful; the default is the trained dphr-minilm-squad."
)

# Used when ../shared is absent: short paragraphs written for this example, with questions.
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
    (
        "Mount Kilimanjaro",
        "Mount Kilimanjaro is a dormant volcano in Tanzania. Its summit is about 5,895 metres "
        "above sea level, the highest in Africa.",
        "In which country is Kilimanjaro?",
    ),
    (
        "Python",
        "Python is a programming language created by Guido van Rossum and first released in 1991.",
        "Who created Python?",
    ),
]


def load_corpus(limit: int) -> tuple[list[dict], list[str], str]:
    """Paragraphs as Haystack document dicts, some questions, and where they came from."""
    if not SQUAD_DEV.is_file():
        docs = [{"content": text, "id": title, "meta": {"title": title}} for title, text, _ in SAMPLE]
        return docs, [q for _, _, q in SAMPLE], "built-in sample (../shared/data not found)"
    with gzip.open(SQUAD_DEV, "rt", encoding="utf-8") as handle:
        data = json.load(handle)["data"]
    docs, questions = [], []
    for a_idx, article in enumerate(data):
        for p_idx, para in enumerate(article["paragraphs"]):
            if len(docs) == limit:
                break
            docs.append(
                {
                    "content": para["context"],
                    "id": f"{article['title']}-{a_idx}-{p_idx}",
                    "meta": {"title": article["title"].replace("_", " ")},
                }
            )
            questions.append(para["qas"][0]["question"] if para.get("qas") else "")
    step = max(1, len(docs) // 8)
    picked = [q for q in questions[::step] if q]  # spread over the articles
    return docs, picked, f"{SQUAD_DEV} (first {len(docs)} paragraphs)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=300, help="paragraphs to index (default 300)")
    parser.add_argument("--questions", type=int, default=4, help="questions to ask (default 4)")
    parser.add_argument(
        "--model",
        default="dphr-minilm-squad",
        help="phrase model: 'dphr-minilm-squad' (shipped, trained), 'minilm' (untrained) or a directory",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    import torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    from dphr_haystack.nodes import load_pipeline

    if args.model == "minilm":
        print(UNTRAINED_NOTE)
    docs, questions, source = load_corpus(args.limit)
    print(f"corpus: {source}")
    overrides = {"Retriever": {"model": args.model, "top_k": 3}}
    qa = load_pipeline(REPO / "pipelines" / "phrase_qa.yml", overrides=overrides)
    store, retriever = qa.get_document_store(), qa.get_node("Retriever")
    start = time.perf_counter()
    stats = store.index_documents(docs, retriever)
    print(f"indexed {stats.encoded} paragraphs into the phrase index in {time.perf_counter() - start:.1f} s")

    with tempfile.TemporaryDirectory() as tmp:
        store.save(Path(tmp) / "store")  # the hybrid pipeline loads the same documents and phrases
        hybrid = load_pipeline(
            REPO / "pipelines" / "hybrid_answers.yml",
            overrides={
                "DocumentStore": {"load_path": str(Path(tmp) / "store")},
                "Retriever": {"model": args.model},
                "Join": {"top_k_join": 3, "top_k_answers": 3},
            },
        )
    for question in questions[: args.questions]:
        print(f"\nQ: {question}")
        answers = qa.run(query=question)["answers"]
        print("  phrase_qa.yml answers:")
        for answer in answers:
            span = answer.offsets_in_context[0]
            left = answer.context[max(0, span.start - 50) : span.start].replace("\n", " ")
            right = answer.context[span.end : span.end + 50].replace("\n", " ")
            print(
                f"    {answer.score:.3f}  {answer.answer!r}  [{answer.meta.get('title', '')}] "
                f"...{left}[[{answer.answer}]]{right}..."
            )
        out = hybrid.run(query=question)
        print("  hybrid_answers.yml (BM25 + phrase, reciprocal rank fusion) passages:")
        for doc in out["documents"]:
            print(f"    {doc.score:.3f}  [{doc.meta.get('title', '')}] {doc.content[:110]!r}...")
    if args.model == "minilm":
        print("\n" + UNTRAINED_NOTE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
