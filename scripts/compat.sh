#!/usr/bin/env bash
# Long run, never in CI: the stock-vs-accelerated equality tests, the upstream per-operator
# TOSA tests of CI's subset and the side-by-side benchmark on one supported torch, e.g.
#
#   bash scripts/compat.sh 2.15.0
#
# The torch's own venv is set up by scripts/setup.sh (ARM_ACCEL_TORCH=VERSION; the default
# torch's venv when VERSION is the default), once per machine. `arm-accel info` first lists the
# patch table's rows on that torch; a row that is not in effect fails the tests
# (tests/test_patches.py). About an hour on 2 cores.
# Env: COMPAT_TESTS (pytest selection), COMPAT_MODELS (benches/pipeline.py models),
#      COMPAT_OUT (directory for the benchmark's files, default benches/results).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=${1:?usage: scripts/compat.sh TORCH_VERSION (2.13.0, 2.14.0 or 2.15.0)}
OUT=${COMPAT_OUT:-benches/results}
say() { printf 'compat: %s\n' "$*" >&2; }

VENV=$(ARM_ACCEL_TORCH=$TORCH bash scripts/setup.sh)
PY=$VENV/bin/python
"$PY" -m arm_accel.tools.cli info

# Stock vs accelerated in one process: every pass's graph (every meta key, users order,
# provenance graphs up to renaming), the edge programs, the quantized programs, TOSA, Vela and
# .pte bytes, the debug output.
TESTS=${COMPAT_TESTS:-tests/test_patches.py tests/test_retrace_engine.py
  tests/test_decompositions.py tests/test_propagate.py tests/test_ethosu.py
  tests/test_hf_decoders.py tests/test_fake_memo.py tests/test_deferred_recompile.py
  tests/test_stack_entry.py tests/test_cia_ops.py tests/test_cia_override.py
  tests/test_param_meta.py tests/test_fuzz_differential.py tests/test_debug_info.py
  tests/test_fusion_passes.py tests/test_determinism.py tests/test_eval_counter.py
  tests/test_dynamo_header.py}
export ARM_ACCEL_STRICT=1 ARM_ACCEL_REQUIRE_TESTING=1
say "pytest (torch $TORCH)"
# shellcheck disable=SC2086 # TESTS is a list of pytest arguments
nice -n 10 "$PY" -m pytest -q -p no:cacheprovider -n 2 --dist loadfile $TESTS
say "upstream per-operator TOSA tests (UPSTREAM_SET=ops-ci, torch $TORCH)"
ARM_ACCEL_VENV=$VENV UPSTREAM_SET=ops-ci nice -n 10 bash scripts/upstream_suite.sh
MODELS=${COMPAT_MODELS:-llama8,dscnnkws}
say "benches/pipeline.py --models $MODELS (torch $TORCH)"
mkdir -p "$OUT"
PYTHONHASHSEED=0 nice -n 10 "$PY" benches/pipeline.py --models "$MODELS" \
  --out "$OUT/pipeline-torch-$TORCH"
