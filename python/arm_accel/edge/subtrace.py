"""Trace only the nodes a decomposition call rewrites.

A call whose graph holds a few nodes the table decomposes re-traces every node to rewrite those
few. :func:`trace_rewritten` copies the rewritten nodes with their meta into a small program of
the values they read and traces it with stock's own ``run_decompositions`` (same table, fake mode,
CIA override and mode stack), for the replay to graft in place. A traced value whose layout
differs from the graph's declines (:class:`Declined`). Why: design.md, "The re-trace engine".
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.export import ExportedProgram
from torch.export.exported_program import ModuleCallEntry, ModuleCallSignature
from torch.export.graph_signature import (
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    TensorArgument,
)
from torch.utils import _pytree as pytree

#: The fx pass name every node the re-trace makes names in its first provenance level.
TRACE_PASS_NAME = "Interpreter_PropagateUnbackedSymInts"


def created_from(source: fx.Node) -> list[Any]:
    """The ``from_node`` the re-trace gives a node it makes while interpreting ``source``."""
    from torch.fx.traceback import NodeSource, NodeSourceAction

    return [NodeSource(source, TRACE_PASS_NAME, NodeSourceAction.CREATE)]


def listed(node: fx.Node) -> bool:
    """Whether ``node``'s value is a list/tuple (read through ``getitem`` users)."""
    return isinstance(node.meta.get("val"), (list, tuple))


class Declined(Exception):
    """The traced nodes show the replay cannot model the call (not a fault: stock runs)."""


@dataclass
class SubTrace:
    """What the small program's trace made. ``made[node]``: the traced nodes made for a rewritten
    node, in trace order; ``values[node]``: what a rewritten node (or a ``getitem`` of one) the
    rest of the graph reads became; ``inputs[placeholder]``: the full graph's node a traced
    placeholder stands for."""

    made: dict[fx.Node, list[fx.Node]]
    values: dict[fx.Node, Any]
    inputs: dict[fx.Node, fx.Node]


def decline_reason(node: fx.Node) -> str | None:
    """Why ``node`` (its target in the table) cannot be traced alone, or None: every value it
    reads must be a tensor (they become the small program's inputs), and its own value a tensor
    or a list/tuple of tensors read only through ``getitem``."""
    for arg in node.all_input_nodes:
        if not isinstance(arg.meta.get("val"), torch.Tensor):
            return f"{node.name}: reads {arg.name}, not a tensor"
    value = node.meta.get("val")
    if isinstance(value, (list, tuple)):
        if not all(isinstance(v, torch.Tensor) for v in value):
            return f"{node.name}: a non-tensor in its value"
        if any(u.target is not operator.getitem for u in node.users):
            return f"{node.name}: a list value read other than by getitem"
        return None
    if not isinstance(value, torch.Tensor):
        return f"{node.name}: value not a tensor"
    return None


def _program(
    ep: ExportedProgram, rewritten: list[fx.Node]
) -> tuple[ExportedProgram, list[fx.Node], list[fx.Node], dict[str, fx.Node]]:
    """The small program: one input per value the rewritten nodes read from the rest of the
    graph, copies of the rewritten nodes (and of their ``getitem`` users) with their meta, and
    one output per value the rest of the graph reads. Returns it with, per input, the full
    graph's node, per output, the full graph's node it stands for, and the rewritten nodes by
    their copies' names."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    inputs: list[fx.Node] = []
    outputs: list[fx.Node] = []
    chosen = set(rewritten)
    for node in rewritten:
        if listed(node):
            chosen.update(node.users)  # its getitems, copied with it
    for node in rewritten:
        for arg in node.all_input_nodes:
            if arg not in chosen and arg not in env:
                placeholder = graph.placeholder(f"input{len(inputs)}")
                placeholder.meta = {"val": arg.meta["val"]}
                env[arg] = placeholder
                inputs.append(arg)
    for node in rewritten:
        env[node] = graph.node_copy(node, env.__getitem__)
        env[node].meta = copy.copy(node.meta)
        if listed(node):
            for user in node.users:
                env[user] = graph.node_copy(user, env.__getitem__)
                env[user].meta = copy.copy(user.meta)
                outputs.append(user)
        else:
            outputs.append(node)
    graph.output(tuple(env[o] for o in outputs))
    gm = fx.GraphModule(torch.nn.Module(), graph)
    signature = ExportGraphSignature(
        input_specs=[
            InputSpec(InputKind.USER_INPUT, TensorArgument(env[i].name), None) for i in inputs
        ],
        output_specs=[
            OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(env[o].name), None) for o in outputs
        ],
    )
    in_spec = pytree.tree_flatten((tuple(i.meta["val"] for i in inputs), {}))[1]
    out_spec = pytree.tree_flatten(tuple(o.meta["val"] for o in outputs))[1]
    call = ModuleCallSignature(inputs=[], outputs=[], in_spec=in_spec, out_spec=out_spec)
    program = ExportedProgram(
        root=gm,
        graph=gm.graph,
        graph_signature=signature,
        state_dict={},
        range_constraints={},
        module_call_graph=[ModuleCallEntry("", call)],
        verifiers=ep.verifiers,
    )
    return program, inputs, outputs, {env[n].name: n for n in rewritten}


def trace_rewritten(
    ep: ExportedProgram,
    rewritten: list[fx.Node],
    table: dict[Any, Any],
    stock: Callable[..., ExportedProgram],
) -> SubTrace:
    """Trace ``rewritten`` (nodes of ``ep`` whose targets ``table`` decomposes, in graph order)
    alone with stock's ``run_decompositions`` (``stock``, unwrapped) and the same table."""
    program, inputs, outputs, by_name = _program(ep, rewritten)
    traced = stock(program, dict(table), False).graph
    placeholders = traced.find_nodes(op="placeholder")
    if len(placeholders) != len(inputs):
        raise ValueError("the traced program's inputs are not the small program's")
    input_of = dict(zip(placeholders, inputs, strict=True))
    made: dict[fx.Node, list[fx.Node]] = {n: [] for n in rewritten}
    for node in traced.nodes:
        if node.op != "call_function":
            continue
        sources = node.meta.get("from_node") or []
        source = by_name.get(sources[0].name) if sources else None
        if source is None or sources[0].pass_name != TRACE_PASS_NAME:
            raise ValueError(f"traced node {node.name} names no rewritten node")
        made[source].append(node)
    results = traced.output_node().args[0]
    if len(results) != len(outputs):
        raise ValueError("the traced program's outputs are not the small program's")
    values = dict(zip(outputs, results, strict=True))
    for reader, value in values.items():
        if _layout(value.meta["val"]) != _layout(reader.meta["val"]):
            # the nodes reading it would compute other values (strides) than the graph holds
            raise Declined(f"{reader.name}: its traced value's layout differs from the graph's")
    return SubTrace(made=made, values=values, inputs=input_of)


def _layout(value: torch.Tensor) -> tuple[Any, ...]:
    """What a later node's fake value depends on besides its own arguments."""
    return (value.shape, value.dtype, value.stride(), value.storage_offset(), value.device)


__all__ = [
    "Declined",
    "SubTrace",
    "TRACE_PASS_NAME",
    "created_from",
    "decline_reason",
    "listed",
    "trace_rewritten",
]
