"""Export an fx graph, in O(N), into the columnar node table Rust reads.

Node ids are positions in graph order. Target classes are decided once per distinct target
(``classify``) with executorch's own predicates, so the Rust side only ever sees bits.
The column names and dtypes mirror ``rust/table.rs``; the op codes and bit values come from it
(``_native.CONSTANTS``), and ``tests/test_constants.py`` checks every Rust constant has its
name here.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import fx

from arm_accel._native import CONSTANTS

_OP, _FLAG, _CLASS = CONSTANTS["op"], CONSTANTS["flag"], CONSTANTS["class"]


class Op(enum.IntEnum):
    """fx op kinds (``op`` column); values from ``table::op``."""

    PLACEHOLDER = _OP["PLACEHOLDER"]
    CALL_FUNCTION = _OP["CALL_FUNCTION"]
    GET_ATTR = _OP["GET_ATTR"]
    OUTPUT = _OP["OUTPUT"]
    CALL_MODULE = _OP["CALL_MODULE"]
    CALL_METHOD = _OP["CALL_METHOD"]


#: fx op names by code (the codes are 0..n-1).
OP_KINDS = tuple(op.name.lower() for op in sorted(Op))
_OP_CODE = {op.name.lower(): int(op) for op in Op}

# dtype codes; -1 means no tensor value or a dtype outside this list.
DTYPES = (
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
)
_DTYPE_CODE = {dt: code for code, dt in enumerate(DTYPES)}


class Flag(enum.IntFlag):
    """Per-node flag bits (``flags`` column); values from ``table::flag``."""

    CONSTANT = _FLAG["CONSTANT"]
    SYMBOLIC = _FLAG["SYMBOLIC"]
    INT48 = _FLAG["INT48"]
    NON_TENSOR = _FLAG["NON_TENSOR"]
    OPAQUE_ARGS = _FLAG["OPAQUE_ARGS"]
    FEEDS_OUTPUT = _FLAG["FEEDS_OUTPUT"]


class Cls(enum.IntFlag):
    """Per-target class bits (``target_class`` column); values from ``table::class``."""

    PERMUTE = _CLASS["PERMUTE"]
    VIEW = _CLASS["VIEW"]
    ELEMENTWISE = _CLASS["ELEMENTWISE"]
    TRANSPARENT = _CLASS["TRANSPARENT"]
    REDUCTION = _CLASS["REDUCTION"]
    SLICE = _CLASS["SLICE"]
    CAT = _CLASS["CAT"]
    TOSA_TABLE = _CLASS["TOSA_TABLE"]
    TOSA_RESCALE = _CLASS["TOSA_RESCALE"]
    TOSA_SCATTER = _CLASS["TOSA_SCATTER"]
    EXCLUDED = _CLASS["EXCLUDED"]


def _edge_targets() -> dict[str, Any]:
    from executorch.exir.dialects._ops import ops as exir_ops

    edge = exir_ops.edge
    return {
        "permute": edge.aten.permute_copy.default,
        "view_copy": edge.aten.view_copy.default,
        "view": edge.aten.view.default,
        "clone_dim_order": edge.dim_order_ops._clone_dim_order.default,
        "to_dim_order_copy": edge.dim_order_ops._to_dim_order_copy.default,
        "mean": edge.aten.mean.dim,
        "sum": edge.aten.sum.dim_IntList,
        "slice": edge.aten.slice_copy.Tensor,
        "cat": edge.aten.cat.default,
    }


def _tosa_targets() -> dict[str, Any]:
    import executorch.backends.arm.tosa.dialect  # noqa: F401  (registers the TOSA ops)
    from executorch.exir.dialects._ops import ops as exir_ops

    tosa = exir_ops.backend.tosa
    return {
        "table": tosa.TABLE.default,
        "rescale": tosa.RESCALE.default,
        "scatter": tosa.SCATTER.default,
    }


def is_pointwise(target: Any) -> bool:
    """The stock propagation test for elementwise ops: the ``pointwise`` op tag."""
    op = getattr(target, "_op", None)
    return op is not None and hasattr(op, "tags") and torch.Tag.pointwise in op.tags


def classify(target: Any, excluded: Iterable[Any] = ()) -> int:
    """Default class bits of one target, as the Arm view/permute passes see it."""
    if target is None or isinstance(target, str):
        return 0
    e = _edge_targets()
    t = _tosa_targets()
    bits = Cls(0)
    if target == e["permute"]:
        bits |= Cls.PERMUTE
    if target in (e["view_copy"], e["view"]):
        bits |= Cls.VIEW
    if target in (e["clone_dim_order"], e["to_dim_order_copy"]):
        bits |= Cls.TRANSPARENT
    if is_pointwise(target):
        bits |= Cls.ELEMENTWISE
    if target in (e["mean"], e["sum"]):
        bits |= Cls.REDUCTION
    if target == e["slice"]:
        bits |= Cls.SLICE
    if target == e["cat"]:
        bits |= Cls.CAT
    if target == t["table"]:
        bits |= Cls.TOSA_TABLE
    if target == t["rescale"]:
        bits |= Cls.TOSA_RESCALE
    if target == t["scatter"]:
        bits |= Cls.TOSA_SCATTER
    if target in set(excluded):
        bits |= Cls.EXCLUDED
    return int(bits)


@dataclass
class NodeTable:
    """Columns of one exported graph plus the fx objects each id stands for."""

    op: np.ndarray
    target: np.ndarray
    target_class: np.ndarray
    in_ptr: np.ndarray
    in_idx: np.ndarray
    user_ptr: np.ndarray
    user_idx: np.ndarray
    rank: np.ndarray
    shape_ptr: np.ndarray
    shape: np.ndarray
    dtype: np.ndarray
    iarg_ptr: np.ndarray
    iarg: np.ndarray
    flags: np.ndarray
    nodes: list[fx.Node] = field(repr=False)
    targets: list[Any] = field(repr=False)
    #: Built by ``export_light``: rank/shape/dtype/iarg columns are empty, flags hold CONSTANT only.
    light: bool = False

    def __len__(self) -> int:
        return len(self.nodes)

    def index(self) -> dict[fx.Node, int]:
        return {n: i for i, n in enumerate(self.nodes)}

    def shape_of(self, i: int) -> list[int] | None:
        if self.rank[i] < 0:
            return None
        return self.shape[self.shape_ptr[i] : self.shape_ptr[i + 1]].tolist()

    def iargs_of(self, i: int) -> list[int]:
        return self.iarg[self.iarg_ptr[i] : self.iarg_ptr[i + 1]].tolist()


def _int_list(value: Any) -> list[int] | None:
    """``value`` as a list of plain ints, or None if it is anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return [value]
    if isinstance(value, (list, tuple)) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return list(value)
    return None


