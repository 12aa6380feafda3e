#!/usr/bin/env bash
# Check the wheel as a user gets it: build it from the repository's files, fail on any build warning, install it in
# clean virtual environments outside the source tree and use it there, with the repository off sys.path:
#
#   1. Haystack 1.x: the wheel with the `haystack` extra; `import dphr_haystack`, then the README's main job
#      (examples/quickstart.py, which is not installed: it runs as a file copied out of the repository).
#   2. Haystack 2.x/3.x: the wheel with the `haystack2` extra; the haystack_integrations modules import and every
#      shipped Haystack 2 pipeline loads with a plain Pipeline.loads (no allowlist).
#
#   bash scripts/check_wheel.sh                     everything (the quickstart on all 1,702 paragraphs)
#   QUICKSTART_ARGS="--limit 300" bash scripts/check_wheel.sh   a shorter quickstart
#
# Environment: PYTHON (default python3), QUICKSTART_ARGS (default none), KEEP=1 keeps the work folder,
# HS1_CONSTRAINTS / HS2_CONSTRAINTS: pip constraints files for the two environments (CI passes the versions its own
# environments resolved, `pip freeze`, which spares pip's resolver its backtracking: the same packages, minutes faster).
# The two environments install side by side (pip mostly waits on one core); pip's cache is used as usual.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dphr-wheel.XXXXXX")
cleanup() {
    # A failure while the Haystack 2 environment installs in the background: let it end before removing its folder.
    [ -z "${hs2_install:-}" ] || wait "$hs2_install" 2>/dev/null || true
    if [ "${KEEP:-0}" = 1 ]; then
        echo "kept $WORK"
    else
        local started
        started=$(date +%s)
        rm -rf "$WORK"
        echo "removed the work folder in $(($(date +%s) - started))s"
    fi
}
trap cleanup EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
export HAYSTACK_TELEMETRY_ENABLED=False HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
unset PYTHONPATH
total=$(date +%s)
step() { echo "== $1 ($(($(date +%s) - total))s)"; }
pip_in() {  # pip_in VENV LOG ARGS...: pip install into VENV, its output in LOG (printed when it fails)
    local venv=$1 log=$2
    shift 2
    "$WORK/$venv/bin/python" -m pip install "$@" >"$log" 2>&1 || { cat "$log"; exit 1; }
    # Shown, not fatal: pip's own notes. This machine's pip configuration names local package folders that lack
    # most packages, and pip notes each one; INFO lines (the resolver's progress) are no warnings either.
    grep -i "warning" "$log" | grep -v -E "^WARNING: Location '.*' is ignored|^INFO: " || true
}

step "copy the sources to $WORK/src"
# The files git tracks or would track: no build/, egg-info or virtual environment of the working tree can leak in.
mkdir "$WORK/src"
if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$REPO" ls-files -z --cached --others --exclude-standard | (cd "$REPO" && tar --null -T - -cf -) |
        tar -xf - -C "$WORK/src"
else
    tar -C "$REPO" --exclude=./.git --exclude='./.venv*' --exclude=./runs --exclude=./build --exclude=./dist \
        --exclude='*.egg-info' --exclude=__pycache__ -cf - . | tar -xf - -C "$WORK/src"
fi

step "build the wheel"
"$PY" -m venv "$WORK/build-env"
# Exactly [build-system].requires, then `build` without isolation, so the log holds the backend's output only.
"$WORK/build-env/bin/python" -c "import tomllib, sys; print('\n'.join(tomllib.load(open(sys.argv[1], 'rb'))['build-system']['requires']))" \
    "$WORK/src/pyproject.toml" >"$WORK/build-requires.txt"
pip_in build-env "$WORK/build-env.log" -r "$WORK/build-requires.txt" build
# PYTHONDONTWRITEBYTECODE would make setuptools note that it skips byte-compiling: a setting, not a packaging fault.
(cd "$WORK/src" && env -u PYTHONDONTWRITEBYTECODE "$WORK/build-env/bin/python" -m build --wheel --no-isolation \
    --outdir "$WORK/dist" .) >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; exit 1; }
