"""How often the fuzz generator's models give propagation runs of >= 2 native scans.

Draws ``N`` specs from ``tests/fuzz_models.specs()`` (hypothesis, ``--seed``), lowers each with
acceleration on, FP and INT (no stock lowering, no comparison: the differential test does that),
and prints per propagation pass the native runs by number of scans, and how many had >= 2 (the
only runs where the between-scan model predicts values a re-trace then checks).

    python benches/fuzz_scan_runs.py 100 --seed 7
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
from hypothesis import HealthCheck, Phase, given, seed, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import fuzz_models as fm  # noqa: E402
from arm_accel.tools import models  # noqa: E402
from fuzz_shard import scan_run_counts  # noqa: E402


def draw_specs(n: int, seed_: int) -> list[fm.Spec]:
    """``n`` specs as the long profile's generate phase draws them under ``seed_``."""
    drawn: list[fm.Spec] = []

    @settings(
        max_examples=n,
        database=None,
        deadline=None,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
    )
    @seed(seed_)
    @given(spec=fm.specs())
    def collect(spec: fm.Spec) -> None:
        drawn.append(spec)

    collect()
    return drawn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", help="also write the counts here")
    args = parser.parse_args()
    specs = draw_specs(args.n, args.seed)
    errors: Counter[str] = Counter()
    start = time.perf_counter()
    with scan_run_counts() as runs:
        for spec in specs:
            for mode in ("FP", "INT"):
                model, inputs = fm.build(spec)
                try:
                    models.lower(models.export_for_arm(model, inputs, mode), mode)
                except Exception as exc:  # noqa: BLE001 - stock raises on some models too
                    errors[type(exc).__name__] += 1
    seconds = time.perf_counter() - start
    report: dict[str, object] = {"specs": len(specs), "seed": args.seed, "errors": dict(errors)}
    print(f"{len(specs)} specs, seed {args.seed}, {seconds:.0f} s; raised: {dict(errors)}")
    for name, counts in sorted(runs.items()):
        multi = sum(n for k, n in counts.items() if k >= 2)
        total = sum(counts.values())
        by_scans = dict(sorted(counts.items()))
        print(f"{name}: {total} runs, {multi} with >= 2 scans; by scans {by_scans}")
        report[name] = {"runs": total, "multi_scan_runs": multi, "by_scans": by_scans}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
