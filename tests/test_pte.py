"""The ``.pte`` stage: ``to_executorch`` of one lowered program, stock (``arm_accel.disabled()``)
and accelerated, in one process; and the delegate call whose unlifted module shares its records'
ancestors, generates its code once and runs with the fake memo (the patch table's
``delegate.unlifted`` row)."""

from __future__ import annotations

import copy
import importlib
from typing import Any

import arm_accel
import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import pytest
import torch
from arm_accel import patches
from arm_accel.pipeline import scoped_calls
from arm_accel.runtime import fake_memo
from arm_accel.testing import meta_signature
from arm_accel.tools import models
from executorch.exir.lowered_backend_module import get_lowered_submodules
from torch.export import ExportedProgram
from torch.fx import graph_module as fx_graph_module

pytestmark = pytest.mark.skipif(
    not patches.installed("delegate.unlifted"), reason="the delegate.unlifted row is stock here"
)


@pytest.fixture(scope="module")
def lowered() -> Any:
    """convnet, quantized and lowered for TOSA INT (accelerated): the program to serialize."""
    model, inputs, _ = models.build("convnet")
    exported = models.export_for_arm(model, inputs, "INT")
    return models.lower(exported, "INT")


def _memo_served() -> int:
    return arm_accel.stats().get(fake_memo.DISPATCH_STATS_NAME, arm_accel.PassStats()).accelerated


def _delegate_calls() -> int:
    return (
        arm_accel.stats().get(scoped_calls.DELEGATE_STATS_NAME, arm_accel.PassStats()).accelerated
    )


def test_pte_bytes_equal_stock(lowered: Any) -> None:
    """``to_executorch`` bytes of copies of one lowered program, stock then accelerated: equal,
    and the accelerated side's delegate dispatches ran scoped (stats delta > 0; none stock)."""
    before = _delegate_calls()
    with arm_accel.disabled():
        stock = models.pte_bytes(copy.deepcopy(lowered))
    assert _delegate_calls() == before, "the stock side ran the scoped call"
    ours = models.pte_bytes(copy.deepcopy(lowered))
    assert _delegate_calls() > before
    assert stock == ours


def _chains_shared(unlifted: torch.nn.Module, program: ExportedProgram) -> tuple[int, int]:
    """Of the unlifted module's records made from a node of the program with a chain: how many
    hold that chain's records themselves, and how many copies of them."""
    from arm_accel.runtime import identity

    chains = {n.name: n.meta["from_node"] for n in program.graph.nodes if n.meta.get("from_node")}
    graph_id = identity.graph_id(program.graph)
    shared = copied = 0
    for node in unlifted.graph.nodes:
        for source in node.meta.get("from_node") or []:
            chain = chains.get(source.name)
            if chain is None or source.graph_id != graph_id:
                continue
            same = all(a is b for a, b in zip(source.from_node, chain, strict=True))
            shared, copied = shared + same, copied + (not same)
    return shared, copied


def test_delegate_outputs_equal_stock(lowered: Any) -> None:
    """The fake dispatch of each delegate call (``call_delegate_cpu``), stock then accelerated
    on the same fake inputs: outputs equal (shape, dtype, strides, offset, device,
    ``requires_grad``) and torch's ``<eval_with_key>`` counter moved as far. Where the scopes'
    rows are installed the fast path shows: the module the accelerated call unlifted holds the
    program's records themselves (stock's: copies), fewer sources were compiled, and the fake
    memo served some of its calls (none on the stock side)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    call = importlib.import_module("torch._higher_order_ops.executorch_call_delegate")
    loader = fx_graph_module._loader
    unlifted: list[torch.nn.Module] = []
    stock_module = ExportedProgram.module

    def capturing(self: ExportedProgram, *args: Any, **kwargs: Any) -> torch.nn.Module:
        module = stock_module(self, *args, **kwargs)
        unlifted.append(module)
        return module

    graph_module = lowered.exported_program().graph_module
    for _, lowered_module, node in get_lowered_submodules(graph_module):
        inputs = [a.meta["val"] for a in node.args[1:]]
        moved = []
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fake = [mode.from_tensor(t) for t in inputs]
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(ExportedProgram, "module", capturing)
                served = []
                for enabled in (False, True):
                    served.append(_memo_served())
                    ids, compiled = loader.next_id, len(loader.eval_cache)
                    with arm_accel.enabled() if enabled else arm_accel.disabled():
                        out = call.call_delegate_cpu(lowered_module, *fake)
                    moved.append((out, loader.next_id - ids, len(loader.eval_cache) - compiled))
                served.append(_memo_served())
        (expected, stock_ids, stock_compiled), (ours, our_ids, our_compiled) = moved
        assert meta_signature(expected) == meta_signature(ours)
        assert stock_ids == our_ids > 1
        program = lowered_module.original_module
        stock_shared, stock_copied = _chains_shared(unlifted[-2], program)
        our_shared, our_copied = _chains_shared(unlifted[-1], program)
        if patches.installed("edge.provenance"):  # else stock's records share already
            assert stock_copied > 0 and stock_shared == 0, (stock_shared, stock_copied)
            assert our_shared > 0 and our_copied == 0, (our_shared, our_copied)
        if patches.installed("retrace_engine"):
            assert our_compiled < stock_compiled, (our_compiled, stock_compiled)
        if patches.installed("edge.fake_memo"):
            assert served[0] == served[1] < served[2], served
