"""Fewer vectors per passage: the model's token filter at stricter thresholds, on the SQuAD-open-small phrase index.

    .venv/bin/python -m benchmarks.index.filter_thresholds [--questions 1000] [--targets 24 16 8 6 4] [--state-head]
        [--oracle 4 8]

The index keeps a token when the larger of its start and end filter logits exceeds the model's threshold (0.9 for the
shipped default: ~35 vectors a passage). A stored vector is the phrase encoder's state of its token (float16), the
very input of the filter, so the filter's logits are computed again from the stored vectors, and a stricter threshold
keeps a subset of them: for each target of vectors per passage, the threshold that keeps that many on average, and an
index of the same passages with only those vectors (stored vectors copied, no encoding; the structure the index
picks for its size, as a fresh ``dphr index`` would). Each is searched by the default ``PhraseSearcher`` with the same
int8 query vectors: held-out validation questions (the threshold is chosen on them: the fewest vectors within 1 EM
point of all of them) and unseen SQuAD-open-small questions (reported). Measured per variant: vectors and passages
left without a vector, EM@1 / F1@1 of the phrase answers, passage acc@1 / acc@5, disk bytes of the saved index and
the RSS a fresh process gains by loading it and answering 64 token searches (both per passage; stored vectors are
memory-mapped and count only where read), and the p50 of one phrase search.

``--state-head`` also keeps tokens by a second filter head, side by side: the model's head trained on (started from
its weights, 4 epochs of BCE) the stored states of the SQuAD train paragraphs' tokens, labelled by their questions'
answers (train paragraphs only: the evaluated questions are dev questions), i.e. trained to choose among the tokens
the model's filter kept. ``--factories`` also searches every vector of today's index in other FAISS structures
(product quantization, ``OPQ96,IVF4096,PQ96``: 96 bytes a vector in FAISS as in DensePhrases, the stored vectors
still scoring the spans), side by side.

``--oracle B ...`` also keeps, in each SQuAD paragraph, only whole answers to the questions SQuAD asks of it (their
first and last stored tokens, at most B a paragraph; the validation and unseen questions among them): what a filter
that knew every question could keep, the bound of one that must guess which phrases will be asked about. Every row
reports the share of questions whose answer (first and last token, in the gold passage) the kept vectors still hold.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import (
    DEFAULT_MODEL,
    ROOT,
    SQUAD_DEV,
    SQUAD_TRAIN,
    cached_open_small_phrases,
    finish_result,
    log_x_ticks,
    machine,
    model_id,
    pyplot,
    save_figure,
)
from benchmarks.index_variants import (
    UNSEEN,
    answer_sets,
    filter_scores,
    filtered_index,
    footprint,
    question_sets,
)

WORK = ROOT / "runs" / "filter_thresholds"
EM_BUDGET = 0.01  # the most EM@1 a stricter threshold may lose on the validation questions
ORACLE = "oracle: answers to the paragraph's own questions"


def threshold_for(scores: np.ndarray, kept: int) -> float:
    """The threshold above which ``kept`` of ``scores`` lie (the score of the best one left out)."""
    if kept >= len(scores):
        return float(scores.min()) - 1e-6
    return float(np.sort(scores)[::-1][kept])


def evaluate(index, model, sets: dict[str, tuple[list, np.ndarray, np.ndarray]]) -> dict[str, Any]:
    """EM@1 / F1@1, passage acc@1 / acc@5 per question set, and the p50 of one phrase search (one thread) on the
    first set's questions."""
    out = answer_sets(index, model, sets, latency_set=next(iter(sets)))
    out["p50_ms_search"] = out.pop("latency_ms")["p50_ms"]
    return out


