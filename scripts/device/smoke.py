"""A tiny run of the device path (``run.py check --smoke``): seconds, and every step the real call takes.

A random tiny BERT built from the built-in sample trains the rc stage in passage-grouped batches in the shared
query layout (on CUDA: bf16 autocast), is stopped by a tiny time budget after its first step, resumes from that
checkpoint to the end, and is exported with the real ``$OUT`` limits into a scratch folder. Any failure here would
have failed the long training call too, so it is worth its seconds in the first call.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from scripts.device.export import export_model
from scripts.device.kit import REPO_ROOT, OutLimits, out_problems

STEPS = 6


def smoke(work: Path) -> dict[str, Any]:
    """Train, stop on the budget, resume, export; ``ok`` when each did what it should."""
    import torch

    from train.recipes import load_recipe, run_stage
    from train.trainer import TimeBudgetReached

    started = time.monotonic()
    shutil.rmtree(work, ignore_errors=True)
    settings = {
        "output_dir": str(work / "run"),
        "stages": ["rc"],
        "data.train": "builtin",
        "data.dev": "builtin",
        "model.config": {
            "max_passage_length": 48,
            "passage_stride": 8,
            "max_query_length": 24,
            "query_layout": "shared",
        },
        "rc.select_on": None,
        "rc.batching": "passage",
        "rc.train": {
            "max_steps": STEPS,
            "batch_size": 4,
            "lr": 1.0e-3,
            "log_every": 1,
            "save_every": 100,
            "progress": False,
            "max_minutes": 1.0e-4,
        },
    }
    threads = torch.get_num_threads()
    try:
        recipe = load_recipe(REPO_ROOT / "train" / "configs" / "smoke.yaml", settings)
        stopped = False
        try:
            run_stage(recipe, "rc")
        except TimeBudgetReached:
            stopped = True
        del recipe.rc.train["max_minutes"]
        result = run_stage(recipe, "rc")
    finally:
        torch.set_num_threads(threads)
    out = work / "out"
    report = export_model(
        Path(result["final"]), work / "export", out, {"metrics.jsonl": work / "run" / "rc" / "metrics.jsonl"}
    )
    problems = out_problems(out, OutLimits())
    return {
        "ok": stopped and result["steps"] == STEPS and not problems and report["word_embeddings_left_out"],
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "stopped_by_budget": stopped,
        "steps": result["steps"],
        "export": {"files": sorted(report["files"]), "left_out": report["left_out"], "problems": problems},
        "seconds": round(time.monotonic() - started, 1),
    }
