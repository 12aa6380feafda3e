"""Phrase answers at 200,000 passages: SQuAD-open-small plus 180,000 distractor passages, phrase-indexed as a user
would (``dphr index``, in the background, see ``runs/scale/README.txt``), against SQuAD-open-small alone and against
a dense FAISS Flat retriever over the same 200,598 passages.

    .venv/bin/python -m benchmarks.index.large_corpus --dense-only     # the dense embeddings, resumable (~100 min)
    .venv/bin/python -m benchmarks.index.large_corpus [--questions 600] [--latency-questions 200] [--no-dense] \
        [--verify] [--index DIR --progress LOG] [--small-index DIR [DIR ...]]
    .venv/bin/python -m benchmarks.index.large_corpus --tuning     # search parameters compared (~15 min)
        [--settings 128/16/1.0 ...]     # these (nprobe / refine / scan cap) instead of TUNINGS
    (``--name NAME``: results/NAME.json and .png instead)

- **corpus**: passages, vectors a passage, the FAISS structure and its search parameters, the indexing rate from the
  indexer's one-line-a-minute log (``runs/scale/progress.tsv``: passages committed against wall time while it ran).
- **answers**: EM@1 / F1@1 and passage acc@1 / acc@5 of the default searcher on the held-out validation and the
  unseen SQuAD-open-small questions, over the large index and over SQuAD-open-small's own cached index (20,598
  passages; or the ``--small-index`` ones, e.g. its copy with the large index's key vectors): what the distractors
  cost; the top answer's ECE (beside the ECE a perfectly calibrated confidence shows on as many questions: what
  sampling alone adds) and AUROC right vs wrong (with ``--verify`` also once the verification reader read it). The
  dense retriever's passage acc@1 / acc@5 over the large corpus beside it.
- **corpus words**: what the answerability's ``all_names_in_corpus`` costs at this size: the time to count the words
  of every passage (:mod:`dphr_haystack.corpus_words`, done once, when a store warms up or at the first question with
  names) and the RSS it adds.
- **latency**: p50 / p95 of one question, query encoding included, one thread, round robin (the order rotated
  each question): phrase answers (top 10) over the large index and over SQuAD-open-small, and the dense retriever
  (the offline all-MiniLM-L6-v2 query embedding, ``faiss.IndexFlatIP`` over the 200,598 normalised passage
  embeddings, top 10), with the ratio.

- **tuning** (``--tuning``): for each of :data:`TUNINGS` (nprobe, refine, scan budget) on the large index, the
  recall of the exact top-20 tokens on ``auto``'s probe queries and on the start and end vectors of real questions,
  EM@1 / F1@1 / acc@1 / acc@5 on both question sets, and p50 / p95 of one question beside the dense retriever (round
  robin).

Memory and disk: ``python -m benchmarks.memory.index_footprint --index runs/scale/index-200k`` (a fresh process).
The dense embeddings are cached under ``runs/scale/dense-200k`` in chunks (a finished chunk is never redone).
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from tqdm import tqdm

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import (
    DEFAULT_MODEL,
    ROOT,
    build_dense,
    cached_open_small_phrases,
    finish_result,
    hit_scores,
    load_dense,
    machine,
    model_id,
    percentiles,
    proc_memory,
    pyplot,
    save_figure,
)
from benchmarks.index_variants import UNSEEN, answer_sets, question_sets, use_search_params

SCALE = ROOT / "runs" / "scale"
CORPUS = SCALE / "corpus-200k.jsonl.gz"
INDEX = SCALE / "index-200k"
DENSE = SCALE / "dense-200k"
PROGRESS = SCALE / "progress.tsv"
TOP_K = 10
# Search parameters (nprobe, refine, scan cap) ``--tuning`` compares on the large index; a cap f > 0 stops a query's
# scan at f times what its lists hold on average (auto.scan_budget, FAISS' max_codes).
TUNINGS = (
    (64, 32, 0),
    (128, 16, 0),
    (128, 32, 0),
    (128, 32, 1.0),
    (128, 32, 1.5),
    (128, 32, 2.0),
    (256, 16, 0),
    (256, 32, 0),
)
# Lines of the progress log further apart than this were written by different runs of the indexer.
RUN_GAP_S = 180


def indexing_rate(path: Path) -> dict[str, Any] | None:
    """Passages committed per second of wall time while the indexer ran (consecutive log lines of one run), from
    ``progress.tsv`` (utc, passages, vectors, RSS KiB, index KiB, load average)."""
    if not path.is_file():
        return None
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 6 and not line.startswith("#"):
            stamp = calendar.timegm(time.strptime(parts[0], "%Y-%m-%dT%H:%M:%SZ"))
            rows.append((stamp, int(parts[1]), int(parts[3])))
    seconds = passages = 0.0
    for (t0, p0, _), (t1, p1, _) in zip(rows, rows[1:]):
        if 0 < t1 - t0 <= RUN_GAP_S and p1 >= p0:
            seconds += t1 - t0
            passages += p1 - p0
    return {
        "wall_hours_running": seconds / 3600,
        "passages_logged": int(passages),
        "passages_per_s": passages / seconds if seconds else None,
        "peak_rss_gib": max(r[2] for r in rows) / 2**20 if rows else None,
        "note": "wall time while the niced indexer ran beside other work on the same 2 cores, SIGSTOP pauses and "
        "the structure's rebuilds included",
    }


def corpus_words_cost(index) -> dict[str, float]:
    """Seconds and RSS MiB it takes to count the words of every live passage of ``index`` (its first question)."""
    from dphr_haystack.corpus_words import corpus_words

    before, started = proc_memory()["VmRSS"], time.perf_counter()
    words = corpus_words(index)
    return {
        "seconds": time.perf_counter() - started,
        "rss_mib_added": proc_memory()["VmRSS"] - before,
        "distinct_words": len(words.counts),
    }


def dense_search(embeddings: np.ndarray):
    """Top-10 inner-product search of normalised query embeddings over ``embeddings`` (faiss.IndexFlatIP)."""
    import faiss

    vectors = np.array(embeddings, dtype=np.float32)
    faiss.normalize_L2(vectors)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    return index


def _normalised(queries: np.ndarray) -> np.ndarray:
    import faiss

    out = np.array(queries, dtype=np.float32)
    faiss.normalize_L2(out)
    return out


def dense_hits(index, docs, query_embeddings: np.ndarray) -> list[list]:
    """Each query's top 10 passages as hits that ``hit_scores`` reads (passage id, score, text)."""
    scores, ids = index.search(_normalised(query_embeddings), TOP_K)
    return [
        [SimpleNamespace(passage_id=docs[j].id, score=float(s), text=docs[j].content) for s, j in zip(row_s, row_i)]
        for row_s, row_i in zip(scores, ids)
    ]


