"""Fault injection: each of the six accelerated passes is made to fail at each stage
(plan, apply, virtual re-trace, real re-trace); the result must still be stock's and the
fallback must be counted in ``stats()`` with its reason.

Cells replay the inputs the passes received in one stock lowering of ``MODEL`` (captured once)
through the stock class and through ours with the fault installed, comparing graphs after the
pass (``assert_graphs_equal``) up to the first call the fault fired in, and require it to have
fired and the fallback to be counted. One more cell makes the native planner panic through a
whole accelerated lowering and compares its TOSA bytes with stock's.
The matrix (stage x pass: fallbacks counted / calls hit, or n/a) is printed by the last test
and written to ``$ARM_ACCEL_FAULT_MATRIX`` when set.
"""

from __future__ import annotations

import copy
import os
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import pytest
from arm_accel import _native
from arm_accel.control import counters, switch
from arm_accel.pipeline.passes import (
    canonicalize,
    fuse_duplicate_users,
    fuse_identical_input_transforms,
    remove_permutes_around_elementwise,
)
from arm_accel.pipeline.passes.base import _stock_class
from arm_accel.pipeline.passes.propagate import accelerated, scan_plan
from arm_accel.pipeline.passes.propagate.retrace import VirtualRetracer
from arm_accel.runtime import eval_counter
from arm_accel.testing import assert_graphs_equal
from arm_accel.tools import capture, models
from arm_accel.tools.fusion_replay import ACCELERATED, as_class, tosa_context
from executorch.exir.pass_base import _ExportPassBase
from support.native import needs_testing
from support.scans import scans_per_run

MODEL = "llama1"
STAGES = accelerated.STAGES
PROPAGATION = ("PropagateViewCopyPermuteDownPass", "PropagateViewCopyPermuteUpPass")
#: Fusion pass -> the mixin every accelerated variant of it (Arm, transforms, Virtual) derives.
FUSIONS: dict[str, type] = {
    "CanonicalizeViewCopyPermutePass": canonicalize.AccelCanonicalizeMixin,
    "FuseDuplicateUsersPass": fuse_duplicate_users.AccelFuseDuplicateUsersMixin,
    "FuseIdenticalInputTransformsPass": (
        fuse_identical_input_transforms.AccelFuseIdenticalInputTransformsMixin
    ),
    "RemovePermutesAroundElementwiseTosaOps": (
        remove_permutes_around_elementwise.AccelRemovePermutesMixin
    ),
}
PASSES = PROPAGATION + tuple(FUSIONS)
MATRIX: dict[tuple[str, str], str] = {}
REMOVE = "RemovePermutesAroundElementwiseTosaOps"
IN_LOOP_RECORDS = 8  # of the in-loop permute removals, enough to hit every stage


class InjectedFault(RuntimeError):
    """The failure a cell injects."""


class Lowering:
    """One stock lowering of ``MODEL``: the inputs of the Arm passes' outermost calls, of the
    first in-loop permute removals (the pipeline runs that pass only inside propagation), and
    the TOSA bytes."""

    def __init__(self) -> None:
        model, inputs, self.mode = models.build(MODEL)
        self.exported = models.export_for_arm(model, inputs, self.mode)
        in_loop: list[capture.Captured] = []
        with (
            switch.disabled(),
            capture.capture() as records,
            capture.patched_calls([REMOVE], self._recorder(in_loop)),
        ):
            edge = models.lower(copy.deepcopy(self.exported), self.mode)
        self.records = records + in_loop
        self.tosa = models.tosa_bytes(edge)

    @staticmethod
    def _recorder(into: list[capture.Captured]) -> Any:
        """Records the propagation passes' in-loop ``Virtual`` variant of the Arm permute
        removal (``capture.capture`` records the Arm class under its own name only)."""

        def wrap(name: str, original: Any) -> Any:
            def call(self: Any, graph_module: Any) -> Any:
                if type(self).__name__ == f"Virtual{name}" and len(into) < IN_LOOP_RECORDS:
                    into.append(
                        capture.Captured(name, len(into), copy.deepcopy(graph_module), self)
                    )
                return original(self, graph_module)

            return call

        return wrap

    def inputs_of(self, name: str) -> list[capture.Captured]:
        """Captured calls of the Arm pass ``name``."""
        return [r for r in self.records if r.pass_name == name]


