"""Recompiles in the Arm pipeline generate their code on first use
(:mod:`arm_accel.runtime.deferred`), and that code is the code stock's recompile
generated at the recompile.

Each test runs the same steps twice, with acceleration on inside the pipeline scope and with it
off (stock's ``GraphModule.recompile``), and compares what a user can read of the module: its
source, line map, ``str()``, ``forward``'s signature and result, its pickle, the value
``recompile()`` returned. The deferral counters show the deferred path ran.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import pickle
import re
from collections.abc import Callable
from typing import Any

import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import pytest
import torch
from arm_accel import patches
from arm_accel.control import switch
from arm_accel.patches import table
from arm_accel.patches.model import Pin
from arm_accel.pipeline import engine
from arm_accel.runtime import deferred
from torch import fx


class Net(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + y) * 2


def traced() -> fx.GraphModule:
    """``Net`` traced, without the placeholders' annotations (strings under this module's
    ``from __future__ import annotations``, which stock cannot pickle)."""
    gm = fx.symbolic_trace(Net())
    for node in gm.graph.nodes:
        node.type = None
    gm.recompile()
    return gm


def add_neg(gm: fx.GraphModule) -> None:
    """An edit: ``neg`` of the last computed value feeds the output."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    last = out.args[0]
    with gm.graph.inserting_before(out):
        neg = gm.graph.call_function(torch.neg, (last,))
    out.args = (neg,)


def rename_and_reroute(gm: fx.GraphModule) -> None:
    """Another edit, of names and args: the relu is renamed and reads ``y`` instead."""
    relu = next(n for n in gm.graph.nodes if n.target is torch.relu)
    y = next(n for n in gm.graph.nodes if n.name == "y")
    relu.name = "renamed_relu"
    relu.args = (y,)


def find_nodes_index(gm: fx.GraphModule) -> list[tuple[str, list[str]]]:
    """The graph's find_nodes index: each non-empty bucket's key and node names, in order."""
    table = gm.graph._find_nodes_lookup_table.table
    return [(str(key), [n.name for n in bucket]) for key, bucket in table.items() if bucket]


def readable(gm: fx.GraphModule, pickled: bool = True) -> dict[str, Any]:
    """Everything of ``gm``'s code a user can read, and what its forward computes
    (``pickled``: and the code of its pickle round trip); the graph's find_nodes index before
    the reads, after reading the code, after all (pickling recompiles)."""
    x, y = torch.ones(2, 3), torch.full((2, 3), 2.0)
    read = {
        "index": find_nodes_index(gm),
        "code": gm.code,
        "index after the code": find_nodes_index(gm),
        "lineno_map": gm._lineno_map,
        "prologue_start": gm._prologue_start,
        "str": str(gm),
        "signature": str(inspect.signature(gm.forward)),
        "class forward": str(inspect.signature(type(gm).forward)),
        "result": gm(x, y),
    }
    if pickled:
        read["pickled code"] = pickle.loads(pickle.dumps(gm)).code
    read["index after the reads"] = find_nodes_index(gm)
    return read


def run(steps: Callable[[fx.GraphModule], Any], accelerated: bool) -> tuple[Any, dict[str, Any]]:
    """``steps`` on a fresh traced module inside the pipeline scope, acceleration on or off;
    returns what the steps returned and what can be read of the module afterwards."""
    gm = traced()
    previous = switch.set_enabled(accelerated)
    try:
        with engine.arm_pipeline():
            value = steps(gm)
            return value, readable(gm)
    finally:
        switch.set_enabled(previous)


def assert_like_stock(steps: Callable[[fx.GraphModule], Any]) -> tuple[Any, dict[str, int]]:
    """The readable state after ``steps`` equals stock's; returns what the steps returned in
    the accelerated run and the deferral counters' deltas of that run."""
    before = dict(deferred.counts)
    value, ours = run(steps, accelerated=True)
    delta = {k: deferred.counts[k] - before[k] for k in before}
    _, stock = run(steps, accelerated=False)
    assert ours.keys() == stock.keys()
    for key in ours:
        if isinstance(ours[key], torch.Tensor):
            assert torch.equal(ours[key], stock[key]), key
        else:
            assert ours[key] == stock[key], key
    return value, delta


def test_deferred_code_is_stocks_code() -> None:
    """An edit and a recompile: the code is generated only when first read, and is stock's."""

    def steps(gm: fx.GraphModule) -> bool:
        add_neg(gm)
        gm.recompile()
        return deferred.pending(gm) is not None

    pending, delta = assert_like_stock(steps)
    assert pending
    # (the pickle round trip recompiles twice more: in __reduce__ and in the loaded module)
    assert delta["generated"] >= 1 and delta["from_snapshot"] == 0, delta


