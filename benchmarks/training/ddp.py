"""DDP on CPU: ``torchrun --nproc_per_node 2`` (per-rank batch b) against one process (batch 2b), both RC losses.

With all-gathered negatives and no dropout the two runs should train the same model: this records per-step losses
and gradient norms of both, the largest relative differences, the largest weight difference, wall times and
throughput. Tiny random BERT on the built-in sample, so it runs anywhere in a few minutes.

    python -m benchmarks.training.ddp            # -> benchmarks/results/train_ddp.{json,png}
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.common import RESULTS, ROOT, machine, pyplot, save_figure, write_result

LOSSES = {
    "unified": {"loss": "unified", "pre_batch": 1, "gather_negatives": True},
    "densephrases": {
        "loss": "densephrases",
        "pre_batch": 1,
        "gather_negatives": True,
        "loss_kwargs": {"lambda_neg": 4.0, "lambda_flt": 1.0},
    },
}


def recipe(out: Path, rc: dict, steps: int, batch: int) -> dict:
    return {
        "output_dir": str(out),
        "seed": 0,
        "torch_threads": 1,
        "stages": ["rc"],
        "model": {
            "base": "tiny",
            "tiny": {"hidden_size": 32, "layers": 2, "heads": 4, "max_words": 500, "dropout": 0.0},
            "config": {"max_passage_length": 48, "passage_stride": 8, "max_query_length": 24},
        },
        "data": {"train": "builtin", "dev": "builtin"},
        "rc": {
            **rc,
            "train": {
                "max_steps": steps,
                "batch_size": batch,
                "lr": 1e-3,
                "log_every": 1,
                "save_every": steps,
                "progress": False,
            },
        },
    }


def run(out: Path, rc: dict, steps: int, batch: int, nproc: int) -> dict:
    config = out.with_suffix(".yaml")
    config.write_text(yaml.safe_dump(recipe(out, rc, steps, batch)))
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HAYSTACK_TELEMETRY_ENABLED": "False",
    }
    launcher = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)]
        if nproc > 1
        else [sys.executable]
    )
    started = time.perf_counter()
    subprocess.run(
        [*launcher, "-m", "train", "rc", "--config", str(config), "--quiet"],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - started
    records = [json.loads(line) for line in (out / "rc" / "metrics.jsonl").read_text().splitlines()]
    steps_ = [r for r in records if "loss" in r]
    return {
        "nproc": nproc,
        "batch_per_process": batch,
        "wall_s": wall,
        "loss": [r["loss"] for r in steps_],
        "grad_norm": [r["grad_norm"] for r in steps_],
        "samples_per_s": steps_[-1]["samples_per_s"],
        "parameter_spread": next((r["ddp/parameter_spread"] for r in records if "ddp/parameter_spread" in r), None),
    }


def weight_diff(a: Path, b: Path) -> float:
    from dphr_haystack import PhraseModel

    one, two = PhraseModel.load(a).state_dict(), PhraseModel.load(b).state_dict()
    return max((one[k] - two[k]).abs().max().item() for k in one)


def plot(results: dict, path: Path) -> None:
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for loss_name, r in results.items():
        for key, ax in (("loss", axes[0]), ("grad_norm", axes[1])):
            for run_name, style in (("one_process", "-o"), ("torchrun_2", "--x")):
                values = r[run_name][key]
                ax.plot(range(1, len(values) + 1), values, style, label=f"{loss_name}, {run_name}")
            ax.set_xlabel("step")
            ax.set_title(key)
    axes[0].legend(fontsize=7)
    fig.suptitle("1 process (batch 2b) vs torchrun 2 CPU processes (batch b each), gathered negatives")
    save_figure(fig, path, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=4, help="per-process batch of the 2-process run")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, rc in LOSSES.items():
            one = run(Path(tmp) / f"{name}-1", rc, args.steps, 2 * args.batch, 1)
            two = run(Path(tmp) / f"{name}-2", rc, args.steps, args.batch, 2)
            results[name] = {
                "one_process": one,
                "torchrun_2": two,
                "max_rel_loss_diff": max(abs(a - b) / abs(b) for a, b in zip(two["loss"], one["loss"], strict=True)),
                "max_rel_grad_norm_diff": max(
                    abs(a - b) / abs(b) for a, b in zip(two["grad_norm"], one["grad_norm"], strict=True)
                ),
                "max_weight_diff": weight_diff(
                    Path(tmp) / f"{name}-1" / "rc" / "final", Path(tmp) / f"{name}-2" / "rc" / "final"
                ),
            }
            print(name, {k: v for k, v in results[name].items() if k.startswith("max")})
    payload = {
        "benchmark": "train_ddp",
        "machine": machine(),
        "steps": args.steps,
        "lr": 1e-3,
        "model": "tiny random BERT (hidden 32, 2 layers), built-in sample, windows 48",
        "results": results,
    }
    path = write_result("train_ddp", payload)
    plot(results, RESULTS / "train_ddp.png")
    print(f"wrote {path} and {RESULTS / 'train_ddp.png'}")


if __name__ == "__main__":
    main()