def latency(
    examples, phrase: dict[str, Any], model, embedder, dense, count: int, params: dict[str, dict] | None = None
) -> dict[str, Any]:
    """p50 / p95 (ms) of one question end to end, one thread, each question to every retriever in turn, the order
    rotated by one each question (the retriever after the dense scan, which streams its 300 MB through the CPU
    caches, starts cold: always first after it, a phrase search took 5-8 ms more at p50 in a scratch comparison);
    ``params``: the search parameters a phrase searcher's index is given before each of its searches, by name."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    names = [*phrase, *(["dense FAISS Flat"] if dense is not None else [])]
    times: dict[str, list[float]] = {name: [] for name in names}
    try:
        for i, example in enumerate(examples[:count]):
            question = [example.question]
            for name in names[i % len(names) :] + names[: i % len(names)]:
                searcher = phrase.get(name)
                if searcher is not None and params and name in params:
                    use_search_params(searcher.index, params[name])
                started = time.perf_counter()
                if searcher is None:
                    dense.search(_normalised(embedder.embed_queries(question)), TOP_K)
                else:
                    q_start, q_end = model.encode_queries(question, batch_size=1, precision=searcher.query_precision)
                    searcher.search_vectors(q_start, q_end, "phrase", TOP_K, questions=question)
                times[name].append((time.perf_counter() - started) * 1000)
    finally:
        torch.set_num_threads(threads)
    out = {name: percentiles(values) for name, values in times.items()}
    if dense is not None:
        reference = out["dense FAISS Flat"]["p50_ms"]
        for values in out.values():
            values["p50_vs_dense"] = values["p50_ms"] / reference
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from dphr_haystack import PhraseIndex, PhraseSearcher
    from dphr_haystack.nodes import MiniLMEmbeddingRetriever, corpus_documents, load_phrase_model

    started = time.perf_counter()
    docs = corpus_documents([args.corpus])
    model = load_phrase_model(args.model)
    large = PhraseIndex.load(args.index, model=model)
    if large.num_live_passages != len(docs):
        live = large.num_live_passages
        raise SystemExit(f"{args.index} holds {live} of the corpus' {len(docs)} passages: finish indexing it")
    # SQuAD-open-small alone: its cached index, or the ones given (e.g. a copy with key vectors)
    smalls = [PhraseIndex.load(path, model=model) for path in args.small_index or [cached_open_small_phrases(model)]]
    smalls = {_small_name(small): small for small in smalls}
    words = corpus_words_cost(large)
    sets = question_sets(model, args.questions)
    answers = {  # each with the p50 / p95 of its searches from given query vectors ("latency_ms")
        f"{large.num_live_passages:,} passages (with distractors)": answer_sets(
            large, model, sets, UNSEEN, verify=args.verify
        ),
    }
    for name, small in smalls.items():
        answers[f"{small.num_live_passages:,} passages ({name})"] = answer_sets(
            small, model, sets, UNSEEN, verify=args.verify
        )
    embedder = MiniLMEmbeddingRetriever(document_store=None, batch_size=64, progress_bar=False)
    dense = None if args.no_dense else dense_search(load_dense(args.dense, len(docs)))
    for name, (examples, _, _) in sets.items() if dense is not None else ():
        embedded = embedder.embed_queries([e.question for e in examples])
        answers.setdefault("dense FAISS Flat (MiniLM), with distractors", {})[name] = hit_scores(
            examples, None, dense_hits(dense, docs, embedded), 5
        )
    searchers = {
        "phrase answers, with distractors": PhraseSearcher(large, model),
        **{f"phrase answers, {name}": PhraseSearcher(small, model) for name, small in smalls.items()},
    }
    examples = sets[UNSEEN][0]
    return {
        "machine": machine(),
        "model": args.model,
        "model_id": model_id(args.model),
        "corpus": {
            "passages": large.num_live_passages,
            "vectors": large.num_live_vectors,
            "vectors_per_passage": large.num_live_vectors / large.num_live_passages,
            "key_vectors": large.key_vectors,  # FAISS holds this many a passage (None: every vector)
            "searched_vectors": large.num_searched_vectors,
            "faiss_factory": large.manifest.get("faiss_factory"),
            "search_params": large.manifest.get("search_params"),
            "structure": large.manifest.get("structure"),
            "faiss_build": large.manifest.get("faiss_build"),
            "indexing": indexing_rate(args.progress),
            "corpus_words": words,
        },
        "questions": {name: len(s[0]) for name, s in sets.items()},
        "answers": answers,
        "latency_ms": latency(examples, searchers, model, embedder, dense, args.latency_questions),
        "seconds": time.perf_counter() - started,
    }


def _small_name(index) -> str:
    """How the results name a SQuAD-open-small index: by its key vectors, if it has them."""
    keys = index.key_vectors
    return f"SQuAD-open-small, {keys} key vectors a passage" if keys else "SQuAD-open-small"


def measure_tuning(args: argparse.Namespace) -> dict[str, Any]:
    """Each of :data:`TUNINGS` on the large index: the recall of its top-20 tokens against exact search (auto's
    probes, and the start and end vectors of real questions), the answers it gives and its latency beside the dense
    retriever's (one thread, round robin)."""
    from dphr_haystack import PhraseIndex, PhraseSearcher
    from dphr_haystack.index import auto
    from dphr_haystack.index import structures as index_types
    from dphr_haystack.nodes import MiniLMEmbeddingRetriever, corpus_documents, load_phrase_model

    started = time.perf_counter()
    docs = corpus_documents([args.corpus])
    model = load_phrase_model(args.model)
    large = PhraseIndex.load(args.index, model=model)
    stored, decode = large.storage.vectors.view(), large.codec.decode
    probes = auto.probe_queries(stored, decode, auto.PROBE_QUERIES)
    asked = [np.concatenate([s, e]) for _, s, e in question_sets(model, args.recall_questions).values()]
    queries = np.concatenate([probes, *asked]).astype(np.float32)
    truth = auto.exact_top_rows(queries, stored, decode, auto.PROBE_K)
    sets = question_sets(model, args.questions)
    tunings: dict[str, Any] = {}
    nlist = index_types.ivf_of(large.faiss_index).nlist
    for nprobe, refine, cap in tqdm(args.settings or TUNINGS, desc="tunings"):
        max_codes = auto.scan_budget(nprobe, len(stored), nlist, cap) if cap else 0
        found = large.structure.probe_search(queries, auto.PROBE_K, nprobe, refine, max_codes)
        recall = auto.token_recall(truth, found)
        use_search_params(large, {"nprobe": nprobe, "refine": refine, "max_codes": max_codes})
        answers = answer_sets(large, model, sets, UNSEEN, latency_questions=1)
        answers.pop("latency_ms")
        name = f"nprobe {nprobe} / refine {refine}" + (f" / max_codes {max_codes:,} ({cap}x)" if cap else "")
        tunings[name] = {
            "nprobe": nprobe,
            "refine": refine,
            "max_codes": max_codes,
            "probe_recall": float(recall[: len(probes)].mean()),
            "question_recall": float(recall[len(probes) :].mean()),
            "answers": answers,
        }
    searcher = PhraseSearcher(large, model)
    embedder = MiniLMEmbeddingRetriever(document_store=None, batch_size=64, progress_bar=False)
    dense = dense_search(load_dense(args.dense, len(docs)))
    params = {name: {key: t[key] for key in ("nprobe", "refine", "max_codes")} for name, t in tunings.items()}
    times = latency(
        sets[UNSEEN][0], dict.fromkeys(params, searcher), model, embedder, dense, args.latency_questions, params
    )
    for name, values in times.items():
        tunings.setdefault(name, {})["latency_ms"] = values
    return {
        "machine": machine(),
        "model": args.model,
        "model_id": model_id(args.model),
        "vectors": large.num_live_vectors,
        "passages": large.num_live_passages,
        "faiss_factory": large.faiss_factory,
        "auto_target_recall": auto.target_recall(large.faiss_factory),
        "probe_queries": len(probes),
        "recall_question_vectors": len(queries) - len(probes),
        "questions": {name: len(s[0]) for name, s in sets.items()},
        "tunings": tunings,
        "seconds": time.perf_counter() - started,
    }


