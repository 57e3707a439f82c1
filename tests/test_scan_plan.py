"""The native one-scan propagation planner (``rust/propagate/``, ``passes/propagate/scan_plan.py``).

Every scan the planner answers is compared with stock's own walk run on a deep copy of the same
graph (``support.scans.checked_scans``: ``assert_graphs_equal`` plus users order), on
captured lowerings and on hand-built graphs that put each rule in play. Declines are checked
to leave the graph untouched and to be counted with their reason.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch
from arm_accel import PassStats, _native
from arm_accel.control import counters, switch
from arm_accel.pipeline.passes.propagate import accelerated, scan_plan
from arm_accel.testing import assert_graphs_equal
from arm_accel.tools import capture
from executorch.exir.dialects._ops import ops as exir_ops
from support.native import needs_testing
from support.scans import PASS_NAMES, assert_users_equal, checked_scans, replay, scans_per_run
from torch import fx

Down = accelerated.PropagateViewCopyPermuteDownPass
Up = accelerated.PropagateViewCopyPermuteUpPass
edge = exir_ops.edge.aten


def _tosa() -> Any:
    from executorch.backends.arm.tosa.specification import TosaLoweringContext, TosaSpecification

    return TosaLoweringContext(TosaSpecification.create_from_string("TOSA-1.0+INT"))


# -- captured lowerings ----------------------------------------------------------------------


def test_planned_scans_equal_stock_on_captured_graphs(captured: list[capture.Captured]) -> None:
    counts: Counter[str] = Counter()
    with checked_scans(counts):
        replay(captured)
    assert counts["native"] > 0, counts


@pytest.mark.parametrize("name", ["transformer1", "transformer2", "convnet"])
def test_planned_scans_equal_stock_on_fp_models(name: str) -> None:
    """Synthetic transformer stacks and a convnet (FP): every scan is planned natively."""
    from conftest import captured_lowering

    records, _ = captured_lowering(name)
    counts: Counter[str] = Counter()
    with checked_scans(counts):
        replay(records)
    assert counts["native"] > 0, counts
    assert not [k for k in counts if k.startswith("declined")], counts


def _mismatches() -> int:
    snap = counters.snapshot()
    return sum(snap.get(n, PassStats()).shape_mismatches for n in PASS_NAMES)


@pytest.mark.parametrize("name", ["llama1", "llama1-fp"])
def test_scans_run_to_the_fixed_point_natively(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-trace between scans is modelled natively: llama's calls plan scans in runs, each
    run equal to stock's scans with real re-traces between (graphs, values, users order); the
    closing re-traces find no value the model got wrong; fewer virtual re-traces run than with
    one scan per run."""
    from arm_accel.pipeline.passes.propagate.retrace import VirtualRetracer
    from conftest import captured_lowering

    records, _ = captured_lowering(name)
    before = _mismatches()
    counts: Counter[str] = Counter()
    with checked_scans(counts):
        replay(records)
    assert counts["scans in multi-scan runs"] > 0, counts
    assert not [k for k in counts if k.startswith("declined")], counts
    assert _mismatches() == before

    applied = Counter[int | None]()
    original = VirtualRetracer.apply
    for max_scans in (1, None):

        def apply(self: VirtualRetracer, limit: int | None = max_scans, **kwargs: Any) -> int:
            applied[limit] += 1
            return original(self, **kwargs)

        monkeypatch.setattr(VirtualRetracer, "apply", apply)
        with scans_per_run(max_scans):
            replay(records)
    assert applied[None] < applied[1], applied


# -- hand-built graphs -----------------------------------------------------------------------


class _Graph:
    """A small fx graph with tensor values in meta, built node by node."""

    def __init__(self) -> None:
        self.graph = fx.Graph()

    def input(self, name: str, shape: tuple[int, ...]) -> fx.Node:
        node = self.graph.placeholder(name)
        node.meta["val"] = torch.empty(shape)
        return node

    def op(
        self, target: Any, args: tuple[Any, ...], shape: tuple[int, ...], **meta: Any
    ) -> fx.Node:
        node = self.graph.call_function(target, args)
        node.meta["val"] = torch.empty(shape)
        node.meta.update(meta)
        return node

    def done(self, *outs: fx.Node) -> fx.GraphModule:
        self.graph.output(tuple(outs))
        return fx.GraphModule(torch.nn.Module(), self.graph)


