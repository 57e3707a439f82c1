"""One shard of the long fuzz profile (README "Development"), with its figures.

Runs ``tests/test_fuzz_differential.py -k random_models`` under ``ARM_ACCEL_FUZZ=long`` with
``--hypothesis-seed=SEED`` in this process and writes ``OUT`` (JSON): pytest's exit code, wall and
CPU seconds, how many examples the log lists (``ARM_ACCEL_FUZZ_LOG``, default ``OUT.log``) and
``arm_accel.stats()`` at the end -- mispredictions are ``shape_mismatches`` and ``misprediction``
fallbacks of the two propagation passes. Also written when interrupted (``timeout -s INT``).
Strict by default, as the suite; ``ARM_ACCEL_STRICT=0`` lets failures fall back (and be counted).

    ARM_ACCEL_STRICT=1 timeout -s INT 1800 nice -n 19 python benches/fuzz_shard.py /tmp/s1.json 101
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def main(out: str, seed: int) -> int:
    os.environ["ARM_ACCEL_FUZZ"] = "long"
    os.environ.setdefault("ARM_ACCEL_STRICT", "1")
    log = Path(os.environ.setdefault("ARM_ACCEL_FUZZ_LOG", f"{out}.log"))
    wall, cpu = time.perf_counter(), time.process_time()
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

    report = {
        "rc": int(rc),
        "seed": seed,
        "strict": os.environ["ARM_ACCEL_STRICT"],
        "wall_s": round(time.perf_counter() - wall, 1),
        "cpu_s": round(time.process_time() - cpu, 1),
        "examples_logged": len(log.read_text().splitlines()) if log.exists() else 0,
        "stats": arm_accel.stats().as_dict(),
    }
    Path(out).write_text(json.dumps(report, indent=1, default=str))
    return int(rc)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
