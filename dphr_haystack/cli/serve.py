"""``dphr serve``: the REST API and the web page on a store directory, optionally filled from a corpus first.

    dphr serve --corpus squad-dev                 # index the shipped SQuAD dev paragraphs once, then serve
    dphr serve --store /srv/dphr-store --host 0.0.0.0 --port 8000

Without ``--store`` the store lives in the user's data directory, ``$XDG_DATA_HOME/dphr-haystack/store`` (by default
``~/.local/share/dphr-haystack/store``; under ``%LOCALAPPDATA%`` on Windows), never the current directory;
start-up prints where it is.

The pipelines are the shipped ``rest_api.yml`` (or ``--pipelines``) with every PhraseDocumentStore on ``--store``;
the environment variables of ``uvicorn dphr_haystack.nodes.rest_api:app`` apply as well (``QUERY_PIPELINE_NAME``,
``RETRIEVER_PARAMS_TOP_K``, the upload bounds, ...). ``--corpus`` is indexed (with a progress bar) only when the
store holds no document yet.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from ..errors import InvalidParameterError

SERVE_EXTRA = 'pip install "dphr-haystack[serve]"'
STORE_FOLDER = ("dphr-haystack", "store")
_NEEDED = {"fastapi": "FastAPI", "uvicorn": "uvicorn", "multipart": "python-multipart", "haystack": "farm-haystack"}


def add_serve_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``dphr serve``."""
    serve = sub.add_parser("serve", help="serve the REST API and a web page for questions (Haystack 1.x)")
    serve.add_argument(
        "--store",
        type=Path,
        default=None,
        help="store directory (created if missing; default: $XDG_DATA_HOME/dphr-haystack/store, "
        "i.e. ~/.local/share/dphr-haystack/store)",
    )
    serve.add_argument(
        "--pipelines",
        type=Path,
        default=None,
        help="pipeline YAML with 'query' and 'indexing' (default: rest_api.yml)",
    )
    serve.add_argument(
        "--corpus",
        default=None,
        help="index this first if the store is empty: squad-dev (shipped), a SQuAD JSON or JSON lines file "
        "(.gz ok) or a folder of .txt/.md files",
    )
    serve.add_argument("--model", default=None, help="phrase model directory or shipped name (default: the file's)")
    serve.add_argument("--device", default=None, choices=["auto", "cpu", "cuda"], help="(default: the file's)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    serve.add_argument("--port", type=port_number, default=8000, help="(default: %(default)s)")


def port_number(text: str) -> int:
    """A TCP port from the command line: a whole number from 1 to 65535."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1 to 65535)")
    return value


def default_store_path(environ: Mapping[str, str] | None = None) -> Path:
    """The store of ``dphr serve`` without ``--store``: ``dphr-haystack/store`` in the user's data directory
    (``$XDG_DATA_HOME``, else ``~/.local/share``; ``%LOCALAPPDATA%`` on Windows)."""
    env = os.environ if environ is None else environ
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    xdg = Path(env.get("XDG_DATA_HOME", ""))
    if xdg.is_absolute():  # the XDG spec: a relative (or empty) XDG_DATA_HOME is ignored
        base = xdg
    elif os.name == "nt" and env.get("LOCALAPPDATA"):
        base = Path(env["LOCALAPPDATA"])
    else:
        base = home / ".local" / "share"
    return base.joinpath(*STORE_FOLDER)


def serve_store_path(store: Path | None, environ: Mapping[str, str] | None = None) -> Path:
    """The absolute store directory ``dphr serve`` uses: ``--store`` when given, else :func:`default_store_path`."""
    return (store if store is not None else default_store_path(environ)).expanduser().resolve()


def missing_serve_packages() -> list[str]:
    """The packages of the ``serve`` extra that cannot be imported here."""
    missing = []
    for module, package in _NEEDED.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(package)
    return missing


def _check_port(host: str, port: int) -> None:
    """Fail before the model loads when the address cannot be listened on."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise InvalidParameterError(f"--host {host!r}: {exc}") from exc
    family, kind, _, _, address = infos[0]
    with socket.socket(family, kind) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            raise InvalidParameterError(
                f"cannot listen on {host}:{port} ({exc.strerror}); choose another --port"
            ) from exc


def _index_corpus(served, corpus: str) -> None:  # noqa: ANN001  (ServedPipelines: imported with Haystack)
    """Index ``corpus`` into the served store unless it holds documents already."""
    from ..nodes import corpus_documents

    store, retriever = served.phrase_store(), served.phrase_retriever()
    if store is None or retriever is None:
        raise InvalidParameterError("--corpus needs a PhraseDocumentStore and a PhraseRetriever in the pipelines")
    count = store.get_document_count()
    if count:
        print(f"the store already holds {count} documents: not indexing --corpus {corpus} again", flush=True)
        return
    started = time.perf_counter()
    documents = corpus_documents([corpus])
    print(f"indexing {len(documents)} passages of {corpus} ...", flush=True)
    store.index_documents(documents, retriever)
    print(f"indexed {store.get_document_count()} passages in {time.perf_counter() - started:.0f}s", flush=True)


def run_serve(args: argparse.Namespace) -> int:
    """Run ``dphr serve``: build the pipelines, index ``--corpus`` when the store is empty, then serve."""
    missing = missing_serve_packages()
    if missing:
        print(f"dphr: error: dphr serve needs {', '.join(missing)}: {SERVE_EXTRA}", file=sys.stderr)
        return 2
    _check_port(args.host, args.port)
    try:
        from ..nodes.rest import RestSettings, build_app, load_served_pipelines
    except ImportError as exc:  # e.g. haystack-ai (2.x) where farm-haystack (1.x) is needed
        print(f"dphr: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    import uvicorn

    retriever_params = {k: v for k, v in (("model", args.model), ("device", args.device)) if v is not None}
    store_path = serve_store_path(args.store)
    if args.store is None:
        print(f"no --store given: using the store {store_path} (--store DIR chooses another)", flush=True)
    given = {"store_path": store_path, "phrase_retriever_params": retriever_params}
    if args.pipelines is not None:
        given["pipeline_yaml"] = args.pipelines
    settings = RestSettings.from_env(**given)
    print(f"loading {settings.pipeline_yaml} on the store {settings.store_path} ...", flush=True)
    served = load_served_pipelines(settings)
    if args.corpus:
        _index_corpus(served, args.corpus)
    app = build_app(settings, served)
    store = served.document_store
    count = store.get_document_count() if store is not None else 0
    url = f"http://{args.host if ':' not in args.host else f'[{args.host}]'}:{args.port}/"
    docs = f"; REST API: {url}docs" if any(getattr(route, "path", None) == "/docs" for route in app.routes) else ""
    print(f"serving {count} documents at {url} (web page{docs}). Ctrl-C stops.", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