def _one_scan(pass_: Any, gm: fx.GraphModule) -> tuple[str, fx.GraphModule]:
    """One checked scan: ("native", graph) or ("declined: reason", untouched graph)."""
    counts: Counter[str] = Counter()
    before = copy.deepcopy(gm)
    with checked_scans(counts):
        planned = scan_plan.run_scan(pass_, gm, type(pass_).__name__)
    scans = {k: n for k, n in counts.items() if not k.startswith("edit")}
    assert sum(scans.values()) == 1, counts
    (key,) = scans
    if planned is None:
        assert_graphs_equal(gm, before)
        assert_users_equal(gm, before)
    return key, gm


def _permute_relu() -> fx.GraphModule:
    g = _Graph()
    x = g.input("x", (2, 3, 4))
    p = g.op(edge.permute_copy.default, (x, [0, 2, 1]), (2, 4, 3))
    r = g.op(edge.relu.default, (p,), (2, 4, 3))
    return g.done(r)


def _permute_fork() -> fx.GraphModule:
    g = _Graph()
    x = g.input("x", (2, 3, 4))
    p = g.op(edge.permute_copy.default, (x, [0, 2, 1]), (2, 4, 3))
    a = g.op(edge.relu.default, (p,), (2, 4, 3))
    b = g.op(edge.neg.default, (p,), (2, 4, 3))
    return g.done(a, b)


def _relu_fork() -> fx.GraphModule:
    # permute -> relu -> {neg, abs}: the permute crosses relu, then splits over the fork.
    g = _Graph()
    x = g.input("x", (2, 3, 4))
    p = g.op(edge.permute_copy.default, (x, [0, 2, 1]), (2, 4, 3))
    r = g.op(edge.relu.default, (p,), (2, 4, 3))
    a = g.op(edge.neg.default, (r,), (2, 4, 3))
    b = g.op(edge.abs.default, (r,), (2, 4, 3))
    return g.done(a, b)


def _fork_mean_slice() -> fx.GraphModule:
    g = _Graph()
    x = g.input("x", (2, 3, 4))
    p = g.op(edge.permute_copy.default, (x, [2, 0, 1]), (4, 2, 3))
    m = g.op(edge.mean.dim, (p, [1], True), (4, 1, 3))
    s = g.op(edge.slice_copy.Tensor, (p, 2, 0, 2), (4, 2, 2))
    r = g.op(edge.relu.default, (m,), (4, 1, 3))
    return g.done(r, s)


def _fork_blocked() -> fx.GraphModule:
    g = _Graph()
    x = g.input("x", (2, 3, 4))
    p = g.op(edge.permute_copy.default, (x, [0, 2, 1]), (2, 4, 3))
    a = g.op(edge.relu.default, (p,), (2, 4, 3))
    v = g.op(edge.view_copy.default, (p, [24]), (24,))
    return g.done(a, v)


def _permute_mean(keepdim: bool) -> fx.GraphModule:
    g = _Graph()
    x = g.input("x", (2, 3, 4))
    p = g.op(edge.permute_copy.default, (x, [2, 0, 1]), (4, 2, 3))
    shape = (4, 1, 3) if keepdim else (4, 3)
    m = g.op(edge.mean.dim, (p, [1], keepdim), shape)
    return g.done(m)


def _permute_slice(step: bool) -> fx.GraphModule:
    g = _Graph()
    x = g.input("x", (2, 3, 4))
    p = g.op(edge.permute_copy.default, (x, [0, 2, 1]), (2, 4, 3))
    args = (p, 1, 1, 3, 1) if step else (p, 1, 1, 3)
    s = g.op(edge.slice_copy.Tensor, args, (2, 2, 3))
    return g.done(s)


def _view_mean_up() -> fx.GraphModule:
    # x[2, 6, 4] -> mean(dim=2, keepdim) [2, 6, 1] -> view [2, 2, 3, 1]: the view goes up.
    g = _Graph()
    x = g.input("x", (2, 6, 4))
    m = g.op(edge.mean.dim, (x, [2], True), (2, 6, 1))
    v = g.op(edge.view_copy.default, (m, [2, 2, 3, 1]), (2, 2, 3, 1))
    return g.done(v)


def _view_slice_down() -> fx.GraphModule:
    g = _Graph()
    x = g.input("x", (2, 6, 4))
    v = g.op(edge.view_copy.default, (x, [2, 6, 2, 2]), (2, 6, 2, 2))
    s = g.op(edge.slice_copy.Tensor, (v, 1, 0, 3), (2, 3, 2, 2))
    return g.done(s)


