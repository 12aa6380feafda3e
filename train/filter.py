"""Token-filter training on a frozen encoder (Kim et al. 2022 App. A): BCE, AUC-PR, threshold sweep and choice."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dphr_haystack.index.codec import VectorCodec
from dphr_haystack.index.phrase_index import PhraseIndex
from dphr_haystack.index.shards import TOKEN_DTYPE, PhraseShard
from dphr_haystack.model.config import CONFIG_FILE, PhraseModelConfig
from dphr_haystack.model.phrase_model import PhraseModel

from .data import Feature, RCData, collate
from .losses import FilterLoss
from .tasks import epoch_order
from .validation import evaluate_index

logger = logging.getLogger(__name__)


LABELS = ("window", "question")


def answerable_windows(features: Sequence[Feature]) -> list[list[Feature]]:
    """The answerable features grouped by window (``Feature.window``), in order of first appearance."""
    groups: dict[int, list[Feature]] = {}
    for number, f in enumerate(features):
        if f.start > 0:
            groups.setdefault(f.window if f.window >= 0 else -1 - number, []).append(f)
    return list(groups.values())


def filter_units(features: Sequence[Feature], labels: str) -> list[list[Feature]]:
    """What one row of a filter batch holds: an answerable window with all of its questions (``window``), or one
    answerable (question, window) feature (``question``)."""
    if labels not in LABELS:
        raise ValueError(f"filter labels {labels!r}; valid: {', '.join(LABELS)}")
    groups = answerable_windows(features)  # the loss uses answerable windows only
    return groups if labels == "window" else [[f] for group in groups for f in group]


def window_targets(batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """(W, L) 0/1 start and end targets of a window-grouped batch: every answer of every question of a window."""
    n_rows, width = batch["p_input_ids"].shape
    targets = []
    for positions in (batch["start_positions"], batch["end_positions"]):
        target = torch.zeros(n_rows, width, dtype=torch.bool)
        answered = positions > 0
        target[batch["own_index"][answered], positions[answered]] = True
        targets.append(target)
    return targets[0], targets[1]


class FilterTask:
    """Trains ``filter_linear`` only: the phrase encoder runs in eval mode without gradients.

    ``labels`` ``window`` (default): a batch is ``batch_size`` answerable windows, each encoded once, whose
    targets are the starts and ends of all of their questions' answers (the filter does not see the question,
    so the answer to one question is no negative for another). ``question``: a batch is ``batch_size``
    (question, window) features, each with its own answer as the only positive (the recipe before window
    targets).
    """

    def __init__(
        self,
        model: PhraseModel,
        data: RCData,
        features: Sequence[Feature],
        pos_weight: float | None = None,
        labels: str = "window",
    ) -> None:
        self.units = filter_units(features, labels)
        self.tokenizer, self.config = model.tokenizer, model.config
        self.data = data
        self.labels = labels
        self.loss = FilterLoss(pos_weight)

    def num_batches(self, batch_size: int, world_size: int) -> int:
        return max(1, len(self.units) // (batch_size * world_size))

    def batches(self, epoch: int, batch_size: int, rank: int, world_size: int, seed: int) -> Iterator[dict[str, Any]]:
        order = epoch_order(len(self.units), epoch, seed)[rank::world_size]
        for b in range(self.num_batches(batch_size, world_size)):
            feats = [f for i in order[b * batch_size : (b + 1) * batch_size] for f in self.units[i]]
            if feats:
                questions = [self.data.examples[f.example].question for f in feats]
                batch = collate(feats, questions, self.tokenizer, self.config, group_windows=self.labels == "window")
                if self.labels == "window":
                    batch["start_positions"], batch["end_positions"] = window_targets(batch)
                yield batch

    def step(self, model: PhraseModel, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        model.phrase_encoder.eval()
        with torch.no_grad():
            states = model.phrase_states(batch["p_input_ids"], batch["p_attention_mask"], batch["p_token_type_ids"])
        logits = model.filter_linear(states)
        loss = self.loss(logits, batch["start_positions"], batch["end_positions"], batch["p_attention_mask"])
        return {"loss": loss}


def average_precision(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the precision-recall curve as average precision: Σ_n (R_n − R_{n−1}) P_n (ties grouped)."""
    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=bool)
    n_pos = int(labels.sum())
    if n_pos == 0:
        return float("nan")
    order = np.argsort(-scores, kind="mergesort")
    scores, labels = scores[order], labels[order]
    tp = np.cumsum(labels)
    # Evaluate only at the last element of each run of equal scores (one threshold per distinct score).
    last = np.r_[np.nonzero(np.diff(scores))[0], len(scores) - 1]
    tp, seen = tp[last], last + 1
    precision, recall = tp / seen, tp / n_pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


