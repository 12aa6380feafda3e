"""Reading-comprehension data: SQuAD-format files → examples → windowed features with gold token positions.

Features use the inference-time input builder of :mod:`dphr_haystack.model.inputs` (same windows, titles and
segment ids). A gold character span maps to context tokens through the tokenizer's offsets, then to
window positions; an answer outside a window gets position 0 ([CLS]), as in DensePhrases.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dphr_haystack._util.io import read_json
from dphr_haystack.answers import normalize_answer
from dphr_haystack.corpus import squad_paragraphs
from dphr_haystack.model.config import PhraseModelConfig
from dphr_haystack.model.inputs import TokenizedPassage, build_windows, pad_batch, tokenize_passages, tokenize_queries
from dphr_haystack.passage_words import SENTENCE_END
from dphr_haystack.question_words import question_words

logger = logging.getLogger(__name__)


@dataclass
class RCExample:
    """A question with its answers and gold passage."""

    qid: str
    question: str
    answers: list[str]
    answer_starts: list[int]
    passage_id: str


@dataclass
class RCData:
    """Passages (``{id, document_id, title, text}``) and the questions asked about them."""

    passages: list[dict[str, Any]]
    examples: list[RCExample]
    passage_index: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.passage_index = {p["id"]: i for i, p in enumerate(self.passages)}


@dataclass
class Feature:
    """One (question, window) training input; ``start``/``end`` are window positions (0 = outside).

    ``context_start`` is the window position of the first context token (after [CLS] and the title); the
    context runs to the window's final [SEP]. ``window`` numbers the window across the whole data (features
    of one window share it), so passage-grouped batches encode each window once for all of its questions.
    """

    example: int
    passage_id: str
    input_ids: list[int]
    token_type_ids: list[int]
    start: int
    end: int
    context_start: int = 1
    window: int = -1


# A small built-in sample so that the smoke recipe runs where ../shared is absent.
BUILTIN_SAMPLE: list[tuple[str, str, list[tuple[str, str]]]] = [
    (
        "Paris",
        "Paris is the capital and most populous city of France. The city hosts the Louvre museum.",
        [("What is the capital of France?", "Paris"), ("Which museum is in Paris?", "the Louvre museum")],
    ),
    (
        "Berlin",
        "Berlin is the capital of Germany. It is known for its art scene and modern landmarks.",
        [("What is the capital of Germany?", "Berlin"), ("What is Berlin known for?", "its art scene")],
    ),
    (
        "Nile",
        "The Nile is a major river in northeastern Africa. It flows into the Mediterranean Sea.",
        [("Where does the Nile flow into?", "the Mediterranean Sea"), ("Where is the Nile?", "northeastern Africa")],
    ),
    (
        "Hamlet",
        "Hamlet is a tragedy written by William Shakespeare sometime between 1599 and 1601.",
        [("Who wrote Hamlet?", "William Shakespeare"), ("What kind of play is Hamlet?", "a tragedy")],
    ),
    (
        "Everest",
        "Mount Everest is Earth's highest mountain above sea level, located in the Himalayas.",
        [("Where is Mount Everest?", "the Himalayas"), ("What is Earth's highest mountain?", "Mount Everest")],
    ),
    (
        "Python",
        "Python is a programming language created by Guido van Rossum and first released in 1991.",
        [("Who created Python?", "Guido van Rossum"), ("When was Python first released?", "1991")],
    ),
    (
        "Amazon",
        "The Amazon rainforest covers much of the Amazon basin of South America, about 5.5 million km2.",
        [("How large is the Amazon rainforest?", "5.5 million km2"), ("Where is the Amazon basin?", "South America")],
    ),
    (
        "Moon",
        "The Moon is Earth's only natural satellite. It orbits the Earth at an average distance of 384,400 km.",
        [("What is Earth's only natural satellite?", "The Moon"), ("How far is the Moon?", "384,400 km")],
    ),
]


def builtin_squad() -> dict[str, Any]:
    """The built-in sample as a SQuAD-format dict."""
    data = []
    for title, context, qas in BUILTIN_SAMPLE:
        items = [
            {"id": f"{title}-{i}", "question": q, "answers": [{"text": a, "answer_start": context.index(a)}]}
            for i, (q, a) in enumerate(qas)
        ]
        data.append({"title": title, "paragraphs": [{"context": context, "qas": items}]})
    return {"version": "builtin", "data": data}


def load_squad(
    source: str | Path | dict[str, Any],
    max_paragraphs: int | None = None,
    max_questions: int | None = None,
    skip_paragraphs: int = 0,
) -> RCData:
    """SQuAD v1.1-format data → passages and examples.

    Passage ids follow :func:`dphr_haystack.corpus.read_corpus` (``title-article-paragraph``), so an index
    built from the same file has the same ids. ``skip_paragraphs``/``max_paragraphs`` select a run of
    paragraphs in file order; ``max_questions`` keeps that many evenly spaced examples. ``source`` ``"builtin"``
    is the sample.
    """
    data = builtin_squad() if source == "builtin" else source if isinstance(source, dict) else read_json(source)
    passages: list[dict[str, Any]] = []
    examples: list[RCExample] = []
    for seen, (passage, para) in enumerate(
        squad_paragraphs(data, str(source) if isinstance(source, Path) else "<data>")
    ):
        if seen < skip_paragraphs:
            continue
        if max_paragraphs is not None and len(passages) >= max_paragraphs:
            break
        passages.append(passage)
        pid = passage["id"]
        for qa in para.get("qas", []):
            answers = [a for a in qa.get("answers", []) if a.get("text")]
            if not answers:
                continue
            examples.append(
                RCExample(
                    str(qa.get("id", f"{pid}-{len(examples)}")),
                    qa["question"],
                    [a["text"] for a in answers],
                    [int(a["answer_start"]) for a in answers],
                    pid,
                )
            )
    if max_questions is not None and len(examples) > max_questions:
        # Evenly spaced, so a capped question set still covers many passages (C0 stays representative).
        picks = np.linspace(0, len(examples) - 1, max_questions).round().astype(int)
        examples = [examples[i] for i in sorted(set(picks.tolist()))]
    return RCData(passages, examples)


# ----------------------------------------------------------------------------- features
class PassageWindows:
    """Tokenised passages and their windows, built once with the inference-time input builder."""

    def __init__(self, tokenizer, config: PhraseModelConfig, passages: Sequence[dict[str, Any]]) -> None:
        self.ids = [p["id"] for p in passages]
        self.row = {pid: i for i, pid in enumerate(self.ids)}
        self.tokenized: list[TokenizedPassage] = tokenize_passages(
            tokenizer, [p["text"] for p in passages], [p.get("title", "") for p in passages], config
        )
        self.windows: list[list[tuple[int, list[int], list[int], int]]] = [[] for _ in passages]
        self.offsets: list[int] = []  # global number of each passage's first window
        for window in build_windows(tokenizer, self.tokenized, config):
            if len(window.owned_context) == 0:
                continue
            self.windows[window.passage].append(
                (window.context_first, window.input_ids, window.token_type_ids, window.context_start)
            )
        total = 0
        for passage_windows in self.windows:
            self.offsets.append(total)
            total += len(passage_windows)

    def first_window(self, passage_id: str) -> tuple[list[int], list[int]]:
        """input_ids and token_type_ids of a passage's first window."""
        _, ids, types, _ = self.windows[self.row[passage_id]][0]
        return ids, types