def _view_unit_slice_up() -> fx.GraphModule:
    g = _Graph()
    x = g.input("x", (2, 6, 4))
    s = g.op(edge.slice_copy.Tensor, (x, 1, 2, 3), (2, 1, 4))
    v = g.op(edge.view_copy.default, (s, [2, 4]), (2, 4))
    return g.done(v)


def _elementwise_up() -> fx.GraphModule:
    g = _Graph()
    x = g.input("x", (2, 3, 4))
    r = g.op(edge.relu.default, (x,), (2, 3, 4))
    p = g.op(edge.permute_copy.default, (r, [0, 2, 1]), (2, 4, 3))
    return g.done(p)


def _cat_fanout(
    users: int = 1, tuple_dims: bool = False, shape: tuple[int, ...] = (2, 1, 3)
) -> fx.GraphModule:
    g = _Graph()
    a = g.input("a", shape)
    b = g.input("b", shape)
    cat_shape = (shape[0] * 2, *shape[1:])
    c = g.op(edge.cat.default, ([a, b], 0), cat_shape)
    out_shape = (cat_shape[1], cat_shape[0], cat_shape[2])
    perm: Any = (1, 0, 2) if tuple_dims else [1, 0, 2]
    outs = [g.op(edge.permute_copy.default, (c, perm), out_shape) for _ in range(users)]
    return g.done(*outs)


def _table(shape: tuple[int, ...]) -> fx.GraphModule:
    import executorch.backends.arm.tosa.dialect  # noqa: F401

    tosa = exir_ops.backend.tosa
    g = _Graph()
    x = g.input("x", shape)
    tbl = g.input("tbl", (256,))
    flat = (shape[0], shape[-1])
    v = g.op(edge.view_copy.default, (x, list(flat)), flat)
    t = g.op(tosa.TABLE.default, (v, tbl), flat)
    return g.done(t)


def _int48_permute() -> fx.GraphModule:
    from executorch.backends.arm.tosa.mapping import TosaSpecialDtype

    g = _Graph()
    x = g.input("x", (2, 3, 4))
    p = g.op(edge.permute_copy.default, (x, [0, 2, 1]), (2, 4, 3))
    r = g.op(
        edge.relu.default, (p,), (2, 4, 3), **{TosaSpecialDtype.meta_key(): TosaSpecialDtype.INT48}
    )
    return g.done(r)


def _rescale_up(scales: Any) -> fx.GraphModule:
    import executorch.backends.arm.tosa.dialect  # noqa: F401

    tosa = exir_ops.backend.tosa
    g = _Graph()
    x = g.input("x", (2, 3, 4))
    r = g.op(tosa.RESCALE.default, (x, torch.int8, scales, 0, 0), (2, 3, 4))
    p = g.op(edge.permute_copy.default, (r, [0, 2, 1]), (2, 4, 3))
    return g.done(p)


def _scatter_up() -> fx.GraphModule:
    import executorch.backends.arm.tosa.dialect  # noqa: F401

    tosa = exir_ops.backend.tosa
    g = _Graph()
    x = g.input("x", (2, 3, 4))
    r = g.op(edge.relu.default, (x,), (2, 3, 4))
    p = g.op(edge.permute_copy.default, (r, [0, 2, 1]), (2, 4, 3))
    idx = g.input("idx", (2, 1))
    s = g.op(tosa.SCATTER.default, (r, idx, r), (2, 3, 4))
    return g.done(p, s)


