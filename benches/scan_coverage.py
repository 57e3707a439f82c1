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
import contextlib
import copy
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from arm_accel import capture, models, stats
from arm_accel.passes import propagate, scan_plan
from arm_accel.testing import assert_graphs_equal
from torch import fx

PASS_NAMES = ("PropagateViewCopyPermuteDownPass", "PropagateViewCopyPermuteUpPass")


def assert_users_equal(a: fx.GraphModule, b: fx.GraphModule) -> None:
    """Users of every node in the same order (positions): later scans walk them in order."""
    na, nb = list(a.graph.nodes), list(b.graph.nodes)
    ia = {n: i for i, n in enumerate(na)}
    ib = {n: i for i, n in enumerate(nb)}
    for i, (x, y) in enumerate(zip(na, nb, strict=True)):
        ux = [ia[u] for u in x.users]
        uy = [ib[u] for u in y.users]
        assert ux == uy, f"node {i} ({x.name}): users {ux} != {uy}"


@contextlib.contextmanager
def checked_scans(counts: Counter[str]) -> Iterator[None]:
    """Every planned scan is compared with stock's walk on a deep copy of its input."""
    original = scan_plan.run_scan
    original_apply = scan_plan.apply_edits

    def apply_edits(pass_: Any, nodes: list[fx.Node], edits: Any) -> None:
        for edit in edits:
            counts[f"edit: {edit[0]}"] += 1
        original_apply(pass_, nodes, edits)

    def run_scan(
        pass_: Any, graph_module: fx.GraphModule, name: str, cache: Any = None
    ) -> bool | None:
        reference = copy.deepcopy(graph_module)
        before = stats.snapshot().get(name, {}).get("scans_declined", {})
        planned = original(pass_, graph_module, name, cache)
        if planned is None:
            after = stats.snapshot()[name]["scans_declined"]
            for reason, n in after.items():  # type: ignore[union-attr]
                if n != before.get(reason, 0):  # type: ignore[union-attr]
                    counts[f"declined: {reason}"] += 1
            return None
        expected = propagate.PropagateViewCopyPermuteDownPass._python_scan(pass_, reference)
        assert planned == expected, f"modified {planned} != stock {expected}"
        assert_graphs_equal(graph_module, reference)
        assert_users_equal(graph_module, reference)
        counts["native"] += 1
        return planned

    scan_plan.run_scan = run_scan
    scan_plan.apply_edits = apply_edits
    try:
        yield
    finally:
        scan_plan.run_scan = original
        scan_plan.apply_edits = original_apply


def _tosa_context(instance: Any) -> Any:
    from executorch.backends.arm.tosa.specification import TosaLoweringContext

    return TosaLoweringContext(instance.compile_spec.tosa_spec)


def replay(records: list[capture.Captured]) -> None:
    """Run our class on every captured propagation call (scans checked if inside
    ``checked_scans``)."""
    for record in records:
        if record.pass_name not in PASS_NAMES:
            continue
        inst = record.pass_instance
        cls = getattr(propagate, record.pass_name)
        with _tosa_context(inst):
            cls(inst.compile_spec, inst.exported_program).call(record.fresh_graph())


def timed_replay(records: list[capture.Captured], enabled: bool) -> float:
    previous = scan_plan.ENABLED
    scan_plan.ENABLED = enabled
    try:
        start = time.perf_counter()
        replay(records)
        return time.perf_counter() - start
    finally:
        scan_plan.ENABLED = previous


def first_scan_costs(records: list[capture.Captured], repeat: int = 5) -> None:
    """Per call, the first scan on its captured input: planner (export, plan, apply) vs stock's
    walk, in milliseconds (best of ``repeat``, each on a fresh copy)."""
    from arm_accel import _native

    for record in records:
        inst = record.pass_instance
        pass_ = getattr(propagate, record.pass_name)(inst.compile_spec, inst.exported_program)
        config = scan_plan.scan_config(pass_)
        assert not isinstance(config, str), config
        direction, tosa = config
        best = {"export": 1e9, "plan": 1e9, "apply": 1e9, "python walk": 1e9}
        with _tosa_context(inst):
            for _ in range(repeat):
                gm, ref = record.fresh_graph(), record.fresh_graph()
                t0 = time.perf_counter()
                exported = scan_plan.export_scan_input(gm, pass_, tosa)
                assert not isinstance(exported, str), exported
                t1 = time.perf_counter()
                answer = _native.plan_propagation_scan(*exported, direction, tosa)
                t2 = time.perf_counter()
                if answer[0] == "plan":
                    scan_plan.apply_edits(pass_, exported[0].nodes, answer[2])
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
        total = sum(n for key, n in counts.items() if not key.startswith("edit"))
        print(f"{name}: {len(records)} calls, {total} scans, {counts['native']} planned natively")
        for key, n in sorted(counts.items()):
            if key != "native":
                print(f"  {key}: {n}")
        on, off = float("inf"), float("inf")
        for _ in range(args.repeat):  # interleaved, so load drifts hit both alike
            on = min(on, timed_replay(records, True))
            off = min(off, timed_replay(records, False))
        print(
            f"  replay of all calls (best of {args.repeat}): planner {on:.3f} s, "
            f"python walk {off:.3f} s"
        )
        first_scan_costs(records)


if __name__ == "__main__":
    main()
