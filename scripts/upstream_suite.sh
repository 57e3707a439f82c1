#!/usr/bin/env bash
# Upstream ExecuTorch Arm pass suite with acceleration active THROUGH THE INSTALLED HOOK
# (arm_accel_hook.pth in the project venv; nothing is patched inside the tests), compared with the
# known stock pass/fail set.
#
#   scripts/upstream_suite.sh                # hook active (default)
#   ARM_ACCEL=0 scripts/upstream_suite.sh    # stock reference run
#   scripts/upstream_suite.sh -k "not vgf"   # extra pytest args (e.g. a CI subset)
#
# Runs: executorch/backends/arm/test/passes plus misc/test_transpose_counts.py,
# misc/test_high_rank_permute_view_invariants.py, misc/test_reshape_permute_5d_regression.py.
# Stock fails test_ioquantization_pass.py::test_quantize_io_vgf_INT_uint8_numeric (needs a
# Vulkan emulation layer) and, here, test_transpose_counts_tosa_FP_channels_last
# [groupnorm_channels_last] (fails with ARM_ACCEL=0 too: checked 2026-11-30 with ethos-u-vela
# 5.2.0). Exit status 0 iff no test fails outside that set.
# On a machine without ethos-u-vela (or the VGF tool chain) stock fails more tests; then compare
# with a recorded stock run instead: every run writes its failure set to $UPSTREAM_OUT/failures.txt,
# and UPSTREAM_STOCK_FAILURES=<that file of a stock run> makes it the expected set.
# Env: ARM_ACCEL_VENV (project venv), UPSTREAM_TIMEOUT (seconds, default 7200),
#      UPSTREAM_OUT (directory for log/report, default a temp dir), UPSTREAM_STOCK_FAILURES,
#      UPSTREAM_TESTS_FILE (UPSTREAM_SET=ops or models: these node ids, relative to test/<set>,
#      instead of the whole set; to shard the long run or resume an interrupted one).
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${ARM_ACCEL_VENV:-$HOME/.cache/arm-accel/venv}
PY="$VENV/bin/python"
OUT=${UPSTREAM_OUT:-$(mktemp -d /tmp/arm-accel-upstream.XXXXXX)}
mkdir -p "$OUT"
KNOWN_STOCK_FAILURES="test_ioquantization_pass.py::test_quantize_io_vgf_INT_uint8_numeric
test_transpose_counts.py::test_transpose_counts_tosa_FP_channels_last[groupnorm_channels_last]"
if [ -n "${UPSTREAM_STOCK_FAILURES:-}" ]; then
  KNOWN_STOCK_FAILURES=$(cat "$UPSTREAM_STOCK_FAILURES")
fi

[ -x "$PY" ] || PY=$(bash scripts/setup.sh)/bin/python
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The editable install lacks the wheel-root .pth; make sure the hook is installed.
cmp -s arm_accel_hook.pth "$SITE/arm_accel_hook.pth" || cp arm_accel_hook.pth "$SITE/"