# (graph builder, pass, expected outcome of the first scan, whether that scan modifies)
CASES = [
    ("permute past relu", _permute_relu, Down, "native", True),
    ("permute above relu", _elementwise_up, Up, "native", True),
    ("fork split", _permute_fork, Down, "native", True),
    ("fork split after a move", _relu_fork, Down, "native", True),
    ("fork split with swaps", _fork_mean_slice, Down, "native", True),
    ("fork with an unplannable branch", _fork_blocked, Down, "native", False),
    ("reduction swap down", lambda: _permute_mean(True), Down, "native", True),
    ("reduction swap up", _view_mean_up, Up, "native", True),
    ("slice swap down", lambda: _permute_slice(False), Down, "native", True),
    ("slice swap with step", lambda: _permute_slice(True), Down, "native", True),
    ("view slice down", _view_slice_down, Down, "native", True),
    ("view unit slice up", _view_unit_slice_up, Up, "native", True),
    ("cat fan-out", _cat_fanout, Up, "native", True),
    ("cat fan-out, tuple dims", lambda: _cat_fanout(tuple_dims=True), Up, "native", True),
    ("cat with two permute users", lambda: _cat_fanout(users=2), Up, "native", False),
    ("cat fan-out, not singleton", lambda: _cat_fanout(shape=(2, 2, 3)), Up, "native", False),
    ("unsafe TABLE shape", lambda: _table((2, 1, 1, 8)), Down, "native", False),
    ("safe TABLE shape", lambda: _table((1, 1, 1, 8)), Down, "native", True),
    ("INT48 blocks", _int48_permute, Down, "native", False),
    ("per-tensor RESCALE", lambda: _rescale_up([0.5]), Up, "native", True),
    ("per-channel RESCALE", lambda: _rescale_up([0.5, 0.25]), Up, "native", False),
    ("SCATTER blocks", _scatter_up, Up, "native", False),
]