@torch.no_grad()
def filter_scores(
    model: PhraseModel, data: RCData, features: Sequence[Feature], batch_size: int = 32, labels: str = "window"
) -> dict[str, np.ndarray]:
    """Filter logits and 0/1 labels over the context tokens of answerable windows (for AUC-PR).

    ``labels`` ``window``: each window once, labelled with the answers of all of its questions (what an index
    filter has to keep); ``question``: each (question, window) feature, labelled with its own answer only.
    """
    units = filter_units(features, labels)
    model.eval()
    device = model.device
    out: dict[str, list[np.ndarray]] = {"start": [], "end": [], "start_label": [], "end_label": []}
    for b in range(0, len(units), batch_size):
        chunk = [f for unit in units[b : b + batch_size] for f in unit]
        batch = collate(
            chunk,
            [data.examples[f.example].question for f in chunk],
            model.tokenizer,
            model.config,
            group_windows=labels == "window",
        )
        if labels == "window":
            start_target, end_target = window_targets(batch)
        else:
            width = batch["p_input_ids"].shape[1]
            start_target = torch.nn.functional.one_hot(batch["start_positions"], width).bool()
            end_target = torch.nn.functional.one_hot(batch["end_positions"], width).bool()
        states = model.phrase_states(
            batch["p_input_ids"].to(device), batch["p_attention_mask"].to(device), batch["p_token_type_ids"].to(device)
        )
        logits = model.filter_linear(states).float().cpu().numpy()
        mask = batch["p_attention_mask"].numpy().astype(bool)
        mask[:, 0] = False  # [CLS] is never indexed
        for row in range(len(mask)):
            positions = np.nonzero(mask[row])[0]
            out["start"].append(logits[row, positions, 0])
            out["end"].append(logits[row, positions, 1])
            out["start_label"].append(start_target[row, positions].numpy())
            out["end_label"].append(end_target[row, positions].numpy())
    return {k: np.concatenate(v) if v else np.zeros(0) for k, v in out.items()}


def filter_metrics(scores: dict[str, np.ndarray]) -> dict[str, float]:
    """AUC-PR of the start and end channels and of the index rule (max logit vs start-or-end label)."""
    either = np.maximum(scores["start"], scores["end"])
    return {
        "auc_pr_start": average_precision(scores["start"], scores["start_label"]),
        "auc_pr_end": average_precision(scores["end"], scores["end_label"]),
        "auc_pr": average_precision(either, scores["start_label"] | scores["end_label"]),
    }


def kept_tokens(filter_logits: np.ndarray, threshold: float | None) -> np.ndarray:
    """Positions of a passage's tokens that ``threshold`` keeps: those whose start or end filter logit exceeds it
    (None: all); a passage left empty keeps its first token, as the dump does."""
    n = len(filter_logits)
    keep = np.arange(n) if threshold is None else np.nonzero(filter_logits.max(axis=1) > threshold)[0]
    return np.zeros(1, dtype=np.int64) if keep.size == 0 and n else keep


def vectors_per_passage(filter_logits: Sequence[np.ndarray], threshold: float | None) -> float:
    """The vectors per passage ``threshold`` keeps (:func:`kept_tokens`) of passages with these filter logits."""
    return sum(len(kept_tokens(logits, threshold)) for logits in filter_logits) / len(filter_logits)


