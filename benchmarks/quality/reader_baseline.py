"""Phrase answers beside the pipeline a Haystack user would otherwise pick: BM25 + an extractive reader.

    .venv/bin/python -m benchmarks.quality.reader_baseline --reader runs/reader-baseline/reader/final
    .venv-hs2/bin/python -m benchmarks.quality.reader_baseline --haystack 2 --reader runs/reader-baseline/reader/final
    .venv/bin/python -m benchmarks.quality.reader_baseline --reader DIR --questions 100 --passages 1 5   # quicker
    .venv/bin/python -m benchmarks.quality.reader_baseline --threads 2 --reader \
        MiniLM=runs/reader-baseline/reader/final MPNet=runs/reader-mpnet/reader/final   # two readers, one run

Corpus: SQuAD-open-small (the 20,598 paragraphs of SQuAD train-rebuilt and dev-public) in one store with the
default model's cached phrase index (``python -m benchmarks.quality.squad_open_small --only phrases`` builds it).
Questions: the dev-public questions ``squad_open_small`` samples (same seed, held-out validation articles
excluded), which neither the phrase model nor a reader trained on SQuAD train has seen.

Systems: phrase answers; BM25's top k passages read by the reader for each k of ``--passages``; and the passages
phrase retrieval ranks first (``unit="passage"``) read by the same reader, for each k of ``--phrase-passages``
(a hybrid: phrase retrieval finds, the reader reads); with several ``--reader LABEL=DIR``, each reader in each
pipeline, its label in the systems' names. Haystack 1.x
(default, ``.venv``): the YAML pipelines ``phrase_qa.yml`` and ``bm25_reader.yml`` (Haystack's ``FARMReader``) on
one PhraseDocumentStore. ``--haystack 2`` (``.venv-hs2``): the 2.x phrase QA pipeline and BM25 +
``TransformersExtractiveReader`` (haystack-ai 3.x's reader, package ``transformers-haystack``) on one Haystack 2
store. Every question goes to every system in turn (round robin, so the machine's drift hits all alike) after one
warm-up query each; torch runs ``--threads`` intra-op threads (default 1, what the phrase retriever uses).
Reported: EM@1 / F1@1 of the top answer, the share of questions whose top answer comes from a passage holding a
gold answer, p50 / p95 ms of one question through the pipeline and the ratio of each p50 to phrase answers', with
the paired difference in EM@1 to phrase answers (its standard error and exact McNemar p). Writes
``results/reader_baseline[_haystack2][_<tag>].json`` and ``.png`` (EM@1 against p50).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import (
    DEFAULT_MODEL,
    SQUAD_DEV,
    SQUAD_TRAIN,
    finish_result,
    machine,
    model_id,
    parse_readers,
    percentiles,
    pyplot,
    save_figure,
    squad_open_small_questions,
    squad_open_small_store,
)
from benchmarks.significance import paired

PHRASE = "Phrase answers"
READER_ANSWERS = 5  # answers the reader returns per question (only the top one is scored)


def reader_system(passages: int, retriever: str = "BM25", reader: str = "reader") -> str:
    """The name of the system whose ``reader`` reads the ``passages`` passages ``retriever`` ranks first."""
    return f"{retriever} top-{passages} + {reader}"


PHRASE_PASSAGES = "Phrase passages"


def round_robin(
    examples: Sequence[Any],
    runs: dict[str, Callable[[str], tuple[Iterable, Iterable]]],
    progress: bool = True,
) -> dict[str, list]:
    """Each question to each system in turn: ``{system: [QuestionResult, ...]}`` in question order.

    ``runs[system](question)`` returns its answers as ``(text, score, document id)`` and its documents as
    ``(id, score, content)``, best first (what :func:`dphr_haystack.evaluation.evaluate.question_result` scores).
    """
    from tqdm import tqdm

    from dphr_haystack.evaluation.evaluate import question_result

    results: dict[str, list] = {name: [] for name in runs}
    for example in tqdm(examples, desc="questions", unit="q", disable=not progress):
        for name, run in runs.items():
            start = time.perf_counter()
            answers, documents = run(example.question)
            seconds = time.perf_counter() - start
            results[name].append(question_result(example, answers, documents, seconds, 1, "squad"))
    return results


def pipeline_run(pipeline, params: dict[str, dict[str, Any]]) -> Callable[[str], tuple[Iterable, Iterable]]:
    """``run(question)`` of a Haystack 1.x pipeline: its answers and documents as :func:`round_robin` takes them."""

    def run(question: str) -> tuple[Iterable, Iterable]:
        output = pipeline.run(query=question, params=params)
        answers = [(a.answer, a.score, (a.document_ids or [None])[0]) for a in output.get("answers") or []]
        documents = [(d.id, d.score, d.content) for d in output.get("documents") or []]
        return answers, documents

    return run


def system_rows(results: dict[str, list], examples: Sequence[Any], texts: dict[str, str]) -> list[dict[str, Any]]:
    """Per system: EM@1, F1@1, top answer from an answer passage (``texts``: passage id → text), latency and the
    EM@1 difference to phrase answers."""
    from dphr_haystack.answers import contains_answer, exact_match, f1_score

    def em_f1(rows: list) -> tuple[np.ndarray, np.ndarray]:
        em = np.array([bool(r.predictions) and exact_match(r.predictions[0]["text"], r.answers) for r in rows], float)
        f1 = np.array([f1_score(r.predictions[0]["text"], r.answers) if r.predictions else 0.0 for r in rows], float)
        return em, f1

    def from_answer_passage(rows: list) -> np.ndarray:
        hits = []
        for example, row in zip(examples, rows, strict=True):
            pid = row.predictions[0].get("passage_id") if row.predictions else None
            hits.append(pid in texts and contains_answer(texts[pid], example.answers))
        return np.array(hits, float)

    reference = em_f1(results[PHRASE])[0] if PHRASE in results else None
    out = []
    for name, rows in results.items():
        em, f1 = em_f1(rows)
        latency = percentiles([1000 * r.seconds for r in rows])
        row = {
            "system": name,
            "questions": len(rows),
            "em@1": float(em.mean()),
            "f1@1": float(f1.mean()),
            "top_answer_passage_acc": float(from_answer_passage(rows).mean()),
            "latency": latency,
        }
        if reference is not None and name != PHRASE:
            row["em@1_vs_phrase"] = paired(reference, em)
        out.append(row)
    phrase_p50 = next((r["latency"]["p50_ms"] for r in out if r["system"] == PHRASE), None)
    for row in out:
        if phrase_p50:
            row["p50_vs_phrase"] = row["latency"]["p50_ms"] / phrase_p50
    return out


def markdown(payload: dict[str, Any]) -> str:
    """One table: accuracy, latency and the ratios, with the corpus, questions and models named."""
    named = payload["reader"] if isinstance(payload["reader"], dict) else {"reader": payload["reader"]}
    readers = "; ".join(f"{label} `{path}`" for label, path in named.items())
    lines = [
        f"Corpus: SQuAD-open-small, {payload['corpus_passages']:,} passages; {payload['questions']} dev-public "
        f"questions (seed {payload['seed']}, held-out validation articles excluded); phrase model "
        f"`{payload['phrase_model']}`; {readers} ({payload['haystack']}, windows of 384 subwords, "
        f"stride 128); "
        f"torch threads {payload['threads']}; {payload['machine'].get('cpu', '')}.",
        "",
        "| system | EM@1 | F1@1 | top answer from an answer passage | p50 ms | p95 ms | p50 / phrase answers "
        "| EM@1 − phrase answers (p) |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in payload["systems"]:
        lat = row["latency"]
        diff = row.get("em@1_vs_phrase")
        versus = f"{100 * diff['diff']:+.1f} ± {100 * diff['se']:.1f} ({diff['mcnemar_p']:.2g})" if diff else ""
        lines.append(
            f"| {row['system']} | {100 * row['em@1']:.1f} | {100 * row['f1@1']:.1f} | "
            f"{100 * row['top_answer_passage_acc']:.1f} | {lat['p50_ms']:.1f} | {lat['p95_ms']:.1f} | "
            f"{row.get('p50_vs_phrase', float('nan')):.2f} | {versus} |"
        )
    return "\n".join(lines)


def plot(payload: dict[str, Any], path: Path) -> None:
    """EM@1 against p50 latency (log scale): the quality / speed trade of each system."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for row in payload["systems"]:
        x, y = row["latency"]["p50_ms"], 100 * row["em@1"]
        color = "tab:red" if row["system"] == PHRASE else "tab:blue"
        ax.scatter([x], [y], s=60, color="tab:purple" if row["system"].startswith(PHRASE_PASSAGES) else color)
        ax.annotate(row["system"], (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("p50 ms per question (log), 2-core CPU")
    ax.set_ylabel("EM@1 (%)")
    ax.set_title(f"SQuAD-open-small, {payload['questions']} unseen questions ({payload['haystack']})", fontsize=10)
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def haystack1_systems(args: argparse.Namespace) -> tuple[dict[str, Callable], dict[str, str], str]:
    """Phrase answers, BM25 + FARMReader (the Haystack 1.x YAML pipelines) and phrase passages + the same reader over
    one store: the runs, the passage texts and the phrase index's name."""
    from haystack import Pipeline

    from dphr_haystack.nodes import load_pipeline

    store, phrase_index = squad_open_small_store(args.model)
    components = {"DocumentStore": store}
    phrase = load_pipeline("phrase_qa.yml", overrides={"Retriever": {"model": args.model}}, components=components)
    runs = {PHRASE: pipeline_run(phrase, {"Retriever": {"top_k": READER_ANSWERS}})}
    passages = load_pipeline(
        "phrase_passages.yml", overrides={"Retriever": {"model": args.model}}, components=components
    )
    for label, path in args.readers.items():
        reader = load_pipeline(
            "bm25_reader.yml", overrides={"Reader": {"model_name_or_path": path}}, components=components
        )
        for k in args.passages:
            params = {"BM25": {"top_k": k}, "Reader": {"top_k": READER_ANSWERS}}
            runs[reader_system(k, reader=label)] = pipeline_run(reader, params)
        hybrid = Pipeline()
        hybrid.add_node(passages.get_node("Retriever"), "Retriever", ["Query"])
        hybrid.add_node(reader.get_node("Reader"), "Reader", ["Retriever"])
        for k in args.phrase_passages:
            params = {"Retriever": {"top_k": k}, "Reader": {"top_k": READER_ANSWERS}}
            runs[reader_system(k, PHRASE_PASSAGES, label)] = pipeline_run(hybrid, params)
    return runs, {d.id: d.content for d in store.get_all_documents()}, phrase_index


def haystack2_reader_pipeline(store, reader: str, retriever=None, name: str = "bm25"):
    """A retriever (default BM25) + ``TransformersExtractiveReader`` (haystack-ai 3.x's reader, package
    ``transformers-haystack``) over a Haystack 2 store: run with ``{name: {"query": q, "top_k": k}, "reader":
    {"query": q}}``."""
    from haystack import Pipeline
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.utils import ComponentDevice
    from haystack_integrations.components.readers.transformers import TransformersExtractiveReader

    pipeline = Pipeline()
    pipeline.add_component(name, retriever or InMemoryBM25Retriever(document_store=store, top_k=5))
    reader_component = TransformersExtractiveReader(
        model=reader, top_k=READER_ANSWERS, no_answer=False, device=ComponentDevice.from_str("cpu")
    )
    pipeline.add_component("reader", reader_component)
    pipeline.connect(f"{name}.documents", "reader.documents")
    pipeline.warm_up()
    return pipeline


def haystack2_run(pipeline, inputs: Callable[[str], dict], answers_from: str, documents_from: str) -> Callable:
    """``run(question)`` of a Haystack 2 pipeline, its answers and documents as :func:`round_robin` takes them."""

    def run(question: str) -> tuple[Iterable, Iterable]:
        output = pipeline.run(inputs(question), include_outputs_from={documents_from})
        answers = [(a.data, a.score, a.document.id if a.document else None) for a in output[answers_from]["answers"]]
        documents = [(d.id, d.score, d.content) for d in output[documents_from].get("documents") or []]
        return [a for a in answers if a[0]], documents

    return run


def haystack2_systems(args: argparse.Namespace) -> tuple[dict[str, Callable], dict[str, str], str]:
    """Phrase answers, BM25 + TransformersExtractiveReader and phrase passages + the same reader over one Haystack 2
    store holding the same passages and the same cached phrase index as the 1.x run."""
    from benchmarks.common import SQUAD_OPEN_SMALL_CACHE, haystack2_phrase_store, phrase_cache
    from dphr_haystack.haystack2 import PhraseRetriever
    from dphr_haystack.haystack2.pipelines import corpus_documents, phrase_qa_pipeline
    from dphr_haystack.model.cache import load_phrase_model

    model = load_phrase_model(args.model)
    phrase_dir = phrase_cache(model, SQUAD_OPEN_SMALL_CACHE)
    docs = corpus_documents([SQUAD_TRAIN, SQUAD_DEV])
    store = haystack2_phrase_store(docs, phrase_dir, model)
    phrase = phrase_qa_pipeline(store, model=args.model, top_k=READER_ANSWERS)
    phrase.warm_up()
    runs = {PHRASE: haystack2_run(phrase, lambda q: {"retriever": {"query": q}}, "retriever", "retriever")}
    for label, path in args.readers.items():
        reader = haystack2_reader_pipeline(store, path)
        for k in args.passages:

            def inputs(question: str, k: int = k) -> dict:
                return {"bm25": {"query": question, "top_k": k}, "reader": {"query": question}}

            runs[reader_system(k, reader=label)] = haystack2_run(reader, inputs, "reader", "bm25")
        # A Haystack 2 component belongs to one pipeline: each reader's hybrid gets its own phrase retriever.
        passages = PhraseRetriever(document_store=store, model=args.model, unit="passage", top_k=5)
        hybrid = haystack2_reader_pipeline(store, path, passages, "retriever")
        for k in args.phrase_passages:

            def hybrid_inputs(question: str, k: int = k) -> dict:
                return {"retriever": {"query": question, "top_k": k}, "reader": {"query": question}}

            runs[reader_system(k, PHRASE_PASSAGES, label)] = haystack2_run(
                hybrid, hybrid_inputs, "reader", "retriever"
            )
    return runs, {d.id: d.content for d in docs}, phrase_dir.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--reader",
        required=True,
        nargs="+",
        help="question-answering model directories (or model ids), each DIR or LABEL=DIR: every reader in every "
        "pipeline, one run",
    )
    parser.add_argument("--model", default=DEFAULT_MODEL, help="phrase model (its SQuAD-open-small index cached)")
    parser.add_argument("--questions", type=int, default=300, help="dev questions sampled (default 300)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--passages", type=int, nargs="+", default=[1, 5, 10], help="BM25 passages the reader reads (default 1 5 10)"
    )
    parser.add_argument(
        "--phrase-passages",
        type=int,
        nargs="*",
        default=[1, 5],
        help="phrase-ranked passages the reader reads, as a third system (default 1 5; none: left out)",
    )
    parser.add_argument(
        "--haystack",
        type=int,
        choices=(1, 2),
        default=1,
        help="1: FARMReader in farm-haystack 1.26 (.venv); 2: TransformersExtractiveReader in haystack-ai 3.x "
        "(.venv-hs2, package transformers-haystack)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--tag", default="", help="write results/reader_baseline[_haystack2]_<tag>.json")
    args = parser.parse_args(argv)
    if not SQUAD_TRAIN.is_file() or not SQUAD_DEV.is_file():
        raise SystemExit("SQuAD train-rebuilt and dev-public are needed (../shared/data/squad)")
    if any(k < 1 for k in [*args.passages, *args.phrase_passages]):
        raise SystemExit("--passages and --phrase-passages take counts >= 1")
    try:
        args.readers = parse_readers(args.reader)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    import torch

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    examples = squad_open_small_questions(args.questions, args.seed)
    runs, texts, phrase_index = (haystack2_systems if args.haystack == 2 else haystack1_systems)(args)
    for run in runs.values():
        run(examples[0].question)  # warm-up: model loading and caches are not query latency
    results = round_robin(examples, runs)
    payload = {
        "benchmark": "phrase answers vs BM25 + extractive reader, SQuAD-open-small",
        "haystack": "farm-haystack 1.26, FARMReader"
        if args.haystack == 1
        else "haystack-ai 3.x, TransformersExtractiveReader",
        "phrase_model": args.model,
        "model_id": model_id(args.model),
        "phrase_index": phrase_index,
        "reader": args.readers,
        "corpus_passages": len(texts),
        "questions": len(examples),
        "seed": args.seed,
        "threads": args.threads,
        "systems": system_rows(results, examples, texts),
        "machine": machine(),
        "seconds": time.perf_counter() - started,
    }
    name = "reader_baseline" + ("_haystack2" if args.haystack == 2 else "") + (f"_{args.tag}" if args.tag else "")
    finish_result(name, payload, markdown, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
