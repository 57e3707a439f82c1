"""The edge stage's ``run_decompositions`` calls that would return their input are
replayed without tracing (arm_accel.edge.decompositions). Every test compares with stock's own
call in the same process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import arm_accel
import fuzz_models as fm
import pytest
import torch
from arm_accel import PassStats, patches
from arm_accel.control import counters, switch
from arm_accel.edge import cia_ops, cia_override, decompositions, param_meta, subtrace
from arm_accel.patches import sources, table
from arm_accel.runtime import fake_memo
from arm_accel.testing import assert_graphs_equal
from arm_accel.tools import models
from arm_accel.tools.program_compare import assert_programs_equal, program_differences
from hypothesis import given
from support.provenance import records as provenance_records
from torch import fx
from torch.export import ExportedProgram


@contextmanager
def edge_stage_output() -> Iterator[list[ExportedProgram]]:
    """Record the program ``_gen_edge_manager_for_partitioners`` hands to
    ``_generate_edge_program``: the edge stage's result after its decompositions."""
    import executorch.exir.program._program as prog

    seen: list[ExportedProgram] = []
    original = prog._generate_edge_program

    def recording(config: Any, program: ExportedProgram, *args: Any, **kwargs: Any) -> Any:
        seen.append(program)
        return original(config, program, *args, **kwargs)

    prog._generate_edge_program = recording
    try:
        yield seen
    finally:
        prog._generate_edge_program = original


def _accelerated() -> int:
    return counters.snapshot().get(decompositions.STATS_NAME, PassStats()).accelerated


def _collected() -> int:
    """Collections of CIA ops that materialized once (``arm_accel.edge.cia_ops``) so far."""
    return counters.snapshot().get(cia_ops.STATS_NAME, PassStats()).accelerated


def _overridden() -> int:
    """CIA overrides entered by ``arm_accel.edge.cia_override`` so far."""
    return counters.snapshot().get(cia_override.STATS_NAME, PassStats()).accelerated


def _populated() -> int:
    """Param/buffer metadata write-backs made by ``arm_accel.edge.param_meta`` so far."""
    return counters.snapshot().get(param_meta.STATS_NAME, PassStats()).accelerated


def _served() -> int:
    """Calls served by the fake memo under ``FakeTensorMode.dispatch`` so far."""
    return counters.snapshot().get(fake_memo.DISPATCH_STATS_NAME, PassStats()).accelerated


@pytest.fixture(scope="module")
def active() -> None:
    import executorch.backends.arm._passes  # noqa: F401  (the activation's trigger)

    arm_accel.enable()
    assert patches.installed("edge.decompositions"), arm_accel.status().edge_decompositions


def test_lowering_equals_stock(active: None) -> None:
    """dscnnkws INT lowered with acceleration off, then on, from the same exported program: the
    edge stage's program equals stock's (graph with every meta key, signature, state dict,
    constants, verifiers) and the TOSA bytes are equal; fails unless calls 0 (the export's
    ``relu_`` functionalized, its eval ``dropout`` and ``flatten`` traced alone), 1 (its conv2d
    written as convolution) and 2 were replayed, or if no collection of CIA ops materialized
    once, no CIA override made its patches directly or no param/buffer metadata write-back
    looked its mappings up once, or if any of these happened with acceleration off; the
    provenance records hold fewer objects than stock's where stock deep-copies them."""
    model, inputs, mode = models.build("dscnnkws")
    exported = models.export_for_arm(model, inputs, mode)
    before, served, collected, overridden, populated = (
        _accelerated(),
        _served(),
        _collected(),
        _overridden(),
        _populated(),
    )
    with arm_accel.disabled(), edge_stage_output() as stock_programs:
        stock_bytes = models.tosa_bytes(models.lower(exported, mode))
    assert _accelerated() == before, "the fast path ran with acceleration off"
    assert _served() == served, "the fake memo served calls with acceleration off"
    assert _collected() == collected, "CIA ops collected once with acceleration off"
    assert _overridden() == overridden, "the CIA override ran ours with acceleration off"
    assert _populated() == populated, "param/buffer meta written by ours with acceleration off"
    with edge_stage_output() as ours_programs:
        ours_bytes = models.tosa_bytes(models.lower(exported, mode))
    assert _accelerated() - before == 3, (
        "calls 0 (relu_ functionalized, dropout and flatten traced alone), 1 (conv2d as "
        "convolution) and 2 not all replayed"
    )
    assert _collected() > collected, "no collection of CIA ops materialized once"
    assert _overridden() > overridden, "no CIA override made its patches directly"
    if patches.installed("edge.param_meta"):  # stock by design where torch reads once itself
        assert _populated() > populated, "no param/buffer meta write-back looked up once"
    (stock,), (ours,) = stock_programs, ours_programs
    assert_graphs_equal(stock.graph_module, ours.graph_module)
    assert stock.graph_signature == ours.graph_signature
    assert list(stock.state_dict) == list(ours.state_dict)
    assert all(stock.state_dict[k] is ours.state_dict[k] for k in stock.state_dict)
    assert list(stock.constants) == list(ours.constants)
    assert_programs_equal(stock, ours)
    assert stock_bytes and ours_bytes == stock_bytes
    # equal values, fewer objects where stock's records deep-copy their ancestors (torch 2.13,
    # 2.14.0): ours share them; as many where stock's share them too (2.15.0)
    if sources.live_failure(table.NODE_SOURCE_SHARES) is not None:
        assert _provenance_objects(ours) < _provenance_objects(stock)
    else:
        assert _provenance_objects(ours) == _provenance_objects(stock)