TESTS=$("$PY" -c 'import os, executorch.backends.arm as a; print(os.path.join(a.__path__[0], "test"))' 2>/dev/null)
# UPSTREAM_SET: "passes" (default: the pass suite and the view/permute misc modules), "ops-ci"
# (the per-operator TOSA FP/INT lowering tests of a few operators, which run the whole Arm
# pipeline through the re-trace engine; CI) or "ops" (every per-operator TOSA FP/INT test;
# the long run), "models-ci" (the whole-model TOSA FP/INT tests of two MLPerf Tiny models; CI)
# or "models" (every test/models TOSA FP/INT test; a long run: its full-size LLM tests, e.g.
# test_qwen3_vl_2b_instruct_full_models_*, need more than 24 GiB). The ops and models sets
# compare with the stock failures recorded in scripts/upstream_{ops,models}_stock_failures.txt
# unless UPSTREAM_STOCK_FAILURES names another file.
OPS_CI=(softmax layer_norm sdpa permute)
MODELS_CI=(deep_autoencoder ds_cnn)
# ci_modules DIR NAME...: the TOSA FP/INT tests of the modules test/DIR/test_NAME.py.
ci_modules() {
  local dir=$1
  shift
  ARGS=("${@/#/$TESTS/$dir/test_}")
  ARGS=("${ARGS[@]/%/.py}" -k "tosa_FP or tosa_INT")
}
# whole_set DIR [PYTEST_ARG...]: every TOSA FP/INT test of test/DIR, or, for a shard or the rest
# of an interrupted long run, the node ids in UPSTREAM_TESTS_FILE, one per line, relative to
# test/DIR (`pytest --co -q` there prints them so).
whole_set() {
  local dir=$1
  shift
  if [ -n "${UPSTREAM_TESTS_FILE:-}" ]; then
    sed "s|^|$TESTS/$dir/|" "$UPSTREAM_TESTS_FILE" >"$OUT/tests.txt"
    ARGS=("@$OUT/tests.txt")
  else
    ARGS=("$TESTS/$dir" -k "tosa_FP or tosa_INT" "$@")
  fi
}
EXTRA_PATH=""
case "${UPSTREAM_SET:-passes}" in
  passes)
    ARGS=("$TESTS/passes"
          "$TESTS/misc/test_transpose_counts.py"
          "$TESTS/misc/test_high_rank_permute_view_invariants.py"
          "$TESTS/misc/test_reshape_permute_5d_regression.py") ;;
  ops-ci) ci_modules ops "${OPS_CI[@]}" ;;
  ops)
    # test_transpose_conv2d.py does `import conftest` (the test directory's); the package import
    # pytest uses does not put that directory on sys.path.
    EXTRA_PATH="$TESTS"
    whole_set ops ;;
  models-ci) ci_modules models "${MODELS_CI[@]}" ;;
  models)
    # Six modules do not import on a machine that reaches PyPI only (pretrained weights from
    # download.pytorch.org or the Hugging Face hub at import time); their collection errors are
    # in the recorded stock failures, and the rest of the set still runs.
    whole_set models --continue-on-collection-errors ;;
  *) echo "unknown UPSTREAM_SET=$UPSTREAM_SET" >&2; exit 2 ;;
esac
# The ops tests that fail in stock too, one per line: numeric tolerance failures on unseeded
# random data (test_native_layer_norm_tosa_INT_a16w8[randn_last_dim]: stock fails 7 of 60
# seeds; accelerated, its TOSA bytes equal stock's for seeds 0-2). The models tests that fail in
# stock too: six modules that cannot be collected here (pretrained weights), Qwen3-VL's vision
# rotary embedding, two Gemma3n tests with transformers 5 (the attention's arguments no longer
# bind under dynamo; the audio encoder is not delegated) and two phi3 INT tests marked as strict
# xfails that pass here (XPASS), T5ForConditionalGeneration and DeiT-tiny (Hugging Face hub
# downloads), the T5 encoder's INT test (its not-delegated check finds a delegate) and Swin2SR's
# INT test (it counts 2 of the 6 quantize ops it expects outside the delegates). Listed, a
# failure is expected, not required.
if [ "${UPSTREAM_SET:-passes}" != passes ] && [ -z "${UPSTREAM_STOCK_FAILURES:-}" ]; then
  KNOWN_STOCK_FAILURES=$(cat "scripts/upstream_${UPSTREAM_SET%-ci}_stock_failures.txt")
fi

# A reporting-only plugin: at the end of the session it writes arm_accel.status()/stats() so we
# can see that the hook activated and which accelerated passes ran. It patches nothing.
mkdir -p "$OUT/plugin"
cat > "$OUT/plugin/arm_accel_suite_report.py" <<'PYEOF'
import json, os, sys


