"""Graph equality, the project's promise: the oracles of the differential tests and benches
(the contract is spelt out in design.md, "The equality contract")."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
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


# ---------------------------------------------------------------------------------------------
# Which graph a provenance record names


#: id() of each graph created while tracking -> its number (the graph created last there).
_serials: dict[int, int] = {}
_numbers = itertools.count()
_tracking: list[tuple[Any, Any]] = []


@contextmanager
def tracking_graphs() -> Iterator[None]:
    """Inside the block every ``fx.Graph`` created is numbered, and every provenance record
    (``NodeSource.NodeInfo``) made remembers the number of the graph its ``graph_id`` names
    (``graph_serial``; deep copies keep it). A ``graph_id`` is an address, and a freed graph's
    address is given to later graphs: the number tells them apart. Records made outside the
    block keep their bare ids. Re-entrant; not thread-aware."""
    from torch.fx.traceback import NodeSource

    if not _tracking:
        graph_init, info_init = fx.Graph.__init__, NodeSource.NodeInfo.__init__

        def numbered(self: fx.Graph, *args: Any, **kwargs: Any) -> None:
            graph_init(self, *args, **kwargs)
            _serials[id(self)] = next(_numbers)

        def remembering(self: Any, name: str, target: str, graph_id: int) -> None:
            info_init(self, name, target, graph_id)
            self.graph_serial = _serials.get(graph_id)

        fx.Graph.__init__ = numbered  # type: ignore[method-assign]
        NodeSource.NodeInfo.__init__ = remembering  # type: ignore[method-assign]
        _tracking.append((graph_init, info_init))
    else:
        _tracking.append(_tracking[0])
    try:
        yield
    finally:
        stock = _tracking.pop()
        if not _tracking:
            fx.Graph.__init__, NodeSource.NodeInfo.__init__ = stock  # type: ignore[method-assign]


class GraphLabels:
    """Numbers the graphs provenance records name, in order of first appearance (by the
    number :func:`tracking_graphs` gave them, else by ``graph_id``). Two walks in the same
    order over two lowerings give equal labels exactly when the records fall into the same
    graphs in the same order: graph ids compared up to renaming. One per side."""

    def __init__(self) -> None:
        self._labels: dict[tuple[str, int], int] = {}

    def __call__(self, source: Any) -> int:
        info = source.node_info
        if info is None:
            return -1
        serial = getattr(info, "graph_serial", None)
        key = ("graph", serial) if serial is not None else ("id", info.graph_id)
        return self._labels.setdefault(key, len(self._labels))


def meta_signature(
    value: Any, labels: GraphLabels | None = None, graph: fx.Graph | None = None
) -> Any:
    """A comparable form of one meta value: fake tensors by shape, dtype, strides, storage
    offset, device and ``requires_grad``; provenance (``NodeSource``) as
    :func:`source_signature` gives it, graphs by ``labels`` (default: numbered within this
    value); nodes (``source_fn_stack`` records) by name, those not of ``graph`` by name, op
    and target; ops by name; anything else as is."""
    from torch.fx.traceback import NodeSource

    if labels is None:
        labels = GraphLabels()
    if isinstance(value, fx.Node):
        if value.graph is graph:
            return ("node", value.name)
        return ("foreign node", value.name, value.op, str(value.target))
    if isinstance(value, torch.Tensor):
        return (
            "tensor",
            tuple(value.shape),
            value.dtype,
            value.stride(),
            value.storage_offset(),
            str(value.device),
            value.requires_grad,
        )
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(meta_signature(v, labels, graph) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, meta_signature(v, labels, graph)) for k, v in value.items()))
    if isinstance(value, NodeSource):
        return ("source", source_signature(value, labels))
    if isinstance(value, torch._ops.OperatorBase) or type(value).__name__ == "EdgeOpOverload":
        return ("op", str(value))
    return value


def source_signature(source: Any, labels: GraphLabels) -> Any:
    """A ``NodeSource`` as ``to_dict()`` gives it, down its ``from_node`` chain, with its graph
    labelled by ``labels`` instead of its ``graph_id``."""
    fields = source.to_dict()
    rest = tuple(sorted((k, repr(v)) for k, v in fields.items() if k not in _GRAPH_FIELDS))
    return (rest, labels(source), tuple(source_signature(p, labels) for p in source.from_node))


_GRAPH_FIELDS = ("graph_id", "from_node")


def _labelled(source: Any, labels: GraphLabels) -> Any:
    """A copy of a ``NodeSource`` chain whose ``graph_id`` s are ``labels``' numbers."""
    from torch.fx.traceback import NodeSource

    copy = NodeSource(None, source.pass_name, source.action)
    copy.node_info = NodeSource.NodeInfo(source.name, source.target, labels(source))
    copy.from_node = [_labelled(p, labels) for p in source.from_node]
    return copy


@contextmanager
def labelled_debug_info(labels: GraphLabels) -> Iterator[None]:
    """Inside the block the Arm backend's debug schema (the ``DebugMode.JSON`` file and the
    ``DebugMode.TOSA`` locations in the flatbuffer) writes each provenance record's graph as its
    ``labels`` number (``graph_id`` and ``parent_graph_id``): two lowerings' debug output is
    then equal byte for byte when it is equal with graph ids renamed. Stock's serializer runs
    on relabelled copies of the records."""
    from executorch.backends.arm.debug.schema import TorchDebugSchema

    stock = TorchDebugSchema.__dict__["serialize_node_trace"]

    def serialize_node_trace(node_trace: list[Any]) -> list[dict[str, Any]]:
        return stock.__func__([_labelled(s, labels) for s in node_trace])  # type: ignore[no-any-return]

    TorchDebugSchema.serialize_node_trace = staticmethod(serialize_node_trace)  # type: ignore[method-assign]
    try:
        yield
    finally:
        TorchDebugSchema.serialize_node_trace = stock  # type: ignore[method-assign]


def assert_graphs_identical(
    a: fx.GraphModule,
    b: fx.GraphModule,
    labels: tuple[GraphLabels, GraphLabels] | None = None,
) -> None:
    """The equality contract of the re-trace engine (design.md): same nodes in the same order
    with the same names, ops, targets, args and kwargs (containers' types included, nodes by
    position), the same meta keys with equal values (:func:`meta_signature`) but for
    :data:`UNCOMPARED_META`, provenance naming the same graphs (``labels``, one per side,
    shared by the comparisons of one lowering; default: numbered within these two graphs), and
    the same name-space state (what later node names follow from)."""
    la, lb = labels if labels is not None else (GraphLabels(), GraphLabels())
    for where, x, y in _matched_nodes(a, b, typed=True):
        assert x.name == y.name, f"{where}: names differ"
        keys_x = set(x.meta) - UNCOMPARED_META
        keys_y = set(y.meta) - UNCOMPARED_META
        assert keys_x == keys_y, f"{where}: meta keys differ: {sorted(keys_x ^ keys_y)}"
        for key in sorted(keys_x):
            sx = meta_signature(x.meta[key], la, x.graph)
            sy = meta_signature(y.meta[key], lb, y.graph)
            assert sx == sy, f"{where}: meta[{key!r}] {str(sx)[:300]} != {str(sy)[:300]}"
    ns_a, ns_b = a.graph._graph_namespace, b.graph._graph_namespace
    assert ns_a._used_names == ns_b._used_names, "name spaces hold different names"
    assert ns_a._base_count == ns_b._base_count, "name spaces count names differently"
