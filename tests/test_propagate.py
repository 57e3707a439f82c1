"""Accelerated PropagateViewCopyPermute{Down,Up}Pass: differential tests against stock.

Stock and ours run on the same captured input in one process and must give equal graphs
(``arm_accel.testing.assert_graphs_equal``); full lowerings with our classes in the Arm pass
manager must give byte-identical TOSA. The upstream executorch test modules are re-run with our
classes swapped in by ``upstream_propagate_plugin`` (see ``test_upstream_modules``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from arm_accel import PassStats, Stats
from arm_accel.bootstrap import activation
from arm_accel.control import switch
from arm_accel.pipeline.passes.propagate import accelerated
from arm_accel.pipeline.passes.propagate.retrace import count_retraces
from arm_accel.testing import assert_graphs_equal
from arm_accel.tools import capture, models

PASS_NAMES = ("PropagateViewCopyPermuteDownPass", "PropagateViewCopyPermuteUpPass")


def _tosa_context(instance: object):  # type: ignore[no-untyped-def]
    from executorch.backends.arm.tosa.specification import TosaLoweringContext

    return TosaLoweringContext(instance.compile_spec.tosa_spec)  # type: ignore[attr-defined]


def test_differential_on_captured_graphs(captured: list[capture.Captured]) -> None:
    """Every captured propagation call: ours equals stock (graph, ``modified``), with no more
    re-traces, and ran accelerated (a call that fell back would compare stock with stock); the
    fake memo served quantize/dequantize calls of the virtual re-traces (where the captures
    hold them: the INT models)."""
    from arm_accel.control import counters
    from arm_accel.runtime import fake_memo

    records = [r for r in captured if r.pass_name in PASS_NAMES]
    assert records, "the lowering did not call the propagation passes"
    counters.reset()
    for record in records:
        stock_instance = record.pass_instance
        # The activation hook may have swapped ours in: take the stock class explicitly.
        stock_cls = activation.stock_class(record.pass_name)
        ours_cls = getattr(accelerated, record.pass_name)
        a, b = record.fresh_graph(), record.fresh_graph()
        with _tosa_context(stock_instance):
            with switch.disabled(), count_retraces() as stock_retraces:
                ra = stock_cls(stock_instance.compile_spec, stock_instance.exported_program).call(a)
            with count_retraces() as our_retraces:
                rb = ours_cls(stock_instance.compile_spec, stock_instance.exported_program).call(b)
        assert ra.modified == rb.modified
        assert_graphs_equal(ra.graph_module, rb.graph_module)
        assert our_retraces.count <= stock_retraces.count
    snap = counters.snapshot()
    for name in {r.pass_name for r in records}:
        ours_calls = sum(r.pass_name == name for r in records)
        assert snap[name].accelerated == ours_calls, (name, snap[name])
    quantized = any(
        "quantized_decomposed" in str(n.target)
        for r in records
        for n in r.fresh_graph().graph.nodes
    )
    if quantized:
        assert snap.get(fake_memo.DISPATCH_STATS_NAME, PassStats()).accelerated > 0


def _lower(name: str, ours: bool) -> list[bytes]:
    """Lower with our two classes (switch on) or pure stock (switch off: every accelerated pass
    the activation hook may have installed runs stock)."""
    import executorch.backends.arm._passes.arm_pass_manager as apm

    saved = {n: getattr(apm, n) for n in PASS_NAMES}
    previous = switch.set_enabled(ours)
    try:
        for n in PASS_NAMES:
            setattr(apm, n, getattr(accelerated, n) if ours else activation.stock_class(n))
        model, inputs, mode = models.build(name)
        exported = models.export_for_arm(model, inputs, mode)
        return models.tosa_bytes(models.lower(exported, mode))
    finally:
        switch.set_enabled(previous)
        for n, cls in saved.items():
            setattr(apm, n, cls)


# llama2 doubles the lowering cost; CI runs llama1, the long run (ARM_ACCEL_UPSTREAM=1) both.
TOSA_MODELS = ["llama1", "llama2"] if os.environ.get("ARM_ACCEL_UPSTREAM") == "1" else ["llama1"]


@pytest.mark.parametrize("name", TOSA_MODELS)
def test_tosa_bytes_identical(name: str) -> None:
    stock_bytes = _lower(name, ours=False)
    ours = _lower(name, ours=True)
    assert len(ours) == len(stock_bytes)
    assert ours == stock_bytes


class _MeanNoKeepdim(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 1).mean(dim=1)


def _edge_graph(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]):  # type: ignore[no-untyped-def]
    from executorch.exir import to_edge

    return to_edge(torch.export.export(module, inputs)).exported_program().graph_module


def test_keepdim_false_reduction_raises_like_stock() -> None:
    from executorch.backends.arm._passes import propagate_view_copy_permute_pass as arm_mod
    from executorch.backends.arm.tosa.specification import TosaLoweringContext, TosaSpecification

    spec = TosaSpecification.create_from_string("TOSA-1.0+FP")
    messages = []
    for cls in (
        arm_mod.PropagateViewCopyPermuteDownPass,
        accelerated.PropagateViewCopyPermuteDownPass,
    ):
        gm = _edge_graph(_MeanNoKeepdim(), (torch.randn(2, 3, 4),))
        with TosaLoweringContext(spec), pytest.raises(RuntimeError) as info:
            cls().call(gm)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert "keep_dim=True" in messages[0]


class _DuplicateUsers(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x.permute(0, 2, 1)
        return y.relu(), y.relu()


def test_fusion_virtual_retrace_equals_export_pass_retrace() -> None:
    """A fusion ends with a bare ``ExportPass.call``: no DCE (dead nodes are re-created),
    every value recomputed, users in graph order. The virtual one must give the same graph."""
    from arm_accel.pipeline.passes.propagate.retrace import VirtualRetracer
    from executorch.backends.transforms.fuse_duplicate_users_pass import FuseDuplicateUsersPass
    from executorch.exir.dialects._ops import ops as exir_ops

    neg = exir_ops.edge.aten.neg.default

    def build():  # type: ignore[no-untyped-def]
        gm = _edge_graph(_DuplicateUsers(), (torch.randn(2, 3, 4),))
        graph = gm.graph
        x = next(n for n in graph.nodes if n.op == "placeholder")
        out = next(n for n in graph.nodes if n.op == "output")
        with graph.inserting_before(out):
            dead = graph.call_function(neg, (x,))
        dead.meta["val"] = x.meta["val"]
        gm.recompile()
        return gm

    real = FuseDuplicateUsersPass().call(build())
    assert real.modified
    virtual_gm = build()
    fusion = accelerated._virtualized(FuseDuplicateUsersPass)()
    assert isinstance(fusion, accelerated._VirtualRetraceBase)
    fusion._arm_accel_tracker = VirtualRetracer(virtual_gm)
    try:
        virtual = fusion.call(virtual_gm)
    finally:
        fusion._arm_accel_tracker = None
    assert virtual.modified and virtual.graph_module is virtual_gm
    assert any(n.target == neg for n in virtual_gm.graph.nodes), "dead node must survive"
    assert_graphs_equal(real.graph_module, virtual_gm)

    def users(gm):  # type: ignore[no-untyped-def]
        index = {n: i for i, n in enumerate(gm.graph.nodes)}
        return [[index[u] for u in n.users] for n in gm.graph.nodes]

    assert users(real.graph_module) == users(virtual_gm)


_SLICE_PERMUTE_SHAPES = ((1, 4, 3, 3), (1, 2, 3, 3), (1, 3, 3, 2))


def _slice_permute_graph() -> torch.fx.GraphModule:
    """The graph of upstream ``test_up_pass_fuses_duplicate_permutes_at_placeholder`` (real
    tensors as values: the pass declines and stock runs, with our fusion hooks)."""
    from executorch.exir.dialects._ops import ops as exir_ops

    permute, slice_ = exir_ops.edge.aten.permute_copy.default, exir_ops.edge.aten.slice_copy.Tensor
    src, half, perm = _SLICE_PERMUTE_SHAPES
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(src)
    outs = []
    for start in (0, 2):
        s = graph.call_function(slice_, args=(x, 1, start, start + 2))
        s.meta["val"] = torch.empty(half)
        p = graph.call_function(permute, args=(s, [0, 2, 3, 1]))
        p.meta["val"] = torch.empty(perm)
        outs.append(p)
    graph.output(tuple(outs))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def test_fusion_choice_survives_replaced_generic_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Arm Up pass runs the Up pass's horizontal fusion even when the generic
    ``PropagateViewCopyPermuteUpPass`` is replaced by a subclass (as the upstream-test plugin
    does): an ``isinstance(self, _generic.PropagateViewCopyPermuteUpPass)`` choice would then
    pick the Down pass's fusion."""
    import executorch.backends.transforms.propagate_view_copy_permute_pass as generic
    from executorch.backends.arm._passes import propagate_view_copy_permute_pass as arm_mod

    monkeypatch.setattr(
        generic,
        "PropagateViewCopyPermuteUpPass",
        accelerated.accelerate(generic.PropagateViewCopyPermuteUpPass),
    )
    stock = activation.stock_class("PropagateViewCopyPermuteUpPass")
    assert stock is arm_mod.PropagateViewCopyPermuteUpPass or issubclass(
        arm_mod.PropagateViewCopyPermuteUpPass, stock
    )
    with switch.disabled():
        ra = stock().call(_slice_permute_graph())
    rb = accelerated.PropagateViewCopyPermuteUpPass().call(_slice_permute_graph())
    assert ra.modified == rb.modified
    assert_graphs_equal(ra.graph_module, rb.graph_module)


