#!/usr/bin/env bash
# Set up arm-accel on this machine: the pinned stack once per machine, a project venv, and the
# native extension built in place. Safe to run again; it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_PY=${ARM_ACCEL_BASE_PYTHON:-python3}
VENV=${ARM_ACCEL_VENV:-$HOME/.cache/arm-accel/venv}
PINS=("torch==2.13.0" "executorch==1.5.1" "tosa-tools==2026.5.0" "numpy")

# torch is a multi-GB download: install the pinned stack into the base interpreter once per
# machine and share it with every venv through --system-site-packages.
if ! "$BASE_PY" - <<'PY' 2>/dev/null
import importlib.metadata as md
want = {"torch": "2.13.0", "executorch": "1.5.1", "tosa-tools": "2026.5.0"}
assert all(md.version(k) == v for k, v in want.items())
import numpy  # noqa: F401
PY
then
  echo "setup: installing the pinned stack (once per machine)" >&2
  "$BASE_PY" -m pip install -q "${PINS[@]}"
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$BASE_PY" -m venv --system-site-packages "$VENV"
fi
"$VENV/bin/python" - <<'PY' 2>/dev/null || "$VENV/bin/pip" install -q "maturin>=1.5,<2" pytest hypothesis ruff matplotlib
import maturin, pytest, hypothesis, matplotlib  # noqa: F401
import shutil; assert shutil.which("ruff") or True
PY
"$VENV/bin/python" -m ruff --version >/dev/null 2>&1 || "$VENV/bin/pip" install -q ruff
# Vela compiles for Ethos-U: the upstream Arm suite's Ethos-U tests need it (issue 5).
"$VENV/bin/python" -c 'import ethosu.vela' 2>/dev/null || "$VENV/bin/pip" install -q "ethos-u-vela==5.2.0"

# Build the extension in release mode and install the package editable into the venv.
# maturin's binary must live in the venv (a base-interpreter copy is not found from here).
[ -x "$VENV/bin/maturin" ] || "$VENV/bin/pip" install -q --ignore-installed "maturin>=1.5,<2"
VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" "$VENV/bin/maturin" develop --release -q >&2
# The editable install does not carry the wheel-root arm_accel_hook.pth (transparent activation,
# issue 5); put it next to the editable arm_accel.pth so the venv behaves like a wheel install.
cp arm_accel_hook.pth "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/"
echo "$VENV"
