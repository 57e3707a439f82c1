"""The in-place re-trace equals stock's ``ExportPass`` re-trace, node for node.

Each test runs a pass's re-trace twice on copies of one graph: stock (``_ExportPassBase.call``
as executorch defines it) and through the engine (:func:`arm_accel.pipeline.engine.accelerated_call`
inside :func:`arm_accel.pipeline.engine.arm_pipeline`), then compares the two results with
:func:`arm_accel.testing.assert_graphs_identical` (names, order, targets, args, kwargs, every
meta key, the name space), and checks in ``arm_accel.stats()`` that the engine took the
in-place path (a fallback would compare stock with stock).
"""

from __future__ import annotations

import copy
import dataclasses
import types
from collections.abc import Callable
from typing import Any

import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import pytest
import torch
from arm_accel import PassStats
from arm_accel.control import counters, switch
from arm_accel.fxstock import GraphJournal, freshness
from arm_accel.patches import table
from arm_accel.patches.model import Pin
from arm_accel.pipeline import engine, inplace
from arm_accel.runtime import fake_memo
from arm_accel.testing import assert_graphs_identical
from executorch.backends.arm._passes.arm_pass import ArmPass
from executorch.exir import to_edge
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import ExportPass
from torch import fx

ADD = exir_ops.edge.aten.add.Tensor
SUB = exir_ops.edge.aten.sub.Tensor
MUL = exir_ops.edge.aten.mul.Tensor
NEG = exir_ops.edge.aten.neg.default
RELU = exir_ops.edge.aten.relu.default
VIEW = exir_ops.edge.aten.view_copy.default
LINEAR = torch.ops.aten.linear.default
BMM = exir_ops.edge.aten.bmm.default


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = torch.relu(self.linear(x)) + y
        b = (a * y + a).reshape(2, 16)
        return torch.relu(b).permute(1, 0) + 1.0


@pytest.fixture(scope="module")
def edge_graph() -> fx.GraphModule:
    torch.manual_seed(0)
    inputs = (torch.randn(4, 8), torch.randn(4, 8))
    program = torch.export.export(Small().eval(), inputs)
    return to_edge(program).exported_program().graph_module


def stock_retrace(pass_: ExportPass, graph_module: fx.GraphModule) -> Any:
    with switch.disabled():
        return pass_.call(graph_module)


def engine_retrace(pass_: ExportPass, graph_module: fx.GraphModule) -> Any:
    with engine.arm_pipeline():
        return pass_.call(graph_module)


def in_place_runs(pass_cls: type) -> tuple[int, dict[str, int]]:
    entry = counters.snapshot().get(f"{pass_cls.__name__}.retrace", PassStats())
    return entry.accelerated, dict(entry.fallbacks)


