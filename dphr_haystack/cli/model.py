"""``dphr model``: create (``init``), convert (``import-densephrases``) and re-save (``export``) phrase models."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..model.config import WEIGHT_STORAGE, PhraseModelConfig
from ..params import arg_type


def add_model_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``dphr model`` and its subcommands."""
    model = sub.add_parser("model", help="phrase model utilities").add_subparsers(dest="model_command", required=True)
    init = model.add_parser("init", help="create an untrained phrase model from a BERT-family base")
    init.add_argument(
        "--base", required=True, help="base model directory or hub name; 'minilm' = offline all-MiniLM-L6-v2"
    )
    init.add_argument("--out", required=True, type=Path)
    init.add_argument(
        "--max-passage-length", type=arg_type("max_passage_length"), default=PhraseModelConfig.max_passage_length
    )
    init.add_argument(
        "--passage-stride",
        type=arg_type("passage_stride"),
        default=None,
        help="overlap of long-passage windows (default: min(128, max length / 4))",
    )
    init.add_argument("--seed", type=int, default=0)
    imp = model.add_parser(
        "import-densephrases", help="convert a DensePhrases checkpoint (config.json + pytorch_model.bin)"
    )
    imp.add_argument("--checkpoint", required=True, type=Path)
    imp.add_argument("--tokenizer", help="tokenizer directory (DensePhrases checkpoints ship none)")
    imp.add_argument("--out", required=True, type=Path)
    export = model.add_parser(
        "export", help="re-save a phrase model compactly (float16, bounded shards, no base tensors)"
    )
    export.add_argument("--model", required=True, type=Path)
    export.add_argument("--out", required=True, type=Path)
    export.add_argument(
        "--weights-dtype",
        default="float16",
        choices=list(WEIGHT_STORAGE),
        help="int8-phrase: phrase encoder int8, query side float16",
    )
    export.add_argument(
        "--max-shard-mb", type=arg_type("max_shard_mb"), default=15.0, help="largest weight file, MiB (default 15)"
    )
    export.add_argument(
        "--omit-base-weights",
        action="store_true",
        help="leave out tensors identical to the base model's (read from the installed base on load)",
    )


def run_model(args: argparse.Namespace) -> int:
    """Run ``dphr model …``."""
    from ..model.phrase_model import PhraseModel, load_model

    if args.model_command == "export":
        written = load_model(args.model).save(
            args.out,
            weights_dtype=args.weights_dtype,
            max_shard_mb=args.max_shard_mb,
            omit_base_weights=args.omit_base_weights,
        )
        model = PhraseModel.load(args.out)
        print(
            f"saved phrase model to {args.out}: {len(written['files'])} weight files, "
            f"{written['bytes'] / 2**20:.1f} MiB, "
            f"{written['from_base']} tensors from the base model (fingerprint {model.phrase_fingerprint()[:12]})"
        )
        return 0
    if args.model_command == "init":
        stride = args.passage_stride if args.passage_stride is not None else min(128, args.max_passage_length // 4)
        config = PhraseModelConfig(max_passage_length=args.max_passage_length, passage_stride=stride)
        model = PhraseModel.from_base(args.base, config, seed=args.seed)
    else:
        model = PhraseModel.from_densephrases(args.checkpoint, tokenizer=args.tokenizer)
    model.save(args.out)
    print(f"saved phrase model to {args.out} (fingerprint {model.phrase_fingerprint()[:12]})")
    return 0
