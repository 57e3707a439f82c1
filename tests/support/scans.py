"""The propagation test oracle: every planned run of scans checked against stock's walk, and
the replay of captured propagation calls through our classes."""

from __future__ import annotations

import contextlib
import copy
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from arm_accel import PassStats
from arm_accel.control import counters
from arm_accel.pipeline.passes.propagate import accelerated, scan_plan
from arm_accel.testing import assert_graphs_equal
from executorch.backends.transforms import propagate_view_copy_permute_pass as _generic
from torch import fx

if TYPE_CHECKING:
    from arm_accel.tools.capture import Captured

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
            counts[f"edit: {type(edit).__name__}"] += 1
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
        before = counters.snapshot().get(name, PassStats()).scans_declined
        run = original(pass_, graph_module, name, cache, max_scans, **kwargs)
        if run is None:
            after = counters.snapshot()[name].scans_declined
            for reason, n in after.items():
                if n != before.get(reason, 0):
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


@contextlib.contextmanager
def scans_per_run(limit: int | None) -> Iterator[None]:
    """At most ``limit`` scans per native run (None: the planner's own bound, to the fixed
    point), or with ``limit`` 0 no native run at all: every scan is stock's walk."""
    original = scan_plan.run_scans

    def run_scans(
        pass_: Any,
        graph_module: fx.GraphModule,
        name: str,
        cache: Any = None,
        max_scans: int = 1,
        **kwargs: Any,
    ) -> scan_plan.ScanRun | None:
        if limit == 0:
            return None
        bound = max_scans if limit is None else min(max_scans, limit)
        return original(pass_, graph_module, name, cache, bound, **kwargs)

    scan_plan.run_scans = run_scans
    try:
        yield
    finally:
        scan_plan.run_scans = original


def tosa_context(instance: Any) -> Any:
    """The TOSA lowering context a captured pass instance ran in."""
    from executorch.backends.arm.tosa.specification import TosaLoweringContext

    return TosaLoweringContext(instance.compile_spec.tosa_spec)


def replay(records: Sequence[Captured]) -> None:
    """Run our class on every captured propagation call (scans checked if inside
    ``checked_scans``)."""
    for record in records:
        if record.pass_name not in PASS_NAMES:
            continue
        inst = record.pass_instance
        cls = getattr(accelerated, record.pass_name)
        with tosa_context(inst):
            cls(inst.compile_spec, inst.exported_program).call(record.fresh_graph())