def paragraph_answers(paths: Sequence[Path]) -> dict[str, list[list[tuple[int, int]]]]:
    """Each SQuAD paragraph's questions (by passage id), a question as the character spans of its answers."""
    import gzip

    from dphr_haystack.corpus import squad_paragraphs

    answers: dict[str, list[list[tuple[int, int]]]] = {}
    for path in paths:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            data = json.load(handle)
        for record, paragraph in squad_paragraphs(data):
            answers[record["id"]] = [
                [(a["answer_start"], a["answer_start"] + len(a["text"])) for a in qa["answers"]]
                for qa in paragraph["qas"]
            ]
    return answers


def passage_rows(index) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``index`` grouped by passage: ``rows[bounds[p]:bounds[p + 1]]`` are passage ``p``'s."""
    passage = index.tokens["passage"]
    rows = np.argsort(passage, kind="stable")
    return rows, np.searchsorted(passage[rows], np.arange(index.num_passages + 1))


def boundary_rows(index, rows: np.ndarray, span: tuple[int, int]) -> tuple[int, int] | None:
    """The stored rows (among a passage's ``rows``) holding the first and the last character of ``span``, or None
    where either token is not stored."""
    first, last = index.tokens["char_start"][rows], index.tokens["char_end"][rows]
    starts = rows[(first <= span[0]) & (span[0] < last)]
    ends = rows[(first < span[1]) & (span[1] <= last)]
    return (int(starts[0]), int(ends[-1])) if len(starts) and len(ends) else None


def answer_labels(index) -> tuple[np.ndarray, np.ndarray]:
    """The stored tokens of SQuAD train paragraphs (rows of ``index``) and their (start, end) labels: 1 where the
    token holds the first (last) character of an answer to one of the paragraph's questions."""
    spans = paragraph_answers([SQUAD_TRAIN])
    grouped, bounds = passage_rows(index)
    labels = np.zeros((len(index), 2), dtype=np.float32)
    for p, record in enumerate(index.passages):
        own = grouped[bounds[p] : bounds[p + 1]]
        first, last = index.tokens["char_start"][own], index.tokens["char_end"][own]
        for question in spans.get(record["id"], []):
            for a_start, a_end in question:
                labels[own[(first <= a_start) & (a_start < last)], 0] = 1
                labels[own[(first < a_end) & (a_end <= last)], 1] = 1
    train = np.array([p["id"] in spans for p in index.passages], dtype=bool)
    rows = np.flatnonzero(train[index.tokens["passage"]])
    return rows, labels[rows]


def oracle_keep(
    index, budget: int, answers: dict[str, list[list[tuple[int, int]]]], grouped: tuple[np.ndarray, np.ndarray]
) -> np.ndarray:
    """What a filter that knew every question asked of a SQuAD paragraph would keep within ``budget`` vectors of it:
    the first and last stored tokens of whole answers, the question whose answer adds the fewest new tokens first
    (any of its annotated answers), until the next would pass the budget. Other passages keep nothing. ``answers``:
    :func:`paragraph_answers`; ``grouped``: :func:`passage_rows`."""
    rows, bounds = grouped
    keep = np.zeros(len(index), dtype=bool)
    for p, record in enumerate(index.passages):
        own = rows[bounds[p] : bounds[p + 1]]
        questions = []
        for question in answers.get(record["id"], []):
            options = {frozenset(b) for b in (boundary_rows(index, own, span) for span in question) if b}
            if options:
                questions.append(options)
        keep[sorted(pack_answers(questions, budget))] = True
    return keep


def pack_answers(questions: Sequence[set[frozenset[int]]], budget: int) -> set[int]:
    """Rows answering as many questions as a greedy choice finds within ``budget`` rows: a question is a set of
    options (the rows of one of its answers); the question whose cheapest option adds the fewest new rows is taken
    first (ties: the earlier question), until the next would pass the budget."""
    todo, kept = list(questions), set()
    while todo:
        cost, best = min((min(len(o - kept) for o in q), i) for i, q in enumerate(todo))
        if len(kept) + cost > budget:
            break
        kept |= min(todo.pop(best), key=lambda o: (len(o - kept), sorted(o)))
    return kept