def char_span_to_tokens(offsets: np.ndarray, start: int, end: int) -> tuple[int, int] | None:
    """Context token indices (first, last) covering characters [start, end), or None."""
    if len(offsets) == 0:
        return None
    first = np.nonzero(offsets[:, 1] > start)[0]
    last = np.nonzero(offsets[:, 0] < end)[0]
    if len(first) == 0 or len(last) == 0 or last[-1] < first[0]:
        return None
    return int(first[0]), int(last[-1])


def build_features(data: RCData, windows: PassageWindows, keep_unanswered_windows: bool = True) -> list[Feature]:
    """One feature per (example, window of its gold passage); gold positions are 0 outside the window."""
    features: list[Feature] = []
    skipped = 0
    for e_idx, ex in enumerate(data.examples):
        row = windows.row.get(ex.passage_id)
        if row is None:
            skipped += 1
            continue
        tp = windows.tokenized[row]
        span = char_span_to_tokens(tp.char_offsets, ex.answer_starts[0], ex.answer_starts[0] + len(ex.answers[0]))
        if span is None:
            skipped += 1
            continue
        for w_idx, (first, ids, types, prefix) in enumerate(windows.windows[row]):
            n_context = len(ids) - prefix - 1
            inside = first <= span[0] and span[1] < first + n_context
            if not inside and not keep_unanswered_windows:
                continue
            start = prefix + span[0] - first if inside else 0
            end = prefix + span[1] - first if inside else 0
            features.append(
                Feature(e_idx, ex.passage_id, ids, types, start, end, prefix, windows.offsets[row] + w_idx)
            )
    if skipped:
        logger.warning("skipped %d examples whose answer span could not be located", skipped)
    return features