class _PermuteRelu(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.relu().permute(0, 2, 1).neg(), y.abs()


def test_virtual_retrace_names_and_provenance_equal_a_real_retrace() -> None:
    """After an edit that creates a node and erases the one it replaces, a virtual re-trace
    gives every node the name and ``from_node`` a real ``ExportPass`` re-trace gives (records
    naming the same graphs), leaves the same name space (a node created afterwards gets the
    same name in both) and, as the real one's new graph, a new identity to the graph."""
    from arm_accel.pipeline.passes.propagate.retrace import VirtualRetracer
    from arm_accel.testing import GraphLabels, meta_signature, source_signature
    from executorch.exir.dialects._ops import ops as exir_ops
    from executorch.exir.pass_base import ExportPass
    from torch.fx.traceback import NodeSource

    permute = exir_ops.edge.aten.permute_copy.default

    def build():  # type: ignore[no-untyped-def]
        gm = _edge_graph(_PermuteRelu(), (torch.randn(2, 3, 4), torch.randn(5, 6)))
        graph = gm.graph
        old = next(n for n in graph.nodes if n.target == permute)
        with graph.inserting_before(old):
            new = graph.call_function(permute, old.args)  # named with a suffix: old's is taken
        new.meta["val"] = old.meta["val"]
        old.replace_all_uses_with(new)
        graph.erase_node(old)  # its name stays taken until a re-trace
        gm.recompile()
        return gm

    real = ExportPass().call(build()).graph_module
    virtual = build()
    assert any(n.name.endswith("_1") for n in virtual.graph.nodes)
    VirtualRetracer(virtual).apply(prologue=False, arm_pass=False)
    pairs = list(zip(real.graph.nodes, virtual.graph.nodes, strict=True))
    la, lb = GraphLabels(), GraphLabels()  # the records of both graphs name the same graphs
    for a, b in pairs:
        assert a.name == b.name
        assert meta_signature(a.meta.get("from_node"), la) == meta_signature(
            b.meta.get("from_node"), lb
        )
    new = next(b for _, b in pairs if b.target == permute)
    assert "from_node" in new.meta, "the new node's provenance is the virtual re-trace's"
    # a record made now names the re-trace's new graph, not the one it read
    later = [NodeSource(n, "later") for n in pairs[0]]
    assert source_signature(later[0], la) == source_signature(later[1], lb)
    names = []
    for gm in (real, virtual):
        x = next(n for n in gm.graph.nodes if n.op == "placeholder")
        with gm.graph.inserting_after(x):
            names.append(gm.graph.call_function(permute, (x, [1, 0, 2])).name)
    assert names[0] == names[1]


def test_graph_with_get_attr_declines_to_stock() -> None:
    """A get_attr node's re-traced name is not modelled: the call runs stock (the graph equals
    stock's), counted as a decline with that reason, not as a failure."""
    from arm_accel import PassStats
    from arm_accel.control import counters
    from arm_accel.testing import assert_graphs_identical
    from executorch.backends.arm._passes import propagate_view_copy_permute_pass as arm_mod
    from executorch.backends.arm.tosa.specification import TosaLoweringContext, TosaSpecification

    def build():  # type: ignore[no-untyped-def]
        gm = _edge_graph(_PermuteRelu(), (torch.randn(2, 3, 4), torch.randn(5, 6)))
        gm.register_buffer("unused_constant", torch.zeros(1))
        x = next(n for n in gm.graph.nodes if n.op == "placeholder")
        with gm.graph.inserting_after(x):
            gm.graph.get_attr("unused_constant")
        gm.recompile()
        return gm

    name = "PropagateViewCopyPermuteUpPass"
    reason = "get_attr node (re-traced name not modelled)"
    before = counters.snapshot().get(name, PassStats()).fallbacks.get(reason, 0)
    with TosaLoweringContext(TosaSpecification.create_from_string("TOSA-1.0+FP")):
        with switch.disabled():
            expected = arm_mod.PropagateViewCopyPermuteUpPass().call(build())
        ours = accelerated.PropagateViewCopyPermuteUpPass().call(build())
    assert counters.snapshot()[name].fallbacks[reason] == before + 1
    assert ours.modified == expected.modified
    assert_graphs_identical(expected.graph_module, ours.graph_module)


def test_stale_input_values_are_refreshed_by_the_first_retrace() -> None:
    """A real re-trace refreshes every value, an incremental one only what is downstream of
    an edit: the first re-trace of a call recomputes every value (``full``), so a stale value
    in the input is refreshed where stock's first real re-trace refreshes it."""
    from arm_accel.pipeline.passes.propagate.retrace import VirtualRetracer
    from executorch.backends.arm._passes import propagate_view_copy_permute_pass as arm_mod
    from executorch.backends.arm.tosa.specification import TosaLoweringContext, TosaSpecification
    from executorch.exir.pass_base import ExportPass

    def build():  # type: ignore[no-untyped-def]
        gm = _edge_graph(_PermuteRelu(), (torch.randn(2, 3, 4), torch.randn(5, 6)))
        node = next(n for n in gm.graph.nodes if "abs" in str(n.target))
        node.meta["val"] = node.meta["val"].new_empty((6, 5))  # stale: not what abs gives
        return gm

    assert len(VirtualRetracer(build()).stale_nodes()) == 1
    real = ExportPass().call(build()).graph_module
    incremental, full = build(), build()
    VirtualRetracer(incremental).apply(prologue=False, arm_pass=False)
    VirtualRetracer(full, full=True).apply(prologue=False, arm_pass=False)
    assert_graphs_equal(real, full)
    with pytest.raises(AssertionError):
        assert_graphs_equal(real, incremental)

    spec = TosaSpecification.create_from_string("TOSA-1.0+FP")
    with TosaLoweringContext(spec):
        with switch.disabled():
            ra = arm_mod.PropagateViewCopyPermuteUpPass().call(build())
        rb = accelerated.PropagateViewCopyPermuteUpPass().call(build())
    assert ra.modified == rb.modified
    assert_graphs_equal(ra.graph_module, rb.graph_module)


UPSTREAM_MODULES = (
    "arm/test/passes/test_propagate_permutes_views_pass.py",
    "arm/test/passes/test_rank_match_after_propagation.py",
    "arm/test/passes/test_permute_view_swap.py",
    "arm/test/passes/test_view_permute_swap.py",
    "transforms/test/test_propagate_view_copy_permute_pass.py",
    "arm/test/misc/test_transpose_counts.py",
    "arm/test/misc/test_high_rank_permute_view_invariants.py",
    "arm/test/misc/test_reshape_permute_5d_regression.py",
)


#: Slow (~10 min of lowerings on a shared 2-core machine): only with ARM_ACCEL_UPSTREAM=1.
SLOW_UPSTREAM_MODULES = ("arm/test/misc/test_transpose_counts.py",)

#: Fail with pure stock executorch 1.5.1 too (ARM_ACCEL=0, no plugin): not ours to pass.
STOCK_FAILURES = (
    "arm/test/misc/test_transpose_counts.py::"
    "test_transpose_counts_tosa_FP_channels_last[groupnorm_channels_last]",
)


def _vela_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("ethosu") is not None


@pytest.mark.skipif(
    os.environ.get("ARM_ACCEL_UPSTREAM") == "0",
    reason="ARM_ACCEL_UPSTREAM=0: upstream propagation test modules skipped",
)
def test_upstream_modules() -> None:
    """executorch's own test modules for the two passes, with ours swapped in (subprocess:
    the plugin must patch before the modules import), every call compared with pure stock by
    the plugin. The Ethos-U55 module needs vela; the slow module needs ARM_ACCEL_UPSTREAM=1."""
    import executorch.backends

    everything = os.environ.get("ARM_ACCEL_UPSTREAM") == "1"
    modules = [
        m
        for m in UPSTREAM_MODULES
        if (_vela_installed() or m != "arm/test/passes/test_rank_match_after_propagation.py")
        and (everything or m not in SLOW_UPSTREAM_MODULES)
    ]
    root = Path(executorch.backends.__file__).parent
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent), ARM_ACCEL="0")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-s"]
        + ["-p", "upstream_propagate_plugin"]
        + [str(root / m) for m in modules]
        + [f"--deselect={t}" for t in STOCK_FAILURES],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-5000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("ARM_ACCEL_STATS "))
    snapshot = json.loads(line.removeprefix("ARM_ACCEL_STATS "))
    assert snapshot["PropagateViewCopyPermuteDownPass"]["accelerated"] > 0
    assert snapshot["PropagateViewCopyPermuteUpPass"]["accelerated"] > 0
    line = next(x for x in proc.stdout.splitlines() if x.startswith("ARM_ACCEL_DIFFERENTIAL "))
    diff = json.loads(line.removeprefix("ARM_ACCEL_DIFFERENTIAL "))
    assert diff["compared"] > 0 and diff["not_copyable"] == 0, diff


