"""Issue 7: random models lowered stock and accelerated must give equal graphs and TOSA bytes.

Each example (a :class:`fuzz_models.Spec`) is exported once per mode (FP, and INT quantized with
the TOSA quantizer), then lowered twice from deep copies of that program: with acceleration off
and on, in this process. Every call of the five accelerated passes records the graph it returns;
the two lowerings must record the same calls with equal graphs (``assert_graphs_equal``) and end in
equal TOSA bytes. When the stock lowering raises, the accelerated one must raise the same type.

CI runs the ``fuzz-ci`` hypothesis profile; ``ARM_ACCEL_FUZZ=long`` runs ``fuzz-long`` (2000
examples, see the README). Failures found by hypothesis are kept below as named regressions.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import fuzz_models as fm
import pytest
import torch
from arm_accel import capture, models, switch
from arm_accel.testing import assert_graphs_equal
from fuzz_models import Op, Spec
from hypothesis import given
from torch import fx

PASSES = tuple(capture.STOCK_PASSES)


@dataclass
class Outcome:
    calls: list[tuple[str, fx.GraphModule]]  # (pass name, graph it returned), in call order
    tosa: list[bytes] | None
    error: BaseException | None


@contextmanager
def record_outputs() -> Iterator[list[tuple[str, fx.GraphModule]]]:
    """Record a deep copy of the graph each outermost call of the five passes returns."""
    records: list[tuple[str, fx.GraphModule]] = []
    depth = [0]

    def wrap(name: str, original: Any) -> Any:
        def call(self: Any, graph_module: fx.GraphModule) -> Any:
            depth[0] += 1
            try:
                result = original(self, graph_module)
            finally:
                depth[0] -= 1
            if depth[0] == 0 and type(self).__name__ == name:
                out = getattr(result, "graph_module", None) or graph_module
                records.append((name, copy.deepcopy(out)))
            return result

        return call

    with capture.patched_calls(PASSES, wrap):
        yield records


def lower_once(program: Any, mode: str, accelerated: bool) -> Outcome:
    torch.manual_seed(0)
    previous = switch.set_enabled(accelerated)
    try:
        with record_outputs() as calls:
            try:
                edge = models.lower(copy.deepcopy(program), mode)
            except Exception as exc:  # compared with the other lowering's outcome
                return Outcome(calls, None, exc)
            return Outcome(calls, models.tosa_bytes(edge), None)
    finally:
        switch.set_enabled(previous)


def check_spec(spec: Spec, modes: tuple[str, ...] = ("FP", "INT")) -> None:
    """Export once per mode, lower stock and accelerated, and compare pass by pass."""
    for mode in modes:
        model, inputs = fm.build(spec)
        with switch.disabled():
            program = models.export_for_arm(model, inputs, mode)
        stock = lower_once(program, mode, accelerated=False)
        ours = lower_once(program, mode, accelerated=True)
        compare(stock, ours, mode)


def compare(stock: Outcome, ours: Outcome, mode: str) -> None:
    if stock.error is not None or ours.error is not None:
        assert type(ours.error) is type(stock.error), (
            f"{mode}: stock raised {stock.error!r}, accelerated raised {ours.error!r}"
        )
        return
    names_stock = [n for n, _ in stock.calls]
    names_ours = [n for n, _ in ours.calls]
    assert names_ours == names_stock, f"{mode}: pass calls differ"
    for k, ((name, a), (_, b)) in enumerate(zip(stock.calls, ours.calls, strict=True)):
        try:
            assert_graphs_equal(a, b)
        except AssertionError as exc:
            raise AssertionError(f"{mode}: call {k} ({name}) differs: {exc}") from None
    assert ours.tosa == stock.tosa, f"{mode}: TOSA bytes differ"


@fm.fuzz_settings()
@given(spec=fm.specs())
def test_random_models_lower_like_stock(spec: Spec) -> None:
    fm.log_example(spec)
    check_spec(spec)


# -- the checker itself must be able to fail ---------------------------------------------------


def test_compare_catches_a_different_graph() -> None:
    spec = Spec(inputs=((2, 3),), ops=(Op("permute", (0,), ((1, 0),)),), outputs=(1,))
    model, inputs = fm.build(spec)
    program = models.export_for_arm(model, inputs, "FP")
    stock = lower_once(program, "FP", accelerated=False)
    assert stock.error is None and stock.calls, "the five passes never ran"
    ours = lower_once(program, "FP", accelerated=True)
    compare(stock, ours, "FP")
    # Tamper with one recorded graph: an extra node must be reported.
    name, gm = ours.calls[-1]
    gm = copy.deepcopy(gm)
    out = next(n for n in gm.graph.nodes if n.op == "output")
    with gm.graph.inserting_before(out):
        gm.graph.call_function(torch.ops.aten.relu.default, (out.args[0][0],))
    ours.calls[-1] = (name, gm)
    with pytest.raises(AssertionError, match="differs"):
        compare(stock, ours, "FP")
    with pytest.raises(AssertionError, match="stock raised"):
        compare(stock, Outcome([], None, RuntimeError("boom")), "FP")


def test_strategy_draws_the_promised_shapes() -> None:
    """The generator reaches every op kind, ranks 1 and 6, and several outputs."""
    from hypothesis import HealthCheck, settings

    seen_kinds: set[str] = set()
    ranks: set[int] = set()
    multi = [False]

    @settings(max_examples=300, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(spec=fm.specs())
    def probe(spec: Spec) -> None:
        seen_kinds.update(op.kind for op in spec.ops)
        ranks.update(len(s) for s in spec.inputs)
        multi[0] |= len(spec.outputs) > 1
        fm.build(spec)[0](*fm.build(spec)[1])  # runs eagerly

    probe()
    assert seen_kinds == {
        "permute", "transpose", "reshape", "squeeze", "unsqueeze", "unary", "binary", "const",
        "mean", "slice", "cat",
    }  # fmt: skip
    assert {1, 6} <= ranks
    assert multi[0]
