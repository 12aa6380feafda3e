"""Quickstart: index the SQuAD dev paragraphs shipped with the package, answer questions through Haystack pipelines.

    .venv/bin/python examples/quickstart.py               # all 1,702 paragraphs, a few minutes on 2 CPU cores
    .venv/bin/python examples/quickstart.py --limit 300   # quicker: 300 paragraphs spread over the 40 articles
    .venv/bin/python examples/quickstart.py --model DIR   # another phrase model directory ('minilm': untrained)

The corpus is ``squad-dev``, shipped inside the package (SQuAD v1.1 dev, public part: 40 Wikipedia articles,
1,702 paragraphs, 8,763 questions, CC BY-SA 4.0; ``dphr_haystack/shipped_datasets/squad-dev/README.md``), so
everything runs offline with nothing to download. The script

1. writes the paragraphs into a ``PhraseDocumentStore`` and encodes their phrases (``pipelines/phrase_qa.yml``'s
   retriever, progress bar);
2. asks a few questions through ``phrase_qa.yml`` and prints the top answer with its confidence;
3. scores a fixed sample of questions (200, seed 0) through ``phrase_qa.yml`` (phrase answers),
   ``phrase_passages.yml`` (passages ranked by their best phrase), ``bm25.yml`` and ``hybrid_rrf.yml`` (BM25 and
   phrase passages, reciprocal rank fusion) with the project's evaluation code (``dphr_haystack.evaluation``):
   EM@1 and F1@1 of the top answer, passage accuracy@1 and @5 (an answer occurs in the top passages) and the
   median milliseconds per query.

Every pipeline is loaded with ``components={"DocumentStore": store}``: one store and one phrase index serve all
four. The default phrase model is ``dphr-minilm-squad-distilled``, trained from all-MiniLM-L6-v2 on SQuAD train and
shipped inside the package (see its MODEL_CARD.md). Its checkpoint was selected on the questions of the first 8 dev
articles, so the questions here come from the other 32 (the 8 articles' paragraphs stay in the corpus). With all
paragraphs indexed and seed 0 they are the 200 questions of ``benchmarks/quality/squad_open_small.py --questions
200``, asked here of the 1,702 dev paragraphs instead of that benchmark's 20,598 passages.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import sys
import time

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from dphr_haystack.model.registry import DEFAULT_MODEL  # noqa: E402  (after the environment)

CORPUS = "squad-dev"  # the shipped corpus: a name every corpus and question reader of dphr_haystack accepts
MODEL_SELECTION_ARTICLES = 8  # the shipped models were chosen on the first 8 dev articles' questions
UNTRAINED_NOTE = (
    "NOTE: model 'minilm' is an UNTRAINED phrase model (all-MiniLM-L6-v2 copied into the three "
    "encoders), so its phrase answers are not meaningful; the default is the trained " + DEFAULT_MODEL + "."
)
# (row name, pipeline file, node settings for this script)
SYSTEMS = [
    ("phrase answers (phrase_qa.yml)", "phrase_qa.yml", {"Retriever": {}}),
    ("phrase passages (phrase_passages.yml)", "phrase_passages.yml", {"Retriever": {}}),
    ("BM25 (bm25.yml)", "bm25.yml", {}),
    ("BM25 + phrase RRF (hybrid_rrf.yml)", "hybrid_rrf.yml", {"Retriever": {}}),
]


def spread(items: list, limit: int | None) -> list:
    """``limit`` items evenly spaced over ``items`` (all of them when ``limit`` is None or large enough)."""
    if limit is None or limit >= len(items):
        return items
    return [items[i * len(items) // limit] for i in range(limit)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="paragraphs to index (default: all 1,702)")
    parser.add_argument("--questions", type=int, default=200, help="questions to score (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the question sample (default 0)")
    parser.add_argument("--examples", type=int, default=3, help="questions to print answers for (default 3)")
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"phrase model: '{DEFAULT_MODEL}' (shipped, trained; 'dphr-minilm-squad' indexes faster), 'minilm' "
        "(untrained) or a directory",
    )
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1 or args.questions < 1 or args.examples < 0:
        parser.error("--limit and --questions must be at least 1, --examples at least 0")
    started = time.perf_counter()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    import torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    from dphr_haystack.datasets import SQUAD_DEV
    from dphr_haystack.evaluation import evaluate_pipeline, read_questions
    from dphr_haystack.nodes import corpus_documents, load_pipeline

    if args.model == "minilm":
        print(UNTRAINED_NOTE)

    # 1. The corpus: the shipped SQuAD dev paragraphs as Haystack documents (title and document_id in meta).
    all_docs = corpus_documents([CORPUS])
    docs = spread(all_docs, args.limit)
    print(
        f"corpus: {CORPUS}, {len(docs)} of {SQUAD_DEV.passages} paragraphs from {SQUAD_DEV.articles} Wikipedia "
        f"articles ({SQUAD_DEV.citation}; {SQUAD_DEV.licence})"
    )

    # 2. Index: write the documents and encode their phrases with phrase_qa.yml's retriever.
    qa = load_pipeline("phrase_qa.yml", overrides={"Retriever": {"model": args.model, "top_k": 5}})
    store, retriever = qa.get_document_store(), qa.get_node("Retriever")
    start = time.perf_counter()
    stats = store.index_documents(docs, retriever, batch_size=256)
    print(f"indexed {stats.encoded} paragraphs into the phrase index in {time.perf_counter() - start:.1f} s")

    # 3. Questions: open-domain (no gold paragraph given), about the indexed paragraphs, a fixed sample.
    indexed = {doc.id for doc in docs}
    selection_titles = list(dict.fromkeys(doc.meta["document_id"] for doc in all_docs))[:MODEL_SELECTION_ARTICLES]
    pool = [q for q in read_questions(CORPUS, exclude_titles=selection_titles) if q.gold_passage_id in indexed]
    sample = random.Random(args.seed).sample(pool, min(args.questions, len(pool)))
    if not sample:
        print("no question is about the indexed paragraphs: raise --limit")
        return 1

    print("\nAsking phrase_qa.yml (Answer.score is the calibrated confidence that the answer is right):")
    for example in sample[: args.examples]:
        answers = qa.run(query=example.question)["answers"]
        print(f"\nQ: {example.question}\n   gold: {example.answers[0]!r}")
        for answer in answers[:1]:
            span = answer.offsets_in_context[0]
            left = answer.context[max(0, span.start - 60) : span.start].replace("\n", " ")
            right = answer.context[span.end : span.end + 60].replace("\n", " ")
            print(
                f"   top answer: {answer.answer!r}  confidence {answer.score:.2f}  [{answer.meta.get('title', '')}]\n"
                f"   ...{left}[[{answer.answer}]]{right}..."
            )

    # 4. Score every pipeline on the same questions with the project's evaluation code.
    rows = []
    for name, file, settings in SYSTEMS:
        overrides = {node: {**params, "model": args.model} for node, params in settings.items()}
        pipeline = load_pipeline(file, overrides=overrides or None, components={"DocumentStore": store})
        report = evaluate_pipeline(pipeline, sample, top_k=10, system=name)
        p50 = 1000 * statistics.median(r.seconds for r in report.results)
        rows.append((name, report.summary, p50))

    def cell(summary: dict, key: str) -> str:
        return f"{100 * summary[key]:.1f}" if key in summary else "–"

    print(
        f"\n{len(sample)} questions (seed {args.seed}) over {len(docs)} paragraphs, top 10 per query; "
        f"accuracies in %, median time per query on a machine with {os.cpu_count()} CPU cores\n"
    )
    print("| pipeline | EM@1 | F1@1 | passage acc@1 | passage acc@5 | p50 ms/query |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, summary, p50 in rows:
        metrics = [cell(summary, k) for k in ("phrase_em@1", "phrase_f1@1", "passage_acc@1", "passage_acc@5")]
        print(f"| {name} | " + " | ".join(metrics) + f" | {p50:.1f} |")
    if args.model == "minilm":
        print("\n" + UNTRAINED_NOTE)
    print(f"\ntotal wall time: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