def _arg(node: fx.Node, pos: int, name: str, default: Any) -> Any:
    if len(node.args) > pos:
        return node.args[pos]
    return node.kwargs.get(name, default)


def encode_iargs(node: fx.Node, cls: int) -> list[int] | None:
    """The integer arguments the kernels need, or None when they are not plain ints.

    permute: dims; view: shape; reduction: [keepdim (1/0, -1 when absent), *dims];
    slice: [dim, start, end, step]; cat: [dim]. Other classes carry none.
    """
    if cls & (Cls.PERMUTE | Cls.VIEW):
        return _int_list(_arg(node, 1, "dims" if cls & Cls.PERMUTE else "size", None))
    if cls & Cls.REDUCTION:
        dims = _int_list(_arg(node, 1, "dim", None))
        keep = _arg(node, 2, "keepdim", None)
        if dims is None or not (keep is None or isinstance(keep, bool)):
            return None
        return [-1 if keep is None else int(keep), *dims]
    if cls & Cls.SLICE:
        vals = [
            _arg(node, 1, "dim", 0),
            _arg(node, 2, "start", None),
            _arg(node, 3, "end", None),
            _arg(node, 4, "step", 1),
        ]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            return None
        return vals
    if cls & Cls.CAT:
        return _int_list(_arg(node, 1, "dim", 0))
    return []


def constant_names(exported_program: Any) -> frozenset[str]:
    """Placeholder names that are parameters, buffers or lifted constants."""
    if exported_program is None:
        return frozenset()
    gs = exported_program.graph_signature
    return frozenset(
        set(gs.inputs_to_parameters)
        | set(gs.inputs_to_buffers)
        | set(gs.inputs_to_lifted_tensor_constants)
    )


