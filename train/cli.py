"""``python -m train <stage> --config recipe.yaml [--output-dir DIR] [--set key=value ...]``.

Under ``torchrun --nproc_per_node N -m train ...`` every rank runs the stage (see :mod:`train.trainer`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")


def _parse_value(text: str):
    from dphr_haystack._util.safe_yaml import load_yaml

    return load_yaml(text, source="--set")


def main(argv: Sequence[str] | None = None) -> int:
    from .recipes import STAGES, load_recipe, run_all, run_stage

    parser = argparse.ArgumentParser(prog="python -m train", description=__doc__)
    parser.add_argument("stage", choices=[*STAGES, "run-all"], help="stage to run, or run-all for the recipe")
    parser.add_argument("--config", required=True, help="recipe YAML (train/configs/*.yaml)")
    parser.add_argument("--output-dir", help="override the recipe's output_dir")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe value by dotted key, e.g. rc.train.lr=5e-5 (repeatable)",
    )
    parser.add_argument("--quiet", action="store_true", help="log warnings only")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key] = _parse_value(value)
    if args.output_dir:
        overrides["output_dir"] = args.output_dir
    recipe = load_recipe(args.config, overrides)
    from .trainer import TimeBudgetReached, dist_info, is_distributed

    try:
        result = run_all(recipe) if args.stage == "run-all" else run_stage(recipe, args.stage)
    except TimeBudgetReached as exc:  # a checkpoint is written: the same command resumes from it
        print(f"stopped: {exc}; run the same command again to resume", file=sys.stderr)
        return 3

    if dist_info()[0] == 0:  # under torchrun, one summary (rank 0's)
        json.dump(result, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    if is_distributed():
        import torch

        torch.distributed.destroy_process_group()
    return 0
