"""Training speed on a CPU: float32 vs bfloat16 autocast (a recipe's ``precision: bf16``), a reader's real steps.

    .venv/bin/python -m benchmarks.training.cpu_precision [--bases minilm mpnet] [--steps 8] [--rounds 2]

Each base's question-answering reader (the reader stage's model, started from the pre-trained base) trains
``--steps`` optimiser steps of 16 SQuAD train windows of 192 subwords through :class:`train.trainer.Trainer` (AdamW,
the linear schedule, no checkpoint), once per precision per round, the precisions taking turns; each keeps its best
round. The speed is read from the trainer's own log (``metrics.jsonl``, every step) after two warm-up steps: windows
per second and seconds per step, and bf16's speed-up over fp32 for each base, with the loss after the last step
(the two precisions start from the same weights and see the same batches). ``mpnet`` needs
``bash scripts/setup.sh --with-mpnet``. Writes results/train_cpu_precision.json and .png.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import SQUAD_TRAIN, finish_result, machine, pyplot, save_figure

PRECISIONS = ("fp32", "bf16")
WARM_UP_STEPS = 2
BATCH = 16


def steady_speed(records: list[dict[str, Any]], batch: int, warm_up: int = WARM_UP_STEPS) -> dict[str, float]:
    """Windows/s and s/step after ``warm_up`` steps, from the trainer's per-step log (cumulative ``samples_per_s``).

    Step k's cumulative time is ``k * batch / samples_per_s`` (each step trains ``batch`` windows).
    """
    steps = [r for r in records if "samples_per_s" in r]
    if len(steps) <= warm_up:
        raise ValueError(f"{len(steps)} logged steps: more than the {warm_up} warm-up steps are needed")
    elapsed = {r["step"]: r["step"] * batch / r["samples_per_s"] for r in steps}
    first, last = steps[warm_up - 1]["step"], steps[-1]["step"]
    seconds = elapsed[last] - elapsed[first]
    return {"windows_per_s": (last - first) * batch / seconds, "s_per_step": seconds / (last - first)}


def _train(base: str, precision: str, features, data, steps: int, seed: int) -> dict[str, Any]:
    import torch

    from dphr_haystack.model.phrase_model import PhraseModel, PhraseModelConfig
    from train.curves import read_metrics
    from train.reader import ReaderModel, ReaderTask
    from train.trainer import TrainArgs, Trainer

    torch.manual_seed(seed)
    config = PhraseModelConfig(max_passage_length=192, passage_stride=64, max_query_length=64, query_layout="shared")
    reader = ReaderModel.from_phrase_model(PhraseModel.from_base(base, config=config), "base")
    task = ReaderTask(reader, data, features(reader.tokenizer, reader.config))
    with tempfile.TemporaryDirectory() as out:
        args = TrainArgs(
            output_dir=out,
            max_steps=steps,
            batch_size=BATCH,
            lr=5e-5,
            warmup_ratio=0.1,
            precision=precision,
            log_every=1,
            save_every=10**9,
            progress=False,
            seed=seed,
            freeze_word_embeddings=False,
        )
        Trainer(reader, args, task).train()
        records = read_metrics(Path(out) / "metrics.jsonl")
    last_step = [r for r in records if "samples_per_s" in r][-1]
    return {**steady_speed(records, BATCH), "loss_last_step": last_step["loss"]}


def measure(bases: list[str], steps: int, rounds: int, paragraphs: int) -> dict[str, Any]:
    import torch

    from train.data import PassageWindows, build_features, load_squad

    data = load_squad(SQUAD_TRAIN, max_paragraphs=paragraphs)

    def features(tokenizer, config):
        return build_features(data, PassageWindows(tokenizer, config, data.passages))

    runs: dict[str, dict[str, list[dict[str, Any]]]] = {b: {p: [] for p in PRECISIONS} for b in bases}
    for round_ in range(rounds):
        for base in bases:
            for precision in PRECISIONS if round_ % 2 == 0 else PRECISIONS[::-1]:
                run = _train(base, precision, features, data, steps, seed=0)
                runs[base][precision].append(run)
                print(f"round {round_ + 1} {base} {precision}: {run['s_per_step']:.2f} s/step", flush=True)
    rows = []
    for base in bases:
        best = {p: max(runs[base][p], key=lambda r: r["windows_per_s"]) for p in PRECISIONS}
        rows.append(
            {
                "base": base,
                **best,
                "bf16_speedup": best["bf16"]["windows_per_s"] / best["fp32"]["windows_per_s"],
                "rounds": runs[base],
            }
        )
    return {
        "benchmark": "reader training steps on a CPU, float32 vs bfloat16 autocast",
        "steps": steps,
        "warm_up_steps": WARM_UP_STEPS,
        "batch_windows": BATCH,
        "window_subwords": 192,
        "paragraphs": paragraphs,
        "rounds": rounds,
        "threads": torch.get_num_threads(),
        "cpu_bf16": _cpu_has_bf16(),
        "rows": rows,
        "machine": machine(),
    }


def _cpu_has_bf16() -> bool:
    """Whether the CPU has native bfloat16 instructions (AVX512-BF16 or AMX); elsewhere bf16 is emulated."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"{result['steps']} optimiser steps of {result['batch_windows']} SQuAD train windows of "
        f"{result['window_subwords']} subwords per run (speed after {result['warm_up_steps']} warm-up steps), best of "
        f"{result['rounds']} rounds; {result['threads']} torch threads; native bf16: {result['cpu_bf16']}; "
        f"{result['machine'].get('cpu', '')}.",
        "",
        "| reader base | fp32 s/step | bf16 s/step | bf16 speed-up | fp32 windows/s | bf16 windows/s "
        "| loss after the last step fp32 / bf16 |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in result["rows"]:
        f, b = row["fp32"], row["bf16"]
        lines.append(
            f"| {row['base']} | {f['s_per_step']:.2f} | {b['s_per_step']:.2f} | **{row['bf16_speedup']:.2f}×** | "
            f"{f['windows_per_s']:.1f} | {b['windows_per_s']:.1f} | {f['loss_last_step']:.3f} / "
            f"{b['loss_last_step']:.3f} |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bases = [r["base"] for r in result["rows"]]
    x = range(len(bases))
    for offset, precision, color in ((-0.2, "fp32", "tab:gray"), (0.2, "bf16", "tab:blue")):
        values = [r[precision]["windows_per_s"] for r in result["rows"]]
        ax.bar([i + offset for i in x], values, width=0.4, color=color, label=precision)
    ax.set_xticks(list(x), bases)
    ax.set_ylabel("training windows / s (192 subwords)")
    ax.set_title(f"Reader training on a CPU ({result['machine'].get('cpu', '')})", fontsize=10)
    ax.legend()
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bases", nargs="+", default=["minilm", "mpnet"], help="reader bases (default minilm mpnet)")
    parser.add_argument("--steps", type=int, default=8, help="optimiser steps per run (default 8)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--paragraphs", type=int, default=200, help="SQuAD train paragraphs drawn from (default 200)")
    args = parser.parse_args()
    if not SQUAD_TRAIN.is_file():
        raise SystemExit(f"{SQUAD_TRAIN} is needed (../shared/data/squad)")
    if args.steps <= WARM_UP_STEPS:
        raise SystemExit(f"--steps must exceed the {WARM_UP_STEPS} warm-up steps")
    started = time.perf_counter()
    result = measure(args.bases, args.steps, args.rounds, args.paragraphs)
    result["seconds"] = time.perf_counter() - started
    finish_result("train_cpu_precision", result, markdown, plot)


if __name__ == "__main__":
    main()
