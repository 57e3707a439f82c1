#!/usr/bin/env bash
# Set up, then run every check and test: cargo fmt/clippy/test, ruff, pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=$(bash scripts/setup.sh)
export PATH="$VENV/bin:$PATH"
# Strict (issue 14): an unexpected failure of the accelerated path (exception, misprediction)
# raises instead of falling back, here and in the upstream suite; declines still fall back.
export ARM_ACCEL_STRICT="${ARM_ACCEL_STRICT:-1}"

cargo fmt --check
cargo clippy --all-targets -q -- -D warnings
cargo clippy --all-targets --features python -q -- -D warnings
cargo test -q
python -m ruff check python tests benches
python -m pytest -q "$@"

# The upstream Arm pass suite with acceleration active through the installed hook (issue 5).
# CI leaves out test_transpose_counts, the slowest module (~1/5 of the suite); the long run
# (ARM_ACCEL_UPSTREAM=1) includes it. ARM_ACCEL_UPSTREAM=0 skips the suite.
case "${ARM_ACCEL_UPSTREAM:-ci}" in
  0) ;;
  1) bash scripts/upstream_suite.sh ;;
  *) bash scripts/upstream_suite.sh -k "not test_transpose_counts" ;;
esac