@pytest.fixture(scope="module")
def lowering() -> Lowering:
    return Lowering()


def _classes(record: capture.Captured) -> tuple[type, type]:
    """(stock, ours) Arm classes of a captured call."""
    name = record.pass_name
    if name in PROPAGATION:
        return accelerated._stock_class(getattr(accelerated, name)), getattr(accelerated, name)
    return _stock_class(ACCELERATED[name]), ACCELERATED[name]


def _replay(lowering: Lowering, records: list[capture.Captured], hits: Counter[str]) -> None:
    """Records through stock and ours (fault installed by the caller), graphs equal and as
    many ``<eval_with_key>`` numbers taken (a rolled-back call gives its own back), up to the
    first whose call hit the fault (to keep the matrix cheap)."""
    counters.reset()
    with tosa_context(lowering.records):
        for record in records:
            stock_cls, ours_cls = _classes(record)
            graph = record.fresh_graph()
            start = eval_counter.position()
            with switch.disabled():
                expected = as_class(record.pass_instance, stock_cls).call(graph)
            stock_numbers = eval_counter.position() - start
            graph = record.fresh_graph()
            start = eval_counter.position()
            got = as_class(record.pass_instance, ours_cls).call(graph)
            assert eval_counter.position() - start == stock_numbers, "<eval_with_key> numbers"
            assert expected.modified == got.modified
            assert_graphs_equal(expected.graph_module, got.graph_module)
            if hits["hit"]:
                return


def _fallbacks(reason: str) -> int:
    return sum(s.fallbacks.get(reason, 0) for s in counters.snapshot().values())


# -- the faults ---------------------------------------------------------------------------------
# Each installs itself with ``mp`` and returns (hits counter, the reason the fallback records,
# which pass's captured calls to replay). A fault fires after the real work where there is
# some, so the graph is half-edited when it raises.

Fault = tuple[Counter[str], str, tuple[str, ...]]


def _propagation_fault(mp: pytest.MonkeyPatch, stage: str, name: str) -> Fault:
    hits: Counter[str] = Counter()
    direction = "Down" if "Down" in name else "Up"

    def mine(pass_: Any) -> bool:  # name "": both directions
        return not name or direction in type(pass_).__name__

    if stage == "plan":  # a Rust panic in the planner
        if not _native.TESTING:
            pytest.skip(needs_testing.kwargs["reason"])
        original = _native.plan_propagation_run

        def planner(*args: Any) -> Any:
            hits["hit"] += 1
            _native._test_panic("injected planner panic")
            return original(*args)

        mp.setattr(_native, "plan_propagation_run", planner)
        return hits, "plan failed: NativePanic", (name,)
    if stage == "apply":
        apply_edits = scan_plan.apply_edits

        def apply(pass_: Any, nodes: Any, edits: Any) -> None:
            apply_edits(pass_, nodes, edits)
            if mine(pass_) and edits:
                hits["hit"] += 1
                raise InjectedFault("apply")

        mp.setattr(scan_plan, "apply_edits", apply)
        return hits, "apply failed: InjectedFault", (name,)
    if stage == "virtual re-trace":
        retrace = VirtualRetracer.apply

        def apply_retrace(self: VirtualRetracer, **kwargs: Any) -> int:
            n = retrace(self, **kwargs)
            if kwargs.get("prologue", True):  # the propagation's own, not a fusion's
                hits["hit"] += 1
                raise InjectedFault("virtual re-trace")
            return n

        mp.setattr(VirtualRetracer, "apply", apply_retrace)
        return hits, "virtual re-trace failed: InjectedFault", (name,)

    def real_retrace(self: Any, graph_module: Any) -> Any:
        result = type(self)._arm_accel_stock._retrace(self, graph_module)
        if self._arm_accel_active:  # the accelerated call's, not the stock fallback's
            hits["hit"] += 1
            raise InjectedFault("real re-trace")
        return result

    mp.setattr(accelerated._AcceleratedPropagation, "_retrace", real_retrace, raising=False)
    return hits, "real re-trace failed: InjectedFault", (name,)