if grep -i -n "warning" "$WORK/build.log"; then
    echo "FAIL: the wheel build printed warnings (above)" >&2
    exit 1
fi
WHEEL=$(ls "$WORK"/dist/*.whl)
echo "built $(basename "$WHEEL") ($(du -h "$WHEEL" | cut -f1)), no build warnings"

mkdir "$WORK/run"
cd "$WORK/run"  # outside the repository: nothing of it is importable from here

install() {  # install VENV EXTRA [CONSTRAINTS]: a clean environment with the CPU torch, then the wheel and one extra
    "$PY" -m venv "$WORK/$1"
    # torch first, pinned as scripts/setup.sh does: here the CPU build from local disk, never a CUDA one.
    pip_in "$1" "$WORK/$1-torch.log" "torch==2.13.0"
    if [ -n "${3:-}" ]; then
        pip_in "$1" "$WORK/$1-install.log" -c "$3" "$WHEEL[$2]"
    else
        pip_in "$1" "$WORK/$1-install.log" "$WHEEL[$2]"
    fi
}

step "install the wheel: the haystack extra (Haystack 1.x) and, beside it, the haystack2 extra (Haystack 2.x/3.x)"
install hs2 haystack2 "${HS2_CONSTRAINTS:-}" >"$WORK/hs2-steps.log" 2>&1 &
hs2_install=$!
install hs1 haystack "${HS1_CONSTRAINTS:-}"
step "Haystack 1.x: import and run the quickstart outside the repository"
"$WORK/hs1/bin/python" - "$REPO" <<'EOF'
import sys
from pathlib import Path

import dphr_haystack

repo = Path(sys.argv[1]).resolve()
where = Path(dphr_haystack.__file__).resolve()
assert not where.is_relative_to(repo), f"dphr_haystack imported from the repository: {where}"
assert not any(Path(p or ".").resolve() == repo for p in sys.path), "the repository is on sys.path"
print("dphr_haystack from", where)
EOF
cp "$REPO/examples/quickstart.py" "$WORK/run/quickstart.py"
# shellcheck disable=SC2086  # QUICKSTART_ARGS holds several words on purpose
"$WORK/hs1/bin/python" quickstart.py ${QUICKSTART_ARGS:-}

step "Haystack 2.x/3.x: its environment"
wait "$hs2_install" || { cat "$WORK/hs2-steps.log"; exit 1; }
cat "$WORK/hs2-steps.log"
"$WORK/hs2/bin/python" -m pip check
step "Haystack 2.x/3.x: import haystack_integrations and load every shipped pipeline without an allowlist"
"$WORK/hs2/bin/python" - "$REPO" <<'EOF'
import importlib.metadata
import importlib.resources
import sys
from pathlib import Path

from haystack import Pipeline

repo = Path(sys.argv[1]).resolve()
folder = importlib.resources.files("dphr_haystack.pipelines.haystack2")
files = sorted((f for f in folder.iterdir() if f.name.endswith(".yml")), key=lambda f: f.name)
assert files, "no Haystack 2 pipelines in the wheel"
assert not any(m.startswith("haystack_integrations") for m in sys.modules)
for file in files:
    text = file.read_text()
    pipeline = Pipeline.loads(text)  # Haystack imports the haystack_integrations modules itself
    assert Pipeline.loads(pipeline.dumps()).dumps() == text, file.name
    print("loaded", file.name, "components:", ", ".join(sorted(pipeline.graph.nodes)))
import haystack_integrations.components.retrievers.dense_phrases as retrievers
import haystack_integrations.components.writers.dense_phrases as writers
import haystack_integrations.document_stores.dense_phrases as stores

import dphr_haystack.haystack2 as hs2

assert (retrievers.PhraseRetriever, writers.PhraseIndexer, stores.PhraseDocumentStore) == (
    hs2.PhraseRetriever, hs2.PhraseIndexer, hs2.PhraseDocumentStore)
for module in (retrievers, writers, stores, hs2):
    assert not Path(module.__file__).resolve().is_relative_to(repo), module.__file__
print("haystack-ai", importlib.metadata.version("haystack-ai"), "| haystack_integrations from", Path(stores.__file__).parent)
EOF
step "wheel check passed"