def test_call_results_get_their_code_when_used(
    active: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dscnnkws INT lowered with acceleration off, then on, from the same exported program,
    recording what each decomposition call of the edge stage returns. Accelerated, every result
    but the last (which leaves the stage) still has its code pending after the lowering, and
    each result's code, once read, equals stock's result of the same call (same source, same
    ``forward`` signature); stock's results have theirs at once."""
    import inspect

    from arm_accel.runtime import deferred

    model, inputs, mode = models.build("dscnnkws")
    exported = models.export_for_arm(model, inputs, mode)
    results: list[ExportedProgram] = []
    stock_decompose = decompositions._decompose

    def recording(*args: Any) -> ExportedProgram:
        results.append(stock_decompose(*args))
        return results[-1]

    monkeypatch.setattr(decompositions, "_decompose", recording)
    with arm_accel.disabled():
        models.lower(exported, mode)
    stock_results = list(results)
    results.clear()
    models.lower(exported, mode)
    assert len(results) == len(stock_results) == 3
    assert all(deferred.pending(r.graph_module) is None for r in stock_results)
    assert [deferred.pending(r.graph_module) is not None for r in results] == [True, True, False]
    for ours, stock in zip(results, stock_results, strict=True):
        assert ours.graph_module.code == stock.graph_module.code
        assert inspect.signature(ours.graph_module.forward) == inspect.signature(
            stock.graph_module.forward
        )
        assert deferred.pending(ours.graph_module) is None


def _provenance_objects(ep: ExportedProgram) -> int:
    """Distinct NodeSource objects reachable from the program's ``from_node`` chains."""
    return len(provenance_records(ep.graph))


def test_shared_provenance_equals_deep_copy(active: None) -> None:
    """``NodeSource(node)`` inside ``provenance.sharing()`` equals stock's record of the same
    node (``to_dict``, ``==``) and holds the node's own ancestors in a list of its own; outside
    the block, and in another thread while this one is inside it, the chain is deep-copied
    where stock's constructor deep-copies it (torch 2.13, 2.14.0). Where stock's shares the
    records itself (2.15.0) nothing is wrapped and every record shares them."""
    import threading

    from arm_accel.runtime import provenance
    from torch.fx.traceback import NodeSource, NodeSourceAction

    deep_copies = sources.live_failure(table.NODE_SOURCE_SHARES) is not None
    assert patches.installed("edge.provenance") is deep_copies
    ep = _functional_tiny().run_decompositions({})  # chains two levels deep
    node = next(n for n in ep.graph.nodes if n.op == "call_function")
    chain = node.meta["from_node"]
    stock = NodeSource(node, "p", NodeSourceAction.CREATE)
    assert (stock.from_node[0] is not chain[0]) is deep_copies
    in_thread: list[NodeSource] = []
    with provenance.sharing():
        shared = NodeSource(node, "p", NodeSourceAction.CREATE)
        worker = threading.Thread(target=lambda: in_thread.append(NodeSource(node, "p")))
        worker.start()
        worker.join()
    assert shared == stock and shared.to_dict() == stock.to_dict()
    assert shared.from_node == chain and shared.from_node is not chain
    assert all(a is b for a, b in zip(shared.from_node, chain, strict=True))
    assert (in_thread[0].from_node[0] is not chain[0]) is deep_copies
    assert vars(shared).keys() == vars(stock).keys()


class _QuantizableTiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.linear = torch.nn.Linear(6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x).relu().transpose(2, 3)
        return self.linear(y.reshape(1, 4, 6, 6)).sum(dim=-1)


def test_deprecated_retrace_shares_and_memoizes(
    active: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's ``ReplaceViewOpsWithViewCopyOpsPass`` (the deprecated ``ExportPass`` base's
    re-trace, which the edge stage runs) on copies of the INT program the edge stage hands to
    it: in the pipeline with acceleration on, its graph equals stock's (every meta key,
    provenance naming the same graphs), its records deep-copied no chain where stock's did
    (torch 2.13, 2.14.0; on 2.15.0 neither does) and the fake memo served its quantize /
    dequantize calls, counted; with the switch off, or outside the pipeline, stock's copies
    and nothing counted or served."""
    import copy
    import types
    from contextlib import nullcontext

    from arm_accel.pipeline import engine
    from arm_accel.runtime import provenance
    from arm_accel.testing import assert_graphs_identical, tracking_graphs
    from torch._export.passes.replace_view_ops_with_view_copy_ops_pass import (
        ReplaceViewOpsWithViewCopyOpsPass,
    )
    from torch.fx import traceback as fx_traceback

    torch.manual_seed(0)
    exported = models.export_for_arm(_QuantizableTiny().eval(), (torch.randn(1, 3, 8, 8),), "INT")
    with arm_accel.disabled(), edge_stage_output() as programs:
        models.lower(exported, "INT")
    (program,) = programs
    copies = [0]

    def counted_deepcopy(value: Any, memo: Any = None) -> Any:
        copies[0] += 1
        return copy.deepcopy(value, memo)

    monkeypatch.setattr(fx_traceback, "copy", types.SimpleNamespace(deepcopy=counted_deepcopy))

    def retraced(on: bool, in_pipeline: bool) -> tuple[fx.GraphModule, int]:
        gm = copy.deepcopy(program.graph_module)
        pipeline = engine.arm_pipeline() if in_pipeline else nullcontext()
        copies[0] = 0
        with pipeline, nullcontext() if on else arm_accel.disabled():
            result = ReplaceViewOpsWithViewCopyOpsPass()(gm).graph_module
        return result, copies[0]

    def counts() -> tuple[int, int]:
        return counters.snapshot().get(provenance.STATS_NAME, PassStats()).calls, _served()

    deep_copies = sources.live_failure(table.NODE_SOURCE_SHARES) is not None
    with tracking_graphs():
        before = counts()
        (stock, stock_copies), (outside, outside_copies) = (
            retraced(on=False, in_pipeline=True),
            retraced(on=True, in_pipeline=False),
        )
        assert counts() == before, "counted or served with the switch off or outside the pipeline"
        ours, ours_copies = retraced(on=True, in_pipeline=True)
    assert_graphs_identical(stock, ours)
    assert_graphs_identical(stock, outside)
    shared, served = counts()
    assert shared == before[0] + int(deep_copies)
    assert served > before[1], "the fake memo served no quantize/dequantize call"
    assert outside_copies == stock_copies
    assert (stock_copies > 0) is deep_copies
    assert ours_copies == 0


class _Tiny(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.relu(x + 1).sum(dim=1)


def _functional_tiny() -> ExportedProgram:
    return torch.export.export(_Tiny(), (torch.randn(2, 3),)).run_decompositions({})


def test_replay_equals_stock_call_on_tiny_program() -> None:
    """A re-trace output with no table target: the replay equals stock's call with that table
    (every meta key, names, signature); without tracing rewritten nodes alone, the decision
    declines once a target is in the table."""
    ep = _functional_tiny()
    table: dict[Any, Any] = {}
    assert decompositions.decline_reason(ep, table) is None
    stock = ep.run_decompositions(table)  # outside the edge stage: always stock's call
    assert program_differences(stock, decompositions.replay_program(ep)) == []
    add = torch.ops.aten.add.Tensor
    assert (
        decompositions.decline_reason(ep, {add: None}, trace_rewritten=False)
        == "aten.add.Tensor in the decomposition table"
    )


def test_replay_holds_constants_as_stock_call() -> None:
    """The program stock's call builds holds the input's ``constants`` dict itself (torch 2.13)
    or a new one with its items (2.14.0, 2.15.0): the replay's does the same, here with an
    entry no input reads (so that neither side replaces an empty dict by its own)."""
    ep = _functional_tiny()
    ep.constants["unread"] = torch.ones(1)
    stock = ep.run_decompositions({})
    ours = decompositions.replay_program(ep)
    assert program_differences(stock, ours) == []
    assert list(ours.constants) == ["unread"]
    assert (ours.constants is ep.constants) == (stock.constants is ep.constants)


class _Convs(torch.nn.Module):
    """conv2d with stride and padding, then one with groups, dilation and no bias."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.b = torch.nn.Conv2d(4, 4, 3, groups=2, dilation=2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.b(self.a(x)))


