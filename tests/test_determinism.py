"""The same graph twice gives the same plan, the same edits and the same native output.

Runs on the graphs a real lowering hands to the five accelerated passes (llama1 INT, captured
once per session by ``conftest.captured_lowering``). For the passes built on ``AcceleratedPass``
the plan (``accel_plan``) of two deep copies must be equal node for node; for every pass the
graphs after an accelerated call on two copies must be equal; the native kernels must return
equal arrays for equal tables.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from arm_accel import _native
from arm_accel.control import switch
from arm_accel.native import table
from arm_accel.pipeline.passes.base import AcceleratedPass, Decline
from arm_accel.testing import assert_graphs_equal
from conftest import captured_lowering
from torch import fx


def _norm(plan: Any, index: dict[fx.Node, int]) -> Any:
    """A plan with nodes replaced by their graph positions, comparable across graph copies."""
    if isinstance(plan, fx.Node):
        return ("node", index[plan])
    if isinstance(plan, (set, frozenset)):
        return ("set", sorted((_norm(p, index) for p in plan), key=repr))
    if isinstance(plan, dict):
        items = ((repr(_norm(k, index)), _norm(v, index)) for k, v in plan.items())
        return ("dict", sorted(items, key=repr))
    if dataclasses.is_dataclass(plan) and not isinstance(plan, type):
        values = [(f.name, _norm(getattr(plan, f.name), index)) for f in dataclasses.fields(plan)]
        return (type(plan).__name__, values)
    if isinstance(plan, (list, tuple)):
        return (type(plan).__name__, [_norm(p, index) for p in plan])
    if isinstance(plan, np.ndarray):
        return ("array", plan.dtype.str, plan.tolist())
    return plan


def _plan_of(instance: Any, gm: fx.GraphModule) -> Any:
    try:
        plan = instance.accel_plan(gm)
    except Decline as exc:
        return ("decline", str(exc))
    return _norm(plan, {n: i for i, n in enumerate(gm.graph.nodes)})


@pytest.fixture(scope="module")
def records() -> list[Any]:
    return captured_lowering("llama1")[0]


def test_same_graph_gives_the_same_plan(records) -> None:
    planned: dict[str, int] = {}
    for record in records:
        instance = record.pass_instance
        if not isinstance(instance, AcceleratedPass):
            continue
        first = _plan_of(instance, record.fresh_graph())
        second = _plan_of(instance, record.fresh_graph())
        assert first == second, f"{record.pass_name} call {record.index}: plans differ"
        if first[0] != "decline" and repr(first) != repr(("list", [])):
            planned[record.pass_name] = planned.get(record.pass_name, 0) + 1
    # Not vacuous: the lowering gave non-empty plans to the native-backed passes (llama1's
    # outermost RemovePermutes calls have no permute left to plan for).
    assert {"CanonicalizeViewCopyPermutePass", "FuseDuplicateUsersPass"} <= set(planned), planned


def test_same_graph_gives_the_same_edits(records) -> None:
    from executorch.backends.arm.tosa.specification import (
        TosaLoweringContext,
        TosaSpecification,
    )

    assert switch.is_enabled()  # the accelerated path, not the stock one
    spec = TosaSpecification.create_from_string("TOSA-1.0+INT")  # llama1 is lowered INT
    names = set()
    for record in records:
        a, b = record.fresh_graph(), record.fresh_graph()
        with TosaLoweringContext(spec):
            ra = record.pass_instance.call(a)
            rb = record.pass_instance.call(b)
        assert ra.modified == rb.modified, record.pass_name
        assert_graphs_equal(ra.graph_module, rb.graph_module)
        names.add(record.pass_name)
    assert len(names) >= 4, names


def test_native_kernels_are_deterministic(records) -> None:
    mask = int(table.Cls.PERMUTE | table.Cls.VIEW)
    checked = 0
    for record in records:
        gm = record.graph_module
        constants = table.constant_names(getattr(record.pass_instance, "exported_program", None))
        t1, t2 = table.export_table(gm, constants), table.export_table(gm, constants)
        for field in ("op", "target", "target_class", "in_idx", "user_idx", "shape", "flags"):
            assert np.array_equal(getattr(t1, field), getattr(t2, field)), field
        keys = np.arange(len(t1.target_class), dtype=np.int64)
        for call in (
            lambda t: _native.collect_chains(t, mask),
            lambda t, keys=keys: _native.user_signatures(t, keys),
            lambda t: (_native.constant_mask(t),),
        ):
            for x, y in zip(call(t1), call(t2), strict=True):
                assert np.array_equal(x, y)
        checked += 1
    assert checked
