"""``torch.export.export`` stock (``arm_accel.disabled()``) and accelerated, in one process, on
one module (``nn_module_stack`` names modules by address): the user's model, its quantized
module (the re-export), a GraphModule calling GraphModules and a module calling one. The
accelerated call runs inside the engine's scopes (the patch table's ``export.scoped`` row):
records sharing their ancestors, code generated once, the fake memo; and dynamo's list of the
traced GraphModule's metas is rebuilt only when it changed (``export.dynamo_meta``)."""

from __future__ import annotations

from typing import Any

import arm_accel
import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import pytest
import torch
from arm_accel import patches
from arm_accel.pipeline import scoped_calls
from arm_accel.runtime import dynamo_meta, fake_memo
from arm_accel.testing import GraphLabels, assert_graphs_identical, tracking_graphs
from arm_accel.tools import models
from support.provenance import records as provenance_records
from torch import fx
from torch.fx import graph_module as fx_graph_module

pytestmark = pytest.mark.skipif(
    not patches.installed("export.scoped"), reason="the export.scoped row is stock here"
)


def _accelerated(name: str) -> int:
    return arm_accel.stats().get(name, arm_accel.PassStats()).accelerated


Case = tuple[torch.nn.Module, tuple[Any, ...], Any]


@pytest.fixture(scope="module")
def exported_inputs() -> dict[str, Case]:
    """What a user exports: convnet's module, with a dynamic batch too, and its quantized
    module (TOSA INT)."""
    model, inputs, _ = models.build("convnet")
    graph = torch.export.export(model, inputs, strict=True).module(check_guards=False)
    quantizer = models.quantizer("INT", models.TOSA)
    converted = models.quantize(quantizer, graph, [inputs], models.StageClock({}))
    batch = (torch.cat([inputs[0]] * 3),)
    dynamic = ({0: torch.export.Dim("batch", min=2, max=8)},)
    return {
        "model": (model, inputs, None),
        "dynamic": (model, batch, dynamic),
        "quantized": (converted, inputs, None),
        "nested": (_nested(converted, _post(converted(*inputs))), inputs, None),
        "wrapped": (_Wrapped(_post(torch.randn(2, 8))), (torch.randn(2, 8),), None),
    }


class _Post(torch.nn.Module):
    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(y * 2.0 + 1.0) - y


def _post(example: torch.Tensor) -> fx.GraphModule:
    """``_Post`` exported: a GraphModule whose nodes carry the metas dynamo copies."""
    return torch.export.export(_Post(), (example,), strict=True).module(check_guards=False)


class _Wrapped(torch.nn.Module):
    """A module calling a GraphModule, then its own code, then the GraphModule again: dynamo's
    trace goes from a GraphModule's code to code without one and back."""

    def __init__(self, post: fx.GraphModule) -> None:
        super().__init__()
        self.post = post

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.post(x)
        z = torch.sigmoid(z * 3.0)
        return self.post(z)


def _nested(inner: fx.GraphModule, post: fx.GraphModule) -> fx.GraphModule:
    """A GraphModule calling ``inner`` and ``post`` (twice): dynamo's trace moves between the
    three modules' code (each with its own metas) and back."""
    graph = fx.Graph()
    x = graph.placeholder("x")
    y = graph.call_module("inner", (x,))
    z = graph.call_module("post", (y,))
    z = graph.call_function(torch.add, (z, y))
    graph.output(graph.call_module("post", (z,)))
    return fx.GraphModule({"inner": inner, "post": post}, graph)


def _export(
    module: torch.nn.Module, inputs: tuple[Any, ...], dynamic: Any, enabled: bool
) -> dict[str, Any]:
    """One side: the program exported from ``module`` and what the call moved (the
    ``<eval_with_key>`` counter, sources compiled, the memo's and the row's counts)."""
    loader = fx_graph_module._loader
    before = (
        loader.next_id,
        len(loader.eval_cache),
        _accelerated(fake_memo.DISPATCH_STATS_NAME),
        _accelerated(scoped_calls.EXPORT_STATS_NAME),
        _accelerated(dynamo_meta.STATS_NAME),
        _accelerated(fake_memo.DISPATCH_ATEN_STATS_NAME),
    )
    with arm_accel.enabled() if enabled else arm_accel.disabled():
        program = torch.export.export(module, inputs, dynamic_shapes=dynamic, strict=True)
    after = (
        loader.next_id,
        len(loader.eval_cache),
        _accelerated(fake_memo.DISPATCH_STATS_NAME),
        _accelerated(scoped_calls.EXPORT_STATS_NAME),
        _accelerated(dynamo_meta.STATS_NAME),
        _accelerated(fake_memo.DISPATCH_ATEN_STATS_NAME),
    )
    return {"program": program, "moved": tuple(b - a for a, b in zip(before, after, strict=True))}