_in_apply = threading.local()


def _fusion_fault(mp: pytest.MonkeyPatch, stage: str, name: str) -> Fault:
    hits: Counter[str] = Counter()
    mixin = FUSIONS[name]
    if stage == "plan":

        def plan(self: Any, graph_module: Any) -> Any:
            hits["hit"] += 1
            raise InjectedFault("plan")

        mp.setattr(mixin, "accel_plan", plan)
        return hits, "plan failed: InjectedFault", (name,)
    accel_apply = mixin.accel_apply
    if stage == "apply":

        def apply(self: Any, graph_module: Any, plan: Any, journal: Any) -> Any:
            accel_apply(self, graph_module, plan, journal)
            hits["hit"] += 1
            raise InjectedFault("apply")

        mp.setattr(mixin, "accel_apply", apply)
        return hits, "apply failed: InjectedFault", (name,)
    if stage == "real re-trace":  # the fusion's closing ExportPass re-trace, on our path
        export_call = _ExportPassBase.call

        def flagged(self: Any, graph_module: Any, plan: Any, journal: Any) -> Any:
            _in_apply.on = True
            try:
                return accel_apply(self, graph_module, plan, journal)
            finally:
                _in_apply.on = False

        def retrace(self: Any, graph_module: Any) -> Any:
            result = export_call(self, graph_module)
            if getattr(_in_apply, "on", False) and isinstance(self, mixin):
                hits["hit"] += 1
                raise InjectedFault("real re-trace")
            return result

        mp.setattr(mixin, "accel_apply", flagged)
        mp.setattr(_ExportPassBase, "call", retrace)
        return hits, "apply failed: InjectedFault", (name,)
    # The virtual re-trace a fusion ends with inside a propagation call: the propagation call
    # rolls back (the fusion's own fallback could not undo it).
    set_tracker = accelerated._VirtualRetraceBase._set_tracker

    def tracked(self: Any, tracker: VirtualRetracer, owner: str) -> None:
        if isinstance(self, mixin):
            apply = tracker.apply

            def failing(**kwargs: Any) -> int:
                apply(**kwargs)
                hits["hit"] += 1
                raise InjectedFault("fusion virtual re-trace")

            tracker.apply = failing  # type: ignore[method-assign]
        set_tracker(self, tracker, owner)

    mp.setattr(accelerated._VirtualRetraceBase, "_set_tracker", tracked)
    return hits, "virtual re-trace failed: InjectedFault", PROPAGATION


FAULTS: dict[str, Callable[[pytest.MonkeyPatch, str, str], Fault]] = {
    **dict.fromkeys(PROPAGATION, _propagation_fault),
    **dict.fromkeys(FUSIONS, _fusion_fault),
}


