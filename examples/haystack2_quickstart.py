"""Haystack 2.x/3.x quickstart: index the SQuAD dev paragraphs shipped with the package, ask through YAML pipelines.

    .venv-hs2/bin/python examples/haystack2_quickstart.py               # all 1,702 paragraphs, the default model
    .venv-hs2/bin/python examples/haystack2_quickstart.py --limit 300   # quicker: 300 paragraphs over the 40 articles
    .venv-hs2/bin/python examples/haystack2_quickstart.py --model DIR   # another phrase model directory
    .venv-hs2/bin/python examples/haystack2_quickstart.py --store DIR   # keep the store in DIR (reused next time)

Runs in the Haystack 2 environment (``bash scripts/setup.sh --haystack2``), offline. The corpus is ``squad-dev``
(SQuAD v1.1 dev, public part, CC BY-SA 4.0), shipped inside the package. The script indexes it through
``pipelines/haystack2/indexing.yml``, prints the top answer of a few questions through ``phrase_qa.yml`` and the
``hybrid_rrf.yml`` passages, then scores a fixed sample of questions (200, seed 0) with
``dphr_haystack.haystack2.evaluation`` (the metrics of ``dphr eval``).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from pathlib import Path

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from haystack import Pipeline

from dphr_haystack import DEFAULT_MODEL
from dphr_haystack.evaluation import read_questions
from dphr_haystack.haystack2 import ALLOWED_MODULES, PhraseDocumentStore
from dphr_haystack.haystack2.evaluation import evaluate_pipeline
from dphr_haystack.haystack2.pipelines import corpus_documents

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines" / "haystack2"
CORPUS = "squad-dev"  # the shipped corpus: a name every corpus and question reader of dphr_haystack accepts
MODEL_SELECTION_ARTICLES = 8  # the shipped models were chosen on the first 8 dev articles' questions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="phrase model name or directory")
    parser.add_argument("--store", default=None, help="keep the store in this directory")
    parser.add_argument("--limit", type=int, default=None, help="paragraphs to index (default: all 1,702)")
    parser.add_argument("--questions", type=int, default=200, help="questions to score (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the question sample (default 0)")
    args = parser.parse_args()
    if args.limit is not None and args.limit < 1 or args.questions < 1:
        parser.error("--limit and --questions must be at least 1")
    started = time.perf_counter()

    # The YAML pipelines name the in-memory store "dphr"; a --store directory replaces it in every one of them.
    def load(name: str):
        text = (PIPELINES / f"{name}.yml").read_text()
        text = text.replace(f"model: {DEFAULT_MODEL}", f"model: {args.model}")
        if args.store:
            text = text.replace("index: dphr", "index: null").replace(
                "path: null", f"path: {Path(args.store).resolve()}"
            )
        return Pipeline.loads(text, allowed_modules=ALLOWED_MODULES)  # load_pipeline(file) for an unedited file

    indexing, qa, bm25, hybrid = load("indexing"), load("phrase_qa"), load("bm25"), load("hybrid_rrf")
    store: PhraseDocumentStore = qa.get_component("retriever").document_store  # one store, shared by all four
    all_docs = corpus_documents([CORPUS])  # ids title-article-paragraph, title and document_id in meta
    docs = all_docs
    if args.limit is not None and args.limit < len(all_docs):  # spread over the articles
        docs = [all_docs[i * len(all_docs) // args.limit] for i in range(args.limit)]
    start = time.perf_counter()
    written = indexing.run({"indexer": {"documents": docs}})["indexer"]
    print(
        f"indexed {len(docs)} {CORPUS} paragraphs: {written} in {time.perf_counter() - start:.1f}s; "
        f"store holds {store.count_documents()} documents"
    )

    # Open-domain questions about the indexed paragraphs, outside the articles the model was selected on.
    indexed = {doc.id for doc in docs}
    selection_titles = list(dict.fromkeys(doc.meta["document_id"] for doc in all_docs))[:MODEL_SELECTION_ARTICLES]
    pool = [q for q in read_questions(CORPUS, exclude_titles=selection_titles) if q.gold_passage_id in indexed]
    sample = random.Random(args.seed).sample(pool, min(args.questions, len(pool)))
    for example in sample[:3]:
        answers = qa.run({"retriever": {"query": example.question, "top_k": 3}})["retriever"]["answers"]
        best = answers[0]
        kind = "confidence" if "confidence" in best.meta else "score"
        print(
            f"\nQ: {example.question}  (gold: {example.answers[0]!r})\n"
            f"   phrase QA: {best.data!r} ({kind} {best.score:.2f}, from {best.document.id!r})"
        )
        out = hybrid.run({"bm25": {"query": example.question}, "phrase": {"query": example.question}})
        print("   hybrid RRF passages:", [d.id for d in out["joiner"]["documents"][:3]])

    print(f"\n{len(sample)} questions (seed {args.seed}) over {len(docs)} paragraphs, top 10; accuracies in %\n")
    print("| pipeline | EM@1 | F1@1 | passage acc@1 | passage acc@5 | p50 ms/query |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, pipeline in (("phrase_qa.yml", qa), ("bm25.yml", bm25), ("hybrid_rrf.yml", hybrid)):
        report = evaluate_pipeline(pipeline, sample, top_k=10, system=name, progress=False)
        cells = [
            f"{100 * report.summary[key]:.1f}" if key in report.summary else "–"
            for key in ("phrase_em@1", "phrase_f1@1", "passage_acc@1", "passage_acc@5")
        ]
        p50 = 1000 * statistics.median(r.seconds for r in report.results)
        print(f"| {name} | " + " | ".join(cells) + f" | {p50:.1f} |")
    print(f"\ntotal wall time: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