def test_find_nodes_index_is_stocks_around_a_recompile() -> None:
    """Stock's recompile re-files every node of the find_nodes index in graph order (its code
    generation sets an attribute of each node), reading the code later does not: a
    placeholder re-filed (a new meta dict) before the recompile is back in graph order after
    it, one re-filed after it stays last when the code is read. Ours, deferred, the same."""

    def placeholders(gm: fx.GraphModule) -> list[str]:
        return [n.name for n in gm.graph.find_nodes(op="placeholder", sort=False)]

    def steps(gm: fx.GraphModule) -> tuple[list[str], list[str]]:
        x = next(n for n in gm.graph.nodes if n.name == "x")
        x.meta = dict(x.meta)  # re-filed after y
        before = placeholders(gm)
        add_neg(gm)
        gm.recompile()
        after = placeholders(gm)
        x.meta = dict(x.meta)
        return before, after

    (before, after), delta = assert_like_stock(steps)
    assert before == ["y", "x"] and after == ["x", "y"], (before, after)
    assert delta["deferred"] >= 1 and delta["generated"] >= 1, delta


def test_edits_after_the_recompile_keep_the_recompiled_code() -> None:
    """Edited after the recompile and not recompiled again: stock's code is still the
    recompiled graph's, and so is ours (rebuilt from the snapshot, as the counter shows)."""

    def steps(gm: fx.GraphModule) -> None:
        add_neg(gm)
        gm.recompile()
        rename_and_reroute(gm)
        add_neg(gm)

    _, delta = assert_like_stock(steps)
    assert delta["from_snapshot"] == 1, delta


def test_superseded_recompile_returns_its_own_code() -> None:
    """The value of a recompile that a later recompile superseded is still the code of the
    graph as it was then (``GraphModule.__reduce__`` reads it so), here read after both."""

    def steps(gm: fx.GraphModule) -> tuple[str, str]:
        add_neg(gm)
        first = gm.recompile()
        rename_and_reroute(gm)
        second = gm.recompile()
        return first.src, second.src

    ours, _ = run(steps, accelerated=True)
    stock, _ = run(steps, accelerated=False)
    assert ours == stock
    assert ours[0] != ours[1]


def test_successive_snapshots_share_what_did_not_change() -> None:
    """Three deferred recompiles of one module: unchanged, the second snapshot holds the first's
    very entries and ``custom`` copies; after an edit, the edited nodes' entries and the changed
    ``custom`` are new, and the key equals one computed with nothing to share (so sharing
    changes no key: the code-equality tests above and the lowering's cover the code)."""
    from arm_accel.runtime import codegen

    gm = traced()
    relu = next(n for n in gm.graph.nodes if n.target is torch.relu)
    add = next(n for n in gm.graph.nodes if n.op == "call_function" and n is not relu)
    relu.meta["custom"] = {"tag": "a"}
    add.meta["custom"] = {"tag": "b"}
    previous = switch.set_enabled(True)
    try:
        with engine.arm_pipeline():
            gm.recompile()
            first = deferred.pending(gm)
            gm.recompile()
            second = deferred.pending(gm)
            rename_and_reroute(gm)
            relu.meta["custom"]["tag"] = "c"
            gm.recompile()
            third = deferred.pending(gm)
    finally:
        switch.set_enabled(previous)
    assert first is not None and second is not None and third is not None
    assert all(a is b for a, b in zip(first.key, second.key, strict=True))
    assert all(a is b for a, b in zip(first.alive, second.alive, strict=True))
    assert all(second.custom[n] is first.custom[n] for n in (relu, add))
    shared = [a is b for a, b in zip(second.key, third.key, strict=True)]
    nodes = list(gm.graph.nodes)
    assert not shared[nodes.index(relu)] and shared.count(False) == 1, shared
    assert third.custom[add] is second.custom[add]
    assert third.custom[relu] == {"tag": "c"} and second.custom[relu] == {"tag": "a"}
    delattr(gm.graph, codegen._ENTRIES_ATTR)
    assert codegen.source_key(gm.graph)[0] == third.key


def test_copies_of_a_pending_module_are_stocks() -> None:
    """``copy.deepcopy`` and ``copy.copy`` of a module whose code is pending: the copies'
    code and results equal stock's copies'."""

    def steps(gm: fx.GraphModule) -> tuple[str, str]:
        add_neg(gm)
        gm.recompile()
        return copy.deepcopy(gm).code, copy.copy(gm).code

    ours, _ = run(steps, accelerated=True)
    stock, _ = run(steps, accelerated=False)
    assert ours == stock