def _int48_key() -> tuple[str, Any] | None:
    try:
        from executorch.backends.arm.tosa.mapping import TosaSpecialDtype
    except ImportError:  # pragma: no cover - tosa-tools missing
        return None
    return TosaSpecialDtype.meta_key(), TosaSpecialDtype.INT48


def export_table(
    graph_module: fx.GraphModule,
    constants: frozenset[str] = frozenset(),
    classifier: Callable[[Any], int] = classify,
) -> NodeTable:
    """The full node table of ``graph_module``: ``export_light``'s columns and CONSTANT flags,
    plus the value columns, the integer arguments and the other flags.

    ``constants`` names the placeholders that count as constant (see ``constant_names``);
    get_attr nodes always do. ``classifier`` maps a target to class bits and is called once
    per distinct target.
    """
    light = export_light(graph_module, classifier, constants)
    table = with_int_args(light, _int_arg_rows(light))
    rank, shape_ptr, shape, dtype, value_flags = _value_columns(light.nodes)
    return dataclasses.replace(
        table,
        rank=rank,
        shape_ptr=shape_ptr,
        shape=shape,
        dtype=dtype,
        flags=table.flags | value_flags | _marker_flags(light.nodes),
        light=False,
    )


def _int_arg_rows(table: NodeTable) -> list[list[int] | None]:
    """Each node's ``encode_iargs`` row (empty for a node whose target has no class)."""
    classes = table.target_class.tolist()
    return [
        encode_iargs(node, classes[code]) if code >= 0 and classes[code] else []
        for node, code in zip(table.nodes, table.target.tolist(), strict=True)
    ]


