"""The ``.pte`` stage: ``to_executorch`` of one lowered program, stock (``arm_accel.disabled()``)
and accelerated, in one process; and the delegate call whose unlifted module shares its records'
ancestors (the patch table's ``delegate.provenance`` row)."""

from __future__ import annotations

import copy
import importlib
from typing import Any

import arm_accel
import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import pytest
import torch
from arm_accel import patches
from arm_accel.runtime import provenance
from arm_accel.testing import meta_signature
from arm_accel.tools import models
from executorch.exir.lowered_backend_module import get_lowered_submodules
from torch.export import ExportedProgram

pytestmark = pytest.mark.skipif(
    not patches.installed("delegate.provenance"),
    reason="the delegate.provenance row is stock on this torch (its NodeSource shares records)",
)


@pytest.fixture(scope="module")
def lowered() -> Any:
    """convnet, quantized and lowered for TOSA INT (accelerated): the program to serialize."""
    model, inputs, _ = models.build("convnet")
    exported = models.export_for_arm(model, inputs, "INT")
    return models.lower(exported, "INT")


def _delegate_calls() -> int:
    return arm_accel.stats().get(provenance.DELEGATE_STATS_NAME, arm_accel.PassStats()).accelerated


def test_pte_bytes_equal_stock(lowered: Any) -> None:
    """``to_executorch`` bytes of copies of one lowered program, stock then accelerated: equal,
    and the accelerated side's delegate dispatches ran sharing (stats delta > 0; none stock)."""
    before = _delegate_calls()
    with arm_accel.disabled():
        stock = models.pte_bytes(copy.deepcopy(lowered))
    assert _delegate_calls() == before, "the stock side shared records"
    ours = models.pte_bytes(copy.deepcopy(lowered))
    assert _delegate_calls() > before
    assert stock == ours


def test_delegate_outputs_equal_stock_and_records_shared(lowered: Any) -> None:
    """The fake dispatch of each delegate call (``call_delegate_cpu``), stock and accelerated on
    the same fake inputs: outputs equal (shape, dtype, strides, offset, device,
    ``requires_grad``). The module the accelerated call unlifted holds its records' ancestors
    themselves (stock's holds deep copies): the fast path ran."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    delegate = importlib.import_module("torch._higher_order_ops.executorch_call_delegate")
    graph_module = lowered.exported_program().graph_module
    unlifted: list[torch.nn.Module] = []
    stock_module = ExportedProgram.module

    def capturing(self: ExportedProgram, *args: Any, **kwargs: Any) -> torch.nn.Module:
        module = stock_module(self, *args, **kwargs)
        unlifted.append(module)
        return module

    for _, lowered_module, node in get_lowered_submodules(graph_module):
        inputs = [a.meta["val"] for a in node.args[1:]]
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fake = [mode.from_tensor(t) for t in inputs]
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(ExportedProgram, "module", capturing)
                with arm_accel.disabled():
                    expected = delegate.call_delegate_cpu(lowered_module, *fake)
                ours = delegate.call_delegate_cpu(lowered_module, *fake)
        assert meta_signature(expected) == meta_signature(ours)
        program_chains = {
            n.name: n.meta["from_node"]
            for n in lowered_module.original_module.graph.nodes
            if n.meta.get("from_node")
        }
        stock_unlifted, our_unlifted = unlifted[-2:]
        shared = copied = 0
        for side, module in (("stock", stock_unlifted), ("ours", our_unlifted)):
            for n in module.graph.nodes:
                sources = n.meta.get("from_node") or []
                for source in sources:
                    chain = program_chains.get(source.name)
                    if chain is None or not source.from_node:
                        continue
                    same = all(a is b for a, b in zip(source.from_node, chain, strict=True))
                    if side == "ours":
                        shared += same
                    else:
                        copied += not same
        assert shared > 0 and copied > 0, (shared, copied)