def answers_kept(index, keep: np.ndarray, examples, grouped: tuple[np.ndarray, np.ndarray]) -> float:
    """The share of ``examples`` whose gold passage keeps the first and the last token of an occurrence of one of
    their answers (only then can a search over the kept vectors answer from the gold passage). ``grouped``:
    :func:`passage_rows`."""
    rows, bounds = grouped
    position = {p["id"]: i for i, p in enumerate(index.passages)}
    found = 0
    for ex in examples:
        p = position.get(ex.gold_passage_id)
        if p is None:
            continue
        own, text = rows[bounds[p] : bounds[p + 1]], index.passages[p]["text"]
        spans = [(m, m + len(a)) for a in ex.answers for m in _occurrences(text, a)]
        found += any((b := boundary_rows(index, own, span)) and keep[list(b)].all() for span in spans)
    return found / max(1, len(examples))


def _occurrences(text: str, answer: str) -> list[int]:
    at, out = text.find(answer), []
    while answer and at >= 0:
        out.append(at)
        at = text.find(answer, at + 1)
    return out


def train_state_head(index, model, epochs: int = 4, seed: int = 0):
    """A filter head (the model's shape, started from its weights) trained with BCE on the stored states of the
    SQuAD train paragraphs' tokens (:func:`answer_labels`): the tokens the model's filter kept, so it learns which of
    them to keep at a stricter threshold. Returns the head and its training summary."""
    import torch

    from train.filter import average_precision

    torch.manual_seed(seed)
    rows, labels = answer_labels(index)
    if not len(rows):
        raise SystemExit("--state-head: the index holds no SQuAD train paragraph to learn from")
    states = torch.from_numpy(index.codec.decode(index.storage.vectors.view()[rows]).astype(np.float32))
    targets = torch.from_numpy(labels)
    head = copy.deepcopy(model.filter_linear).train()
    positive = targets.mean(0)
    loss_fn = torch.nn.BCEWithLogitsLoss(pos_weight=(1 - positive) / positive)
    optimizer = torch.optim.AdamW(head.parameters(), lr=3e-4, weight_decay=0.01)
    passage = index.tokens["passage"][rows]
    held = torch.from_numpy(np.isin(passage, np.unique(passage)[::20]))  # every 20th passage is held out

    def held_ap(scorer) -> float:
        with torch.inference_mode():
            scores = scorer(states[held]).max(1).values.numpy()
        return average_precision(scores, (targets[held].max(1).values > 0).numpy())

    before = held_ap(model.filter_linear)
    train_rows = torch.nonzero(~held).squeeze(1)
    for _ in range(epochs):
        for batch in train_rows[torch.randperm(len(train_rows))].split(4096):
            loss = loss_fn(head(states[batch]), targets[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    head.eval()
    summary = {
        "tokens": len(rows),
        "positive_share": positive.tolist(),
        "held_out_passages": int(len(np.unique(passage[held.numpy()]))),
        "average_precision_held_out": {"model's filter": before, "state head": held_ap(head)},
        "epochs": epochs,
    }
    return head, summary


def measure(
    model_name: str,
    questions: int,
    targets: list[float],
    cache: Path | None = None,
    state_head: bool = False,
    factories: Sequence[str] = (),
    oracle: Sequence[int] = (),
) -> dict[str, Any]:
    from dphr_haystack.index.phrase_index import PhraseIndex
    from dphr_haystack.nodes import load_phrase_model

    started = time.perf_counter()
    model = load_phrase_model(model_name, "cpu")
    index = PhraseIndex.load(cached_open_small_phrases(model, cache))
    passages = index.num_passages
    scorers = {"model's filter": filter_scores(index, model)}
    head_summary = None
    if state_head:
        head, head_summary = train_state_head(index, model)
        scorers["state head"] = filter_scores(index, model, head=head)
    sets = question_sets(model, questions)
    variants: list[tuple[str, str | None, float | None, float | None, np.ndarray]] = [
        ("model's filter (today)", None, None, model.config.filter_threshold, np.arange(len(index)))
    ]
    for scorer, scores in scorers.items():
        for target in targets:
            threshold = threshold_for(scores, min(len(index), int(round(target * passages))))
            variants.append((scorer, None, target, threshold, np.flatnonzero(scores > threshold)))
    variants += [(f"all, {f}", f, None, model.config.filter_threshold, np.arange(len(index))) for f in factories]
    grouped = passage_rows(index)
    if oracle:
        answers = paragraph_answers([SQUAD_DEV, SQUAD_TRAIN])
        variants += [(ORACLE, None, b, None, np.flatnonzero(oracle_keep(index, b, answers, grouped))) for b in oracle]
    rows = []
    for scorer, factory, target, threshold, keep in variants:
        variant = (
            index
            if len(keep) == len(index) and factory is None
            else filtered_index(
                index,
                model,
                keep,
                model.config.filter_threshold if threshold is None else threshold,
                factory or "auto",
            )
        )
        reached = np.zeros(passages, dtype=bool)
        reached[index.tokens["passage"][keep]] = True
        kept = np.zeros(len(index), dtype=bool)
        kept[keep] = True
        row = {
            "scorer": scorer,
            "factory": factory,
            "target": target,
            "threshold": threshold,
            "vectors": int(len(keep)),
            "vectors_per_passage": len(keep) / passages,
            "passages_without_vectors": int(passages - reached.sum()),
            "answers_kept": {name: answers_kept(index, kept, s[0], grouped) for name, s in sets.items()},
            "structure": variant.faiss_factory,
            **footprint(variant, WORK / "variant"),
            "results": evaluate(variant, model, sets),
        }
        row["disk_bytes_per_passage"] = row["disk_bytes"] / passages
        row["rss_bytes_per_passage"] = row["rss_bytes"] / passages
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "results"}), json.dumps(row["results"]), flush=True)
    best = rows[0]["results"]["validation"]["em@1"]
    filters = [r for r in rows if not r["factory"] and r["scorer"] != ORACLE]
    within = [r for r in filters if r["results"]["validation"]["em@1"] >= best - EM_BUDGET]
    chosen = min(within, key=lambda r: r["vectors"])
    return {
        "machine": machine(),
        "model": model_name,
        "model_id": model_id(model_name),
        "passages": passages,
        "below_model_threshold": int((scorers["model's filter"] <= model.config.filter_threshold).sum()),
        "questions": {name: len(s[0]) for name, s in sets.items()},
        "em_budget": EM_BUDGET,
        "state_head": head_summary,
        "chosen": {"scorer": chosen["scorer"], "target": chosen["target"], "threshold": chosen["threshold"]},
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"The token filter of `{result['model']}` at stricter thresholds, SQuAD-open-small ({result['passages']:,} "
        f"passages), default searcher, int8 queries, {result['machine']['cpu']}; EM@1 / acc@1 on "
        f"{result['questions']['validation']:,} validation and {result['questions'][UNSEEN]:,} unseen questions "
        f"(chosen on validation: the fewest vectors within {100 * result['em_budget']:.0f} EM point of today):",
        "",
        "| tokens kept by | threshold | vectors / passage | passages without a vector | answers kept val / unseen "
        "| disk B / passage | RSS B / passage | val EM@1 | unseen EM@1 | unseen F1@1 | unseen acc@1 | unseen acc@5 "
        "| search p50 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    chosen = result["chosen"]
    for r in result["rows"]:
        v, u = r["results"]["validation"], r["results"][UNSEEN]
        mark = " (chosen)" if (r["scorer"], r["target"]) == (chosen["scorer"], chosen["target"]) else ""
        if r["scorer"] == ORACLE:
            mark = f" (≤ {r['target']:g} a paragraph)"
        threshold = "–" if r["threshold"] is None else f"{r['threshold']:.2f}"
        kept = r.get("answers_kept")
        kept = f"{100 * kept['validation']:.1f} / {100 * kept[UNSEEN]:.1f}" if kept else "–"
        lines.append(
            f"| {r['scorer']}{mark} | {threshold} | {r['vectors_per_passage']:.1f} | "
            f"{r['passages_without_vectors']:,} | {kept} | {r['disk_bytes_per_passage']:,.0f} | "
            f"{r['rss_bytes_per_passage']:,.0f} | "
            f"{100 * v['em@1']:.2f} | {100 * u['em@1']:.2f} | {100 * u['f1@1']:.2f} | {100 * u['acc@1']:.2f} | "
            f"{100 * u['acc@5']:.2f} | {r['results']['p50_ms_search']:.1f} |"
        )
    head = result.get("state_head")
    if head:
        before, after = head["average_precision_held_out"].values()
        lines += [
            "",
            f"State head: trained on {head['tokens']:,} stored tokens of SQuAD train paragraphs ({head['epochs']} "
            f"epochs); average precision of answer tokens on {head['held_out_passages']:,} held-out paragraphs: "
            f"model's filter {before:.3f}, state head {after:.3f}.",
        ]
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
    today = result["rows"][0]
    for ax, name in zip(axes, ("validation", UNSEEN), strict=True):
        for row in result["rows"]:
            if row.get("factory"):
                ax.scatter([row["vectors_per_passage"]], [100 * row["results"][name]["em@1"]], marker="x", zorder=3)
                ax.annotate(
                    row["factory"], (row["vectors_per_passage"], 100 * row["results"][name]["em@1"]), fontsize=6
                )
        filtered = [r for r in result["rows"][1:] if not r.get("factory")]
        for scorer in dict.fromkeys(r["scorer"] for r in filtered):
            own = [r for r in filtered if r["scorer"] == scorer]
            rows = sorted(own if scorer == ORACLE else [today, *own], key=lambda r: r["vectors_per_passage"])
            x = [r["vectors_per_passage"] for r in rows]
            ax.plot(x, [100 * r["results"][name]["em@1"] for r in rows], marker="o", label=f"EM@1, {scorer}")
            acc = [100 * r["results"][name]["acc@1"] for r in rows]
            ax.plot(x, acc, marker=".", ls="--", label=f"acc@1, {scorer}")
        ax.axvline(8, color="grey", linestyle=":", linewidth=1)
        log_x_ticks(ax, [round(r["vectors_per_passage"]) for r in result["rows"]], "vectors per passage")
        ax.set_title(name, fontsize=9)
    axes[0].set_ylabel("%")
    axes[0].legend(fontsize=6)
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--targets", type=float, nargs="+", default=[24, 16, 12, 10, 8, 6, 4])
    parser.add_argument("--cache", type=Path, default=None, help="another cache root (a rehearsal on a small index)")
    parser.add_argument(
        "--state-head", action="store_true", help="also a filter head trained on the stored states, side by side"
    )
    parser.add_argument(
        "--factories",
        nargs="*",
        default=[],
        help="also every vector of today's index in these FAISS structures (product quantization: OPQ96,IVF4096,PQ96)",
    )
    parser.add_argument(
        "--oracle",
        type=int,
        nargs="*",
        default=[],
        help="also keep only whole answers to each SQuAD paragraph's own questions, within these vectors a paragraph "
        "(what a filter that knew the questions could keep: the bound of any filter that does not)",
    )
    parser.add_argument("--name", default="filter_thresholds", help="the result's name in benchmarks/results")
    args = parser.parse_args()
    result = measure(
        args.model, args.questions, args.targets, args.cache, args.state_head, args.factories, args.oracle
    )
    finish_result(args.name, result, markdown, plot)


if __name__ == "__main__":
    main()