def _value_columns(
    nodes: list[fx.Node],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rank, shape_ptr, shape, dtype, flags) of the nodes' ``val``: a tensor's dims (-1 and
    SYMBOLIC for a dim that is not an int) and dtype code; rank and dtype -1 and NON_TENSOR
    for anything else."""
    n = len(nodes)
    rank = np.empty(n, dtype=np.int32)
    dtype = np.empty(n, dtype=np.int32)
    flags = np.zeros(n, dtype=np.uint32)
    shape_ptr = np.empty(n + 1, dtype=np.int64)
    shape_ptr[0] = 0
    shape: list[int] = []
    for i, node in enumerate(nodes):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            dims = []
            for d in val.shape:
                if isinstance(d, int):
                    dims.append(d)
                else:
                    dims.append(-1)
                    flags[i] |= Flag.SYMBOLIC
            rank[i] = len(dims)
            shape.extend(dims)
            dtype[i] = _DTYPE_CODE.get(val.dtype, -1)
        else:
            rank[i] = -1
            dtype[i] = -1
            flags[i] = Flag.NON_TENSOR
        shape_ptr[i + 1] = len(shape)
    return rank, shape_ptr, np.asarray(shape, dtype=np.int64), dtype, flags


def _marker_flags(nodes: list[fx.Node]) -> np.ndarray:
    """INT48 (TOSA's special-dtype meta) and FEEDS_OUTPUT flags of the nodes."""
    int48 = _int48_key()
    flags = np.zeros(len(nodes), dtype=np.uint32)
    for i, node in enumerate(nodes):
        if int48 is not None and node.meta.get(int48[0]) == int48[1]:
            flags[i] |= Flag.INT48
        if any(u.op == "output" for u in node.users):
            flags[i] |= Flag.FEEDS_OUTPUT
    return flags


def fx_counts(
    graph_module: fx.GraphModule, constants: frozenset[str] = frozenset()
) -> dict[str, int]:
    """The counts ``_native.table_counts`` must report, computed from fx alone."""
    nodes = list(graph_module.graph.nodes)
    int48 = _int48_key()

    def is_symbolic(n: fx.Node) -> bool:
        val = n.meta.get("val")
        return isinstance(val, torch.Tensor) and any(not isinstance(d, int) for d in val.shape)

    def opaque(n: fx.Node) -> bool:
        if n.op not in ("call_function", "call_method", "call_module"):
            return False
        cls = classify(n.target)
        return bool(cls) and encode_iargs(n, cls) is None

    return {
        "nodes": len(nodes),
        "input_edges": sum(len(n.all_input_nodes) for n in nodes),
        "user_edges": sum(len(n.users) for n in nodes),
        "constants": sum(
            n.op == "get_attr" or (n.op == "placeholder" and n.name in constants) for n in nodes
        ),
        "symbolic": sum(map(is_symbolic, nodes)),
        "int48": sum(int48 is not None and n.meta.get(int48[0]) == int48[1] for n in nodes),
        "non_tensor": sum(not isinstance(n.meta.get("val"), torch.Tensor) for n in nodes),
        "opaque_args": sum(map(opaque, nodes)),
        "feeds_output": sum(any(u.op == "output" for u in n.users) for n in nodes),
    }


# -- light export ----------------------------------------------------------------------------
#
# The fusion passes' and the propagation scan's kernels read only the op kinds, target codes and
# classes, the input/user CSR and the CONSTANT flag. ``export_light`` builds exactly those, with
# C-level iteration (``map`` over attribute getters, ``np.fromiter``), no per-node Python
# function calls and no ``meta`` access: the full ``export_table`` walk costs more than these
# passes' whole stock runs on CI-sized graphs. The other columns are present (Rust validates
# every table the same way) but empty: rank and dtype -1, no shape rows, no integer arguments.
# Kernels fed a light table must not read them; ``NodeTable.light`` says which kind a table is.

_CALL_OPS = frozenset(("call_function", "call_method", "call_module"))
_get_op = operator.attrgetter("op")
_get_target = operator.attrgetter("target")
_get_inputs = operator.attrgetter("_input_nodes")
_get_users = operator.attrgetter("users")


def _subset_csr(
    lists: list[Any], index: dict[fx.Node, int], n: int
) -> tuple[np.ndarray, np.ndarray]:
    """(cumulative counts, flat ids) of the edges in ``lists`` whose endpoint is in ``index``."""
    counts = np.fromiter(map(len, lists), np.int64, n)
    total = int(counts.sum())
    flat = np.fromiter(
        map(index.get, itertools.chain.from_iterable(lists), itertools.repeat(-1)),
        np.int64,
        total,
    )
    keep = flat >= 0
    owner = np.repeat(np.arange(n, dtype=np.int64), counts)
    kept = np.bincount(owner[keep], minlength=n).astype(np.int64)
    return np.cumsum(kept), flat[keep]


def export_light(
    graph_module: fx.GraphModule,
    classifier: Callable[[Any], int],
    constants: frozenset[str] | None = None,
    nodes: list[fx.Node] | None = None,
) -> NodeTable:
    """The node table's op/target/class/CSR columns (and CONSTANT when ``constants`` is given).

    ``nodes``: export only these nodes (in graph order; by default all of them), as the
    subgraph they induce: ids are positions in ``nodes``, and only edges between two exported
    nodes are kept. A kernel that reads the users of node ``i`` sees all of them only if all
    of them were exported.
    """
    subset = nodes is not None
    if nodes is None:
        nodes = list(graph_module.graph.nodes)
    n = len(nodes)
    index = dict(zip(nodes, range(n), strict=True))
    ops = list(map(_get_op, nodes))
    targets, classes, target = _intern_targets(nodes, ops, classifier)
    in_ptr, in_idx = _csr(list(map(_get_inputs, nodes)), index, subset)
    user_ptr, user_idx = _csr(list(map(_get_users, nodes)), index, subset)
    return NodeTable(
        op=np.fromiter(map(_OP_CODE.__getitem__, ops), dtype=np.uint8, count=n),
        target=target,
        target_class=np.asarray(classes, dtype=np.uint32),
        in_ptr=in_ptr,
        in_idx=in_idx,
        user_ptr=user_ptr,
        user_idx=user_idx,
        flags=_constant_flags(nodes, ops, constants),
        nodes=nodes,
        targets=targets,
        light=True,
        **empty_columns(n),
    )


def _intern_targets(
    nodes: list[fx.Node], ops: list[str], classifier: Callable[[Any], int]
) -> tuple[list[Any], list[int], np.ndarray]:
    """(distinct call targets in first-use order, their classes, each node's target code):
    call nodes get their target's code, the others -1."""
    n = len(nodes)
    is_call = np.fromiter(map(_CALL_OPS.__contains__, ops), dtype=bool, count=n)
    call_targets = list(itertools.compress(map(_get_target, nodes), is_call))
    targets: list[Any] = list(dict.fromkeys(call_targets))
    codes = dict(zip(targets, range(len(targets)), strict=True))
    classes = [int(classifier(t)) for t in targets]
    target = np.full(n, -1, dtype=np.int32)
    target[is_call] = np.fromiter(
        map(codes.__getitem__, call_targets), dtype=np.int32, count=len(call_targets)
    )
    return targets, classes, target


def _csr(
    lists: list[Any], index: dict[fx.Node, int], subset: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(pointers, flat ids) of the edges in ``lists`` (one list of nodes per node); with
    ``subset``, only the edges whose endpoint is in ``index``."""
    n = len(lists)
    ptr = np.zeros(n + 1, dtype=np.int64)
    if subset:
        # Map every edge endpoint to its id, -1 outside the subset (C-level), then drop those.
        ptr[1:], idx = _subset_csr(lists, index, n)
        return ptr, idx
    np.cumsum(np.fromiter(map(len, lists), np.int64, n), out=ptr[1:])
    idx = np.fromiter(
        map(index.__getitem__, itertools.chain.from_iterable(lists)), np.int64, int(ptr[-1])
    )
    return ptr, idx


def _constant_flags(
    nodes: list[fx.Node], ops: list[str], constants: frozenset[str] | None
) -> np.ndarray:
    """CONSTANT on get_attr nodes and the placeholders named in ``constants``; all zero when
    ``constants`` is None."""
    flags = np.zeros(len(nodes), dtype=np.uint32)
    if constants is not None:
        for i, (o, node) in enumerate(zip(ops, nodes, strict=True)):
            if o == "get_attr" or (o == "placeholder" and node.name in constants):
                flags[i] = Flag.CONSTANT
    return flags


def empty_columns(n: int) -> dict[str, np.ndarray]:
    """The columns a light table leaves empty, for ``n`` nodes: rank and dtype -1, no shape
    rows, no integer arguments."""
    return {
        "rank": np.full(n, -1, dtype=np.int32),
        "shape_ptr": np.zeros(n + 1, dtype=np.int64),
        "shape": np.zeros(0, dtype=np.int64),
        "dtype": np.full(n, -1, dtype=np.int32),
        "iarg_ptr": np.zeros(n + 1, dtype=np.int64),
        "iarg": np.zeros(0, dtype=np.int64),
    }


def with_int_args(table: NodeTable, rows: Sequence[Sequence[int] | None]) -> NodeTable:
    """``table`` with its integer-argument CSR set to ``rows`` (one per node); a None row sets
    OPAQUE_ARGS on that node (its arguments are not modelled) and stands for no integers.

    The kernel reading the table defines what the integers encode (see ``rust/signature.rs``).
    """
    n = len(table)
    if len(rows) != n:
        raise ValueError(f"with_int_args: {len(rows)} rows for {n} nodes")
    opaque = np.fromiter(map(operator.is_, rows, itertools.repeat(None)), dtype=bool, count=n)
    present = [r if r is not None else () for r in rows]
    iarg_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, present), np.int64, n), out=iarg_ptr[1:])
    iarg = np.fromiter(itertools.chain.from_iterable(present), np.int64, int(iarg_ptr[-1]))
    flags = table.flags | np.where(opaque, np.uint32(Flag.OPAQUE_ARGS), np.uint32(0))
    return dataclasses.replace(
        table, iarg_ptr=iarg_ptr, iarg=iarg, flags=flags.astype(np.uint32), light=table.light
    )


def call_nodes_with_targets(graph: fx.Graph, targets: Iterable[Any]) -> list[fx.Node] | None:
    """The ``call_function`` nodes whose target is one of ``targets``, in graph order.

    Uses the graph's own (op, target) index (``Graph.find_nodes``), so it costs O(matches)
    instead of a walk over every node. Returns None when a target is a string (then other op
    kinds could match it too, and the caller should walk the graph itself).
    """
    found: list[fx.Node] = []
    for t in targets:
        if isinstance(t, str):
            return None
        found.extend(graph.find_nodes(op="call_function", target=t, sort=False))
    found.sort()
    return found


def with_users(nodes: Iterable[fx.Node]) -> list[fx.Node]:
    """``nodes`` plus all their users, deduplicated, in graph order (for ``export_light``)."""
    out = set(nodes)
    for users in list(map(_get_users, out)):
        out.update(users)
    return sorted(out)
