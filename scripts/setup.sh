#!/usr/bin/env bash
# Set up arm-accel on this machine: a venv holding the pinned stack (torch is a multi-GB
# download: once per machine) and the native extension built in place. Safe to run again; it
# only does what is missing. stdout is the venv path and nothing else (callers do
# VENV=$(bash scripts/setup.sh)); stderr gets one line per step that runs; pip/cargo/maturin
# output goes to the log ($LOG), whose tail is printed when a step fails.
#
# The default torch is the one executorch 1.5.1 was released and validated with (2.14.0), in
# $ARM_ACCEL_VENV (default ~/.cache/arm-accel/venv). ARM_ACCEL_TORCH=VERSION sets up another
# supported torch (2.13.0, 2.15.0) in $ARM_ACCEL_VENV_DIR/torch-VERSION (default
# ~/.cache/arm-accel): the compatibility runs and CI's second torch. Every venv holds its own
# torch (no base interpreter packages), so versions never replace one another.
set -euo pipefail
cd "$(dirname "$0")/.."

DEFAULT_TORCH=2.14.0
TORCH=${ARM_ACCEL_TORCH:-$DEFAULT_TORCH}
BASE_PY=${ARM_ACCEL_BASE_PYTHON:-python3}
if [ "$TORCH" = "$DEFAULT_TORCH" ]; then
  VENV=${ARM_ACCEL_VENV:-$HOME/.cache/arm-accel/venv}
else
  VENV=${ARM_ACCEL_VENV_DIR:-$HOME/.cache/arm-accel}/torch-$TORCH
fi
LOG=${ARM_ACCEL_SETUP_LOG:-$VENV.setup.log}
PINS=("torch==$TORCH" "executorch==1.5.1" "tosa-tools==2026.5.0" "numpy")

mkdir -p "$(dirname "$LOG")"
: >"$LOG"

# step LABEL CMD...: run CMD with its output in the log; one line on stderr with the seconds.
step() {
  local label=$1 start=$SECONDS
  shift
  printf 'setup: %s ... ' "$label" >&2
  echo "=== $label: $*" >>"$LOG"
  if "$@" >>"$LOG" 2>&1; then
    printf 'ok (%d s)\n' $((SECONDS - start)) >&2
  else
    local rc=$?
    printf 'FAILED (exit %d); full log: %s\n' "$rc" "$LOG" >&2
    tail -n 25 "$LOG" | sed 's/^/  | /' >&2
    exit "$rc"
  fi
}

has_stack() {
  "$VENV/bin/python" - "$TORCH" <<'PY' 2>/dev/null
import sys
import importlib.metadata as md
want = {"torch": sys.argv[1], "executorch": "1.5.1", "tosa-tools": "2026.5.0"}
assert all(md.version(k).split("+")[0] == v for k, v in want.items())
import numpy  # noqa: F401
PY
}
# A venv of an older layout shared the base interpreter's packages: made anew.
if [ -f "$VENV/pyvenv.cfg" ] && grep -q '^include-system-site-packages = true' "$VENV/pyvenv.cfg"; then
  step "remove $VENV (it shared the base interpreter's packages)" rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
  step "create the venv $VENV" "$BASE_PY" -m venv "$VENV"
fi
if ! has_stack; then
  step "install torch $TORCH, executorch 1.5.1 and tosa-tools into $VENV (once per machine; torch is large)" \
    "$VENV/bin/pip" install "${PINS[@]}"
fi
if ! "$VENV/bin/python" -c 'import pytest, xdist, hypothesis, matplotlib, mypy' 2>/dev/null ||
  ! "$VENV/bin/python" -m ruff --version >/dev/null 2>&1; then
  step "install the dev tools (pytest, pytest-xdist, hypothesis, ruff, mypy, matplotlib)" \
    "$VENV/bin/pip" install pytest pytest-xdist hypothesis ruff mypy matplotlib
fi
# transformers builds the zoo's small decoder LLMs (qwen2-2l, ...); it does not depend on torch,
# so this never pulls one (seconds).
if ! "$VENV/bin/python" -c 'import transformers' 2>/dev/null; then
  step "install transformers (the zoo's decoder LLMs)" "$VENV/bin/pip" install "transformers>=5,<6"
fi
# The upstream model tests (UPSTREAM_SET=models) import torchvision, torchaudio, timm and
# diffusers: the default stack only. torchvision's release for each torch is pinned (it builds
# against one torch); torchaudio has no release past 2.11, and 2.11.1 (torch>=2.11, no
# torch-ABI binary) imports and runs its models. The constraint keeps pip from touching torch.
vision_for() {
  case $1 in
    2.13.0) echo 0.28.0 ;;
    2.14.0) echo 0.29.0 ;;
    *) return 1 ;;
  esac
}
if [ "$TORCH" = "$DEFAULT_TORCH" ] &&
  ! "$VENV/bin/python" -c 'import torchvision, torchaudio, timm, diffusers' 2>/dev/null; then
  step "install the upstream model tests' dependencies (torchvision, torchaudio, timm, diffusers)" \
    "$VENV/bin/pip" install -c <(echo "torch==$TORCH") "torchvision==$(vision_for "$TORCH")" \
    "torchaudio==2.11.1" "timm>=1.0,<2" "diffusers>=0.40,<1"
fi
# Vela compiles for Ethos-U: the demo's Ethos-U targets and the upstream suite's Ethos-U tests.
if ! "$VENV/bin/python" -c 'import ethosu.vela' 2>/dev/null; then
  step "install Vela (ethos-u-vela 5.2.0)" "$VENV/bin/pip" install "ethos-u-vela==5.2.0"
fi

# Build the extension in release mode, with the test-only bindings (cargo feature `testing`; the
# release wheel has none), and install the package editable into the venv.
# maturin's binary must live in the venv (a base-interpreter copy is not found from here).
if [ ! -x "$VENV/bin/maturin" ]; then
  step "install maturin into the venv" "$VENV/bin/pip" install --ignore-installed "maturin>=1.5,<2"
fi
step "build the native extension (maturin develop --release; minutes the first time)" \
  env VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" "$VENV/bin/maturin" develop --release \
  --features testing
# The editable install does not carry the wheel-root arm_accel_hook.pth (transparent
# activation); put it next to the editable arm_accel.pth so the venv behaves like a wheel install.
cp arm_accel_hook.pth "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/"
echo "$VENV"