def _conv2d_table() -> dict[Any, Any]:
    """executorch's default decomposition table's entry for conv2d, alone."""
    from executorch.exir.program._program import _default_decomposition_table

    conv2d = torch.ops.aten.conv2d.default
    return {conv2d: _default_decomposition_table()[conv2d]}


def test_conv2d_replayed_as_convolution_equals_stock_call() -> None:
    """A re-trace output holding two conv2d (defaulted and explicit arguments, with and without
    bias) and a table decomposing conv2d: the replay, which writes each as the convolution its
    kernel calls, equals stock's call with that table (every meta key, names, signature)."""
    torch.manual_seed(0)
    ep = torch.export.export(_Convs().eval(), (torch.randn(1, 3, 16, 16),)).run_decompositions({})
    assert sum(n.target is torch.ops.aten.conv2d.default for n in ep.graph.nodes) == 2
    table = _conv2d_table()
    assert decompositions.decline_reason(ep, table) is None
    stock = ep.run_decompositions(dict(table))  # outside the edge stage: always stock's call
    assert any(n.target is torch.ops.aten.convolution.default for n in stock.graph.nodes)
    ours = decompositions.replay_program(ep, frozenset(), dict(table))
    assert program_differences(stock, ours) == []


def test_conv2d_not_modelled_declines() -> None:
    """conv2d on an unbatched (3-D) input, whose kernel adds an unsqueeze and a squeeze, and a
    table mapping conv2d to another function: the replay declines, naming why."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3).eval()
    unbatched = torch.export.export(conv, (torch.randn(3, 8, 8),)).run_decompositions({})
    assert decompositions.decline_reason(unbatched, _conv2d_table()) == (
        "conv2d input not a batched real tensor"
    )
    batched = torch.export.export(conv, (torch.randn(1, 3, 8, 8),)).run_decompositions({})
    other = {torch.ops.aten.conv2d.default: torch.ops.aten.convolution.default}
    assert decompositions.decline_reason(batched, other) == (
        "conv2d's table entry is not its CompositeImplicitAutograd kernel"
    )


class _Rewritten(torch.nn.Module):
    """The ops llama's call 1 decomposes: transpose, type_as to the same dtype (returns its
    input, leaving the other operand's producer dead), unbind read by getitem, stack,
    repeat_interleave."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        t = x.transpose(1, 2)
        u = (t * 2).type_as(y + 1)
        a, b = u.unbind(-1)
        s = torch.stack([b, a], dim=-1)
        return torch.repeat_interleave(s, 2, dim=1) + 1


