"""Does the top answer's *kind* tell a near miss? A context-free answer-kind check, measured (not shipped).

    .venv/bin/python -m benchmarks.quality.answer_kind [--train-questions 20000] [--questions 300]

A near miss (a question about the corpus' own topic that it does not answer) often gets a top answer of the wrong kind
("What colour are the flowers?" → "hoverfly", "What is the annual budget?" → "2,610 metres"). This benchmark asks
whether a check of the answer's kind alone, without its passage, separates them: the question and the answer text
are embedded by the offline all-MiniLM-L6-v2 (mean pooling, frozen), and a small head (an MLP over ``[q, a, q·a]``) is
trained on SQuAD train to tell a question's gold answer from the gold answers of other questions (two of its own
article, one of any: the same topic, another kind). Its score of each top answer is then judged as the answerability
benchmark judges P(the corpus holds an answer): AUROC of the right top answers of SQuAD questions the calibration
never saw (over the corpus they were asked of) against unanswerable questions (their article removed from 5, 50, 500
and 1,702 dev paragraphs, their paragraph removed, their article alone without it, NQ-open and TriviaQA over the dev
paragraphs) and against the user corpus' 48 unanswerable questions. Writes results/answer_kind.json and .png.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import (
    DEFAULT_MODEL,
    ROOT,
    SQUAD_DEV,
    SQUAD_TRAIN,
    finish_result,
    machine,
    phrase_cache,
    pyplot,
    save_figure,
)

NEGATIVES_SAME_ARTICLE = 2  # other answers of the question's own article per question (same topic)
NEGATIVES_ANY = 1  # answers of any question per question
HIDDEN = 128
EPOCHS = 6
MAX_LENGTH = 64  # subwords of a question or an answer embedded


@functools.cache
def _sentence_encoder() -> Any:
    """The offline all-MiniLM-L6-v2 as sentence-transformers loads it (mean pooling, unit length), loaded once and
    reading at most :data:`MAX_LENGTH` subwords."""
    from sentence_transformers import SentenceTransformer

    from dphr_haystack.model.registry import resolve_base

    encoder = SentenceTransformer(resolve_base("minilm"), device="cpu")
    encoder.max_seq_length = MAX_LENGTH
    return encoder


def embed(texts: list[str], batch_size: int = 256):
    """Unit-length mean-pooled all-MiniLM-L6-v2 embeddings of ``texts`` (a torch tensor)."""
    return _sentence_encoder().encode(texts, batch_size=batch_size, convert_to_tensor=True, show_progress_bar=False)


def training_pairs(rows: list[tuple[int, str, str]], seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(question row, answer row, label) triples over ``rows`` of (article, question, answer): each question's
    gold answer (1) and :data:`NEGATIVES_SAME_ARTICLE` + :data:`NEGATIVES_ANY` other answers (0)."""
    rng = np.random.default_rng(seed)
    by_article: dict[int, list[int]] = {}
    for i, (article, _, _) in enumerate(rows):
        by_article.setdefault(article, []).append(i)
    q, a, y = [], [], []
    for i, (article, _, answer) in enumerate(rows):
        q.append(i), a.append(i), y.append(1.0)
        same = by_article[article]
        others = [same[rng.integers(len(same))] for _ in range(NEGATIVES_SAME_ARTICLE)]
        others += [int(rng.integers(len(rows))) for _ in range(NEGATIVES_ANY)]
        for j in others:
            if rows[j][2] != answer:
                q.append(i), a.append(j), y.append(0.0)
    return np.array(q), np.array(a), np.array(y, dtype=np.float32)


def train_head(questions, answers, pairs, seed: int, epochs: int = EPOCHS) -> tuple[Any, float]:
    """The MLP head trained on ``pairs`` for ``epochs`` (the tenth of the questions held out) and its held-out
    AUROC."""
    import torch

    from dphr_haystack.confidence import auroc

    torch.manual_seed(seed)
    q, a, y = pairs
    dim = questions.shape[1]
    head = torch.nn.Sequential(torch.nn.Linear(3 * dim, HIDDEN), torch.nn.GELU(), torch.nn.Linear(HIDDEN, 1))
    held = q % 10 == 0
    train, test = np.flatnonzero(~held), np.flatnonzero(held)
    optimiser = torch.optim.AdamW(head.parameters(), 1e-3, weight_decay=1e-2)
    labels = torch.tensor(y)
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        rng.shuffle(train)
        for b in range(0, len(train), 512):
            rows = train[b : b + 512]
            logits = score(head, questions[q[rows]], answers[a[rows]])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels[rows])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    with torch.no_grad():
        held_out = score(head, questions[q[test]], answers[a[test]]).numpy()
    return head, auroc(held_out, y[test].astype(bool))


