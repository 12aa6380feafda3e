"""``dphr model``: create (``init``), convert (``import-densephrases``) and re-save (``export``) phrase models."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..errors import InvalidParameterError
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
    imp.add_argument(
        "--lowercase",
        action="store_true",
        help="lower-case the input (DensePhrases checkpoints are cased: by default case is kept and "
        "all-lowercase queries are truecased)",
    )
    imp.add_argument(
        "--phrase-model",
        help="for a query-only checkpoint (DensePhrases v1.1 query-side fine-tuning): the phrase model or "
        "DensePhrases checkpoint whose phrase encoder, filter and tokenizer it goes with",
    )
    imp.add_argument(
        "--index", type=Path, help="a phrase index the result must fit (its phrase fingerprint is checked)"
    )
    imp.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recorded setting, e.g. filter_threshold=null, max_passage_length=384, "
        "passage_stride_mode=overlap, passage_stride=128, truecase=false (repeatable)",
    )
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
    from ..model.loading import load_model
    from ..model.phrase_model import PhraseModel

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
        model = PhraseModel.from_densephrases(
            args.checkpoint,
            tokenizer=args.tokenizer,
            do_lower_case=args.lowercase,
            phrase_model=args.phrase_model,
            phrase_fingerprint=_index_fingerprint(args.index) if args.index is not None else None,
            config_overrides=_settings(args.set),
        )
    model.save(args.out)
    print(f"saved phrase model to {args.out} (fingerprint {model.phrase_fingerprint()[:12]})")
    return 0


def _settings(items: list[str]) -> dict[str, Any]:
    """``["filter_threshold=null"]`` → ``{"filter_threshold": None}`` (values read as YAML, bounded: no aliases)."""
    from .._util.safe_yaml import load_yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidParameterError(f"--set expects KEY=VALUE, got {item!r}")
        out[key.strip()] = load_yaml(value, source=f"--set {key.strip()}")
    return out


def _index_fingerprint(path: Path) -> str:
    """The phrase fingerprint an index directory records (its manifest only is read)."""
    import json

    from ..errors import IndexLoadError
    from ..index.manifest import MANIFEST, check_manifest

    manifest_path = path / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as exc:
        raise IndexLoadError(f"{manifest_path}: cannot read the index manifest ({exc})") from exc
    if not isinstance(manifest, dict):
        raise IndexLoadError(f"{manifest_path}: expected a JSON object")
    check_manifest(manifest, manifest_path)
    return manifest["model_fingerprint"]
