"""``dphr``: create phrase models, index corpora and search phrase indexes from the shell.

dphr model init --base minilm --out models/minilm-phrase
dphr index --corpus corpus.jsonl --out my-index              # the shipped default model
dphr search --index my-index --unit passage --top-k 5 "Who wrote Hamlet?"
dphr eval --index my-index --questions NQ-open.dev.jsonl.gz --out eval-out
dphr dump --model models/minilm-phrase --corpus corpus.jsonl --out dump --ray --num-workers 4
dphr merge --dump dump --out my-index --type ivf-sq8; dphr reindex --index my-index --out idx-pq --type opq-ivf-pq
dphr serve --corpus squad-dev                # REST API and web page on http://127.0.0.1:8000/
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from .._util.threads import add_threads_argument, resolve_threads, set_threads
from ..errors import DphrError
from .eval import add_eval_parser, run_eval
from .index import add_index_parser, run_index
from .model import add_model_parser, run_model
from .scale import add_scale_parsers, run_scale_command
from .search import add_search_parser, run_search
from .serve import add_serve_parser, run_serve

logger = logging.getLogger("dphr")
# Commands with --threads and their kind of work: one thread per query, torch's default for bulk encoding.
THREADED_COMMANDS = {"search": "query", "index": "bulk", "eval": "bulk"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dphr", description="Dense phrase retrieval: models, indexes, search.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", required=True)
    add_model_parser(sub)
    add_index_parser(sub)
    add_search_parser(sub)
    add_eval_parser(sub)
    add_scale_parsers(sub)
    add_serve_parser(sub)
    for command, work in THREADED_COMMANDS.items():
        add_threads_argument(sub.choices[command], work)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The ``dphr`` command; returns its exit status (2 on a :class:`~dphr_haystack.errors.DphrError`)."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        if args.command in THREADED_COMMANDS:
            set_threads(resolve_threads(args.threads, THREADED_COMMANDS[args.command]))
        if args.command == "model":
            return run_model(args)
        if args.command == "index":
            return run_index(args)
        if args.command == "eval":
            return run_eval(args)
        if args.command in ("dump", "merge", "reindex"):
            return run_scale_command(args)
        if args.command == "serve":
            return run_serve(args)
        return run_search(args)
    except DphrError as exc:
        print(f"dphr: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
