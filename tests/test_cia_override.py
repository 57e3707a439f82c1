"""Inside the edge stage's decomposition calls, ``_override_composite_implicit_decomp``
(torch.export.exported_program) is :func:`arm_accel.edge.cia_override.overriding`, which makes
the same patches without building ``py_impl`` / ``register_op_impl`` decorators.

Each test compares the state of the patched operators (their ``py_kernels`` in order, their
fake rule, their dispatch caches) under stock's function with the state under ours, on the same
ops, or checks which of the two the module's binding runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import pytest
import torch
from arm_accel import counters, patches
from arm_accel.edge import cia_ops, cia_override
from arm_accel.records import PassStats
from torch._subclasses import fake_impls
from torch.export import default_decompositions
from torch.export import exported_program as ep_module
from torch.export.exported_program import _split_decomp_table_to_cia_and_python_decomp


def _stock() -> Callable[..., Any]:
    return patches.original("edge.cia_override")


def _kind(fn: Any) -> Any:
    """What a kernel is, comparable across two patchings: functions by module and qualified name,
    partials by their function's name (the fake rule's is a closure in stock, module-level in
    ours), arguments and keywords, anything else by identity."""
    if fn is None:
        return None
    if isinstance(fn, functools.partial):
        inner = {k: _kind(v) if callable(v) else v for k, v in fn.keywords.items()}
        return ("partial", fn.func.__name__, tuple(fn.args), tuple(sorted(inner.items())))
    if hasattr(fn, "__qualname__"):
        return (fn.__module__, fn.__qualname__)
    return id(fn)


def _state(ops: list[Any]) -> list[Any]:
    return [
        (
            str(op),
            [(str(k), _kind(v)) for k, v in op.py_kernels.items()],
            _kind(fake_impls.op_implementations_dict.get(op)),
            len(op._dispatch_cache),
        )
        for op in ops
    ]


@pytest.fixture(scope="module")
def table() -> dict[Any, Any]:
    """The default table's CIA part, the one every decomposition call patches (~510 ops)."""
    cia, _ = _split_decomp_table_to_cia_and_python_decomp(default_decompositions())
    return cia


def _patched_state(override: Callable[..., Any], table: dict[Any, Any]) -> tuple[Any, Any]:
    ops = list(table)
    with override(table):
        inside = _state(ops)
    return inside, _state(ops)


def test_patches_equal_stocks(table: dict[Any, Any]) -> None:
    """Inside the block and after it, every op's python kernels (keys in order, each kernel's
    kind), fake rule and dispatch cache are those stock's function leaves; more than 500 ops."""
    _patched_state(_stock(), table)  # stock's exit drops a few fake rules for good: warm up
    stock_inside, stock_after = _patched_state(_stock(), table)
    ours_inside, ours_after = _patched_state(cia_override.overriding, table)
    assert len(table) > 500
    assert stock_inside != stock_after  # the block patches something
    assert ours_inside == stock_inside
    assert ours_after == stock_after


def test_fake_rule_runs_the_original_cia_kernel() -> None:
    """The fake rule registered for a preserved CIA op calls its original CIA decomposition in
    the fake mode: a fake ``aten.linear`` under ours has the shape and dtype eager computes."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = torch.ops.aten.linear.default
    x, w = torch.randn(3, 4), torch.randn(5, 4)
    with cia_override.overriding({op: ep_module._special_op_to_preserve_cia}):
        rule = fake_impls.op_implementations_dict[op]
        mode = FakeTensorMode()
        with mode:
            fx, fw = mode.from_tensor(x), mode.from_tensor(w)
        out = rule(mode, op, fx, fw)
    expected = torch.nn.functional.linear(x, w)
    assert (tuple(out.shape), out.dtype) == (tuple(expected.shape), expected.dtype)


def _override_counts() -> tuple[int, int]:
    s = counters.snapshot().get(cia_override.STATS_NAME, PassStats())
    return s.accelerated, sum(s.fallbacks.values())


def test_binding_is_ours_in_the_stage_only(table: dict[Any, Any]) -> None:
    """The module's binding returns :func:`overriding`'s block inside ``collecting_once`` (the
    stage's calls), counted when entered; outside it, stock's, uncounted."""
    before = _override_counts()
    outside = ep_module._override_composite_implicit_decomp(table)
    assert outside.gen.__qualname__ == "_override_composite_implicit_decomp"  # type: ignore[attr-defined]
    assert _override_counts() == before
    with cia_ops.collecting_once():
        inside = ep_module._override_composite_implicit_decomp(table)
    assert inside.gen.__qualname__ == "overriding"  # type: ignore[attr-defined]
    with inside:
        pass
    assert _override_counts() == (before[0] + 1, before[1])


def test_an_op_that_is_not_an_opoverload_runs_stock() -> None:
    """A key that is not a plain ``OpOverload`` (here an ``OpOverloadPacket``) declines: the
    stock function runs, counted as a fallback with the reason."""
    before = _override_counts()
    packet = torch.ops.aten.linear
    with cia_ops.collecting_once():
        manager = ep_module._override_composite_implicit_decomp({packet: lambda *a: None})
    assert manager.gen.__qualname__ == "_override_composite_implicit_decomp"  # type: ignore[attr-defined]
    assert _override_counts() == (before[0], before[1] + 1)
    assert any(
        "not an OpOverload" in r for r in counters.snapshot()[cia_override.STATS_NAME].fallbacks
    )
