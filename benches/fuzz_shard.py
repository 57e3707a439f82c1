"""One shard of the long fuzz profile (docs/development.md, "Fuzzing"), with its figures.

Runs ``tests/test_fuzz_differential.py -k random_models`` under ``ARM_ACCEL_FUZZ=long`` with
``--hypothesis-seed=SEED`` in this process and writes ``OUT`` (JSON): pytest's exit code, wall and
CPU seconds, how many examples the log lists (``ARM_ACCEL_FUZZ_LOG``, default ``OUT.log``),
``arm_accel.stats()`` at the end -- mispredictions are ``shape_mismatches`` and ``misprediction``
fallbacks of the two propagation passes -- and per propagation pass how many native runs planned
1, 2, ... scans (``scan_runs_by_scans``: the between-scan model is only exercised by runs of >= 2),
and how many lowerings raised in stock and accelerated alike (``both_raised``; the log has each
error on an ``outcome:`` line after its example).
Also written when interrupted (``timeout -s INT``). ``ARM_ACCEL_FUZZ_EXAMPLES=N`` sets the
shard's number of examples (the profile's 2000 otherwise).
Strict by default, as the suite; ``ARM_ACCEL_STRICT=0`` lets failures fall back (and be counted).

    ARM_ACCEL_STRICT=1 timeout -s INT 1800 nice -n 19 python benches/fuzz_shard.py /tmp/s1.json 101
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def scan_run_counts() -> Iterator[dict[str, Counter[int]]]:
    """Per propagation pass, how many native runs of scans planned each number of scans
    (``scan_plan.run_scans``' result, which ``stats()`` sums into ``scans_native``)."""
    from arm_accel.pipeline.passes.propagate import scan_plan

    counts: dict[str, Counter[int]] = {}
    original = scan_plan.run_scans

    def run_scans(pass_: Any, graph_module: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        run = original(pass_, graph_module, name, *args, **kwargs)
        if run is not None:
            counts.setdefault(name, Counter())[run.scans] += 1
        return run

    scan_plan.run_scans = run_scans
    try:
        yield counts
    finally:
        scan_plan.run_scans = original


def main(out: str, seed: int) -> int:
    os.environ["ARM_ACCEL_FUZZ"] = "long"
    os.environ.setdefault("ARM_ACCEL_STRICT", "1")
    log = Path(os.environ.setdefault("ARM_ACCEL_FUZZ_LOG", f"{out}.log"))
    wall, cpu = time.perf_counter(), time.process_time()
    with scan_run_counts() as runs:
        rc = pytest.main(
            [
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                str(ROOT / "tests" / "test_fuzz_differential.py"),
                "-k",
                "random_models",
                "--hypothesis-show-statistics",
                f"--hypothesis-seed={seed}",
            ]
        )
    import arm_accel

    lines = log.read_text().splitlines() if log.exists() else []
    report = {
        "rc": int(rc),
        "seed": seed,
        "strict": os.environ["ARM_ACCEL_STRICT"],
        "wall_s": round(time.perf_counter() - wall, 1),
        "cpu_s": round(time.process_time() - cpu, 1),
        "examples_logged": sum("Spec(" in line for line in lines),
        "both_raised": sum("outcome: " in line for line in lines),
        "stats": arm_accel.stats().as_dict(),
        "scan_runs_by_scans": {name: dict(sorted(c.items())) for name, c in runs.items()},
    }
    Path(out).write_text(json.dumps(report, indent=1, default=str))
    return int(rc)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