@pytest.mark.parametrize("name", PASSES)
@pytest.mark.parametrize("stage", STAGES)
def test_fault_falls_back_to_stock(
    lowering: Lowering, stage: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARM_ACCEL_STRICT", "0")  # the fault is provoked: fall back
    records = lowering.inputs_of(name)
    hits, reason, replayed = FAULTS[name](monkeypatch, stage, name)
    if replayed != (name,):
        records = [r for n in replayed for r in lowering.inputs_of(n)]
    assert records, f"the lowering never ran {replayed}"
    _replay(lowering, records, hits)
    counted = _fallbacks(reason)
    if not hits["hit"]:
        MATRIX[stage, name] = "n/a"
        pytest.skip(f"{stage} of {name} never runs on {MODEL}'s captured calls")
    MATRIX[stage, name] = f"ok {counted}/{hits['hit']}"
    # Every fault fired in some call and each such call fell back, counted with its reason
    # (a call may hit the fault more than once only where the fault fires per scan).
    assert 0 < counted <= hits["hit"], (counters.snapshot(), hits)


def _lower_accelerated(lowering: Lowering) -> list[bytes]:
    return models.tosa_bytes(models.lower(copy.deepcopy(lowering.exported), lowering.mode))


@needs_testing
def test_native_panic_in_a_whole_lowering_gives_stock_tosa(
    lowering: Lowering, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The native planner panics on every call of a whole accelerated lowering: the panic
    reaches Python as ``NativePanic``, both propagation passes fall back on every call (counted)
    and the TOSA bytes equal stock's."""
    stage = "plan"
    monkeypatch.setenv("ARM_ACCEL_STRICT", "0")
    assert switch.is_enabled()
    hits, reason, _ = _propagation_fault(monkeypatch, stage, "")  # "" : both directions
    counters.reset()
    assert _lower_accelerated(lowering) == lowering.tosa
    snap = counters.snapshot()
    assert hits["hit"] > 0
    for name in PROPAGATION:
        assert snap[name].fallbacks.get(reason, 0) > 0, snap[name]
    MATRIX[stage, "whole lowering (both propagation passes), TOSA bytes"] = (
        f"ok {_fallbacks(reason)}/{hits['hit']}"
    )


@pytest.mark.parametrize("max_scans", [None, 2])
def test_misprediction_rolls_back_and_runs_stock(
    lowering: Lowering, max_scans: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The between-scan model's values are corrupted (dtype of its first value write) in every
    run: the check catches it -- at the closing re-trace of runs to the fixed point, and before
    the last scan of runs that stop early (``max_scans`` 2) -- the call rolls back and runs stock
    (graphs equal stock's), counted as ``misprediction``; strict, it raises."""
    import torch

    hits: Counter[str] = Counter()
    mirror = scan_plan.mirror_retrace

    def corrupt(graph: Any, nodes: Any, between: Any, *args: Any) -> None:
        mirror(graph, nodes, between, *args)
        for write in between.shapes[:1]:
            node = nodes[write.node]
            node.meta["val"] = node.meta["val"].to(torch.float64)
            hits["hit"] += 1

    monkeypatch.setattr(scan_plan, "mirror_retrace", corrupt)
    monkeypatch.setenv("ARM_ACCEL_STRICT", "0")
    records = [r for n in PROPAGATION for r in lowering.inputs_of(n)]
    with scans_per_run(max_scans):
        _replay(lowering, records, hits)
    assert hits["hit"], "no run of the captured calls wrote a modelled value"
    assert _fallbacks("misprediction") > 0, counters.snapshot()
    MATRIX[f"misprediction (max {max_scans or 'all'} scans/run)", "propagation"] = (
        f"ok {_fallbacks('misprediction')}/{hits['hit']}"
    )
    # Strict: the first corrupted call raises.
    monkeypatch.setenv("ARM_ACCEL_STRICT", "1")
    hits.clear()
    with (
        scans_per_run(max_scans),
        tosa_context(lowering.records),
        pytest.raises(accelerated.Misprediction),
    ):
        for record in records:
            as_class(record.pass_instance, _classes(record)[1]).call(record.fresh_graph())


def test_zz_print_matrix() -> None:
    """Prints the matrix the cells above filled (fallbacks counted / faults hit)."""
    if not MATRIX:
        pytest.skip("no cell ran")
    columns = list(PASSES)
    width = max(len(c) for c in columns)
    lines = [f"fault injection on {MODEL}: fallbacks counted / faults hit (graphs equal stock)"]
    for stage in STAGES:
        lines.append(f"{stage}:")
        for column in columns:
            lines.append(f"  {column:<{width}}  {MATRIX.get((stage, column), '-')}")
    for (stage, column), value in MATRIX.items():
        if column not in columns:
            lines.append(f"{stage} x {column}: {value}")
    text = "\n".join(lines)
    print(text)
    path = os.environ.get("ARM_ACCEL_FAULT_MATRIX")
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")