def test_rewritten_nodes_traced_alone_equal_stock_call() -> None:
    """A re-trace output holding nodes the full default table decomposes (one kind each of
    llama's call 1): the replay, which traces them alone and grafts what they became, equals
    stock's call with that table (every meta key, names, signature), and drops the node that
    only fed type_as's dtype operand as stock's trace does."""
    from executorch.exir.program._program import _default_decomposition_table

    torch.manual_seed(0)
    inputs = (torch.randn(1, 4, 3, 2), torch.randn(1, 3, 4, 2))
    ep = torch.export.export(_Rewritten().eval(), inputs).run_decompositions({})
    table = dict(_default_decomposition_table())
    rewritten = {
        str(n.target) for n in ep.graph.nodes if n.op == "call_function" and n.target in table
    }
    assert {"aten.transpose.int", "aten.type_as.default", "aten.unbind.int"} <= rewritten
    assert decompositions.decline_reason(ep, table) is None
    stock = ep.run_decompositions(dict(table))  # outside the edge stage: always stock's call
    ours = decompositions.replay_program(ep, frozenset(), dict(table))
    assert program_differences(stock, ours) == []
    (y,) = ours.graph.find_nodes(op="placeholder", target="y")
    assert not y.users, "y + 1, read only as type_as's dtype operand, was not dropped"


