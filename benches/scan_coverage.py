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
from collections.abc import Callable, Iterator
from typing import Any

from arm_accel import capture, models, stats
from arm_accel.passes.propagate import accelerated, scan_plan
from arm_accel.passes.propagate.retrace import VirtualRetracer
from arm_accel.testing import assert_graphs_equal
from executorch.backends.transforms import propagate_view_copy_permute_pass as _generic
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


def stock_retrace(pass_: Any, graph_module: fx.GraphModule) -> fx.GraphModule:
    """Stock's ``_retrace`` (DCE, lint, a real ``ExportPass`` re-trace), whatever our class
    makes of it."""
    return _generic.PropagateViewCopyPermutePass._retrace(pass_, graph_module)


@contextlib.contextmanager
def checked_scans(
    counts: Counter[str],
    retrace: Callable[[Any, fx.GraphModule], fx.GraphModule] = stock_retrace,
) -> Iterator[None]:
    """Every planned run of scans is compared with stock's walk on a deep copy of its input,
    with ``retrace`` (stock's real one by default) between the scans: graphs and users order,
    before the run's closing re-trace (so the values the model wrote are compared too)."""
    original = scan_plan.run_scans
    original_apply = scan_plan.apply_edits

    def apply_edits(pass_: Any, nodes: list[fx.Node], edits: Any) -> None:
        for edit in edits:
            counts[f"edit: {edit[0]}"] += 1
        original_apply(pass_, nodes, edits)

    def run_scans(
        pass_: Any,
        graph_module: fx.GraphModule,
        name: str,
        cache: Any = None,
        max_scans: int = 1,
        **kwargs: Any,
    ) -> scan_plan.ScanRun | None:
        reference = copy.deepcopy(graph_module)
        before = stats.snapshot().get(name, {}).get("scans_declined", {})
        run = original(pass_, graph_module, name, cache, max_scans, **kwargs)
        if run is None:
            after = stats.snapshot()[name]["scans_declined"]
            for reason, n in after.items():  # type: ignore[union-attr]
                if n != before.get(reason, 0):  # type: ignore[union-attr]
                    counts[f"declined: {reason}"] += 1
            return None
        assert 1 <= run.scans <= max_scans
        for k in range(run.scans):
            if k:
                reference = retrace(pass_, reference)
            expected = accelerated.PropagateViewCopyPermuteDownPass._python_scan(pass_, reference)
            last = k == run.scans - 1
            assert expected == (not last or not run.fixed_point), f"scan {k}: stock {expected}"
        assert run.modified == (run.scans > 1 or not run.fixed_point)
        assert_graphs_equal(graph_module, reference)
        assert_users_equal(graph_module, reference)
        counts["native"] += run.scans
        if run.scans > 1:
            counts["scans in multi-scan runs"] += run.scans
        return run

    scan_plan.run_scans = run_scans
    scan_plan.apply_edits = apply_edits
    try:
        yield
    finally:
        scan_plan.run_scans = original
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
        cls = getattr(accelerated, record.pass_name)
        with _tosa_context(inst):
            cls(inst.compile_spec, inst.exported_program).call(record.fresh_graph())


def timed_replay(
    records: list[capture.Captured], enabled: bool, max_scans: int | None = None
) -> tuple[float, int]:
    """Seconds for replaying every call, and the virtual re-traces they ran."""
    previous = scan_plan.ENABLED, accelerated.MAX_SCANS_PER_RUN
    scan_plan.ENABLED = enabled
    if max_scans is not None:
        accelerated.MAX_SCANS_PER_RUN = max_scans
    original_apply = VirtualRetracer.apply
    retraces = 0

    def apply(self: VirtualRetracer, **kwargs: Any) -> int:
        nonlocal retraces
        retraces += 1
        return original_apply(self, **kwargs)

    VirtualRetracer.apply = apply  # type: ignore[method-assign]
    try:
        start = time.perf_counter()
        replay(records)
        return time.perf_counter() - start, retraces
    finally:
        VirtualRetracer.apply = original_apply  # type: ignore[method-assign]
        scan_plan.ENABLED, accelerated.MAX_SCANS_PER_RUN = previous


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
        total = sum(n for key, n in counts.items() if key == "native" or key.startswith("declined"))
        print(f"{name}: {len(records)} calls, {total} scans, {counts['native']} planned natively")
        for key, n in sorted(counts.items()):
            if key != "native":
                print(f"  {key}: {n}")
        mismatches = sum(stats.snapshot()[n]["shape_mismatches"] for n in PASS_NAMES)
        print(f"  values the between-scan model got wrong: {mismatches}")
        configs = {  # label: (planner on, scans per native run)
            "planner, runs to the fixed point": (True, None),
            "planner, one scan per run": (True, 1),
            "python walk": (False, None),
        }
        best = {label: (float("inf"), 0) for label in configs}
        for _ in range(args.repeat):  # interleaved, so load drifts hit all alike
            for label, (enabled, max_scans) in configs.items():
                seconds, retraces = timed_replay(records, enabled, max_scans)
                best[label] = (min(best[label][0], seconds), retraces)
        print(f"  replay of all calls (best of {args.repeat}):")
        for label, (seconds, retraces) in best.items():
            print(f"    {label}: {seconds:.3f} s, {retraces} virtual re-traces")
        first_scan_costs(records)


if __name__ == "__main__":
    main()
