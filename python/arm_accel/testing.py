"""Graph equality, the project's promise: the oracles of the differential tests and benches
(the contract is spelt out in design.md, "The equality contract")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import fx


def _positional(value: Any, index: dict[fx.Node, int], typed: bool) -> Any:
    """``value`` with nodes replaced by their position; ``typed`` also tells tuple subclasses
    (``torch.Size``) apart from lists by ``isinstance`` and tags leaves with their type name."""
    if isinstance(value, fx.Node):
        return ("node", index[value])
    if isinstance(value, (list, tuple)):
        is_tuple = isinstance(value, tuple) if typed else type(value) is tuple
        return (is_tuple, [_positional(v, index, typed) for v in value])
    if isinstance(value, dict):
        return {k: _positional(v, index, typed) for k, v in value.items()}
    return (type(value).__name__, value) if typed else value


def _matched_nodes(
    a: fx.GraphModule, b: fx.GraphModule, typed: bool
) -> Iterator[tuple[str, fx.Node, fx.Node]]:
    """The node walk both assertions share: same node count, then each pair in graph order,
    yielded with its label for messages once op, target, args and kwargs are checked equal
    (nodes compared by position, :func:`_positional`)."""
    na, nb = list(a.graph.nodes), list(b.graph.nodes)
    assert len(na) == len(nb), f"node count {len(na)} != {len(nb)}"
    ia = {n: i for i, n in enumerate(na)}
    ib = {n: i for i, n in enumerate(nb)}
    for i, (x, y) in enumerate(zip(na, nb, strict=True)):
        where = f"node {i} ({x.name} vs {y.name})"
        assert x.op == y.op, f"{where}: op {x.op} != {y.op}"
        assert x.target == y.target, f"{where}: target {x.target} != {y.target}"
        ax, ay = _positional(x.args, ia, typed), _positional(y.args, ib, typed)
        assert ax == ay, f"{where}: args {x.args} != {y.args}"
        kx, ky = _positional(x.kwargs, ia, typed), _positional(y.kwargs, ib, typed)
        assert kx == ky, f"{where}: kwargs {x.kwargs} != {y.kwargs}"
        yield where, x, y


def assert_graphs_equal(a: fx.GraphModule, b: fx.GraphModule) -> None:
    """Same node count and order; op/target/args/kwargs equal with nodes compared by position;
    ``meta["val"]`` shape and dtype equal."""
    for where, x, y in _matched_nodes(a, b, typed=False):
        vx, vy = x.meta.get("val"), y.meta.get("val")
        assert _val_sig(vx) == _val_sig(vy), f"{where}: val {_val_sig(vx)} != {_val_sig(vy)}"


def _val_sig(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return (tuple(v.shape), v.dtype)
    if isinstance(v, (list, tuple)):
        return tuple(_val_sig(x) for x in v)
    return type(v).__name__


#: Meta keys left out of :func:`assert_graphs_identical`: ``seq_nr`` is autograd's process-wide
#: sequence counter at node creation, so two lowerings in one process differ in it before any
#: arm-accel code runs; nothing in executorch reads it.
UNCOMPARED_META = frozenset({"seq_nr"})


def meta_signature(value: Any) -> Any:
    """A comparable form of one meta value: fake tensors by shape, dtype, strides, storage
    offset and device; provenance (``NodeSource``) as the Arm debug schema serializes it but for
    graph ids (``id()`` of graph objects: different on every run, reused once a graph is freed,
    and one graph object serves several in-place re-traces); ops by name; anything else as is."""
    from torch.fx.traceback import NodeSource

    if isinstance(value, torch.Tensor):
        return (
            "tensor",
            tuple(value.shape),
            value.dtype,
            value.stride(),
            value.storage_offset(),
            str(value.device),
        )
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(meta_signature(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, meta_signature(v)) for k, v in value.items()))
    if isinstance(value, NodeSource):
        return ("source", source_signature(value.to_dict()))
    if isinstance(value, torch._ops.OperatorBase) or type(value).__name__ == "EdgeOpOverload":
        return ("op", str(value))
    return value


def source_signature(d: dict[str, Any]) -> Any:
    """A ``NodeSource.to_dict()`` without its ``graph_id`` s (graph addresses: they differ run
    to run and are reused once a graph is freed), down its ``from_node`` chain."""
    rest = tuple(sorted((k, repr(v)) for k, v in d.items() if k not in ("graph_id", "from_node")))
    return (rest, tuple(source_signature(p) for p in d.get("from_node", [])))


def assert_graphs_identical(a: fx.GraphModule, b: fx.GraphModule) -> None:
    """The equality contract of the re-trace engine (design.md): same nodes in the same order
    with the same names, ops, targets, args and kwargs (containers' types included, nodes by
    position), the same meta keys with equal values (:func:`meta_signature`) but for
    :data:`UNCOMPARED_META`, and the same name-space state (what later node names follow from)."""
    for where, x, y in _matched_nodes(a, b, typed=True):
        assert x.name == y.name, f"{where}: names differ"
        keys_x = set(x.meta) - UNCOMPARED_META
        keys_y = set(y.meta) - UNCOMPARED_META
        assert keys_x == keys_y, f"{where}: meta keys differ: {sorted(keys_x ^ keys_y)}"
        for key in sorted(keys_x):
            sx = meta_signature(x.meta[key])
            sy = meta_signature(y.meta[key])
            assert sx == sy, f"{where}: meta[{key!r}] {str(sx)[:300]} != {str(sy)[:300]}"
    ns_a, ns_b = a.graph._graph_namespace, b.graph._graph_namespace
    assert ns_a._used_names == ns_b._used_names, "name spaces hold different names"
    assert ns_a._base_count == ns_b._base_count, "name spaces count names differently"