def test_subtrace_declines_what_it_cannot_graft() -> None:
    """A rewritten node is traced alone only if it reads tensors and its value is a tensor or a
    list of tensors read through getitem: a node whose value is not a tensor, one that reads a
    non-tensor and one whose list is read otherwise decline, naming the node."""
    graph = fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.ones(2)
    size = graph.call_function(torch.ops.aten.sym_size.int, (x, 0))
    size.meta["val"] = 3
    assert subtrace.decline_reason(size) == "sym_size_int: value not a tensor"
    full = graph.call_function(torch.ops.aten.full.default, ([size], 1.0))
    full.meta["val"] = torch.ones(3)
    assert subtrace.decline_reason(full) == "full_default: reads sym_size_int, not a tensor"
    node = graph.call_function(torch.ops.aten.unbind.int, (x,))
    node.meta["val"] = [torch.ones(1), torch.ones(1)]
    graph.call_function(torch.ops.aten.stack.default, ([node],))
    assert subtrace.decline_reason(node) == "unbind_int: a list value read other than by getitem"


class _Attention(torch.nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return out.transpose(1, 2).reshape(1, 8, 64)


def test_rewritten_value_of_another_layout_declines() -> None:
    """scaled_dot_product_attention traced alone with the full table comes out with other
    strides than the value the graph holds (the FP llamas' call 1): the nodes reading it would
    compute other values, so the replay declines (not a failure) and stock's call would run."""
    from executorch.exir.program._program import _default_decomposition_table

    torch.manual_seed(0)
    inputs = tuple(torch.randn(1, 4, 8, 16) for _ in range(3))
    ep = torch.export.export(_Attention().eval(), inputs).run_decompositions({})
    table = dict(_default_decomposition_table())
    assert decompositions.decline_reason(ep, table) is None
    with pytest.raises(subtrace.Declined, match="layout differs"):
        decompositions.replay_program(ep, frozenset(), table)


def test_llama_edge_stage_traces_rewritten_nodes_alone(active: None) -> None:
    """llama1 INT, whose call 1 decomposes transpose, type_as, unbind, stack, repeat_interleave
    and _to_dim_order_copy, and whose export holds ``_assert_tensor_metadata`` nodes export
    inserted after its trace (args not as dispatched) and a preserved ``unbind`` read through
    getitems: the edge stage replays calls 0 (the asserts' args as the dispatcher hands them,
    each getitem's meta its producer's), 1 (those nodes traced alone) and 2, and its program
    equals stock's (every meta key; tensors by value). One untimed stock edge stage runs
    first, as in the deepautoencoder test."""

    def holds_inserted_assert_and_unbind(program: ExportedProgram) -> bool:
        nodes = list(program.graph.nodes)
        unbind = torch.ops.aten.unbind.int
        return any(decompositions._inserted_after_trace(n) for n in nodes) and any(
            n.target is unbind for n in nodes
        )

    replayed, diffs = _edge_stages_compared("llama1", holds_inserted_assert_and_unbind)
    assert replayed == 3, "the three calls were not all replayed"
    assert diffs == []


def test_outside_the_edge_stage_is_stock(active: None) -> None:
    """``run_decompositions`` called by user code (not from the edge stage) runs stock's and
    records nothing."""
    ep = _functional_tiny()
    before = counters.snapshot().get(decompositions.STATS_NAME)
    out = ep.run_decompositions({})
    assert counters.snapshot().get(decompositions.STATS_NAME) == before
    assert [n.name for n in out.graph.nodes] == [n.name for n in ep.graph.nodes]


def _fallbacks() -> dict[str, int]:
    return dict(counters.snapshot().get(decompositions.STATS_NAME, PassStats()).fallbacks)


class _TinyLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


def test_replay_failure_runs_stock(active: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny FP model lowered with the replay forced to fail: the stock call runs instead, the
    failure is counted with its reason, and the TOSA bytes equal a stock lowering's; under
    ``ARM_ACCEL_STRICT=1`` the same lowering raises, naming the replay."""
    torch.manual_seed(0)
    exported = torch.export.export(_TinyLinear().eval(), (torch.randn(2, 4),))
    with arm_accel.disabled():
        stock_bytes = models.tosa_bytes(models.lower(exported, "FP"))

    attempts: list[int] = []

    def broken(*args: Any, **kwargs: Any) -> ExportedProgram:
        attempts.append(1)
        raise RuntimeError("injected")

    monkeypatch.setattr(decompositions, "replay_program", broken)
    monkeypatch.setenv("ARM_ACCEL_STRICT", "1")
    with pytest.raises(RuntimeError, match="run_decompositions replay failed"):
        models.lower(exported, "FP")
    monkeypatch.setenv("ARM_ACCEL_STRICT", "0")
    before = _fallbacks()
    del attempts[:]
    ours_bytes = models.tosa_bytes(models.lower(exported, "FP"))
    reason = "replay failed: RuntimeError('injected')"
    # calls 1 and 2 both reach the replay (the linear is a CIA op call 1 preserves)
    assert len(attempts) == 2
    assert _fallbacks().get(reason, 0) == before.get(reason, 0) + len(attempts)
    assert ours_bytes == stock_bytes


def test_edited_input_declines() -> None:
    """The proof that a call's input is the previous call's output fails once a node's args
    change, or when the input is another program."""
    ep = _functional_tiny()
    stage = decompositions._Stage()
    stage.remember(ep)
    assert decompositions._edited_only_by_target_swaps(ep, stage) is None
    assert stage.swapped(ep) == frozenset()
    other = _functional_tiny()
    assert decompositions._edited_only_by_target_swaps(other, stage) == (
        "input is not the previous call's output"
    )
    add = next(n for n in ep.graph.nodes if n.target is torch.ops.aten.add.Tensor)
    add.args = (add.args[0], 2)
    assert decompositions._edited_only_by_target_swaps(ep, stage) == (
        "graph edited since the previous call"
    )


def _edge_stage(program: ExportedProgram, mode: str, accelerated: bool) -> ExportedProgram:
    """The edge stage alone (``_gen_edge_manager_for_partitioners``), with acceleration on or
    off; the edge-dialect program it produces."""
    from executorch.exir import EdgeCompileConfig
    from executorch.exir.program._program import _gen_edge_manager_for_partitioners

    previous = switch.set_enabled(accelerated)
    try:
        edge = _gen_edge_manager_for_partitioners(
            {"forward": [models.partitioner(mode)]}, {"forward": program}, EdgeCompileConfig(), None
        )
    finally:
        switch.set_enabled(previous)
    return edge.exported_program()


def _edge_stages_compared(
    name: str, precondition: Callable[[ExportedProgram], bool] | None = None
) -> tuple[int, list[str]]:
    """The zoo model ``name``'s edge stage stock and accelerated, each on its own export made
    right before it (as in the fuzz test: the seq_nr ranks the comparison normalises then order
    alike), after one untimed stock stage (so that neither side is the process's first to meet
    these ops and shapes: a relu kernel annotates ``custom`` only then, stock or not). Returns
    the calls the accelerated stage replayed and the programs' differences; ``precondition``
    must hold on the accelerated side's input."""
    model, inputs, mode = models.build(name)

    def exported() -> ExportedProgram:
        with switch.disabled():
            return models.export_for_arm(model, inputs, mode)

    _edge_stage(exported(), mode, accelerated=False)
    stock = _edge_stage(exported(), mode, accelerated=False)
    program = exported()
    assert precondition is None or precondition(program)
    before = _accelerated()
    ours = _edge_stage(program, mode, accelerated=True)
    return _accelerated() - before, program_differences(stock, ours, separately_exported=True)


@fm.fuzz_settings()
@given(spec=fm.specs())
def test_random_models_edge_stage_equals_stock(active: None, spec: fm.Spec) -> None:
    """Random models (tests/fuzz_models.py), FP and INT, each exported twice: the edge stage
    with acceleration off and on gives equal programs (every meta key; tensors by value, stack
    traces without the generated-code counter); ``ARM_ACCEL_FUZZ=long`` runs the long profile.
    Exceptions must match."""
    fm.log_example(spec)
    for mode in ("FP", "INT"):
        results = []
        for accelerated in (False, True):
            model, inputs = fm.build(spec)
            with switch.disabled():
                program = models.export_for_arm(model, inputs, mode)
            try:
                results.append(_edge_stage(program, mode, accelerated))
            except Exception as exc:  # noqa: BLE001 - compared with the other side's
                results.append(exc)
        stock, ours = results
        if isinstance(stock, Exception) or isinstance(ours, Exception):
            assert type(stock) is type(ours), f"{mode}: stock {stock!r}, accelerated {ours!r}"
            continue
        diffs = program_differences(stock, ours, separately_exported=True)
        assert diffs == [], f"{mode}: {diffs[:5]}"


def test_call_with_a_preserved_cia_op_is_replayed(active: None) -> None:
    """deepautoencoder INT, whose linears are CompositeImplicitAutograd ops the re-trace keeps
    as they are when the table lacks them: the three calls of the edge stage are replayed
    (calls 0 and 1's tables lack linear), and the program equals stock's. One untimed stock
    edge stage runs first, so that neither compared side is the process's first to meet these
    ops and shapes (a relu kernel annotates ``custom`` only then, stock or not)."""
    linear = torch.ops.aten.linear.default
    replayed, diffs = _edge_stages_compared(
        "deepautoencoder", lambda p: any(n.target is linear for n in p.graph.nodes)
    )
    assert replayed == 3, "the three calls were not all replayed"
    assert diffs == []


def test_only_preservable_cia_ops_are_replayed() -> None:
    """linear is in torch's preservable set (functional, a kernel of its own); reshape is
    CompositeImplicitAutograd but may alias, so the re-trace decomposes it: not replayed."""
    assert decompositions._preserved_cia(torch.ops.aten.linear.default)
    assert decompositions._is_cia(torch.ops.aten.reshape.default)
    assert not decompositions._preserved_cia(torch.ops.aten.reshape.default)


class _InputNamedInput(torch.nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 - the name is the case
        return torch.relu(input) * 2


def test_placeholder_fx_would_rename_declines(active: None) -> None:
    """export names a placeholder ``input`` directly; a graph built through fx's namespace would
    call it ``input_1``: the replay declines with that reason (not a replay failure, which
    strict mode would raise on), and the lowering's TOSA bytes equal stock's."""
    torch.manual_seed(0)
    exported = torch.export.export(_InputNamedInput().eval(), (torch.randn(2, 4),))
    assert any(n.name == "input" for n in exported.graph.nodes)
    with arm_accel.disabled():
        stock_bytes = models.tosa_bytes(models.lower(exported, "FP"))
    counters.reset()
    ours = models.tosa_bytes(models.lower(exported, "FP"))
    assert ours == stock_bytes
    reasons = _fallbacks()
    assert reasons.get("placeholder input is a name fx renames", 0) >= 1, reasons
    assert not any(r.startswith("replay failed") for r in reasons), reasons


def test_first_call_replayed_on_resnet8(active: None) -> None:
    """resnet8 INT (its export holds ``flatten``, which the first call's trace decomposes): the
    edge stage replays all three calls, the first on the program torch.export returned, and its
    program equals stock's (every meta key: the placeholders' ``desc`` included; tensors by
    value). One untimed stock edge stage runs first, as in the deepautoencoder test."""
    replayed, diffs = _edge_stages_compared("resnet8")
    assert replayed == 3, "the three calls were not all replayed"
    assert diffs == []


def test_first_call_replays_only_an_unedited_export_output(active: None) -> None:
    """The first call's input must be a program torch.export returned, unedited since: a deep
    copy, and the same program once a node's args change, decline with their reasons (counted,
    not replay failures), and the stock call then runs with its quantize/dequantize values
    served from the fake memo; the lowering's TOSA bytes equal stock's either way."""
    import copy

    from arm_accel.edge import export_outputs

    model, inputs, mode = models.build("dscnnkws")
    exported = models.export_for_arm(model, inputs, mode)
    assert export_outputs.edited_reason(exported) is None
    with arm_accel.disabled():
        stock_bytes = models.tosa_bytes(models.lower(exported, mode))
    copied = copy.deepcopy(exported)
    assert export_outputs.edited_reason(copied) == "input is not a program torch.export returned"
    before, served = dict(_fallbacks()), _served()
    assert models.tosa_bytes(models.lower(copied, mode)) == stock_bytes
    reason = "input is not a program torch.export returned"
    assert _fallbacks().get(reason, 0) == before.get(reason, 0) + 1
    # the stock call's quantize/dequantize calls are served from the fake memo
    assert _served() > served, "the fake memo served no call of the stock decomposition"

    node = next(n for n in exported.graph.nodes if n.target is torch.ops.aten.relu_.default)
    node.args = tuple(node.args)  # same values, a new args object: an edit
    edited = "program edited since torch.export returned it"
    assert export_outputs.edited_reason(exported) == edited
    with arm_accel.disabled():
        stock_edited = models.tosa_bytes(models.lower(exported, mode))
    before = dict(_fallbacks())
    assert models.tosa_bytes(models.lower(exported, mode)) == stock_edited
    assert _fallbacks().get(edited, 0) == before.get(edited, 0) + 1


class _InplaceReads(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2
        z = y + 1
        y.relu_()  # y is read by z before and by the output after
        w = (z * 3).relu_()  # a fresh value only relu_ reads
        return y, w


def test_inplace_op_modelled_only_on_a_value_only_it_reads() -> None:
    """An in-place op is replayed as its out-of-place variant only where functionalization does
    nothing else: on a value a non-aliasing op made that nothing else reads. ``relu_`` of a
    value read by another op (and by the output) declines; of a fresh product it does not; an
    in-place op the table holds, or whose out-of-place variant it holds, declines."""
    ep = torch.export.export(_InplaceReads(), (torch.randn(2, 3),))
    relus = [n for n in ep.graph.nodes if n.target is torch.ops.aten.relu_.default]
    assert len(relus) == 2
    shared, fresh = relus
    assert decompositions._inplace_decline(shared, {}) == (
        "aten.relu_.default mutates a value others may read"
    )
    assert decompositions._inplace_decline(fresh, {}) is None
    relu_ = torch.ops.aten.relu_.default
    assert decompositions._inplace_decline(fresh, {relu_: None}) == "aten.relu_.default is mutable"
    assert decompositions._inplace_decline(fresh, {torch.ops.aten.relu.default: None}) == (
        "aten.relu_.default: its out-of-place variant is rewritten by the trace"
    )
    assert decompositions._functional_variant(relu_) is torch.ops.aten.relu.default
    assert decompositions._functional_variant(torch.ops.aten.relu.default) is None


def test_op_names_as_the_tracer_asks() -> None:
    """The replay names a node as ``proxy_call`` does, through ``Graph._target_to_str``: a
    magic method's packet loses its underscores (``__and__`` -> ``and``, which fx's namespace
    then makes ``and_1``), others keep theirs; getitem takes its own."""
    import operator

    assert decompositions._op_name(torch.ops.aten.__and__.Tensor) == "and"
    assert decompositions._op_name(torch.ops.aten._to_copy.default) == "_to_copy"
    assert decompositions._op_name(operator.getitem) is None
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    node = graph.call_function(torch.ops.aten.__and__.Tensor, (x, x))
    node.name = graph._graph_namespace.create_name(decompositions._op_name(node.target), None)
    assert node.name == "and_1"


def test_inserted_assert_takes_the_dispatched_args() -> None:
    """An ``_assert_tensor_metadata`` node as export inserts it (dtype as a keyword) is rebuilt
    with the args the dispatcher hands the tracer: positional up to the last non-default one,
    keyword-only ones as keywords."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    with FakeTensorMode() as mode:
        x.meta["val"] = torch.empty(2, 3)
    del mode
    target = torch.ops.aten._assert_tensor_metadata.default
    kwargs = {"dtype": torch.float32, "device": torch.device("cpu"), "layout": torch.strided}
    node = graph.call_function(target, (x,), kwargs)
    assert decompositions._inserted_after_trace(node)
    args, got_kwargs = decompositions._as_dispatched(target, node.args, node.kwargs)
    assert args == (x, None, None, torch.float32)
    assert got_kwargs == {"device": torch.device("cpu"), "layout": torch.strided}