@pytest.mark.parametrize(
    "case", ["outside the pipeline", "FX_GRAPH_SHOW_META", "submodule", "another generator"]
)
def test_declined_recompiles_run_at_once(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside the pipeline scope, with FX_GRAPH_SHOW_META=1, with a code generator whose
    source is not one read, and for a module with a GraphModule child (stock recompiles the
    child too: that recompile, the child's own, may be deferred), the module's recompile is
    stock's, at once."""

    gm = traced()
    add_neg(gm)
    if case == "FX_GRAPH_SHOW_META":
        monkeypatch.setenv("FX_GRAPH_SHOW_META", "1")
    if case == "another generator":
        read = table.model("torch.code_generator")
        changed = dataclasses.replace(read, pins=(Pin(read.pins[0].ref, {"0.0.0": "0" * 16}),))
        others = tuple(m for m in table.MODELS if m.name != read.name)
        monkeypatch.setattr(table, "MODELS", (*others, changed))
    if case == "submodule":
        gm.add_submodule("child", traced())
    before = dict(deferred.counts)
    if case == "outside the pipeline":
        gm.recompile()
    else:
        with engine.arm_pipeline():
            gm.recompile()
    assert deferred.pending(gm) is None
    if case == "submodule":
        assert deferred.counts["deferred"] == before["deferred"] + 1
        assert deferred.pending(gm.child) is not None
    else:
        assert deferred.counts == before
    assert "neg" in gm.__dict__["_code"]


def test_every_recompile_of_a_lowering_gets_stocks_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every recompile deferred in an accelerated llama1 script (the quantizer's annotation
    pipeline, the lowering's pipeline and the edge stage's decompositions): the code it gives
    when used equals what stock's ``Graph.python_code`` generated at the recompile. Of the
    lowering's, most come from the snapshot (used after the lowering, when most graphs were
    edited again); the annotation pipeline's are generated as it ends, from the graph as it is."""
    from arm_accel.tools import models

    taken: list[tuple[fx.GraphModule, deferred.Snapshot, str]] = []
    defer = deferred.defer

    def recording(gm: fx.GraphModule) -> deferred.DeferredCode:
        expected = patches.original("retrace_engine.python_code")(gm._graph, "self").src
        result = defer(gm)
        snap = deferred.pending(gm)
        assert snap is not None
        taken.append((gm, snap, expected))
        return result

    monkeypatch.setattr(deferred, "defer", recording)
    net, inputs, mode = models.build("llama1")
    program = models.export_for_arm(net, inputs, mode)
    quantizing = len(taken)
    models.lower(program, mode)
    before = deferred.counts["from_snapshot"]
    for gm, snap, expected in taken:
        assert deferred.code_of(gm, snap).src == expected
    lowering = len(taken) - quantizing
    assert quantizing > 0 and lowering > 40, (quantizing, lowering)
    assert deferred.counts["from_snapshot"] - before > lowering // 2


def with_pytree_codegen(gm: fx.GraphModule) -> None:
    """Give ``gm`` the pytree code generator torch.export's modules have (flat args in and
    out as pytrees)."""
    from torch.fx.graph import _PyTreeCodeGen, _PyTreeInfo
    from torch.utils import _pytree as pytree

    x, y = torch.ones(2, 3), torch.ones(2, 3)
    in_spec = pytree.tree_flatten(((x, y), {}))[1]
    out_spec = pytree.tree_flatten(x)[1]
    gm.graph._codegen = _PyTreeCodeGen(_PyTreeInfo(["x", "y"], in_spec, out_spec))


def test_pytree_info_replaced_after_the_recompile_keeps_the_recompiled_code() -> None:
    """A pytree code generator whose ``pytree_info`` is replaced after the recompile (in place,
    on the same generator): stock's code and specs are the recompiled ones, and so are ours
    (rebuilt from the snapshot with the generator as it was)."""
    from torch.fx.graph import _PyTreeInfo

    def steps(accelerated: bool) -> tuple[Any, ...]:
        gm = traced()
        previous = switch.set_enabled(accelerated)
        try:
            with engine.arm_pipeline():
                with_pytree_codegen(gm)
                add_neg(gm)
                gm.recompile()
                info = gm.graph._codegen.pytree_info
                # other argument names and no output spec: both show in the generated code
                gm.graph._codegen.pytree_info = _PyTreeInfo(["a", "b"], info.in_spec, None)
                return gm.code, gm._in_spec, gm._out_spec
        finally:
            switch.set_enabled(previous)

    before = deferred.counts["from_snapshot"]
    ours = steps(accelerated=True)
    assert deferred.counts["from_snapshot"] == before + 1
    assert ours == steps(accelerated=False)


def test_deferred_outside_the_pipeline_keeps_stocks_file_names() -> None:
    """Inside ``deferring_recompiles()`` (the edge stage's decompositions, which trace through
    generated code and record its frames in stack traces): three recompiles, an edit between,
    then a call. Stock compiles at each recompile, numbering ``<eval_with_key>.N`` from torch's
    counter; deferred, the used code is compiled once, under the number its recompile took.
    Compared with stock: the file name of the module's ``forward``, the counter afterwards, the
    readable code; and the code was generated once, by the deferred path."""
    loader = torch.fx.graph_module._loader

    def steps(accelerated: bool) -> tuple[str, int, dict[str, Any]]:
        gm = traced()
        previous = switch.set_enabled(accelerated)
        try:
            with engine.deferring_recompiles():
                start = loader.next_id
                gm.recompile()
                add_neg(gm)
                gm.recompile()
                gm.recompile()
                x = torch.ones(2, 3)
                gm(x, x)
                # the third recompile's number, relative to the first's
                name = type(gm).forward.__code__.co_filename
                relative = int(re.match(r"<eval_with_key>\.(\d+)", name)[1]) - start  # type: ignore[index]
                taken = loader.next_id - start
                return f"{relative}/{taken}", start, readable(gm)
        finally:
            switch.set_enabled(previous)

    before = dict(deferred.counts)
    ours = steps(accelerated=True)
    delta = {k: deferred.counts[k] - before[k] for k in before}
    stock = steps(accelerated=False)
    assert delta["deferred"] >= 3 and delta["generated"] >= 1, delta
    assert ours[0] == stock[0] == "2/3"
    for key in ours[2]:
        if key == "result":
            assert torch.equal(ours[2][key], stock[2][key])
        else:
            assert ours[2][key] == stock[2][key], key


def test_unlifted_module_is_deferred_like_stock() -> None:
    """``ExportedProgram.module()`` inside ``deferring_recompiles()`` (the edge stage's
    decompositions unlift every program they trace or replay): torch.export's
    ``_StatefulGraphModule`` is deferred too. Compared with stock: the module's base class, its
    code, line map, ``str()``, forward signatures and result, the file name of its
    ``forward`` and torch's ``<eval_with_key>`` counter afterwards (its input hooks run on the
    call); and its recompiles were deferred."""
    from torch.export._unlift import _StatefulGraphModule

    loader = torch.fx.graph_module._loader
    x, y = torch.ones(2, 3), torch.full((2, 3), 2.0)
    ep = torch.export.export(Net(), (x, y))

    def steps(accelerated: bool) -> tuple[Any, ...]:
        previous = switch.set_enabled(accelerated)
        try:
            with engine.deferring_recompiles():
                start = loader.next_id
                gm = ep.module()
                pending = deferred.pending(gm) is not None
                read = {k: v for k, v in readable(gm, pickled=False).items() if k != "result"}
                result = gm(x, y)
                name = type(gm).forward.__code__.co_filename
                number = int(re.match(r"<eval_with_key>\.(\d+)", name)[1]) - start  # type: ignore[index]
                return type(gm).__mro__[1], pending, read, result, number, loader.next_id - start
        finally:
            switch.set_enabled(previous)

    before = deferred.counts["deferred"]
    ours = steps(accelerated=True)
    deferred_here = deferred.counts["deferred"] - before
    stock = steps(accelerated=False)
    assert ours[0] is stock[0] is _StatefulGraphModule
    assert ours[1] and not stock[1] and deferred_here >= 1
    assert ours[2] == stock[2]
    assert torch.equal(ours[3], stock[3])
    assert ours[4:] == stock[4:]


def test_remembered_forward_takes_stocks_number() -> None:
    """A module the pipeline cannot defer (it has a GraphModule child) recompiled twice with
    the same code, stock and inside the pipeline: the second compile is served by the memo
    (counted), and torch's ``<eval_with_key>`` counter moves as far as stock's."""
    from arm_accel.runtime import codegen
    from torch.fx import graph_module

    loader = graph_module._loader

    def moved(in_pipeline: bool) -> int:
        parent = traced()
        parent.child = traced()
        assert not deferred.deferrable(parent)
        start = loader.next_id
        with engine.arm_pipeline() if in_pipeline else contextlib.nullcontext():
            parent.recompile()
            parent.recompile()
        return loader.next_id - start

    stock = moved(False)
    hits = codegen.hits["forward"]
    assert moved(True) == stock
    assert codegen.hits["forward"] > hits
