"""What activating arm-accel adds to a script: the import of ``executorch.backends.arm._passes``
(where the hook activates and installs the patch table) after ``torch`` and
``executorch.exir`` are imported, with ``ARM_ACCEL=0`` and ``=1``, each run in a fresh
interpreter, the two alternating. Prints each side's runs, medians and the difference.

    python benches/activation.py [--reps 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = """
import json, time
import torch, executorch.exir
t0 = time.perf_counter()
import executorch.backends.arm._passes
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""


def one_run(enabled: bool) -> float:
    env = {**os.environ, "ARM_ACCEL": "1" if enabled else "0", "PYTHONHASHSEED": "0"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith('{"seconds"'))
    return float(json.loads(line)["seconds"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    runs: dict[str, list[float]] = {"stock": [], "accelerated": []}
    one_run(True)  # page cache and bytecode of both sides' modules
    for _ in range(args.reps):
        runs["stock"].append(one_run(False))
        runs["accelerated"].append(one_run(True))
    for side, xs in runs.items():
        cells = ", ".join(f"{x:.2f}" for x in xs)
        print(
            f"{side:<12} import of the Arm passes, s: {cells}  median {statistics.median(xs):.2f}"
        )
    diff = statistics.median(runs["accelerated"]) - statistics.median(runs["stock"])
    print(f"activation adds (median - median): {diff:+.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