def near_miss_passages(data: RCData, per_question: float, seed: int = 0) -> list[tuple[int, str]]:
    """(example, passage id) pairs for ``per_question`` near misses a question on average: passages of the question's
    own article (same ``document_id``) that hold none of its answers, the ones sharing most of its words first (its
    names count twice). A reader trained to answer them with [CLS] learns to say that a passage speaks of the
    question's topic without stating the fact asked. A fractional ``per_question`` draws which questions get one
    more (seeded)."""
    if per_question <= 0:
        return []
    by_article: dict[str, list[int]] = {}
    for row, passage in enumerate(data.passages):
        by_article.setdefault(passage.get("document_id") or passage["id"], []).append(row)
    texts = [normalize_answer(p["text"]) for p in data.passages]
    words = [set(text.split()) for text in texts]
    rng = np.random.default_rng(seed)
    whole, extra = int(per_question), per_question - int(per_question)
    pairs: list[tuple[int, str]] = []
    for e_idx, ex in enumerate(data.examples):
        own = data.passage_index.get(ex.passage_id)
        if own is None:
            continue
        wanted = whole + int(rng.random() < extra)
        if wanted == 0:
            continue
        article = data.passages[own].get("document_id") or ex.passage_id
        answers = [normalize_answer(a) for a in ex.answers if normalize_answer(a)]
        asked = question_words(ex.question)
        rows = [r for r in by_article[article] if r != own and not any(a in texts[r] for a in answers)]
        shared = {r: len(set(asked) & words[r]) + len(set(asked.names) & words[r]) for r in rows}
        for r in sorted(rows, key=lambda r: (-shared[r], r))[:wanted]:
            pairs.append((e_idx, data.passages[r]["id"]))
    return pairs


# Sentences an answer-removed passage keeps at least: fewer leave too little of the topic to be a near miss.
MIN_KEPT_SENTENCES = 2


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """The character spans of ``text``'s sentences, split where :data:`~dphr_haystack.passage_words.SENTENCE_END`
    marks one end (the rule the answer features read), each with its closing mark and without the space after."""
    spans, start = [], 0
    for mark in SENTENCE_END.finditer(text):
        spans.append((start, mark.start() + 1))
        start = mark.end()
    if text[start:].strip():
        spans.append((start, len(text)))
    return spans