def pytest_sessionfinish(session, exitstatus):
    import arm_accel

    report = {"status": arm_accel.status().as_dict(), "stats": arm_accel.stats().as_dict(),
              "hooked": "arm_accel.bootstrap.activation" in sys.modules}
    with open(os.environ["ARM_ACCEL_SUITE_REPORT"], "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
PYEOF

echo "upstream suite: ARM_ACCEL=${ARM_ACCEL:-1}, output in $OUT" >&2
start=$(date +%s)
# --confcutdir: pytest's rootdir here is the first test directory, so without it the Arm test
# directory's conftest.py is not loaded and the tests draw unseeded random inputs (a numeric
# tolerance test then fails now and then, in stock as well). With it, every test is seeded as in
# upstream's own runs (TEST_SEED, default 0), so a run is reproducible and stock's failure set is
# fixed. TEST_SEED=RANDOM brings the variation back.
PYTHONPATH="$OUT/plugin${EXTRA_PATH:+:$EXTRA_PATH}${PYTHONPATH:+:$PYTHONPATH}" ARM_ACCEL_SUITE_REPORT="$OUT/arm_accel_report.json" \
  timeout "${UPSTREAM_TIMEOUT:-7200}" "$PY" -m pytest -q -p no:cacheprovider -p arm_accel_suite_report \
  --confcutdir "$TESTS" -rfE "${ARGS[@]}" "$@" >"$OUT/pytest.log" 2>&1
rc=$?
end=$(date +%s)
tail -n 3 "$OUT/pytest.log" >&2
echo "wall time: $((end - start)) s (pytest exit $rc)" >&2

"$PY" - "$OUT" "$KNOWN_STOCK_FAILURES" "${ARM_ACCEL:-1}" <<'PYEOF'
import json, re, sys
from pathlib import Path

out, known, env = Path(sys.argv[1]), set(sys.argv[2].split()), sys.argv[3]
failed = set()
for line in (out / "pytest.log").read_text(errors="replace").splitlines():
    m = re.match(r"^(FAILED|ERROR) (\S+)", line)
    if m:
        path, _, name = m.group(2).partition("::")
        failed.add(f"{Path(path).name}::{name}" if name else Path(path).name)
(out / "failures.txt").write_text("".join(f"{t}\n" for t in sorted(failed)))
report_file = out / "arm_accel_report.json"
report = json.loads(report_file.read_text()) if report_file.exists() else {}
status, stats = report.get("status", {}), report.get("stats", {})
print(f"failures: {sorted(failed)}")
print(f"expected: {sorted(known)}")
if env.strip().lower() not in ("0", "false", "off", "no"):
    print(f"hook activated: {status.get('activated')}; swapped: {sorted(status.get('swapped', {}))}"
          f"; skipped: {status.get('skipped')}")
    for name, s in sorted(stats.items()):
        scans = ""
        if s.get("scans_native") or s.get("scans_declined"):
            scans = (f" scans native {s['scans_native']} declined {s['scans_declined']} "
                     f"in {s['scan_runs']} runs, mispredicted values {s['shape_mismatches']}")
        print(f"  {name}: calls {s['calls']} accelerated {s['accelerated']} "
              f"fallbacks {s['fallbacks']} retraces {s['retraces']} seconds {s['seconds']:.2f}"
              + scans)
    if not status.get("activated"):
        print("ERROR: the hook did not activate in the pytest process")
        sys.exit(1)
    mispredicted = sum(s.get("shape_mismatches", 0) for s in stats.values())
    if mispredicted:
        print(f"ERROR: the between-scan model mispredicted {mispredicted} value(s)")
        sys.exit(1)
missing, extra = known - failed, failed - known
if extra:
    print(f"NEW FAILURES vs stock: {sorted(extra)}")
if missing:
    print(f"note: known stock failures that passed/were not run: {sorted(missing)}")
sys.exit(1 if extra else 0)
PYEOF