def test_fusion_tracker_is_per_thread() -> None:
    """A tracker set for a fusion in one thread is invisible to another thread (two lowerings
    at once must not apply each other's virtual re-traces)."""
    import threading

    from arm_accel.pipeline.passes.propagate.retrace import VirtualRetracer
    from executorch.backends.transforms.fuse_duplicate_users_pass import FuseDuplicateUsersPass

    fusion = accelerated._virtualized(FuseDuplicateUsersPass)()
    gm = _edge_graph(_DuplicateUsers(), (torch.randn(2, 3, 4),))
    fusion._set_tracker(VirtualRetracer(gm), "owner")
    seen: list[object] = []
    other = threading.Thread(target=lambda: seen.append(fusion._arm_accel_tracker))
    other.start()
    other.join()
    try:
        assert fusion._arm_accel_tracker is not None and fusion._arm_accel_owner == "owner"
        assert seen == [None]
    finally:
        fusion._arm_accel_tracker = None
    assert fusion._arm_accel_tracker is None


@pytest.mark.parametrize("name", PASS_NAMES)
def test_in_loop_fusions_run_accelerated(name: str) -> None:
    """Stock's loop runs the ``backends.transforms`` fusion classes; ours runs their accelerated
    variants and still ends in stock's graph."""
    from arm_accel.control import counters

    horizontal = {
        "PropagateViewCopyPermuteUpPass": "transforms.FuseDuplicateUsersPass",
        "PropagateViewCopyPermuteDownPass": "transforms.FuseIdenticalInputTransformsPass",
    }[name]
    expected = (horizontal, "transforms.CanonicalizeViewCopyPermutePass")

    def accelerated_runs(snapshot: Stats, n: str) -> int:
        return snapshot.get(n, PassStats()).accelerated

    inputs = (torch.randn(2, 3, 4),)
    with switch.disabled():
        ra = activation.stock_class(name)().call(_edge_graph(_DuplicateUsers(), inputs))
    before = counters.snapshot()
    rb = getattr(accelerated, name)().call(_edge_graph(_DuplicateUsers(), inputs))
    after = counters.snapshot()
    assert ra.modified == rb.modified
    assert_graphs_equal(ra.graph_module, rb.graph_module)
    for n in expected:
        assert accelerated_runs(after, n) > accelerated_runs(before, n), n