@pytest.mark.parametrize(
    ("build", "cls", "outcome", "modifies"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_rule(build: Any, cls: type, outcome: str, modifies: bool | None) -> None:
    with _tosa():
        pass_ = cls()
        gm = build()
        key, _ = _one_scan(pass_, gm)
        assert key == outcome
        if modifies is not None:
            reference = build()
            assert pass_._python_scan(reference) is modifies


def _permute_sum() -> fx.GraphModule:
    g = _Graph()
    x = g.input("x", (2, 3, 4))
    p = g.op(edge.permute_copy.default, (x, [2, 0, 1]), (4, 2, 3))
    m = g.op(edge.sum.dim_IntList, (p, [1], True), (4, 1, 3))
    return g.done(m)


def test_generic_configuration_swaps_sum_where_tosa_does_not() -> None:
    """The backend-neutral passes count sum.dim_IntList as a reduction, the TOSA ones do not."""
    from executorch.backends.transforms import propagate_view_copy_permute_pass as generic

    generic_down = accelerated.accelerate(generic.PropagateViewCopyPermuteDownPass)
    assert scan_plan.scan_config(generic_down()) == ("down", False)
    key, _ = _one_scan(generic_down(), _permute_sum())
    assert key == "native"
    assert generic_down()._python_scan(_permute_sum()) is True
    with _tosa():
        assert scan_plan.scan_config(Down()) == ("down", True)
        key, _ = _one_scan(Down(), _permute_sum())
        assert key == "native"
        assert Down()._python_scan(_permute_sum()) is False


def test_aten_view_swap_declines_where_stock_asserts() -> None:
    def build() -> fx.GraphModule:
        g = _Graph()
        x = g.input("x", (2, 6, 4))
        v = g.op(edge.view.default, (x, [2, 6, 2, 2]), (2, 6, 2, 2))
        s = g.op(edge.slice_copy.Tensor, (v, 1, 0, 3), (2, 3, 2, 2))
        return g.done(s)

    with _tosa():
        key, _ = _one_scan(Down(), build())
        assert key == "declined: swap of a non-view_copy view (ViewMap asserts)"
        with pytest.raises(AssertionError):
            Down()._python_scan(build())


def test_keepdim_false_declines_and_the_pass_raises_like_stock() -> None:
    counters.reset()
    with _tosa():
        key, _ = _one_scan(Down(), _permute_mean(False))
    assert key == "declined: reduction without keepdim=True (stock raises)"
    assert counters.snapshot()["PropagateViewCopyPermuteDownPass"].scans_declined == {
        "reduction without keepdim=True (stock raises)": 1
    }


def test_a_wrong_plan_is_caught() -> None:
    """The differential check fails when an edit is dropped (the tests above can fail)."""
    original = scan_plan.apply_edits

    def drop_moves(pass_: Any, nodes: Any, edits: Any) -> None:
        original(pass_, nodes, [e for e in edits if not isinstance(e, _native.MoveEdit)])

    scan_plan.apply_edits = drop_moves
    try:
        with _tosa(), pytest.raises(AssertionError):
            _one_scan(Down(), _permute_relu())
    finally:
        scan_plan.apply_edits = original


def test_overriding_a_rule_declines_every_scan() -> None:
    class Custom(Down):  # type: ignore[misc, valid-type]
        def is_elementwise(self, node: fx.Node) -> bool:
            return False

    with _tosa():
        key, _ = _one_scan(Custom(), _permute_relu())
    assert key == "declined: pass overrides a propagation rule"


def test_whole_calls_equal_stock_on_hand_built_graphs() -> None:
    """Whole accelerated calls (planner + virtual re-traces) on real exported graphs."""
    from executorch.backends.arm._passes import propagate_view_copy_permute_pass as arm_mod
    from executorch.exir import to_edge

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x.permute(0, 2, 1).relu().mean(dim=1, keepdim=True)
            return y.reshape(2, 3).neg()[:, 1:3]

    for cls_name in PASS_NAMES:
        results = []
        for ours in (False, True):
            gm = to_edge(torch.export.export(M(), (torch.randn(2, 3, 4),))).exported_program()
            gm = gm.graph_module
            with _tosa():
                if ours:
                    counts: Counter[str] = Counter()
                    with checked_scans(counts):
                        results.append(getattr(accelerated, cls_name)().call(gm))
                    assert counts["native"] >= 1, counts
                else:
                    with switch.disabled():
                        results.append(getattr(arm_mod, cls_name)().call(gm))
        assert results[0].modified == results[1].modified
        assert_graphs_equal(results[0].graph_module, results[1].graph_module)


# -- malformed input to the binding ----------------------------------------------------------


def _inputs() -> tuple[Any, ...]:
    with _tosa():
        pass_ = Down()
        exported = scan_plan.export_scan_input(_permute_relu(), pass_, True)
    assert not isinstance(exported, str)
    return exported


@needs_testing
def test_binding_answers_a_valid_input() -> None:
    table, extra, special, form = _inputs()
    answer = _native.plan_propagation_scan(table, extra, special, form, "down", True)
    assert isinstance(answer, _native.ScanPlan) and answer.modified
    (move,) = answer.edits
    assert isinstance(move, _native.MoveEdit)
    assert (move.node, move.frontier, move.previous_frontier) == (1, 2, 1)


@needs_testing
@pytest.mark.parametrize(
    ("field", "corrupt", "message"),
    [
        ("form", lambda a: a[:-1], "field 'form'"),
        ("form", lambda a: a.astype(np.int64), "field 'form'"),
        ("form", lambda a: a | np.uint32(1 << 9), "unknown bits"),
        ("special", lambda a: np.full_like(a, -3), "field 'special'"),
        ("special", lambda a: np.full_like(a, 1), "INT48"),
        ("target_extra", lambda a: a | np.uint32(1 << 8), "target_extra"),
        ("target_extra", lambda a: a[:-1], "target_extra"),
        ("in_idx", lambda a: a + 5, "in_idx"),
    ],
)
def test_malformed_input_is_a_value_error(field: str, corrupt: Any, message: str) -> None:
    table, extra, special, form = _inputs()
    columns = {"extra": extra, "special": special, "form": form}
    if field == "in_idx":
        import dataclasses

        table = dataclasses.replace(table, in_idx=corrupt(table.in_idx))
    else:
        key = "extra" if field == "target_extra" else field
        columns[key] = corrupt(columns[key])
    with pytest.raises(ValueError, match=message):
        _native.plan_propagation_scan(
            table, columns["extra"], columns["special"], columns["form"], "down", True
        )


@needs_testing
def test_bad_direction_is_a_value_error() -> None:
    table, extra, special, form = _inputs()
    with pytest.raises(ValueError, match="direction"):
        _native.plan_propagation_scan(table, extra, special, form, "sideways", True)


def _fake_permute_relu() -> fx.GraphModule:
    """``_permute_relu`` with fake-tensor values, as a lowering has them (the accelerated
    call declines graphs without)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    gm = _permute_relu()
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    for node in gm.graph.nodes:
        if isinstance(node.meta.get("val"), torch.Tensor):
            node.meta["val"] = mode.from_tensor(node.meta["val"])
    return gm


def _call_falls_back(reason: str) -> None:
    """A whole accelerated propagation call on ``_fake_permute_relu`` gives stock's graph,
    counted as one fallback with ``reason``; strict, it raises."""
    stock_gm, ours_gm, strict_gm = _fake_permute_relu(), _fake_permute_relu(), _fake_permute_relu()
    with _tosa():
        expected = accelerated._StockDown().call(stock_gm)
        counters.reset()
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("ARM_ACCEL_STRICT", "0")
            got = Down().call(ours_gm)
        with pytest.raises(Exception):  # noqa: B017 - whatever the injected failure raises
            Down().call(strict_gm)
    assert_graphs_equal(expected.graph_module, got.graph_module)
    entry = counters.snapshot()["PropagateViewCopyPermuteDownPass"]
    assert entry.accelerated == 0 and entry.fallbacks == {reason: 2}, entry


def test_rejected_planner_input_falls_back_to_stock(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exporter bug (malformed columns) rolls the call back and runs stock."""
    original = scan_plan.export_scan_input

    def corrupt(*args: Any) -> Any:
        table, extra, special, form = original(*args)
        return table, extra, special, form[:-1]

    monkeypatch.setattr(scan_plan, "export_scan_input", corrupt)
    with pytest.raises(ValueError, match="'form'"):
        with _tosa():
            scan_plan.run_scan(Down(), _permute_relu(), "test")
    _call_falls_back("plan failed: ValueError")


def test_graph_without_call_nodes_is_planned() -> None:
    """Regression (upstream ``test_convert_int64_const_ops_to_int32`` through the hook): a
    graph with no call node interns no target; the exporter indexed the empty class column."""
    graph = fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(2, 3)
    graph.output((x,))
    gm = fx.GraphModule(torch.nn.Module(), graph)
    with _tosa():
        assert scan_plan.run_scan(Down(), gm, "test") is False


def test_exporter_error_falls_back_to_stock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any exporter exception rolls the call back and runs stock (strict: raises)."""

    def broken(*args: Any) -> Any:
        raise RuntimeError("exporter bug")

    monkeypatch.setattr(scan_plan, "export_scan_input", broken)
    _call_falls_back("plan failed: RuntimeError")


@needs_testing
def test_native_panic_falls_back_to_stock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Rust panic in the planner reaches Python as ``NativePanic`` (an ``Exception``, not
    pyo3's ``BaseException``) naming the kernel; the call rolls back and runs stock."""
    with pytest.raises(_native.NativePanic, match="_test_panic panicked: boom"):
        _native._test_panic("boom")
    assert issubclass(_native.NativePanic, RuntimeError)

    def panicking(*args: Any) -> Any:
        _native._test_panic("injected planner panic")

    monkeypatch.setattr(_native, "plan_propagation_run", panicking)
    _call_falls_back("plan failed: NativePanic")


def test_retrace_column_marks_impure_nodes_and_kept_values() -> None:
    """The DCE keeps what ``is_impure()`` keeps; a quantized op without a fake kernel (whose
    value ``ArmPass`` keeps) is marked so that a run stops before recomputing it."""
    g = _Graph()
    x = g.input("x", (2, 3))
    p = g.op(edge.permute_copy.default, (x, [1, 0]), (3, 2))
    leaky = g.op(edge.leaky_relu.default, (p,), (3, 2), input_qparams={0: object()})
    plain = g.op(edge.leaky_relu.default, (p,), (3, 2))
    copy_ = g.op(torch.ops.aten.copy_.default, (x, x), (2, 3))  # mutates its input
    gm = g.done(leaky, plain, copy_)
    with _tosa():
        exported = scan_plan.export_scan_input(gm, Down(), True)
    assert not isinstance(exported, str)
    bits = scan_plan.retrace_column(exported[0], scan_plan.ScanCache())
    by_name = {n.name: int(b) for n, b in zip(exported[0].nodes, bits, strict=True)}
    impure, keeps = scan_plan.Retrace.IMPURE, scan_plan.Retrace.KEEPS_VALUE
    assert by_name == {
        x.name: impure,
        p.name: 0,
        leaky.name: keeps,
        plain.name: 0,
        copy_.name: impure,
        "output": impure,
    }


def test_a_run_stops_before_a_value_it_does_not_model() -> None:
    """x -> permute -> relu -> (quantized leaky_relu, value kept by ArmPass): moving the
    permute below the relu changes the leaky_relu's input, so the run ends after that scan
    (no modelled re-trace) and the caller re-traces."""
    g = _Graph()
    x = g.input("x", (2, 3, 4))
    p = g.op(edge.permute_copy.default, (x, [0, 2, 1]), (2, 4, 3))
    r = g.op(edge.relu.default, (p,), (2, 4, 3))
    leaky = g.op(edge.leaky_relu.default, (r,), (2, 4, 3), input_qparams={0: object()})
    gm = g.done(leaky)
    with _tosa():
        run = scan_plan.run_scans(Down(), gm, "test", max_scans=10)
    assert run is not None and run.modified
    assert (run.scans, run.fixed_point) == (1, False)
