"""Training throughput of the reading-comprehension task: passage-grouped batches vs per-question batches.

    .venv/bin/python -m benchmarks.training.throughput [--paragraphs 600] [--seconds 60] [--rounds 2]

Every configuration trains the offline all-MiniLM-L6-v2 phrase model (unified loss, pre-batch 2, AdamW, clipping,
frozen word embeddings: the recipe's optimisation step) on the same SQuAD train paragraphs, on all cores, for
``--seconds`` after two warm-up steps; the configurations take turns for ``--rounds`` rounds and each keeps its
best round. Reported: trained questions/s, passage tokens/s (real tokens of the windows encoded, padding
excluded; a window encoded for each of its questions counts each time), the share of padding, and each one's ratio
to the first configuration, the recipe the shipped
model was trained with (per-question batches of 32, the DensePhrases query layout).
Writes results/train_throughput.json and .png.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import SQUAD_TRAIN, finish_result, machine, pyplot, save_figure

CONFIGS: list[dict[str, Any]] = [
    {
        "name": "per-question 32, separate (shipped recipe)",
        "batching": "question",
        "batch_size": 32,
        "layout": "separate",
    },
    {"name": "passage-grouped 8, separate", "batching": "passage", "batch_size": 8, "layout": "separate"},
    {"name": "passage-grouped 8, shared", "batching": "passage", "batch_size": 8, "layout": "shared"},
    {"name": "passage-grouped 12, shared", "batching": "passage", "batch_size": 12, "layout": "shared"},
]


def _setup(config: dict[str, Any], data, base_config):
    import torch

    from dphr_haystack.model.phrase_model import PhraseModel
    from train.data import PassageWindows, build_features
    from train.tasks import RCTask
    from train.trainer import set_trainable

    model = PhraseModel.from_base("minilm", config=replace(base_config, query_layout=config["layout"]))
    windows = PassageWindows(model.tokenizer, model.config, data.passages)
    features = build_features(data, windows)
    task = RCTask(model, data, features, windows, loss="unified", pre_batch=2, batching=config["batching"])
    params = set_trainable(model, "encoders", freeze_word_embeddings=True)
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    return model, task, params, optimizer


def _run(config: dict[str, Any], data, base_config, seconds: float, epoch: int) -> dict[str, float]:
    import torch

    model, task, params, optimizer = _setup(config, data, base_config)
    model.train()
    batches = task.batches(epoch, config["batch_size"], 0, 1, seed=0)
    questions = real = padded = steps = 0
    started = None
    for i, batch in enumerate(batches):
        if i == 2:  # two warm-up steps (allocator, first-call overheads)
            started = time.perf_counter()
        out = task.step(model, batch)
        out["loss"].backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if started is None:
            continue
        steps += 1
        questions += len(batch["start_positions"])
        real += int(batch["p_attention_mask"].sum())
        padded += batch["p_attention_mask"].numel()
        if time.perf_counter() - started >= seconds:
            break
    elapsed = time.perf_counter() - started
    return {
        "steps": steps,
        "seconds": elapsed,
        "questions_per_s": questions / elapsed,
        "passage_tokens_per_s": real / elapsed,
        "padding": 1 - real / max(padded, 1),
        "questions_per_step": questions / max(steps, 1),
    }


def measure(paragraphs: int, seconds: float, rounds: int) -> dict[str, Any]:
    from dphr_haystack.model.config import PhraseModelConfig
    from train.data import RCData, load_squad

    if not SQUAD_TRAIN.is_file():
        raise SystemExit(f"SQuAD train not found at {SQUAD_TRAIN}: this benchmark needs ../shared/data")
    full = load_squad(SQUAD_TRAIN)
    step = max(1, len(full.passages) // paragraphs)  # evenly spread: questions per paragraph as in the whole file
    passages = full.passages[::step][:paragraphs]
    kept = {p["id"] for p in passages}
    data = RCData(passages, [e for e in full.examples if e.passage_id in kept])
    base_config = PhraseModelConfig(max_passage_length=192, passage_stride=64, max_query_length=64)
    best: dict[str, dict[str, float]] = {}
    started = time.perf_counter()
    for r in range(rounds):
        for config in CONFIGS:
            got = _run(config, data, base_config, seconds, epoch=r)
            print(
                f"round {r + 1}: {config['name']}: {got['questions_per_s']:.2f} questions/s, "
                f"{got['passage_tokens_per_s']:.0f} passage tokens/s, padding {got['padding']:.1%}",
                flush=True,
            )
            if config["name"] not in best or got["questions_per_s"] > best[config["name"]]["questions_per_s"]:
                best[config["name"]] = got
    reference = best[CONFIGS[0]["name"]]
    rows = [
        {
            **config,
            **best[config["name"]],
            "questions_ratio": best[config["name"]]["questions_per_s"] / reference["questions_per_s"],
            "tokens_ratio": best[config["name"]]["passage_tokens_per_s"] / reference["passage_tokens_per_s"],
        }
        for config in CONFIGS
    ]
    return {
        "machine": machine(),
        "paragraphs": len(data.passages),
        "questions": len(data.examples),
        "seconds_per_config": seconds,
        "rounds": rounds,
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Training throughput on {result['paragraphs']} SQuAD train paragraphs ({result['questions']} questions), "
        f"{result['machine']['cpu']}, {result['machine']['torch_threads']} torch threads, best of "
        f"{result['rounds']} rounds of {result['seconds_per_config']:.0f} s:",
        "",
        "| batches, query layout | questions/step | questions/s | passage tokens/s | padding | ratio (questions) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['name']} | {row['questions_per_step']:.1f} | {row['questions_per_s']:.2f} | "
            f"{row['passage_tokens_per_s']:.0f} | {row['padding']:.1%} | {row['questions_ratio']:.2f}× |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path) -> None:
    plt = pyplot()

    names = [row["name"] for row in result["rows"]]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    ax.barh(names, [row["questions_per_s"] for row in result["rows"]], color="#4c72b0")
    for y, row in enumerate(result["rows"]):
        ax.text(row["questions_per_s"], y, f" {row['questions_ratio']:.1f}×", va="center")
    ax.invert_yaxis()
    ax.set_xlabel("trained questions / s (MiniLM, unified loss)")
    ax.set_title(f"training throughput, {result['machine']['cores']} CPU cores")
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paragraphs", type=int, default=600, help="evenly spaced SQuAD train paragraphs")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    finish_result("train_throughput", measure(args.paragraphs, args.seconds, args.rounds), markdown, plot)


if __name__ == "__main__":
    main()
