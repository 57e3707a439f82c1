#!/usr/bin/env bash
# Set up, then run the main job (the `arm-accel demo` command) on the bundled default model.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=$(bash scripts/setup.sh)
exec "$VENV/bin/python" -m arm_accel.tools.cli demo "$@"