def sample_passages(passages: Sequence[dict[str, Any]], count: int, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` passages drawn at random (``seed``), in their order: a stand-in for the corpus a model will index
    when a vector budget is counted (a hard subcorpus keeps other counts than the corpus does)."""
    chosen = np.random.default_rng(seed).choice(len(passages), size=min(count, len(passages)), replace=False)
    return [passages[i] for i in sorted(chosen.tolist())]


def threshold_sweep(
    model: PhraseModel,
    passages: Sequence[dict[str, Any]],
    examples: Sequence[Any],
    thresholds: Sequence[float | None],
    batch_size: int = 32,
    ks: Sequence[int] = (1, 5, 20),
    sample: Sequence[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Index size and retrieval accuracy for each filter threshold (None = no filtering).

    Passages are encoded once; each threshold keeps the tokens :func:`kept_tokens` keeps and is indexed and
    searched. With ``sample`` (passages drawn at random from the corpus to be indexed, :func:`sample_passages`),
    each row also counts the vectors per passage that threshold keeps of them (``sample_vectors_per_passage``):
    what a vector budget should be held to, as the sweep's subcorpus may store more or fewer per passage.
    """
    encoded = model.encode_passages(
        [p["text"] for p in passages], [p.get("title", "") for p in passages], batch_size=batch_size
    )
    sample_logits = None
    if sample:
        texts, titles = [p["text"] for p in sample], [p.get("title", "") for p in sample]
        sample_logits = [e.filter_logits for e in model.encode_passages(texts, titles, batch_size=batch_size)]
    total = sum(len(e.vectors) for e in encoded)
    codec = VectorCodec("float16")
    rows = []
    for th in thresholds:
        vec_parts, tok_parts, records = [], [], []
        for local, (passage, enc) in enumerate(zip(passages, encoded, strict=True)):
            n = len(enc.vectors)
            keep = kept_tokens(enc.filter_logits, th)
            tokens = np.zeros(len(keep), dtype=TOKEN_DTYPE)
            tokens["passage"], tokens["position"] = local, keep
            tokens["char_start"], tokens["char_end"] = enc.char_offsets[keep, 0], enc.char_offsets[keep, 1]
            vec_parts.append(enc.vectors[keep])
            tok_parts.append(tokens)
            records.append(
                {
                    "id": passage["id"],
                    "document_id": passage.get("document_id", passage["id"]),
                    "title": passage.get("title", ""),
                    "text": passage["text"],
                    "meta": {},
                    "num_context_tokens": n,
                }
            )
        shard = PhraseShard(codec.encode(np.concatenate(vec_parts)), np.concatenate(tok_parts), records, codec)
        index = PhraseIndex.create(model, filter_threshold=th)
        index.add_shard(shard)
        metrics = evaluate_index(index, model, examples, ks)
        row = {
            "threshold": th,
            "vectors": len(index),
            "kept_fraction": len(index) / max(1, total),
            "vectors_per_passage": len(index) / max(1, len(passages)),
        }
        if sample_logits is not None:
            row["sample_vectors_per_passage"] = vectors_per_passage(sample_logits, th)
        rows.append({**row, **metrics})
    return rows


def choose_threshold(
    rows: Sequence[dict[str, Any]],
    metric: str = "em@1",
    max_drop: float = 0.01,
    vector_budget: float | None = None,
) -> dict[str, Any]:
    """Pick the filter threshold of a sweep.

    Without ``vector_budget``, the smallest index whose accuracy is within ``max_drop`` of no filtering:

    1. the reference is the unfiltered row (threshold None) or, when it was not swept, the row keeping the
       most vectors;
    2. a row is acceptable when its ``metric`` ≥ reference ``metric`` − ``max_drop`` (absolute);
    3. the chosen row is the acceptable one with the fewest vectors (ties: higher ``metric``, then higher
       threshold). The reference itself is acceptable, so there is always a choice; it is None (keep every
       token) when no filtering threshold keeps the accuracy;
    4. when the reference scores 0 the sweep carries no signal and the choice is None (no filtering).

    With ``vector_budget`` (stored vectors per passage; rows need ``vectors_per_passage``), the most accurate index
    within the budget: among the rows keeping at most ``vector_budget`` vectors per passage, the one with the
    highest ``metric`` (ties: fewer vectors, then higher threshold). When no row fits the budget, the smallest
    index. ``max_drop`` is not used. The budget is held to ``sample_vectors_per_passage`` (counted on a random
    sample of the corpus, :func:`threshold_sweep`) when every row has it, else to the sweep's own count.

    Kim et al. (2022, App. A) note that filtering can even raise accuracy and that the best threshold moves
    with the corpus size: the rule is applied on the validation subcorpus the sweep ran on.

    Returns:
        ``threshold``, the ``metric``, ``max_drop`` and ``vector_budget`` used, ``reference`` and ``chosen`` metric
        values, ``kept_fraction`` (and ``vectors_per_passage`` / ``sample_vectors_per_passage`` when swept) of the
        chosen row, the count a budget was held to (``budget_count``) and a one-line ``rule``.
    """
    if not rows:
        raise ValueError("choose_threshold: the sweep has no rows")
    if metric not in rows[0]:
        valid = [k for k in rows[0] if k == "em@1" or k.startswith("acc@")]
        raise ValueError(f"choose_threshold: metric {metric!r} not in the sweep; valid: {', '.join(valid)}")
    if max_drop < 0:
        raise ValueError(f"choose_threshold: max_drop must be >= 0, got {max_drop}")
    if vector_budget is not None and not vector_budget > 0:
        raise ValueError(f"choose_threshold: vector_budget must be > 0 vectors per passage, got {vector_budget}")
    if vector_budget is not None and any("vectors_per_passage" not in r for r in rows):
        raise ValueError("choose_threshold: vector_budget needs 'vectors_per_passage' in every row of the sweep")
    unfiltered = [r for r in rows if r["threshold"] is None]
    reference = unfiltered[0] if unfiltered else max(rows, key=lambda r: r["vectors"])

    def higher_threshold_first(row: dict[str, Any]) -> float:  # no filtering counts as the lowest threshold
        return math.inf if row["threshold"] is None else -row["threshold"]

    sampled = all("sample_vectors_per_passage" in r for r in rows)
    count = "sample_vectors_per_passage" if sampled else "vectors_per_passage"
    if vector_budget is not None:
        where = "of the corpus sample" if sampled else "of the sweep"
        within = [r for r in rows if r[count] <= vector_budget + 1e-12]
        if within:
            chosen = min(within, key=lambda r: (-r[metric], r["vectors"], higher_threshold_first(r)))
            rule = f"highest {metric} with <= {vector_budget:g} vectors per passage {where}"
        else:
            chosen = min(rows, key=lambda r: (r["vectors"], -r[metric], higher_threshold_first(r)))
            rule = f"no threshold keeps <= {vector_budget:g} vectors per passage {where}: the smallest index"
    else:
        floor = reference[metric] - max_drop
        acceptable = [r for r in rows if r[metric] >= floor - 1e-12] if reference[metric] > 0 else [reference]
        chosen = min(acceptable, key=lambda r: (r["vectors"], -r[metric], higher_threshold_first(r)))
        rule = (
            f"fewest vectors with {metric} >= {metric}(no filter) - {max_drop:g}"
            if reference[metric] > 0
            else f"{metric}(no filter) = 0: no signal, no filtering"
        )
    choice = {
        "threshold": chosen["threshold"],
        "metric": metric,
        "max_drop": max_drop,
        "vector_budget": vector_budget,
        "budget_count": count if vector_budget is not None else None,
        "reference": reference[metric],
        "reference_threshold": reference["threshold"],
        "chosen": chosen[metric],
        "kept_fraction": chosen["kept_fraction"],
        "rule": rule,
    }
    for key in ("vectors_per_passage", "sample_vectors_per_passage"):
        if key in chosen:
            choice[key] = chosen[key]
    return choice


def store_filter_threshold(model_dir: str | Path, threshold: float | None) -> None:
    """Write ``filter_threshold`` into a saved model's ``dphr_config.json`` (the ``dphr index`` default)."""
    path = Path(model_dir) / CONFIG_FILE
    config = PhraseModelConfig.load(path)
    config.filter_threshold = None if threshold is None else float(threshold)
    config.save(path)


def plot_sweep(rows: Sequence[dict[str, Any]], path: Any, chosen: float | None | str = "unset") -> None:
    """Index size (fraction of tokens kept) against EM@1 and acc@k, one point per threshold (chosen one ringed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed: no threshold plot")
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    sizes = [r["kept_fraction"] for r in rows]
    for key in [k for k in rows[0] if k == "em@1" or k.startswith("acc@")]:
        ax.plot(sizes, [r[key] for r in rows], marker="o", label=key)
    for r in rows:
        ax.annotate(
            "none" if r["threshold"] is None else f"{r['threshold']:g}", (r["kept_fraction"], r["em@1"]), fontsize=7
        )
    picked = [r for r in rows if chosen != "unset" and r["threshold"] == chosen]
    if picked:
        ax.scatter(
            [picked[0]["kept_fraction"]],
            [picked[0]["em@1"]],
            s=160,
            facecolors="none",
            edgecolors="red",
            label="chosen",
        )
    ax.set_xlabel("index size (fraction of tokens kept)")
    ax.set_ylabel("accuracy")
    ax.set_title("filter threshold sweep")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