def score(head, q, a):
    """The head's answer-kind logit of each (question, answer) embedding pair."""
    import torch

    return head(torch.cat([q, a, q * a], -1)).squeeze(-1)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from benchmarks.answerability_cases import OPEN_SETS, open_questions, user_cases
    from dphr_haystack import PhraseModel
    from dphr_haystack._util.io import read_json
    from dphr_haystack.confidence import Calibration, auroc
    from train.answerability import dev_index, gather
    from train.answerability_cases import Case, all_cases, article_cases, near_miss_cases, squad_questions

    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    rows = [
        (a, qa["question"], qa["answers"][0]["text"])
        for a, article in enumerate(read_json(SQUAD_TRAIN)["data"])
        for p in article["paragraphs"]
        for qa in p["qas"]
    ]
    random.Random(args.seed).shuffle(rows)
    rows = rows[: args.train_questions]
    pairs = training_pairs(rows, args.seed)
    head, held_out = train_head(embed([r[1] for r in rows]), embed([r[2] for r in rows]), pairs, args.seed)
    trained = time.perf_counter() - started

    model = PhraseModel.load(args.model)
    plain = dataclasses.replace(Calibration.from_dict(model.config.calibration), answerability=None)
    held = squad_questions(SQUAD_DEV, slice(8, None))
    questions = random.Random(args.seed).sample(held, min(args.questions, len(held)))
    dev = dev_index(model, phrase_cache(model, ROOT / "benchmarks" / "cache" / "squad-dev"))
    cases = all_cases(dev, questions, args.seed + 1, None)["dev"]
    cases += near_miss_cases(dev, questions, "squad-paragraph-removed-dev")
    cases += article_cases(dev, questions, "squad-article-alone")
    for name in ("nq", "triviaqa"):
        asked = open_questions(OPEN_SETS[name], args.questions, args.seed)
        cases += [Case(q, f"{name}-over-dev", False) for q in asked]
    user_index, asked_of_user = user_cases(model)
    tables = [gather(dev, model, plain, cases), gather(user_index, model, plain, asked_of_user)]
    result: dict[str, Any] = {
        "machine": machine(),
        "model": args.model,
        "train_questions": len(rows),
        "held_out_auroc_gold_vs_other": held_out,
        "train_seconds": trained,
        "sets": {},
    }
    for table in tables:
        with torch.no_grad():
            kind = score(
                head, embed([c.question.question for c in table.cases]), embed([t or "-" for t in table.texts])
            ).numpy()
        corpus = np.array([c.corpus for c in table.cases])
        user = corpus[0].startswith("user-")
        for name in sorted(set(corpus)):
            unanswerable = (corpus == name) & ~table.holds
            if not unanswerable.any():
                continue
            asked_with = np.char.startswith(corpus.astype(str), "user-") if user else corpus == _answerable_of(name)
            right = asked_with & table.correct
            both = right | unanswerable
            result["sets"][name] = {
                "right": int(right.sum()),
                "unanswerable": int(unanswerable.sum()),
                "auroc_right_vs_unanswerable": auroc(kind[both], right[both]),
                "mean_kind_right": float(kind[right].mean()),
                "mean_kind_unanswerable": float(kind[unanswerable].mean()),
            }
    result["seconds"] = time.perf_counter() - started
    return finish_result(args.name, result, _markdown, _plot)


def _answerable_of(name: str) -> str:
    """The corpus whose right answers an unanswerable set is judged against (its questions' own corpus)."""
    if name == "squad-article-alone":
        return name
    return "dev" if name.endswith("-dev") else name


def _markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Answer-kind head: {result['train_questions']:,} SQuAD train questions, held-out AUROC gold vs other answers "
        f"{result['held_out_auroc_gold_vs_other']:.3f}",
        "",
        "| unanswerable set | right / unanswerable | AUROC of the kind score | mean score right / unanswerable |",
        "|---|---|---|---|",
    ]
    for name, s in result["sets"].items():
        lines.append(
            f"| {name} | {s['right']} / {s['unanswerable']} | {s['auroc_right_vs_unanswerable']:.3f} | "
            f"{s['mean_kind_right']:.2f} / {s['mean_kind_unanswerable']:.2f} |"
        )
    return "\n".join(lines)


def _plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    names = list(result["sets"])
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(names) + 1.5))
    ax.barh(names, [result["sets"][n]["auroc_right_vs_unanswerable"] for n in names], color="tab:blue")
    ax.axvline(0.5, color="grey", lw=0.8, ls="--")
    ax.axvline(0.85, color="tab:red", lw=0.8, ls=":")
    ax.set_xlim(0.3, 1.0)
    ax.set_xlabel("AUROC of the answer-kind score alone: right top answers vs unanswerable")
    ax.set_title("dotted: the bar the answerability must reach (0.85)", fontsize=9)
    ax.invert_yaxis()
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--train-questions", type=int, default=20000)
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="answer_kind", help="results/NAME.json and .png (default: %(default)s)")
    args = parser.parse_args()
    for path in (SQUAD_TRAIN, SQUAD_DEV):
        if not path.is_file():
            raise SystemExit(f"{path} not found: this benchmark needs ../shared/data")
    measure(args)


if __name__ == "__main__":
    main()
