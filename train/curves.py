"""Training curves: the metrics a run logs (``metrics.jsonl``) and their plot."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


SIDE_KEYS = ("grad_norm", "negatives")


def plot_curves(metrics_path: str | Path, out_path: str | Path) -> Path | None:
    """Plot training terms and validation metrics against steps (PNG); None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed: no curves plot (pip install 'dphr-haystack[train]')")
        return None
    records = read_metrics(metrics_path)
    numeric = {k for r in records for k, v in r.items() if isinstance(v, (int, float))}
    # Loss terms on one panel; counts and norms (negatives, grad_norm: other scales) on their own.
    train_keys = sorted(numeric - set(SIDE_KEYS) - {"step", "epoch", "lr", "samples_per_s"})
    train_keys = [k for k in train_keys if not k.startswith(("eval/", "ddp/"))]
    side_keys = [k for k in SIDE_KEYS if k in numeric]
    eval_keys = sorted(k for k in numeric if k.startswith("eval/"))
    panels = [("training loss", train_keys, "")] + [(k, [k], "") for k in side_keys]
    if eval_keys:
        panels.append(("validation", eval_keys, "o"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    for ax, (title, keys, marker) in zip(axes[0], panels, strict=True):
        for key in keys:
            points = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
            if points:
                ax.plot(*zip(*points, strict=True), marker=marker or None, label=key.removeprefix("eval/"))
        ax.set_xlabel("step")
        ax.set_title(title)
        if len(keys) > 1 and ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_path, dpi=90)
    plt.close(fig)
    return Path(out_path)
