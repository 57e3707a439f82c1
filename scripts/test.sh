#!/usr/bin/env bash
# Set up, then run every check and test: cargo fmt/clippy/test, ruff, pytest, the upstream
# Arm pass suite. Prints one line per stage with its seconds, and the total (stderr).
set -euo pipefail
cd "$(dirname "$0")/.."

BUDGET_MIN=45 # CI's limit on 2 cores (docs/development.md); the total line shows it
START=$SECONDS
summary() {
  local took=$((SECONDS - START))
  printf 'total %d s (%d min %02d s; CI budget %d min)\n' \
    "$took" $((took / 60)) $((took % 60)) "$BUDGET_MIN" >&2
}
trap summary EXIT

# stage NAME CMD...: run CMD and print "stage NAME: N s" (and its exit code if it failed).
stage() {
  local name=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  if [ "$rc" -eq 0 ]; then
    printf 'stage %-15s %5d s\n' "$name" $((SECONDS - start)) >&2
  else
    printf 'stage %-15s %5d s  FAILED (exit %d)\n' "$name" $((SECONDS - start)) "$rc" >&2
  fi
  return "$rc"
}

setup_start=$SECONDS
VENV=$(bash scripts/setup.sh)
printf 'stage %-15s %5d s\n' setup $((SECONDS - setup_start)) >&2
export PATH="$VENV/bin:$PATH"
# Strict: an unexpected failure of the accelerated path (exception, misprediction)
# raises instead of falling back, here and in the upstream suite; declines still fall back.
export ARM_ACCEL_STRICT="${ARM_ACCEL_STRICT:-1}"
# setup.sh built the test-only bindings: a test that needs them must run, not skip.
export ARM_ACCEL_REQUIRE_TESTING=1

# Without the Python bindings, with them (the release wheel's) and with the test-only ones;
# `&&` because errexit is off inside `stage`'s command.
clippy() {
  cargo clippy --all-targets -q -- -D warnings &&
    cargo clippy --all-targets --features python -q -- -D warnings &&
    cargo clippy --all-targets --features testing -q -- -D warnings
}

stage "cargo fmt" cargo fmt --check
stage "cargo clippy" clippy
stage "cargo test" cargo test -q
stage "ruff" python -m ruff check python tests benches
# Two worker processes (one per core on CI's machine), each module's tests on one worker in
# their order (modules share session fixtures and warm-ups); ARM_ACCEL_TEST_WORKERS=0 runs them
# in this process.
stage "pytest" python -m pytest -q -n "${ARM_ACCEL_TEST_WORKERS:-2}" --dist loadfile "$@"

# The upstream Arm suites with acceleration active through the installed hook:
# the pass suite, then the per-operator TOSA lowering tests of a few operators (whole lowerings
# through the re-trace engine). CI leaves out test_transpose_counts, the slowest pass module
# (~1/5 of that suite); ARM_ACCEL_UPSTREAM=1 includes it; ARM_ACCEL_UPSTREAM=0 skips them all.
# Every operator's tests: UPSTREAM_SET=ops bash scripts/upstream_suite.sh (a long run).
case "${ARM_ACCEL_UPSTREAM:-ci}" in
  0) ;;
  1) stage "upstream suite" bash scripts/upstream_suite.sh ;;
  *) stage "upstream suite" bash scripts/upstream_suite.sh -k "not test_transpose_counts" ;;
esac
# Then those of a few operators, and the whole-model TOSA FP/INT tests of two MLPerf Tiny models
# (test/models; ~40 s); every model: UPSTREAM_SET=models bash scripts/upstream_suite.sh (a long run).
case "${ARM_ACCEL_UPSTREAM:-ci}" in
  0) ;;
  *)
    UPSTREAM_SET=ops-ci stage "upstream ops" bash scripts/upstream_suite.sh
    UPSTREAM_SET=models-ci stage "upstream models" bash scripts/upstream_suite.sh
    ;;
esac

# The other supported torches (the default is 2.14.0): a smoke subset of the equality tests in
# each one's own venv, built once per machine (scripts/setup.sh with ARM_ACCEL_TORCH); every row
# of the patch table must be in effect there and the outputs equal stock's. The whole set per
# version: bash scripts/compat.sh VERSION (a long run). ARM_ACCEL_OTHER_TORCHES="" skips them.
OTHER_TORCHES=${ARM_ACCEL_OTHER_TORCHES-2.13.0 2.15.0}
SMOKE_TESTS=(
  tests/test_patches.py
  tests/test_debug_info.py
  tests/test_eval_counter.py
  tests/test_dynamo_header.py
  "tests/test_retrace_engine.py::test_every_pass_identical_to_stock"
  "tests/test_retrace_engine.py::test_values_on_parameter_inputs_are_kept_under_grad"
  "tests/test_decompositions.py::test_lowering_equals_stock"
)
other_torch() {
  local venv
  venv=$(ARM_ACCEL_TORCH=$1 bash scripts/setup.sh) &&
    "$venv/bin/python" -m pytest -q -n "${ARM_ACCEL_TEST_WORKERS:-2}" --dist loadfile \
      "${SMOKE_TESTS[@]}"
}
for version in $OTHER_TORCHES; do
  stage "torch $version" other_torch "$version"
done
