"""How much of the propagation walk the native scan planner decides, checked scan by scan.

Lowers each model stock once, capturing what ``PropagateViewCopyPermute{Down,Up}Pass`` receive,
then replays every captured call with our class. Every scan the planner answers is checked
against stock's own walk on a deep copy of the same graph (``assert_graphs_equal`` plus users
order); the script prints scans planned natively vs declined (by reason), and the time of the
accelerated calls with the planner on and off (same inputs, same process).

    python benches/scan_coverage.py llama1 llama2 transformer2
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from arm_accel.control import counters
from arm_accel.pipeline.passes.propagate import accelerated, scan_plan
from arm_accel.pipeline.passes.propagate.retrace import VirtualRetracer
from arm_accel.tools import capture, models

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.scans import PASS_NAMES, checked_scans, replay, scans_per_run, tosa_context  # noqa: E402


def timed_replay(records: list[capture.Captured], max_scans: int | None) -> tuple[float, int]:
    """Seconds for replaying every call, and the virtual re-traces they ran (``max_scans``: as
    ``scans_per_run``)."""
    original_apply = VirtualRetracer.apply
    retraces = 0

    def apply(self: VirtualRetracer, **kwargs: Any) -> int:
        nonlocal retraces
        retraces += 1
        return original_apply(self, **kwargs)

    VirtualRetracer.apply = apply  # type: ignore[method-assign]
    try:
        with scans_per_run(max_scans):
            start = time.perf_counter()
            replay(records)
            return time.perf_counter() - start, retraces
    finally:
        VirtualRetracer.apply = original_apply  # type: ignore[method-assign]


def first_scan_costs(records: list[capture.Captured], repeat: int = 5) -> None:
    """Per call, the first scan on its captured input: planner (export, plan, apply) vs stock's
    walk, in milliseconds (best of ``repeat``, each on a fresh copy)."""
    from arm_accel import _native

    for record in records:
        inst = record.pass_instance
        pass_ = getattr(accelerated, record.pass_name)(inst.compile_spec, inst.exported_program)
        config = scan_plan.scan_config(pass_)
        assert not isinstance(config, str), config
        direction, tosa = config
        best = {"export": 1e9, "plan": 1e9, "apply": 1e9, "python walk": 1e9}
        with tosa_context(inst):
            for _ in range(repeat):
                gm, ref = record.fresh_graph(), record.fresh_graph()
                t0 = time.perf_counter()
                exported = scan_plan.export_scan_input(gm, pass_, tosa)
                assert not isinstance(exported, str), exported
                t1 = time.perf_counter()
                answer = _native.plan_propagation_scan(*exported, direction, tosa)
                t2 = time.perf_counter()
                if isinstance(answer, _native.ScanPlan):
                    scan_plan.apply_edits(pass_, exported[0].nodes, answer.edits)
                t3 = time.perf_counter()
                pass_._python_scan(ref)
                t4 = time.perf_counter()
                for key, dt in zip(best, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                    best[key] = min(best[key], dt)
        n = len(record.graph_module.graph.nodes)
        figures = ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in best.items())
        print(f"  first scan of {record.pass_name}[{record.index}] ({n} nodes): {figures}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for name in args.models:
        model, inputs, mode = models.build(name)
        exported = models.export_for_arm(model, inputs, mode)
        with capture.capture(PASS_NAMES) as records:
            models.lower(exported, mode)
        counts: Counter[str] = Counter()
        with checked_scans(counts):
            replay(records)
        total = sum(n for key, n in counts.items() if key == "native" or key.startswith("declined"))
        print(f"{name}: {len(records)} calls, {total} scans, {counts['native']} planned natively")
        for key, n in sorted(counts.items()):
            if key != "native":
                print(f"  {key}: {n}")
        mismatches = sum(counters.snapshot()[n].shape_mismatches for n in PASS_NAMES)
        print(f"  values the between-scan model got wrong: {mismatches}")
        configs = {  # label: scans per native run (0: none, stock's walk)
            "planner, runs to the fixed point": None,
            "planner, one scan per run": 1,
            "python walk": 0,
        }
        best = {label: (float("inf"), 0) for label in configs}
        for _ in range(args.repeat):  # interleaved, so load drifts hit all alike
            for label, max_scans in configs.items():
                seconds, retraces = timed_replay(records, max_scans)
                best[label] = (min(best[label][0], seconds), retraces)
        print(f"  replay of all calls (best of {args.repeat}):")
        for label, (seconds, retraces) in best.items():
            print(f"    {label}: {seconds:.3f} s, {retraces} virtual re-traces")
        first_scan_costs(records)


if __name__ == "__main__":
    main()