def compare(
    make_pass: Callable[[], ExportPass], graph_module: fx.GraphModule
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Stock and engine re-traces of copies of ``graph_module``; asserts they are identical and
    that the engine ran in place. Returns (stock result, engine result)."""
    counters.reset()
    expected = stock_retrace(make_pass(), copy.deepcopy(graph_module)).graph_module
    actual = engine_retrace(make_pass(), copy.deepcopy(graph_module)).graph_module
    assert_graphs_identical(expected, actual)
    done, fallbacks = in_place_runs(type(make_pass()))
    assert done == 1 and not fallbacks, (done, fallbacks)
    return expected, actual


def test_scalar_to_tensor_in_place(edge_graph: fx.GraphModule) -> None:
    """exir's ``ScalarToTensorPass`` (a ``call`` override, CONDITIONAL_CALLERS) re-traces in
    place, identical to stock: on the edge graph (no scalar left for a Tensor argument), and on
    the aten graph, where ``x + 1.0`` passes a scalar for a Tensor and stock's re-trace stows
    ``tensor(1.)`` as a ``_tensor_constant0`` get_attr; then a second pass re-traces that graph
    (a get_attr input, made again at its use) in place, identical to stock."""
    from executorch.exir.passes.scalar_to_tensor_pass import ScalarToTensorPass

    compare(ScalarToTensorPass, edge_graph)
    torch.manual_seed(0)
    aten = torch.export.export(Small().eval(), (torch.randn(4, 8), torch.randn(4, 8)))
    expected, actual = compare(ScalarToTensorPass, aten.graph_module)
    constants = [n.target for n in actual.graph.nodes if n.op == "get_attr"]
    assert constants == ["_tensor_constant0"], constants
    assert torch.equal(actual._tensor_constant0, expected._tensor_constant0)
    compare(GuardedAddToSub, expected)
    compare(Identity, expected)


def test_exact_strides_operator_records_input_values() -> None:
    """A node of an operator tagged ``needs_exact_strides`` (``_to_dim_order_copy``), inserted
    without ``eager_input_vals`` as Arm passes insert casts: the in-place re-trace records its
    inputs' values where ``PythonKeyTracer.create_node`` does (key order and values), identical
    to stock's re-trace."""
    import executorch.exir.passes.dim_order_ops_registry  # noqa: F401 - registers the op

    torch.manual_seed(0)
    aten = torch.export.export(Small().eval(), (torch.randn(4, 8), torch.randn(4, 8)))
    graph_module = aten.graph_module
    graph = graph_module.graph
    x = next(n for n in graph.nodes if n.name == "x")
    op = torch.ops.dim_order_ops._to_dim_order_copy.default
    with graph.inserting_after(x):
        cast = graph.create_node("call_function", op, (x,), {"dtype": torch.float32})
    x.replace_all_uses_with(cast, delete_user_cb=lambda user: user is not cast)
    with x.meta["val"].fake_mode:
        cast.meta["val"] = op(x.meta["val"], dtype=torch.float32)
    graph_module.recompile()
    _, actual = compare(Identity, graph_module)
    rebuilt = next(n for n in actual.graph.nodes if n.target is op)
    assert "eager_input_vals" in rebuilt.meta


class Identity(ExportPass):
    pass


class GuardedAddToSub(ExportPass):
    """The guard most Arm passes open with: every operator but ``add`` passes through."""

    target_ops = (ADD,)

    def call_operator(self, op, args, kwargs, meta, updated=False):  # type: ignore[no-untyped-def]
        if op not in self.target_ops or len(args) > 2:
            return super().call_operator(op, args, kwargs, meta)
        return super().call_operator(SUB, args, kwargs, meta)


class LogsFirst(GuardedAddToSub):
    """A statement before the guard: nothing is known to pass through."""

    def call_operator(self, op, args, kwargs, meta, updated=False):  # type: ignore[no-untyped-def]
        self.seen = getattr(self, "seen", 0) + 1
        if op not in self.target_ops:
            return super().call_operator(op, args, kwargs, meta)
        return super().call_operator(SUB, args, kwargs, meta)


class GuardChangesArgs(GuardedAddToSub):
    """The guard's ``super()`` call is not given the node's own arguments."""

    def call_operator(self, op, args, kwargs, meta, updated=False):  # type: ignore[no-untyped-def]
        if op not in self.target_ops:
            return super().call_operator(op, args, {}, meta)
        return super().call_operator(SUB, args, kwargs, meta)


class AddFirst(ExportPass):
    """The other form: a block for ``add`` that returns, then the node handed on untouched."""

    def call_operator(self, op, args, kwargs, meta):  # type: ignore[no-untyped-def]
        if op == ADD:
            return super().call_operator(SUB, args, kwargs, meta)
        return super().call_operator(op, args, kwargs, meta)


class GuardReadsArgs(ExportPass):
    """A test that reads the arguments: whether a node passes through depends on more than its
    operator, so nothing is known to."""

    def call_operator(self, op, args, kwargs, meta):  # type: ignore[no-untyped-def]
        if op == ADD or len(args) > 2:
            return super().call_operator(SUB, args, kwargs, meta)
        return super().call_operator(op, args, kwargs, meta)


class BlockFallsThrough(ExportPass):
    """The block before the hand-on may fall through to it with other arguments."""

    def call_operator(self, op, args, kwargs, meta):  # type: ignore[no-untyped-def]
        if op == ADD:
            args = (args[0], args[0])
        return super().call_operator(op, args, kwargs, meta)


def test_passthrough_reads_the_guard() -> None:
    """``passthrough`` knows which operators the pass's ``call_operator`` hands on untouched:
    all for a pass without one, all but ``target_ops`` behind the usual guard, none when
    anything else happens first or the guard changes the arguments."""
    from arm_accel.pipeline.passthrough import passthrough

    assert passthrough(Identity())(ADD) and passthrough(Identity())(RELU)  # type: ignore[misc]
    guarded = passthrough(GuardedAddToSub())
    assert guarded is not None and guarded(RELU) and not guarded(ADD)
    assert passthrough(LogsFirst()) is None
    assert passthrough(GuardChangesArgs()) is None
    assert passthrough(AddToSub()) is None
    first = passthrough(AddFirst())
    assert first is not None and first(RELU) and not first(ADD)
    assert passthrough(GuardReadsArgs()) is None
    assert passthrough(BlockFallsThrough()) is None


def test_passthrough_reads_the_edge_stage_passes(
    monkeypatch: pytest.MonkeyPatch, edge_graph: fx.GraphModule
) -> None:
    """exir's own passes, as their ``call_operator`` s read: ``NormalizeTransposePass`` rewrites
    only ``t``, ``ReplaceBrokenOpsWithFunctionalOpsPass`` only view operators,
    ``MemoryFormatOpsPass`` only the edge memory-format operators; ``ScalarToTensorPass`` and
    ``SymToTensorPass`` rebuild every call unchanged (where they run in place), but only while
    their source is the one read, and ``ScalarToTensorPass`` only on a graph with no scalar
    passed for a Tensor (here the aten graph of ``x + 1.0``)."""
    from arm_accel.pipeline import passthrough as pt
    from executorch.exir.passes import (
        MemoryFormatOpsPass,
        NormalizeTransposePass,
        ReplaceBrokenOpsWithFunctionalOpsPass,
    )
    from executorch.exir.passes.scalar_to_tensor_pass import ScalarToTensorPass
    from executorch.exir.passes.sym_to_tensor_pass import SymToTensorPass

    aten = torch.ops.aten
    transpose = pt.passthrough(NormalizeTransposePass())
    assert transpose is not None and not transpose(aten.t.default) and transpose(aten.add.Tensor)
    views = pt.passthrough(ReplaceBrokenOpsWithFunctionalOpsPass())
    assert views is not None and not views(aten.view.default) and views(aten.clone.default)
    formats = pt.passthrough(MemoryFormatOpsPass())
    clone, to_copy = exir_ops.edge.aten.clone.default, exir_ops.edge.aten._to_copy.default
    assert formats is not None and not formats(clone) and not formats(to_copy)
    assert formats(ADD) and formats(aten.clone.default)
    for cls in (ScalarToTensorPass, SymToTensorPass):
        every = pt.passthrough(cls(), edge_graph)
        assert every is not None and every(ADD) and every(aten.t.default)
    torch.manual_seed(0)
    aten_graph = torch.export.export(Small().eval(), (torch.randn(4, 8), torch.randn(4, 8)))
    assert pt.passthrough(ScalarToTensorPass(), aten_graph.graph_module) is None
    assert pt.passthrough(ScalarToTensorPass()) is None
    read = table.model("exir.scalar_to_tensor")
    changed = dataclasses.replace(read, pins=(Pin(read.pins[0].ref, {"0.0.0": "0" * 16}),))
    monkeypatch.setattr(
        table, "MODELS", tuple(changed if m.name == changed.name else m for m in table.MODELS)
    )
    assert pt.passthrough(ScalarToTensorPass(), edge_graph) is None


def test_guarded_pass_passes_through_and_equals_stock(edge_graph: fx.GraphModule) -> None:
    """A guarded pass re-traced in place: identical to stock, the nodes outside its targets
    claimed without its call chain, the ``add`` it rewrites rebuilt through it."""
    counters.reset()
    expected = stock_retrace(GuardedAddToSub(), copy.deepcopy(edge_graph)).graph_module
    graph = copy.deepcopy(edge_graph)
    freshness.record(graph.graph)
    with engine.arm_pipeline():
        result, run = inplace.retrace(GuardedAddToSub(), graph)
    assert_graphs_identical(expected, result.graph_module)
    adds = sum(n.target == ADD for n in edge_graph.graph.nodes)
    calls = sum(n.op == "call_function" for n in edge_graph.graph.nodes)
    assert adds > 0 and run.passed_through == calls - adds


class AddToSub(ExportPass):
    def call_operator(self, op, args, kwargs, meta):  # type: ignore[no-untyped-def]
        if op == ADD:
            op = SUB
        return super().call_operator(op, args, kwargs, meta)


class DropRelu(ExportPass):
    def call_operator(self, op, args, kwargs, meta):  # type: ignore[no-untyped-def]
        if op == RELU:
            return args[0]
        return super().call_operator(op, args, kwargs, meta)


class NegBeforeMul(ExportPass):
    """New nodes before the node interpreted; an extra ``add`` renames every later ``add``."""

    def call_operator(self, op, args, kwargs, meta):  # type: ignore[no-untyped-def]
        if op == MUL:
            neg = super().call_operator(NEG, (args[0],), {}, meta)
            twice = super().call_operator(ADD, (neg, neg), {}, meta)
            return super().call_operator(op, (twice, *args[1:]), kwargs, meta)
        return super().call_operator(op, args, kwargs, meta)


class NegAfterRelu(ExportPass):
    """The node interpreted is rebuilt as it was, then more nodes follow it."""

    def call_operator(self, op, args, kwargs, meta):  # type: ignore[no-untyped-def]
        out = super().call_operator(op, args, kwargs, meta)
        if op == RELU:
            return super().call_operator(NEG, (out,), {}, meta)
        return out


@pytest.mark.parametrize("pass_cls", [Identity, AddToSub, DropRelu, NegBeforeMul, NegAfterRelu])
def test_in_place_equals_stock(pass_cls: type, edge_graph: fx.GraphModule) -> None:
    """Stock vs in-place re-trace of each toy pass: identical graphs, in place."""
    compare(pass_cls, edge_graph)


def _relu_negated(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` with its relu feeding a new ``neg`` (made as a pass's graph edit makes a node:
    no provenance of its own) that replaces it everywhere else."""
    relu = next(n for n in gm.graph.nodes if n.target == RELU and n.users)
    with gm.graph.inserting_after(relu):
        neg = gm.graph.call_function(NEG, (relu,))
    neg.meta["val"] = relu.meta["val"]
    relu.replace_all_uses_with(neg, delete_user_cb=lambda user: user is not neg)
    gm.recompile()
    return gm


def test_records_name_the_graphs_stocks_name(edge_graph: fx.GraphModule) -> None:
    """Two re-traces in a row, each after a graph edit that made a node without provenance:
    stock's re-traces build a new graph each, so the records the first gives its new node and
    the second gives its own name two graphs, and a record made afterwards a third. In place
    the graph object stays; its identity changes as stock's graph does, so with labels shared
    over the lowering the records fall into the same graphs. Without it, all would name one."""
    from arm_accel.testing import GraphLabels, source_signature
    from torch.fx.traceback import NodeSource

    results = []
    counters.reset()
    for retrace in (stock_retrace, engine_retrace):
        gm = retrace(Identity(), _relu_negated(copy.deepcopy(edge_graph))).graph_module
        gm = retrace(Identity(), _relu_negated(gm)).graph_module
        results.append(gm)
    assert in_place_runs(Identity) == (2, {})
    labels = (GraphLabels(), GraphLabels())
    assert_graphs_identical(results[0], results[1], labels)
    negs = [[n for n in gm.graph.nodes if n.target == NEG] for gm in results]
    later = [NodeSource(nodes[0], "later") for nodes in negs]
    assert source_signature(later[0], labels[0]) == source_signature(later[1], labels[1])
    graphs = {labels[0](n.meta["from_node"][0]) for n in negs[0]} | {labels[0](later[0])}
    assert len(graphs) == 3, "stock's records name three graphs"


class Attention(torch.nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v) * 2.0


def _sdpa_decomposed() -> fx.GraphModule:
    """An aten graph after executorch's SDPA decomposition, whose nodes' ``source_fn_stack``
    records name the nodes themselves (made anew each time: ``deepcopy`` would leave the
    copies' records naming the original's nodes)."""
    from executorch.backends.transforms.decompose_sdpa import DecomposeScaledDotProductAttention

    torch.manual_seed(0)
    inputs = tuple(torch.randn(1, 2, 4, 8) for _ in range(3))
    gm = torch.export.export(Attention(), inputs).graph_module
    gm = DecomposeScaledDotProductAttention().call(gm).graph_module
    assert any(
        inplace._names_graph(n.meta.get("source_fn_stack"), gm.graph) for n in gm.graph.nodes
    )
    return gm


class MulFirst(ExportPass):
    """Each ``aten.mul`` gets a ``mul`` of its own before it: every later ``mul`` is renamed."""

    def call_operator(self, op, args, kwargs, meta):  # type: ignore[no-untyped-def]
        if op == torch.ops.aten.mul.Tensor:
            args = (super().call_operator(op, args, kwargs, meta), *args[1:])
        return super().call_operator(op, args, kwargs, meta)


def test_records_naming_their_own_graph_name_stocks_old_nodes() -> None:
    """Two re-traces in a row of a graph whose ``source_fn_stack`` records name its own nodes
    (the SDPA decomposition's), by a pass that renames nodes: after stock's re-trace the
    records name the old graph's nodes, with the names they had; in place they name stand-ins
    with those names, never the renamed nodes. Identical to stock, records included
    (foreign nodes by name, op and target), both re-traces in place."""
    counters.reset()
    results = []
    for retrace in (stock_retrace, engine_retrace):
        gm = retrace(MulFirst(), _sdpa_decomposed()).graph_module
        results.append(retrace(MulFirst(), gm).graph_module)
    assert in_place_runs(MulFirst) == (2, {})
    assert_graphs_identical(results[0], results[1])
    first = next(n for n in results[1].graph.nodes if n.meta.get("source_fn_stack"))
    named = first.meta["source_fn_stack"][0][0]
    assert named.graph is not first.graph and named.name != first.name, (named, first)


def test_a_failed_re_trace_gives_back_the_records_naming_the_graph() -> None:
    """A pass that raises mid re-trace on a graph whose records name its own nodes: after the
    rollback every node holds its own record list again, naming the node itself."""
    gm = _sdpa_decomposed()
    stacks = {n: n.meta["source_fn_stack"] for n in gm.graph.nodes if "source_fn_stack" in n.meta}
    counters.reset()
    with pytest.raises(RuntimeError, match="fourth node"):
        engine_retrace(Raises(), gm)
    assert in_place_runs(Raises) == (0, {"RuntimeError in the in-place re-trace": 1})
    for node, stack in stacks.items():
        assert node.meta["source_fn_stack"] is stack
        assert all(entry[0] is node for entry in stack)


def test_a_rolled_back_transaction_restores_the_graphs_identity(
    edge_graph: fx.GraphModule,
) -> None:
    """A transaction renewed the graph's identity (a re-trace inside it) and rolled back: the
    graph is the one it was, and records made from it name what they named before."""
    from arm_accel.runtime import identity

    gm = copy.deepcopy(edge_graph)
    before = identity.graph_id(gm.graph)
    journal = GraphJournal(gm)
    journal.checkpoint()
    identity.renew(gm.graph)
    assert identity.graph_id(gm.graph) != before
    journal.rollback()
    assert identity.graph_id(gm.graph) == before == id(gm.graph)


def test_identity_is_pinned_to_the_node_source_read() -> None:
    """The identity row models ``NodeSource.__init__``'s source: its pin holds on the
    constructor as installed (wrapped: ``getsource`` reads through the wrappers), so the row is
    installed with the engine; a changed source keeps the group stock (``test_patches``)."""
    from arm_accel import patches
    from arm_accel.patches import sources

    row = next(r for r in table.group("retrace_engine").rows if r.name.endswith(".identity"))
    assert [p.ref for p in row.models] == ["torch.fx.traceback:NodeSource.__init__"]
    assert sources.live_failure(row.models[0]) is None
    assert patches.installed("retrace_engine")


def test_no_op_keeps_every_node_and_reuses_values(edge_graph: fx.GraphModule) -> None:
    """A re-trace that changes nothing after one that left the graph: no node rebuilt, no value
    dispatched, and still identical to stock's re-trace."""
    fresh = engine_retrace(Identity(), copy.deepcopy(edge_graph)).graph_module
    nodes = list(fresh.graph.nodes)
    _, run = inplace.retrace(Identity(), fresh)
    assert run.dispatched == 0 and not run.journal.created
    assert list(run.graph.nodes) == nodes
    compare(Identity, fresh)


def test_stale_values_are_dispatched_again(edge_graph: fx.GraphModule) -> None:
    """A graph edited after the last re-trace without its values being refreshed (a view's
    shape changed, a value replaced by a wrong one): the in-place re-trace recomputes them,
    and downstream, as stock does."""
    fresh = engine_retrace(Identity(), copy.deepcopy(edge_graph)).graph_module
    view = next(n for n in fresh.graph.nodes if n.target == VIEW)
    view.args = (view.args[0], [16, 2])
    relu = next(n for n in fresh.graph.nodes if n.target == RELU)
    relu.meta["val"] = relu.meta["val"].new_empty((1, 1))
    expected, actual = compare(Identity, fresh)
    out = next(n for n in actual.graph.nodes if n.op == "output").args[0][0]
    assert tuple(out.meta["val"].shape) == (2, 16)  # downstream of the view, recomputed


def test_values_of_another_grad_mode_are_dispatched_again() -> None:
    """A graph whose last in-place re-trace ran under ``torch.no_grad()`` (values computed from
    the parameters do not require grad), re-traced in place under grad mode: identical to
    stock's re-trace, ``requires_grad`` of every value included (stock's dispatch makes them
    require grad; kept values would not), and nothing kept."""
    torch.manual_seed(0)
    aten = torch.export.export(Small().eval(), (torch.randn(4, 8), torch.randn(4, 8)))
    with torch.no_grad():
        fresh = engine_retrace(Identity(), aten.graph_module).graph_module
    linear = next(n for n in fresh.graph.nodes if n.name == "linear")
    assert not linear.meta["val"].requires_grad
    assert freshness.left_by(fresh.graph) == {}  # recorded under another grad mode
    counters.reset()
    expected = stock_retrace(Identity(), copy.deepcopy(fresh)).graph_module
    result, run = inplace.retrace(Identity(), fresh)
    assert_graphs_identical(expected, result.graph_module)
    assert linear.meta["val"].requires_grad
    assert run.dispatched == sum(n.op == "call_function" for n in fresh.graph.nodes)


def test_values_on_parameter_inputs_are_kept_under_grad() -> None:
    """A module as ``prepare_pt2e`` gets it (parameters fetched by ``get_attr``, grad mode on):
    after one in-place re-trace, a second one keeps the values of the nodes that read a
    parameter (``linear``; its ``get_attr`` made again at the use, as stock does) and of every
    node after it, dispatching nothing, and equals stock's re-trace of the same graph, the
    autograd counter moved as far as stock's dispatch moved it (each side's ``seq_nr`` s
    included in the comparison)."""
    torch.manual_seed(0)
    inputs = (torch.randn(4, 8), torch.randn(4, 8))
    module = torch.export.export(Small(), inputs).module(check_guards=False)
    assert any(n.op == "get_attr" for n in module.graph.nodes)
    first = engine_retrace(Identity(), module).graph_module
    counters.reset()
    start = torch.autograd._get_sequence_nr()
    expected = stock_retrace(Identity(), copy.deepcopy(first)).graph_module
    stock_moved = torch.autograd._get_sequence_nr() - start
    start = torch.autograd._get_sequence_nr()
    result, run = inplace.retrace(Identity(), first)
    assert torch.autograd._get_sequence_nr() - start == stock_moved > 0
    assert_graphs_identical(expected, result.graph_module)
    assert run.dispatched == 0 and run.stowed_kept >= 1
    linear = next(n for n in result.graph_module.graph.nodes if n.target == LINEAR)
    assert any(i.op == "get_attr" for i in linear.all_input_nodes)


class Bmm(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.bmm(x, y))


class ArmIdentity(ArmPass):
    _passes_required_after: set[type] = set()


@pytest.mark.parametrize("modelled", [True, False], ids=["rule-modelled", "stock-method"])
def test_quantized_bmm_keeps_its_node_and_equals_stock(
    modelled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``bmm`` with ``input_qparams`` and an int8 ``output_qparams``: ``ArmPass.call_operator``
    builds it with its own rule (``_call_quantized_op_without_fake_kernel``, no fake dispatch),
    in stock a new node on every re-trace. Compares stock's re-trace with the in-place one,
    which keeps the ``bmm`` node object: with the method's source as read, its value rule runs
    without the method (``_quantized_value``); with another source (patched here), stock's
    method builds a node and the old node adopts it."""
    calls: list[object] = []
    rule = inplace._quantized_value
    monkeypatch.setattr(inplace, "_quantized_value", lambda meta: calls.append(meta) or rule(meta))
    if not modelled:
        monkeypatch.setattr(inplace, "_quantized_value_modelled", lambda: False)
    torch.manual_seed(0)
    inputs = (torch.randn(2, 3, 4), torch.randn(2, 4, 5))
    program = torch.export.export(Bmm().eval(), inputs)
    graph_module = to_edge(program).exported_program().graph_module
    bmm = next(n for n in graph_module.graph.nodes if n.target == BMM)
    bmm.meta["input_qparams"] = {0: "q0", 1: "q1"}
    bmm.meta["output_qparams"] = {0: types.SimpleNamespace(dtype=torch.int8)}
    counters.reset()
    expected = stock_retrace(ArmIdentity(), copy.deepcopy(graph_module)).graph_module
    with engine.arm_pipeline():
        actual = ArmIdentity().call(graph_module).graph_module
    assert_graphs_identical(expected, actual)
    assert in_place_runs(ArmIdentity) == (1, {})
    assert next(n for n in actual.graph.nodes if n.target == BMM) is bmm
    assert bmm.meta["val"].dtype == torch.int8
    assert len(calls) == (1 if modelled else 0)


class Raises(ExportPass):
    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def call_operator(self, op, args, kwargs, meta):  # type: ignore[no-untyped-def]
        self.seen += 1
        if self.seen == 4:
            raise RuntimeError("pass failed on its fourth node")
        return super().call_operator(NEG if op == RELU else op, args, kwargs, meta)


def test_failure_rolls_back_and_runs_stock(edge_graph: fx.GraphModule) -> None:
    """A pass that raises mid re-trace: the engine undoes its changes (graph equal to what came
    in, names and name space too), counts a fallback, and stock's re-trace raises as stock does."""
    graph_module = copy.deepcopy(edge_graph)
    before = copy.deepcopy(graph_module)
    counters.reset()
    with pytest.raises(RuntimeError, match="fourth node"):
        engine_retrace(Raises(), graph_module)
    assert_graphs_identical(before, graph_module)
    done, fallbacks = in_place_runs(Raises)
    assert done == 0 and fallbacks == {"RuntimeError in the in-place re-trace": 1}


class EditsThenRaises(ExportPass):
    """Puts a ``neg`` after each ``relu`` (their users' args re-pointed), retargets ``mul`` to
    ``sub``, and raises at the last node, the ``add`` after the second ``relu``."""

    def __init__(self) -> None:
        super().__init__()
        self.relus = 0

    def call_operator(self, op, args, kwargs, meta):  # type: ignore[no-untyped-def]
        if op == ADD and self.relus == 2:
            raise RuntimeError("pass failed at the last add")
        if op == RELU:
            self.relus += 1
            value = super().call_operator(op, args, kwargs, meta)
            return super().call_operator(NEG, (value,), {}, meta)
        return super().call_operator(SUB if op == MUL else op, args, kwargs, meta)


def test_rollback_restores_users_and_index_order(edge_graph: fx.GraphModule) -> None:
    """A pass that re-points args and retargets nodes, then raises: after the rollback each
    node's users and each find_nodes bucket (``sort=False``) are in the order they were in
    before the re-trace (fx's own undo re-appends), as stock's pass body would then see them;
    the engine did edit the graph first (it re-pointed and retargeted nodes)."""
    from pipeline_diff import orders

    graph_module = copy.deepcopy(edge_graph)
    before = copy.deepcopy(graph_module)
    orders_before = orders(graph_module)
    edits: list[int] = []
    journal_rollback = GraphJournal.rollback

    def rollback(journal: GraphJournal) -> None:
        edits.append(len(journal._args) + len(journal._targets))
        journal_rollback(journal)

    counters.reset()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(GraphJournal, "rollback", rollback)
        with pytest.raises(RuntimeError, match="last add"):
            engine_retrace(EditsThenRaises(), graph_module)
    assert edits and edits[0] >= 3, edits
    assert_graphs_identical(before, graph_module)
    assert orders(graph_module) == orders_before


def test_unsupported_graph_declines_before_any_change(edge_graph: fx.GraphModule) -> None:
    """A graph with a ``get_attr`` of a submodule (not modelled: only tensors and parameters
    are): stock runs, the decline is counted, and the graph equals stock's."""
    graph_module = copy.deepcopy(edge_graph)
    graph = graph_module.graph
    graph_module.extra = torch.nn.ReLU()
    with graph.inserting_before(next(iter(graph.nodes))):
        graph.get_attr("extra")
    counters.reset()
    expected = stock_retrace(Identity(), copy.deepcopy(graph_module)).graph_module
    actual = engine_retrace(Identity(), graph_module).graph_module
    assert_graphs_identical(expected, actual)
    done, fallbacks = in_place_runs(Identity)
    assert done == 0 and fallbacks == {"get_attr of a non-tensor": 1}


def test_outside_the_arm_pipeline_stock_runs(edge_graph: fx.GraphModule) -> None:
    """Re-traces outside ``ArmPassManager._transform`` are not the engine's: nothing recorded."""
    counters.reset()
    Identity().call(copy.deepcopy(edge_graph))
    assert f"{Identity.__name__}.retrace" not in counters.snapshot()


@pytest.mark.parametrize("model", ["llama1", "dscnnkws", "convnet"])
def test_every_pass_identical_to_stock(model: str) -> None:
    """A zoo model lowered stock and accelerated from one exported program: the graph after
    every pass of the Arm pipeline is identical, the TOSA bytes equal, most re-traces ran
    in place (the rest only for the reasons listed), the fake memo served ``aten`` calls as
    stock's cache hits, and on INT models calls of the quantized and TOSA operators."""
    from arm_accel.tools import models
    from pipeline_diff import assert_lowerings_identical, lower

    net, inputs, mode = models.build(model)
    exported = models.export_for_arm(net, inputs, mode)
    stock = lower(exported, mode, accelerated=False)
    counters.reset()
    accelerated = lower(exported, mode, accelerated=True)
    assert_lowerings_identical(stock, accelerated)
    records = {k: v for k, v in counters.snapshot().items() if k.endswith(".retrace")}
    in_place = sum(int(v.accelerated) for v in records.values())
    fallbacks = {r for v in records.values() for r in v.fallbacks}
    assert in_place >= 5, records
    assert fallbacks <= {"call override"}, fallbacks
    aten = counters.snapshot()[fake_memo.ATEN_STATS_NAME]
    assert aten.accelerated > 0 and aten.calls > aten.accelerated, aten
    if mode == "INT":
        memo = counters.snapshot()[fake_memo.STATS_NAME]
        assert memo.accelerated > 0 and memo.calls > memo.accelerated, memo


def test_remembered_code_is_what_stock_generates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every recompile of an accelerated llama1 script (quantization and lowering): the source
    (and globals) the memo returns equals what ``Graph.python_code`` generates for that graph
    right then; in the lowering the memo served most recompiles of real graphs (a pass's tracer
    starts from new, empty graphs, which the per-graph memo cannot have seen; the annotation
    pipeline edits every graph it recompiles). Recompiles run at once here (``deferred`` off):
    with it on, the memo serves only code generated on use."""
    from arm_accel.runtime import codegen, deferred
    from arm_accel.tools import models

    monkeypatch.setattr(deferred, "deferrable", lambda gm: False)

    calls = {"checked": 0, "graphs": 0, "served": 0}
    lowering = False
    remembered = codegen.python_code

    def checking(stock: Any, graph: fx.Graph, root_module: str, served_: Any, **kwargs: Any) -> Any:
        before = codegen.hits["python_code"]
        code = remembered(stock, graph, root_module, served_, **kwargs)
        served = codegen.hits["python_code"] > before
        fresh = stock(graph, root_module, **kwargs)
        assert code.src == fresh.src
        assert code.globals.keys() - {"forward", "__builtins__"} == fresh.globals.keys()
        assert all(code.globals[k] is fresh.globals[k] for k in fresh.globals)
        calls["checked"] += 1
        if lowering and len(graph.nodes) > 10:
            calls["graphs"] += 1
            calls["served"] += served
        return code

    monkeypatch.setattr(codegen, "python_code", checking)
    codegen.clear()
    net, inputs, mode = models.build("llama1")
    program = models.export_for_arm(net, inputs, mode)
    lowering = True
    models.lower(program, mode)
    assert calls["checked"] > 100, calls
    assert calls["served"] > calls["graphs"] // 2, calls


def test_engine_fault_falls_back_or_raises_in_strict_mode(
    edge_graph: fx.GraphModule, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault of the engine itself (here its commit raises): the graph is as it came and stock's
    re-trace gives the result, counted; with ``ARM_ACCEL_STRICT=1`` the fault raises instead."""

    def broken(self: Any) -> None:
        raise KeyError("engine fault")

    monkeypatch.setattr(inplace.InplaceRetrace, "_check_erasable", broken)
    expected = stock_retrace(AddToSub(), copy.deepcopy(edge_graph)).graph_module
    monkeypatch.setenv("ARM_ACCEL_STRICT", "0")
    counters.reset()
    actual = engine_retrace(AddToSub(), copy.deepcopy(edge_graph)).graph_module
    assert_graphs_identical(expected, actual)
    assert in_place_runs(AddToSub) == (0, {"KeyError in the in-place re-trace": 1})
    monkeypatch.setenv("ARM_ACCEL_STRICT", "1")
    with pytest.raises(RuntimeError, match="in-place re-trace of AddToSub.retrace failed"):
        engine_retrace(AddToSub(), copy.deepcopy(edge_graph))


def test_what_a_re_trace_left_dies_with_its_graph(edge_graph: fx.GraphModule) -> None:
    """The freshness record of an in-place re-trace does not keep its graph alive (it references
    the graph's nodes, which reference the graph)."""
    import gc
    import weakref

    result = engine_retrace(Identity(), copy.deepcopy(edge_graph)).graph_module
    assert freshness.left_by(result.graph)
    graph = weakref.ref(result.graph)
    del result
    gc.collect()
    assert graph() is None


@pytest.mark.parametrize("pass_cls", [Identity, GuardedAddToSub, NegBeforeMul])
def test_a_re_trace_is_freed_when_it_returns(pass_cls: type, edge_graph: fx.GraphModule) -> None:
    """The re-trace object (its environment of proxies, the old metas in its journal, the
    record it started from) is freed by reference counting once the caller drops it, with the
    collector off: nothing it built survives in a reference cycle until a full collection.
    Covers the interpreter's hooks (every pass), the pass-through claims (the guarded pass) and
    nodes created among the old ones (``NegBeforeMul``)."""
    import gc
    import weakref

    graph = engine_retrace(Identity(), copy.deepcopy(edge_graph)).graph_module
    gc.collect()
    gc.disable()
    try:
        with engine.arm_pipeline():
            result, run = inplace.retrace(pass_cls(), graph)
        assert run.dispatched + run.passed_through > 0
        alive = weakref.ref(run)
        env = weakref.ref(next(iter(run.claimed.values())).proxy)
        del run
        assert alive() is None and env() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("model", ["llama1", "dscnnkws"])
def test_edge_program_identical_to_stock(model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """to_edge's own ExportPass passes (``_generate_edge_program``) re-traced by the engine: the
    edge program they return equals stock's (graph with every meta key, signature, state dict,
    constants; ``arm_accel.tools.program_compare``), and some of them ran in place. The
    first of them follows torch's ``ReplaceViewOpsWithViewCopyOpsPass`` re-trace, whose values
    the engine keeps: it dispatched nothing and claimed the nodes it passes through as is."""
    from arm_accel.tools import models
    from arm_accel.tools.program_compare import assert_programs_equal
    from executorch.exir.program import _program

    net, inputs, mode = models.build(model)
    exported = models.export_for_arm(net, inputs, mode)
    outputs: list[Any] = []
    engine_wrapper = _program._generate_edge_program

    def recording(*args: Any, **kwargs: Any) -> Any:
        outputs.append(engine_wrapper(*args, **kwargs))
        return outputs[-1]

    _program._generate_edge_program = recording
    engines: list[tuple[str, inplace.InplaceRetrace]] = []
    engine_retrace = inplace.retrace

    def retrace(pass_: Any, graph_module: fx.GraphModule) -> Any:
        result = engine_retrace(pass_, graph_module)
        engines.append((type(pass_).__name__, result[1]))
        return result

    monkeypatch.setattr(inplace, "retrace", retrace)
    try:
        # One exported program for both (as a user lowers it): the state dicts then hold the
        # same tensors, which the comparison checks by identity.
        with switch.disabled():
            models.lower(exported, mode)
        counters.reset()
        models.lower(exported, mode)
    finally:
        _program._generate_edge_program = engine_wrapper
    stock, ours = outputs
    assert_programs_equal(stock, ours)
    in_place = {
        k for k, v in counters.snapshot().items() if k.endswith(".retrace") and v.accelerated
    }
    expected = {
        "OpReplacePass.retrace",
        "MemoryFormatOpsPass.retrace",
        "ScalarToTensorPass.retrace",
    }
    assert expected <= in_place, in_place
    name, first = engines[0]
    assert first.claimed_as_is > 0 and first.dispatched == 0, (name, first.dispatched)


def test_proxy_data_is_what_pytree_gives() -> None:
    """``inplace.proxy_data`` equals ``tree_map_only(ProxyValue, .data)`` on the argument
    shapes ``_fx`` sees (nested tuples, lists, dicts, scalars, dtypes, fx's immutable
    containers nested, a namedtuple, a ``torch.Size``, real and fake tensors as leaves, a
    ProxyValue subclass), container types and object identity of the leaves included."""
    from collections import namedtuple

    from executorch.exir.pass_base import ProxyValue
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.immutable_collections import immutable_dict, immutable_list
    from torch.utils import _pytree as pytree

    class Sub(ProxyValue):  # type: ignore[misc]
        pass

    graph = fx.Graph()
    proxy = fx.Proxy(graph.placeholder("x"))
    a, b = torch.empty(2), torch.empty(3)
    pa, pb, sub = ProxyValue(a, proxy), ProxyValue(b, proxy), Sub(b, proxy)
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(a)
    pair = namedtuple("pair", "x y")
    cases: list[Any] = [
        ((pa, 1, 2.5, None, torch.int8), {"dim": [0, pb], "keep": True}),
        ([pa, [pb, (pa,)], {"k": (1, pb)}], {}),
        (immutable_list([pa, pb]), immutable_dict({"out": pa})),
        ((pair(pa, 3), sub, torch.device("cpu"), torch.strided, "s"), {}),
        (immutable_list([immutable_list([pa]), immutable_dict({"b": pb, "a": 1})]), {}),
        ((a, fake, torch.Size([2, 3]), [fake, pb]), immutable_dict({"t": a})),
    ]

    def shape(v: Any) -> Any:
        if isinstance(v, (tuple, list)):
            return (type(v), tuple(shape(x) for x in v))
        if isinstance(v, dict):
            return (type(v), tuple((k, shape(x)) for k, x in v.items()))
        return (type(v), id(v))

    for case in cases:
        expected = pytree.tree_map_only(ProxyValue, lambda x: x.data, case)
        assert shape(inplace.proxy_data(case)) == shape(expected)