def answer_removed_passages(data: RCData, share: float, seed: int = 0) -> tuple[RCData, list[tuple[int, str]]]:
    """``data`` with, for ``share`` of its questions (drawn, seeded), the question's own passage less every
    sentence that holds one of its answers added as a passage of its own, and the (example, passage id) pairs that
    ask the question of it. The hardest near miss: the passage keeps the question's topic, its names and the
    sentences around the fact, but no longer states it ("When was version 3.0 released?" over a release history
    without 3.0's line). Each such passage is a document of its own, so no other question's near misses pick it; a
    question gets none where fewer than :data:`MIN_KEPT_SENTENCES` sentences stay or an answer is still written."""
    if share <= 0:
        return data, []
    rng = np.random.default_rng(seed)
    added: list[dict[str, Any]] = []
    pairs: list[tuple[int, str]] = []
    for e_idx, ex in enumerate(data.examples):
        own = data.passage_index.get(ex.passage_id)
        if rng.random() >= share or own is None:
            continue
        passage = data.passages[own]
        answered = [(s, s + len(a)) for a, s in zip(ex.answers, ex.answer_starts, strict=False) if a and s >= 0]
        kept = [
            passage["text"][a:b]
            for a, b in sentence_spans(passage["text"])
            if not any(a < end and start < b for start, end in answered)
        ]
        text = " ".join(kept)
        written = normalize_answer(text)
        if len(kept) < MIN_KEPT_SENTENCES or any(n and n in written for n in map(normalize_answer, ex.answers)):
            continue
        pid = f"{ex.passage_id}#without-{ex.qid}"
        added.append({**passage, "id": pid, "document_id": pid, "text": text})
        pairs.append((e_idx, pid))
    if not added:
        return data, []
    return RCData(data.passages + added, data.examples), pairs


# A name as a question writes it: a capitalised word and the capitalised words or numbers after it ("Lake Tessin",
# "Super Bowl 50"; "Duke Anselm of Harrowgate" as two), a possessive left out.
_NAME_RUN = re.compile(r"[A-Z][\w.-]*(?:\s[A-Z0-9][\w.-]*)*")


def _name_runs(question: str) -> list[str]:
    """The runs of capitalised words of ``question`` after its first word (the names it asks about)."""
    first = question.split(" ", 1)
    offset = len(first[0]) if len(first) == 2 else len(question)
    return [m.group().rstrip(".") for m in _NAME_RUN.finditer(question, offset)]


def swapped_name_examples(data: RCData, per_question: float, seed: int = 0) -> list[RCExample]:
    """Questions asked of another entity: for ``per_question`` of the questions (drawn, seeded), one of its names
    that its passage writes replaced by a name of a question of another article that the passage does not hold
    ("When did Velmora get its charter?" → "When did Port Calder get its charter?"). Asked of the question's own
    passage, such a question has no answer there: the passage speaks of someone else."""
    if per_question <= 0:
        return []
    rng = np.random.default_rng(seed)
    article = {p["id"]: p.get("document_id") or p["id"] for p in data.passages}
    names = [(article.get(ex.passage_id), run) for ex in data.examples for run in _name_runs(ex.question)]
    if not names:
        return []
    out: list[RCExample] = []
    for ex in data.examples:
        if rng.random() >= per_question or ex.passage_id not in data.passage_index:
            continue
        text = data.passages[data.passage_index[ex.passage_id]]["text"]
        held = [run for run in _name_runs(ex.question) if run in text]
        if not held:
            continue
        for _ in range(8):  # a few draws for a name of another article that the passage does not write
            other_article, other = names[int(rng.integers(len(names)))]
            if other_article != article[ex.passage_id] and other not in text and other not in held:
                question = ex.question.replace(held[int(rng.integers(len(held)))], other, 1)
                out.append(RCExample(f"{ex.qid}-swapped", question, ex.answers, ex.answer_starts, ex.passage_id))
                break
    return out


def near_miss_features(pairs: Sequence[tuple[int, str]], windows: PassageWindows) -> list[Feature]:
    """One feature per (example, window of a passage that does not answer it), its gold positions 0 ([CLS]: no
    answer here)."""
    features = []
    for e_idx, pid in pairs:
        row = windows.row[pid]
        for w_idx, (_, ids, types, prefix) in enumerate(windows.windows[row]):
            features.append(Feature(e_idx, pid, ids, types, 0, 0, prefix, windows.offsets[row] + w_idx))
    return features


