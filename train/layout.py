"""Convert a DensePhrases-layout model (two query encoders) to the shared layout (one query encoder, two heads).

    python -m train.layout --model dphr-minilm-squad --out runs/shared-init --questions 4000

The shared query encoder starts as the start encoder, so the start head is the identity and q_start is
unchanged. The end head is fitted by ridge regression from the start encoder's [CLS] state to the end encoder's
q_end over SQuAD training questions; query-side fine-tuning (``qsft`` with ``init`` set to the output) then trains
encoder and heads together. The phrase encoder and filter are copied, so an existing phrase index stays valid.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from dphr_haystack._util.atomic import write_file_atomic
from dphr_haystack.model.phrase_model import PhraseModel

logger = logging.getLogger(__name__)


def fit_linear(x: np.ndarray, y: np.ndarray, ridge: float = 1e-3) -> np.ndarray:
    """Ridge regression of ``y`` (n, k) on ``x`` (n, d) with a bias: weights (d + 1, k), the bias last; the penalty
    is ``ridge`` times the mean diagonal of x'x, the bias not shrunk."""
    x = np.concatenate([x, np.ones((len(x), 1), dtype=x.dtype)], axis=1).astype(np.float64)
    penalty = ridge * np.trace(x.T @ x) / x.shape[1] * np.eye(x.shape[1])
    penalty[-1, -1] = 0.0
    return np.linalg.solve(x.T @ x + penalty, x.T @ y.astype(np.float64))


def to_shared_layout(
    model: PhraseModel, questions: Sequence[str], ridge: float = 1e-3, batch_size: int = 64
) -> tuple[PhraseModel, dict[str, float]]:
    """The shared-layout copy of ``model`` and how well its fitted end head reproduces q_end on ``questions``.

    Raises:
        ValueError: ``model`` is already shared, or fewer questions than dimensions + 1 are given.
    """
    if model.config.query_layout != "separate":
        raise ValueError(f"the model's query layout is already {model.config.query_layout!r}")
    dim = model.hidden_size
    if len(questions) <= dim:
        raise ValueError(f"fitting the end head needs more than {dim} questions, got {len(questions)}")
    q_start, q_end = model.encode_queries(list(questions), batch_size=batch_size)
    weights = fit_linear(q_start, q_end, ridge)
    config = copy.deepcopy(model.config)
    config.query_layout = "shared"
    shared = PhraseModel(
        copy.deepcopy(model.phrase_encoder),
        None,
        None,
        model.tokenizer,
        config,
        query_encoder=copy.deepcopy(model.query_start_encoder),
    )
    shared.filter_linear.load_state_dict(model.filter_linear.state_dict())
    with torch.no_grad():
        shared.query_end_head.weight.copy_(torch.from_numpy(weights[:-1].T.astype(np.float32)))
        shared.query_end_head.bias.copy_(torch.from_numpy(weights[-1].astype(np.float32)))
    fitted = (q_start.astype(np.float64) @ weights[:-1] + weights[-1]).astype(np.float32)
    cosine = np.sum(fitted * q_end, axis=1) / (np.linalg.norm(fitted, axis=1) * np.linalg.norm(q_end, axis=1) + 1e-12)
    residual = float(np.sum((fitted - q_end) ** 2) / np.sum((q_end - q_end.mean(0)) ** 2))
    return shared.eval(), {
        "questions": len(questions),
        "r2": 1.0 - residual,
        "mean_cosine": float(cosine.mean()),
        "min_cosine": float(cosine.min()),
    }


def main(argv: Sequence[str] | None = None) -> int:
    from .data import load_squad
    from .schema import DataSection, resolve_data

    parser = argparse.ArgumentParser(prog="python -m train.layout", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a separate-layout model (directory or shipped name)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--questions", type=int, default=4000, help="SQuAD train questions to fit the end head on")
    parser.add_argument("--train", default=DataSection.train, help="SQuAD training file")
    parser.add_argument("--ridge", type=float, default=1e-3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    path = resolve_data(args.train)
    if path is None:
        parser.error(f"{args.train} not found")
    data = load_squad(path, max_questions=args.questions)
    model = PhraseModel.load(args.model)
    shared, fit = to_shared_layout(model, [ex.question for ex in data.examples], args.ridge)
    shared.save(args.out)
    fit.update(source=str(args.model), ridge=args.ridge, phrase_fingerprint=shared.phrase_fingerprint())
    write_file_atomic(args.out / "layout_fit.json", json.dumps(fit, indent=1), fsync=False)
    print(json.dumps(fit, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
