#!/usr/bin/env bash
# Rehearse the device kit end to end on this CPU (scripts/device/rehearsal.py): pack a tiny random BERT and a small
# SQuAD subset into stages under a simulated call limit, carry them one call at a time to a copy of the working
# tree (the "device"), run there exactly the commands pack.py prints (run.py check --smoke, check, train stopped by
# its time budget, train resumed) with $OUT a fresh folder per call checked against the limits, then restore.py
# here from the returned files, comparing the rebuilt model's vectors with the device's own.
#
# The device side runs under DEVICE_PYTHON: by default the transformers 5 venv of scripts/check_transformers5.sh
# (like the GPU machine: transformers 5, no FAISS, no Haystack, our package not installed) when it exists, else
# the CPU side's interpreter. The CPU side (pack, restore) runs under CPU_PYTHON (default .venv/bin/python).
# Usage: bash scripts/device/rehearse.sh            (WORK=/tmp/dir to keep the files; ~1 min)
#        BASE_KIND=mpnet bash scripts/device/rehearse.sh   (an MPNet-shaped tiny base, as all-mpnet-base-v2)
#        ADAPTERS=4 BASE_KIND=mpnet bash scripts/device/rehearse.sh   (the rc stage trains rank-4 low-rank adapters)
set -euo pipefail
cd "$(dirname "$0")/../.."
CPU_PYTHON=${CPU_PYTHON:-.venv/bin/python}
TF5=${TF5_VENV:-/tmp/tf5venv}/bin/python
if [ -z "${DEVICE_PYTHON:-}" ]; then
    if [ -x "$TF5" ]; then DEVICE_PYTHON=$TF5; else DEVICE_PYTHON=$CPU_PYTHON; fi
fi
WORK=${WORK:-$(mktemp -d /tmp/device-rehearsal.XXXXXX)}
SQUAD=../shared/data/squad/train-v1.1-rebuilt.json.gz
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HAYSTACK_TELEMETRY_ENABLED=False
echo "== device side: $("$DEVICE_PYTHON" -c 'import sys, transformers; print(sys.executable, "transformers", transformers.__version__)')"
# absolute, but not resolved: a venv's python is a link that must stay the venv's
args=(--work "$WORK" --base-kind "${BASE_KIND:-bert}" --adapters "${ADAPTERS:-0}" --device-python "$(cd "$(dirname "$DEVICE_PYTHON")" && pwd)/$(basename "$DEVICE_PYTHON")")
if [ -f "$SQUAD" ]; then args+=(--squad "$SQUAD"); fi
PYTHONPATH=. "$CPU_PYTHON" scripts/device/rehearsal.py "${args[@]}"
echo "files kept in $WORK"