def unanswerable_features(
    data: RCData, windows: PassageWindows, near_misses: float, swapped_names: float, seed: int = 0
) -> tuple[RCData, list[Feature], list[Feature]]:
    """``data`` with its :func:`swapped_name_examples` added, and the features that teach a reader to answer [CLS]:
    the windows of :func:`near_miss_passages` and each swapped-name question's own passage."""
    near = near_miss_features(near_miss_passages(data, near_misses, seed), windows)
    swapped = swapped_name_examples(data, swapped_names, seed)
    if not swapped:
        return data, near, []
    first = len(data.examples)
    data = RCData(data.passages, data.examples + swapped)
    return data, near, near_miss_features([(first + i, ex.passage_id) for i, ex in enumerate(swapped)], windows)


def _pad(
    ids: Sequence[list[int]], types: Sequence[list[int]], pad_id: int, pad_to: int | None
) -> dict[str, torch.Tensor]:
    """pad_batch, optionally to a fixed width ``pad_to`` (e.g. to all-gather states across DDP ranks)."""
    if pad_to is None:
        return pad_batch(ids, types, pad_id)
    padded = pad_batch([*ids, [pad_id] * pad_to], [*types, [0] * pad_to], pad_id)
    return {k: v[:-1] for k, v in padded.items()}


def collate(
    features: Sequence[Feature],
    questions: Sequence[str],
    tokenizer,
    config: PhraseModelConfig,
    hard: Sequence[tuple[list[int], list[int]]] = (),
    pad_to: int | None = None,
    group_windows: bool = False,
) -> dict[str, Any]:
    """Tensors for a batch: passages ``p_*``, queries ``q_*``, gold positions, optional hard passages ``h_*``.

    By default row i of ``p_*`` is feature i's window. With ``group_windows`` each distinct window
    (``Feature.window``) is a row once, in order of first appearance, and ``own_index`` (B,) gives the
    row of each question's window: a passage with five questions is encoded once, not five times.
    """
    pad_id = tokenizer.pad_token_id or 0
    if group_windows:
        rows: dict[int, int] = {}
        window_feats = []
        for f in features:
            if f.window not in rows:
                rows[f.window] = len(rows)
                window_feats.append(f)
        own_index = torch.tensor([rows[f.window] for f in features], dtype=torch.long)
    else:
        window_feats = list(features)
        own_index = None
    p = _pad([f.input_ids for f in window_feats], [f.token_type_ids for f in window_feats], pad_id, pad_to)
    q = tokenize_queries(tokenizer, list(questions), config)
    batch: dict[str, Any] = {
        **{f"p_{k}": v for k, v in p.items()},
        **{f"q_{k}": v for k, v in q.items()},
        "start_positions": torch.tensor([f.start for f in features], dtype=torch.long),
        "end_positions": torch.tensor([f.end for f in features], dtype=torch.long),
        "p_context_start": torch.tensor([f.context_start for f in window_feats], dtype=torch.long),
        "passage_ids": [f.passage_id for f in window_feats],
    }
    if own_index is not None:
        batch["own_index"] = own_index
    if hard:
        h = _pad([x[0] for x in hard], [x[1] for x in hard], pad_id, pad_to)
        batch.update({f"h_{k}": v for k, v in h.items()})
    return batch


def per_question(batch: dict[str, Any]) -> dict[str, Any]:
    """A window-grouped batch with each question's window repeated in its row (what per-question code reads)."""
    if "own_index" not in batch:
        return batch
    own = batch["own_index"]
    out = {k: v for k, v in batch.items() if k != "own_index"}
    for key in ("p_input_ids", "p_attention_mask", "p_token_type_ids", "p_context_start"):
        out[key] = batch[key][own]
    out["passage_ids"] = [batch["passage_ids"][i] for i in own.tolist()]
    return out