def _setting(text: str) -> tuple[int, int, float]:
    """``NPROBE/REFINE/CAP`` of ``--settings``."""
    try:
        nprobe, refine, cap = text.split("/")
        return int(nprobe), int(refine), float(cap)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NPROBE/REFINE/CAP, such as 128/16/1.0") from exc


def tuning_markdown(result: dict[str, Any]) -> str:
    lines = [
        f"{result['passages']:,} passages, {result['vectors']:,} vectors in `{result['faiss_factory']}`; recall of "
        f"the exact top-20 tokens on {result['probe_queries']} probes and {result['recall_question_vectors']} "
        f"question vectors; `auto` tunes PQ codes to a probe recall of {result['auto_target_recall']}.",
        "",
        "| search parameters | probe recall | question recall | validation EM@1 / F1@1 / acc@1 / acc@5 "
        "| unseen EM@1 / F1@1 / acc@1 / acc@5 | p50 ms | p95 ms | p50 vs dense |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, t in result["tunings"].items():
        p = t["latency_ms"]
        ratio = f"{p['p50_vs_dense']:.2f}x"
        if "answers" not in t:
            lines.append(f"| {name} | - | - | - | - | {p['p50_ms']:.1f} | {p['p95_ms']:.1f} | {ratio} |")
            continue
        scores = [
            " / ".join(f"{100 * s[k]:.2f}" for k in ("em@1", "f1@1", "acc@1", "acc@5")) for s in t["answers"].values()
        ]
        lines.append(
            f"| {name} | {t['probe_recall']:.3f} | {t['question_recall']:.3f} | {scores[0]} | {scores[1]} "
            f"| {p['p50_ms']:.1f} | {p['p95_ms']:.1f} | {ratio} |"
        )
    return "\n".join(lines)


def tuning_plot(result: dict[str, Any], path: Path) -> None:
    """Question recall and p50 per tuning, the dense retriever's p50 as a line."""
    plt = pyplot()
    tunings = {n: t for n, t in result["tunings"].items() if "answers" in t}
    dense = next(t["latency_ms"]["p50_ms"] for t in result["tunings"].values() if "answers" not in t)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, t in tunings.items():
        ax.scatter(t["latency_ms"]["p50_ms"], 100 * t["question_recall"])
        ax.annotate(name, (t["latency_ms"]["p50_ms"], 100 * t["question_recall"]), fontsize=7)
    ax.axvline(dense, color="grey", linestyle="--", label="dense FAISS Flat p50")
    ax.set_xlabel("p50 ms, one question, query encoding included, one thread")
    ax.set_ylabel("question recall of the exact top-20 tokens (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


def markdown(result: dict[str, Any]) -> str:
    corpus = result["corpus"]
    lines = [
        f"{corpus['passages']:,} passages, {corpus['vectors']:,} phrase vectors "
        f"({corpus['vectors_per_passage']:.1f} a passage)"
        + (f", FAISS holding {keys} key vectors a passage" if (keys := corpus.get("key_vectors")) else "")
        + f" in `{corpus['faiss_factory']}`, search {corpus['search_params']}."
        + (
            f" Counting the words of every passage (`all_names_in_corpus`): {words['seconds']:.1f} s, "
            f"+{words['rss_mib_added']:.0f} MiB RSS, {words['distinct_words']:,} distinct words."
            if (words := corpus.get("corpus_words"))
            else ""
        ),
        "",
        "| corpus | questions | EM@1 | F1@1 | passage acc@1 | acc@5 | confidence ECE [a perfectly calibrated one's on"
        " as many questions] (→ with verify) | AUROC right vs wrong (→ with verify) |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def number(value: float | None, scale: float = 100.0, digits: int = 2) -> str:
        return "-" if value is None else f"{scale * value:.{digits}f}"

    def ece(scores: dict[str, Any]) -> str:
        floor = scores.get("ece_if_calibrated")
        return number(scores.get("ece"), 1, 3) + ("" if floor is None else f" [{floor:.3f}]")

    for where, sets in result["answers"].items():
        for name, s in sets.items():
            if name == "latency_ms":
                continue
            calibration = f"{ece(s)} | {number(s.get('auroc_right_vs_wrong'), 1, 3)}"
            if (checked := s.get("verified")) is not None:  # without -> with verify
                calibration = (
                    f"{ece(s)} → {ece(checked)} | "
                    f"{number(s.get('auroc_right_vs_wrong'), 1, 3)} → {number(checked['auroc_right_vs_wrong'], 1, 3)}"
                )
            lines.append(
                f"| {where} | {name} | {number(s.get('em@1'))} | {number(s.get('f1@1'))} | {number(s['acc@1'])} | "
                f"{number(s['acc@5'])} | {calibration} |"
            )
    lines += ["", "| one question, query encoding included | p50 ms | p95 ms | p50 vs dense |", "|---|---|---|---|"]
    for name, p in result["latency_ms"].items():
        ratio = f"{p['p50_vs_dense']:.2f}x" if "p50_vs_dense" in p else "-"
        lines.append(f"| {name} | {p['p50_ms']:.1f} | {p['p95_ms']:.1f} | {ratio} |")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """Passage acc@1 per corpus and retriever, and p50 / p95 of one question."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    rows = [
        (where, name, s["acc@1"])
        for where, sets in result["answers"].items()
        for name, s in sets.items()
        if name != "latency_ms"
    ]
    left.barh(range(len(rows)), [100 * r[2] for r in rows])
    left.set_yticks(range(len(rows)), [f"{w}\n{n}" for w, n, _ in rows], fontsize=6)
    left.set_xlabel("passage acc@1 (%)")
    names = list(result["latency_ms"])
    for k, key in enumerate(("p50_ms", "p95_ms")):
        right.barh(
            np.arange(len(names)) + 0.4 * k, [result["latency_ms"][n][key] for n in names], height=0.4, label=key
        )
    right.set_yticks(np.arange(len(names)) + 0.2, names, fontsize=7)
    right.set_xlabel("ms, one question, query encoding included, one thread")
    right.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--index", type=Path, default=INDEX)
    parser.add_argument("--dense", type=Path, default=DENSE, help="the dense embeddings' cache")
    parser.add_argument("--progress", type=Path, default=PROGRESS, help="the indexer's progress log")
    parser.add_argument(
        "--small-index",
        type=Path,
        nargs="+",
        help="SQuAD-open-small phrase indexes to compare with (default: the quality benchmarks' cached one)",
    )
    parser.add_argument("--questions", type=int, default=600, help="validation and unseen questions each")
    parser.add_argument("--latency-questions", type=int, default=200)
    parser.add_argument(
        "--verify", action="store_true", help="also the calibration once the verification reader read each top answer"
    )
    parser.add_argument("--dense-only", action="store_true", help="build the dense embeddings and stop")
    parser.add_argument("--no-dense", action="store_true", help="leave the dense retriever out (no embeddings yet)")
    parser.add_argument(
        "--tuning",
        action="store_true",
        help="compare search parameters (nprobe / refine / scan budget) of the large index instead",
    )
    parser.add_argument(
        "--settings",
        nargs="+",
        type=_setting,
        default=None,
        metavar="NPROBE/REFINE/CAP",
        help="with --tuning: these search parameters instead of TUNINGS (CAP: times the lists' average, 0: none)",
    )
    parser.add_argument("--recall-questions", type=int, default=200, help="validation and unseen questions each")
    parser.add_argument("--name", help="results/NAME.json (default: large_corpus, large_corpus_tuning with --tuning)")
    args = parser.parse_args()
    if not args.corpus.is_file():
        raise SystemExit(f"{args.corpus} not found: build it with python -m benchmarks.index.distractor_corpus")
    if args.dense_only:
        from dphr_haystack.nodes import corpus_documents

        print(json.dumps(build_dense(corpus_documents([args.corpus]), args.dense)))
        return
    if args.tuning:
        finish_result(args.name or "large_corpus_tuning", measure_tuning(args), tuning_markdown, tuning_plot)
        return
    finish_result(args.name or "large_corpus", measure(args), markdown, plot)


if __name__ == "__main__":
    main()
