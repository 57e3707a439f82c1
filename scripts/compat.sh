#!/usr/bin/env bash
# Long run, never in CI (issue 16): the stock-vs-accelerated identity tests and the quick zoo
# benchmark with another torch than the pinned one, e.g.
#
#   bash scripts/compat.sh 2.14.0
#
# It builds a venv WITHOUT the base interpreter's packages (the base torch stays untouched):
# torch==VERSION, executorch 1.5.1 (which declares no torch requirement), tosa-tools, Vela, the
# test tools, and this package's wheel installed with --no-deps (its pin would pull torch 2.13
# back in). The version guard (arm_accel.bootstrap.activation.SUPPORTED_VERSIONS) is widened to
# VERSION for these runs only, by a sitecustomize in a temporary directory on PYTHONPATH; a run
# that shows everything identical is what justifies widening the real guard and the pins.
# Downloads several GB the first time; the tests and the benchmark then take about an hour on
# 2 cores. Output: $COMPAT_DIR/torch-VERSION.log (pip, build) and the results on stdout.
# Env: COMPAT_DIR (default ~/.cache/arm-accel/compat), COMPAT_TESTS (pytest selection),
#      COMPAT_MODELS (zoo models for benches/lowering.py).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=${1:?usage: scripts/compat.sh TORCH_VERSION (e.g. 2.14.0)}
DIR=${COMPAT_DIR:-$HOME/.cache/arm-accel/compat}
VENV=$DIR/torch-$TORCH
LOG=$VENV.log
mkdir -p "$DIR"
: >"$LOG"

say() { printf 'compat: %s\n' "$*" >&2; }
run() { # run CMD with its output in the log; on failure print the log's tail
  "$@" >>"$LOG" 2>&1 || {
    say "FAILED: $* (log: $LOG)"
    tail -n 25 "$LOG" >&2
    exit 1
  }
}

if [ ! -x "$VENV/bin/python" ]; then
  say "create $VENV (no system site packages)"
  run python3 -m venv "$VENV"
fi
say "install torch==$TORCH, executorch 1.5.1, tosa-tools, Vela, test tools (log: $LOG)"
run "$VENV/bin/pip" install "torch==$TORCH" "executorch==1.5.1" "tosa-tools==2026.5.0" \
  "ethos-u-vela==5.2.0" numpy pytest hypothesis matplotlib "maturin>=1.5,<2"
found=$("$VENV/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')
[ "$found" = "$TORCH" ] || {
  say "pip resolved torch $found, not $TORCH"
  exit 1
}

say "build and install the arm-accel wheel (--no-deps)"
WHEELS=$(mktemp -d)
run env VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" "$VENV/bin/maturin" build --release -q -o "$WHEELS"
run "$VENV/bin/pip" install --no-deps --force-reinstall "$WHEELS"/arm_accel-*.whl

# Accept this torch for these runs only (the hook checks the guard when executorch's Arm passes
# are first imported, after sitecustomize has run).
SITE=$(mktemp -d)
minor=${TORCH%.*}
cat >"$SITE/sitecustomize.py" <<PY
from arm_accel.bootstrap import activation

activation.SUPPORTED_VERSIONS["torch"] = ("$minor",)
PY
export PYTHONPATH=$SITE
"$VENV/bin/python" -m arm_accel.tools.cli info

# The differential tests: stock vs accelerated in one process, graphs after each pass, TOSA,
# Vela and .pte bytes. Left out: tests of the pinned versions and the guard themselves
# (test_info, test_activation) and the wheel-install test.
TESTS=${COMPAT_TESTS:-tests/test_propagate.py tests/test_fusion_passes.py
  tests/test_upstream_fusion_passes.py tests/test_fuzz_differential.py tests/test_ethosu.py
  tests/test_scan_plan.py tests/test_table.py tests/test_determinism.py
  tests/test_cli.py::test_demo_small_model}
say "pytest (torch $TORCH): $TESTS"
# shellcheck disable=SC2086 # TESTS is a list of pytest arguments
nice -n 10 "$VENV/bin/python" -m pytest -q -p no:cacheprovider $TESTS
MODELS=${COMPAT_MODELS:-convnet,dscnnkws,resnet8,transformer4,llama1,llama4}
say "zoo benchmark (benches/lowering.py --models $MODELS)"
nice -n 10 "$VENV/bin/python" benches/lowering.py --models "$MODELS" --out "$DIR/lowering-torch-$TORCH"
