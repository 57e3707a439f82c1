"""Whole-program equality of two ExportedPrograms, node meta included (for the edge stage).

Stock itself is only reproducible up to object identity in a few places, so those are compared
by value: ``from_node`` provenance as the equality contract compares it
(:func:`arm_accel.testing.source_signature`: its graphs numbered in order of first appearance
over the whole program, one numbering per side; ``graph_id`` s are addresses, reused once a
graph is freed, so compare programs lowered inside :func:`arm_accel.testing.tracking_graphs`,
which tells a graph from a later one at its address),
``original_aten`` (the tracer stores a ``copy.copy`` of the op, never the op itself) by name
and type, fake tensors by shape, dtype, strides, storage offset, device and requires_grad;
``seq_nr`` (the process-wide autograd sequence counter when the node was traced, so two stock
lowerings in one process differ) by its rank among the program's seq_nr values.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import fx
from torch.export import ExportedProgram

from arm_accel.testing import GraphLabels, source_signature

_EVAL_KEY = re.compile(r"<eval_with_key>\.\d+")


def _value(v: Any, index: dict[fx.Node, int], labels: GraphLabels) -> Any:
    from torch.fx.traceback import NodeSource

    if isinstance(v, torch.Tensor):
        return (
            "tensor",
            type(v).__name__,
            tuple(v.shape),
            v.dtype,
            tuple(v.stride()),
            v.storage_offset(),
            str(v.device),
            v.requires_grad,
        )
    if isinstance(v, NodeSource):
        return ("source", source_signature(v, labels))
    if isinstance(v, torch._ops.OpOverload):
        return ("op", str(v), type(v).__name__)
    if isinstance(v, fx.Node):  # a node of another graph (e.g. in source_fn_stack) by name
        return ("node", index[v]) if v in index else ("foreign node", v.name, str(v.target))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_value(x, index, labels) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple((k, _value(x, index, labels)) for k, x in v.items()))
    return v


def _eq(x: Any, y: Any) -> bool:
    try:
        return bool(x == y)
    except Exception:
        return repr(x) == repr(y)


def _seq_nr_ranks(nodes: list[fx.Node]) -> dict[Any, int]:
    values = sorted({n.meta["seq_nr"] for n in nodes if isinstance(n.meta.get("seq_nr"), int)})
    return {v: i for i, v in enumerate(values)}


def graph_differences(
    a: fx.GraphModule,
    b: fx.GraphModule,
    separately_exported: bool = False,
    labels: tuple[GraphLabels, GraphLabels] | None = None,
) -> list[str]:
    """Every difference between two graphs, node by node and meta key by meta key (provenance
    graphs by ``labels``, one per side; default: numbered within these two graphs)."""
    la, lb = labels if labels is not None else (GraphLabels(), GraphLabels())
    out: list[str] = []
    na, nb = list(a.graph.nodes), list(b.graph.nodes)
    if len(na) != len(nb):
        return [f"node count {len(na)} != {len(nb)}"]
    ia = {n: i for i, n in enumerate(na)}
    ib = {n: i for i, n in enumerate(nb)}
    ra, rb = _seq_nr_ranks(na), _seq_nr_ranks(nb)
    for x, y in zip(na, nb, strict=True):
        where = f"node {ia[x]} {x.name}/{y.name}"
        if (x.name, x.op, x.target) != (y.name, y.op, y.target):
            out.append(f"{where}: name/op/target {x.op} {x.target} != {y.op} {y.target}")
        if not _eq(_value(x.args, ia, la), _value(y.args, ib, lb)):
            out.append(f"{where}: args {x.args} != {y.args}")
        if not _eq(_value(x.kwargs, ia, la), _value(y.kwargs, ib, lb)):
            out.append(f"{where}: kwargs {x.kwargs} != {y.kwargs}")
        if list(x.meta) != list(y.meta):
            out.append(f"{where}: meta keys {list(x.meta)} != {list(y.meta)}")
        for key in x.meta.keys() & y.meta.keys():
            if key == "seq_nr":
                vx, vy = ra.get(x.meta[key]), rb.get(y.meta[key])
            elif key == "stack_trace" and separately_exported:
                vx, vy = (_EVAL_KEY.sub("<eval_with_key>", str(m.meta[key])) for m in (x, y))
            else:
                vx, vy = _value(x.meta[key], ia, la), _value(y.meta[key], ib, lb)
            if not _eq(vx, vy):
                out.append(f"{where}: meta[{key!r}] {str(vx)[:300]} != {str(vy)[:300]}")
    return out


def _same_tensor(x: Any, y: Any, separately_exported: bool) -> bool:
    if (
        not separately_exported
        or not isinstance(x, torch.Tensor)
        or not isinstance(y, torch.Tensor)
    ):
        return x is y
    return x.dtype == y.dtype and x.shape == y.shape and bool(torch.equal(x, y))


def program_differences(
    a: ExportedProgram, b: ExportedProgram, separately_exported: bool = False
) -> list[str]:
    """Graph (see :func:`graph_differences`), signature, state dict and constants (same key
    order; the same tensor objects, or with ``separately_exported`` equal tensors; the stack
    traces then compare without the process-wide ``<eval_with_key>.N`` counter of generated
    code), verifiers, range constraints, module call graph, graph-module
    meta and class."""
    out = graph_differences(a.graph_module, b.graph_module, separately_exported)
    if a.graph_signature != b.graph_signature:
        out.append(f"graph signature {a.graph_signature} != {b.graph_signature}")
    for what, da, db in (
        ("state dict", a.state_dict, b.state_dict),
        ("constants", a.constants, b.constants),
    ):
        if list(da) != list(db) or any(
            not _same_tensor(da[k], db[k], separately_exported) for k in da
        ):
            out.append(f"{what} differs: {list(da)} != {list(db)}")
    # the edge dialect's verifier class is created per program: compare by name
    if [v.__qualname__ for v in a.verifiers] != [v.__qualname__ for v in b.verifiers] or (
        a.dialect != b.dialect
    ):
        out.append(f"verifiers {a.verifiers} != {b.verifiers}")
    if a.range_constraints != b.range_constraints:
        out.append("range constraints differ")
    if a.module_call_graph != b.module_call_graph:
        out.append("module call graph differs")
    if a.example_inputs is not b.example_inputs and not _eq(
        _value(a.example_inputs, {}, GraphLabels()), _value(b.example_inputs, {}, GraphLabels())
    ):
        out.append("example inputs differ")
    ma, mb = a.graph_module.meta, b.graph_module.meta
    if list(ma) != list(mb) or any(not (ma[k] is mb[k] or _eq(ma[k], mb[k])) for k in ma):
        out.append(f"graph module meta {list(ma)} != {list(mb)}")
    if type(a.graph_module).__name__ != type(b.graph_module).__name__:
        out.append("graph module class differs")
    if type(a.graph._codegen) is not type(b.graph._codegen):
        out.append("codegen differs")
    if sorted(vars(a.graph_module)) != sorted(vars(b.graph_module)):
        out.append("graph module attributes differ")
    for attr in ("_buffers", "_parameters", "_modules"):
        if list(getattr(a.graph_module, attr)) != list(getattr(b.graph_module, attr)):
            out.append(f"graph module {attr} differ")
    return out


def assert_programs_equal(a: ExportedProgram, b: ExportedProgram) -> None:
    diffs = program_differences(a, b)
    assert not diffs, f"{len(diffs)} differences, first: " + "\n".join(diffs[:10])