def _tensors_equal(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert list(a) == list(b)
    for key in a:
        x, y = a[key], b[key]
        assert type(x) is type(y), key
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y), key


@pytest.mark.parametrize("which", ["model", "dynamic", "quantized", "nested", "wrapped"])
def test_export_equals_stock(exported_inputs: dict[str, Case], which: str) -> None:
    """The program exported from one module (convnet's, also with a dynamic batch, its
    quantized module, a GraphModule calling it and another GraphModule, and a module calling a
    GraphModule twice around its own code), stock then accelerated: graphs equal by the
    equality contract (provenance's graphs compared up to renaming; every node's stack trace,
    module stack and source function stack, which dynamo copies from the traced GraphModule's
    metas), the generated code, the module's attribute names, the signature, state dict,
    constants, module call graph and range constraints equal, and torch's ``<eval_with_key>``
    counter moved as far. The accelerated call ran scoped (the row's count moved; stock's did
    not) and compiled fewer sources; on the quantized modules the fake memo served calls, and
    where a GraphModule is traced it served ``aten`` calls too (none on the dynamic batch:
    symbolic shapes are not keyed);
    dynamo reused its metas list wherever a GraphModule is traced (never on convnet's module,
    which calls none), and the program's records hold the module's records themselves
    (stock's: copies), where those rows are installed."""
    module, inputs, dynamic = exported_inputs[which]
    with tracking_graphs():
        stock = _export(module, inputs, dynamic, enabled=False)
        ours = _export(module, inputs, dynamic, enabled=True)
    a, b = stock["program"], ours["program"]
    assert_graphs_identical(a.graph_module, b.graph_module, (GraphLabels(), GraphLabels()))
    assert sorted(vars(a.graph_module)) == sorted(vars(b.graph_module))  # before any read
    assert a.graph_module.code == b.graph_module.code
    assert str(a.graph_signature) == str(b.graph_signature)
    _tensors_equal(a.state_dict, b.state_dict)
    _tensors_equal(a.constants, b.constants)
    assert repr(a.module_call_graph) == repr(b.module_call_graph)
    assert str(a.range_constraints) == str(b.range_constraints)

    (stock_ids, stock_compiled, stock_served, stock_calls, stock_reused, stock_aten) = stock[
        "moved"
    ]
    (our_ids, our_compiled, our_served, our_calls, our_reused, our_aten) = ours["moved"]
    assert stock_ids == our_ids > 0
    assert stock_calls == 0 and our_calls == 1
    quantized = which in ("quantized", "nested")
    traces_graph_modules = which in ("quantized", "nested", "wrapped")
    if patches.installed("retrace_engine") and which != "wrapped":  # compiles no GraphModule
        assert our_compiled < stock_compiled, (our_compiled, stock_compiled)
    if quantized and patches.installed("edge.fake_memo"):
        assert stock_served == 0 < our_served, (stock_served, our_served)
    if patches.installed("edge.fake_memo"):  # aten calls repeated on static shapes only
        assert stock_aten == 0, stock_aten
        if traces_graph_modules:
            assert our_aten > 0, our_aten
        if which == "dynamic":
            assert our_aten == 0, our_aten
    if patches.installed("export.dynamo_meta"):
        assert stock_reused == 0, stock_reused
        assert (our_reused > 0) == traces_graph_modules, our_reused
    if which == "quantized" and patches.installed("edge.provenance"):  # else stock shares
        read = provenance_records(module.graph)
        held = [key in read for key in provenance_records(b.graph)]
        copied = [key in read for key in provenance_records(a.graph)]
        assert any(held) and not any(copied), (sum(held), sum(copied))
