"""Propagation scans decided in Rust (``rust/propagate/``), applied here with stock's edits.

:func:`run_scans` exports the graph once (the node table plus the planner's columns), asks the
native planner for a run of scans to the fixed point, with what the re-trace between two scans
changes modelled (``mirror_retrace``), and applies each scan's edits with the pass's own
methods. A first scan the planner declines has edited nothing: the caller runs stock's walk.
Only passes whose decision methods are exactly stock's are planned.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import logging
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from executorch.backends.arm._passes import propagate_view_copy_permute_pass as _arm
from executorch.backends.transforms import propagate_view_copy_permute_pass as _generic
from executorch.backends.transforms.propagate_view_copy_permute_pass import _ForkBranchSplit
from executorch.exir.dialects._ops import ops as exir_ops
from torch import fx

from arm_accel import _native
from arm_accel.control import counters
from arm_accel.native.table import (
    Cls,
    Flag,
    NodeTable,
    encode_iargs,
    export_light,
    is_pointwise,
    with_int_args,
)
from arm_accel.pipeline.passes.base import _stock_class, stage
from arm_accel.pipeline.passes.propagate.retrace import (
    mirror_names_and_provenance,
    provenance_pass_name,
)

logger = logging.getLogger("arm_accel")


class PlanMismatch(RuntimeError):
    """Applying a planned scan met a graph other than the one planned (a planner or model bug):
    the graph is half-edited, the propagation call rolls it back and runs stock."""


_FORM, _EXTRA = _native.CONSTANTS["form"], _native.CONSTANTS["extra"]
_RETRACE, _SPECIAL = _native.CONSTANTS["retrace"], _native.CONSTANTS["special"]


class Form(enum.IntFlag):
    """Per-node argument-form bits; values from ``propagate::form``."""

    EXACT = _FORM["EXACT"]
    DIM_SCALAR = _FORM["DIM_SCALAR"]
    KEEPDIM_POSITIONAL_TRUE = _FORM["KEEPDIM_POSITIONAL_TRUE"]
    RESCALE_PER_TENSOR_ARGS = _FORM["RESCALE_PER_TENSOR_ARGS"]
    ARG1_TUPLE = _FORM["ARG1_TUPLE"]


class Extra(enum.IntFlag):
    """Per-target planner bits; values from ``propagate::extra``."""

    SCAN_TARGET = _EXTRA["SCAN_TARGET"]
    VIEW_COPY = _EXTRA["VIEW_COPY"]
    ARG_UPDATE = _EXTRA["ARG_UPDATE"]
    PERMUTE_TARGET = _EXTRA["PERMUTE_TARGET"]


class Retrace(enum.IntFlag):
    """``retrace`` column bits; values from ``propagate::retrace``."""

    IMPURE = _RETRACE["IMPURE"]
    KEEPS_VALUE = _RETRACE["KEEPS_VALUE"]


class Special(enum.IntEnum):
    """``special`` column codes (0: none, codes past these: other special dtypes); values from
    ``propagate::special``."""

    INT48 = _SPECIAL["INT48"]


# The methods whose behaviour the planner reproduces: a pass resolving any of them elsewhere
# than the reference stock class is not planned.
_RULES = (
    "_propagate",
    "_validated_next_nodes",
    "_advance_through_next_node",
    "_can_move_through_elementwise",
    "_can_cross_next_nodes",
    "_get_next_nodes",
    "_get_prev_nodes",
    "is_swappable",
    "is_elementwise",
    "is_transparent",
    "is_multi_input_elementwise",
    "blocks_crossing",
    "blocks_moving",
    "tolerates_shape_after_move",
    "_shape_seen_by_next_node",
    "_maybe_swap_args",
    "_maybe_swap_permute_args",
    "_maybe_swap_view_args",
    "_maybe_split_fork",
    "_apply_fork_split",
    "_maybe_split_upwards_cat_fanout",
    "_move_node",
    "_mark_stale_region",
    "_mark_downstream_nodes_stale",
    "_dim_arg",
)
_UP_RULES = (
    "_maybe_swap_reduction_view_args",
    "_maybe_swap_slice_view_args",
    "_map_slice_dim",
    "_valid_slice_interval",
)
_DOWN_RULES = ("_plan_fork_split", "_can_split_through_elementwise")
_TOSA_RULES = (
    "_is_per_tensor_rescale",
    "_node_or_inputs_are_int48",
    "_is_unsafe_table_operand_shape",
)


def _references() -> list[tuple[str, bool, type]]:
    return [
        ("down", True, _stock_class(_arm.PropagateViewCopyPermuteDownPass)),
        ("up", True, _stock_class(_arm.PropagateViewCopyPermuteUpPass)),
        ("down", False, _stock_class(_generic.PropagateViewCopyPermuteDownPass)),
        ("up", False, _stock_class(_generic.PropagateViewCopyPermuteUpPass)),
    ]


def scan_config(pass_: Any) -> tuple[str, bool] | str:
    """(direction, tosa) of the stock configuration ``pass_`` runs, or why it has none."""
    cls = type(pass_)
    for direction, tosa, ref in _references():
        names = _RULES + (_UP_RULES if direction == "up" else _DOWN_RULES)
        names += _TOSA_RULES if tosa else ()
        if all(getattr(cls, n, None) is getattr(ref, n, None) for n in names):
            return direction, tosa
    return "pass overrides a propagation rule"


def _classifier(pass_: Any, tosa: bool) -> Any:
    edge = exir_ops.edge.aten
    tosa_ops = exir_ops.backend.tosa if tosa else None

    def classify(target: Any) -> int:
        bits = Cls(0)
        if target in pass_._permute_targets:
            bits |= Cls.PERMUTE
        if target in (pass_._VIEW_TARGET, pass_._VIEW_DEFAULT_TARGET):
            bits |= Cls.VIEW
        if target in pass_._TRANSPARENT_TARGETS:
            bits |= Cls.TRANSPARENT
        if is_pointwise(target):
            bits |= Cls.ELEMENTWISE
        if target in pass_._REDUCTION_TARGETS:
            bits |= Cls.REDUCTION
        if target == edge.slice_copy.Tensor:
            bits |= Cls.SLICE
        if target == edge.cat.default:
            bits |= Cls.CAT
        if tosa_ops is not None:
            if target == tosa_ops.TABLE.default:
                bits |= Cls.TOSA_TABLE
            if target == tosa_ops.RESCALE.default:
                bits |= Cls.TOSA_RESCALE
            if target == tosa_ops.SCATTER.default:
                bits |= Cls.TOSA_SCATTER
        return int(bits)

    return classify


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_int_seq(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(map(_is_int, v))


# Plain ints: IntFlag arithmetic costs more than the rest of a node's export.
_PERMUTE_OR_VIEW = int(Cls.PERMUTE | Cls.VIEW)
_REDUCTION = int(Cls.REDUCTION)
_SLICE = int(Cls.SLICE)
_RESCALE = int(Cls.TOSA_RESCALE)
_IARG_CLASSES = int(Cls.PERMUTE | Cls.VIEW | Cls.REDUCTION | Cls.SLICE | Cls.CAT)
_EXACT = int(Form.EXACT)
_DIM_SCALAR = int(Form.DIM_SCALAR)
_KEEPDIM_POSITIONAL_TRUE = int(Form.KEEPDIM_POSITIONAL_TRUE)
_RESCALE_PER_TENSOR_ARGS = int(Form.RESCALE_PER_TENSOR_ARGS)
_ARG1_TUPLE = int(Form.ARG1_TUPLE)
_CAT = int(Cls.CAT)


def arg_form(node: fx.Node, cls: int) -> int:
    """The ``Form`` bits of one node's args (what the table's integer encoding leaves out)."""
    args, kwargs = node.args, node.kwargs
    f = 0
    head = len(args) >= 1 and isinstance(args[0], fx.Node)
    if cls & _PERMUTE_OR_VIEW:
        if head and len(args) == 2 and not kwargs and _is_int_seq(args[1]):
            f |= _EXACT
            if isinstance(args[1], tuple):
                f |= _ARG1_TUPLE
    elif cls & _REDUCTION:
        if len(args) >= 2 and _is_int(args[1]):
            f |= _DIM_SCALAR
        if len(args) > 2 and args[2] is True:
            f |= _KEEPDIM_POSITIONAL_TRUE
        keep = args[2] if len(args) > 2 else kwargs.get("keepdim")
        if (
            head
            and len(args) >= 2
            and (_is_int(args[1]) or _is_int_seq(args[1]))
            and "dim" not in kwargs
            and (keep is None or isinstance(keep, bool))
        ):
            f |= _EXACT
    elif cls & _SLICE:
        if head and 4 <= len(args) <= 5 and not kwargs and all(map(_is_int, args[1:])):
            f |= _EXACT | _DIM_SCALAR
    elif cls & _CAT:
        dim = args[1] if len(args) >= 2 else kwargs.get("dim", 0)
        if (
            1 <= len(args) <= 2
            and isinstance(args[0], (list, tuple))
            and all(isinstance(a, fx.Node) for a in args[0])
            and set(kwargs) <= {"dim"}
            and _is_int(dim)
        ):
            f |= _EXACT
    if cls & _RESCALE and len(args) >= 3:
        scales = args[2]
        if not isinstance(scales, Sequence) or len(scales) == 1:
            f |= _RESCALE_PER_TENSOR_ARGS
    return f


def _special_key() -> tuple[str, Any]:
    from executorch.backends.arm.tosa.mapping import TosaSpecialDtype

    return TosaSpecialDtype.meta_key(), TosaSpecialDtype.INT48


_get_meta = operator.attrgetter("meta")
_get_val = operator.methodcaller("get", "val")
_FORM_CLASSES = Cls.PERMUTE | Cls.VIEW | Cls.REDUCTION | Cls.SLICE | Cls.CAT | Cls.TOSA_RESCALE


@dataclasses.dataclass
class ScanCache:
    """What one accelerated call's scans can reuse: per target (class bits, extra bits), and
    per node (args, kwargs, class, iargs row, form) of its last export, valid while the node's
    args and kwargs are the same objects. Holds graph nodes: keep it for one call only."""

    targets: dict[Any, tuple[int, int]] = dataclasses.field(default_factory=dict)
    args: dict[fx.Node, tuple[Any, ...]] = dataclasses.field(default_factory=dict)
    #: ``is_impure()`` per call target.
    impure: dict[Any, bool] = dataclasses.field(default_factory=dict)


# Target bits per pass configuration, shared by calls (targets are long-lived op overloads).
_TARGET_BITS: dict[tuple[Any, ...], dict[Any, tuple[int, int]]] = {}


def _shared_target_bits(pass_: Any, tosa: bool) -> dict[Any, tuple[int, int]]:
    key = (type(pass_), tosa, frozenset(pass_._targets), frozenset(pass_._permute_targets))
    return _TARGET_BITS.setdefault(key, {})


def _extra_bits(pass_: Any, target: Any) -> int:
    bits = Extra(0)
    if target in pass_._targets:
        bits |= Extra.SCAN_TARGET
    if target == pass_._VIEW_TARGET:
        bits |= Extra.VIEW_COPY
    if target in pass_._ARG_UPDATE_TARGETS:
        bits |= Extra.ARG_UPDATE
    if target == pass_._PERMUTE_TARGET:
        bits |= Extra.PERMUTE_TARGET
    return int(bits)


def export_scan_input(
    graph_module: fx.GraphModule, pass_: Any, tosa: bool, cache: ScanCache | None = None
) -> tuple[NodeTable, np.ndarray, np.ndarray, np.ndarray] | str:
    """The node table and the planner's columns: (table, target_extra, special, form), or
    why the graph cannot be exported (a symbolic dim).

    Same columns as ``table.export_table`` where the planner reads them (op, target, class,
    inputs/users in fx order, rank/shape, integer args, INT48/NON_TENSOR/OPAQUE_ARGS flags),
    built with C-level iteration; dtype and the other flags are left empty (not read).
    """
    if cache is None:
        cache = ScanCache()
    if not cache.targets:
        cache.targets = _shared_target_bits(pass_, tosa)
    targets = cache.targets
    table = export_light(graph_module, _cached_classifier(pass_, tosa, targets))
    extra = np.fromiter((targets[t][1] for t in table.targets), np.uint32, len(table.targets))
    metas = list(map(_get_meta, table.nodes))
    shapes = _shape_columns(metas)
    if shapes is None:
        return "symbolic shape"
    rank, shape_ptr, shape, flags = shapes
    special = _special_column(metas)
    flags[special == int(Special.INT48)] |= np.uint32(Flag.INT48)
    rows, form = _int_args_and_forms(table, cache.args)
    table = with_int_args(table, rows)
    table = dataclasses.replace(
        table,
        rank=rank,
        shape_ptr=shape_ptr,
        shape=shape,
        flags=table.flags | flags,
        light=False,
    )
    return table, extra, special, form


def _cached_classifier(
    pass_: Any, tosa: bool, targets: dict[Any, tuple[int, int]]
) -> Callable[[Any], int]:
    """The class bits of a target, its (class, extra) bits computed once into ``targets``."""
    classify = _classifier(pass_, tosa)

    def cls_of(target: Any) -> int:
        bits = targets.get(target)
        if bits is None:
            bits = targets[target] = (classify(target), _extra_bits(pass_, target))
        return bits[0]

    return cls_of


def _shape_columns(
    metas: list[dict[str, Any]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(rank, shape_ptr, shape, NON_TENSOR flags) of the nodes' ``val``; None when a dim is
    not an int."""
    n = len(metas)
    vals = list(map(_get_val, metas))
    shapes = [v.shape if isinstance(v, torch.Tensor) else None for v in vals]
    tensor = np.fromiter(map(operator.is_not, shapes, itertools.repeat(None)), bool, n)
    dims = [s if s is not None else () for s in shapes]
    rank = np.fromiter(map(len, dims), np.int32, n)
    # The call declined symbolic shapes; a value a re-trace made symbolic declines the scan.
    if not set(map(type, itertools.chain.from_iterable(dims))) <= {int}:
        return None
    shape = np.fromiter(itertools.chain.from_iterable(dims), np.int64, int(rank.sum()))
    rank[~tensor] = -1
    shape_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.where(tensor, rank, 0), out=shape_ptr[1:])
    flags = np.where(tensor, np.uint32(0), np.uint32(Flag.NON_TENSOR)).astype(np.uint32)
    return rank, shape_ptr, shape, flags


def _special_column(metas: list[dict[str, Any]]) -> np.ndarray:
    """Each node's special-dtype code: 0 for none, ``Special.INT48``, then one code per other
    special dtype in order of first appearance."""
    n = len(metas)
    key, int48 = _special_key()
    special_vals = list(map(operator.methodcaller("get", key), metas))
    special = np.zeros(n, dtype=np.int32)
    codes: dict[Any, int] = {int48: int(Special.INT48)}
    marked = np.fromiter(map(operator.is_not, special_vals, itertools.repeat(None)), bool, n)
    for i in np.flatnonzero(marked).tolist():
        value = special_vals[i]
        code = codes.get(value)
        if code is None:
            code = codes[value] = len(codes) + 1
        special[i] = code
    return special


def _int_args_and_forms(
    table: NodeTable, arg_cache: dict[fx.Node, tuple[Any, ...]]
) -> tuple[list[list[int] | None], np.ndarray]:
    """(integer-argument rows, form bits) of the nodes whose class has them; reused from the
    previous scan of this graph (``arg_cache``) while the node's args and kwargs are the same
    objects."""
    nodes = table.nodes
    n = len(nodes)
    form = np.zeros(n, dtype=np.uint32)
    rows: list[list[int] | None] = [[]] * n
    # Target -1 (no interned target) reads the appended 0; the table may intern no target.
    node_cls = np.append(table.target_class, np.zeros(1, table.target_class.dtype))[table.target]
    for i in np.flatnonzero(node_cls & np.uint32(_FORM_CLASSES)).tolist():
        c = int(node_cls[i])
        node = nodes[i]
        args, kwargs = node.args, node.kwargs
        hit = arg_cache.get(node)
        if hit is not None and hit[0] is args and hit[1] is kwargs and hit[2] == c:
            rows[i], form[i] = hit[3], hit[4]
            continue
        row = encode_iargs(node, c) if c & _IARG_CLASSES else []
        f = arg_form(node, c)
        arg_cache[node] = (args, kwargs, c, row, f)
        rows[i], form[i] = row, f
    return rows, form


def apply_edits(pass_: Any, nodes: list[fx.Node], edits: Sequence[_native.Edit]) -> None:
    """Apply a planned scan's edits in order, as stock makes them."""
    for edit in edits:
        kind = type(edit)
        if kind is _native.ArgsEdit:
            node = nodes[edit.node]
            args, pos, values = node.args, edit.pos, edit.values
            node.args = (*args[:pos], *values, *args[pos + len(values) :])
        elif kind is _native.MoveEdit:
            pass_._move_node(nodes[edit.node], nodes[edit.frontier], nodes[edit.previous_frontier])
        elif kind is _native.CatFanoutEdit:
            cat, created = nodes[edit.cat], edit.created
            if not pass_._maybe_split_upwards_cat_fanout(nodes[edit.node], cat):
                raise PlanMismatch("planned cat fan-out did not apply")
            new_inputs = cat.args[0]
            if len(new_inputs) != len(created) or created[:1] != [len(nodes)]:
                raise PlanMismatch("cat fan-out created other nodes than planned")
            nodes.extend(new_inputs)
        elif kind is _native.ForkSplitEdit:
            _apply_fork_split(pass_, nodes, edit)
        else:
            raise PlanMismatch(f"unknown edit {edit!r}")


def _apply_fork_split(pass_: Any, nodes: list[fx.Node], edit: _native.ForkSplitEdit) -> None:
    """Stock's ``_apply_fork_split`` with the plan rebuilt as stock's ``_plan_fork_split``
    returns it; the transforms it creates (one right after each branch) get the next ids."""
    node = nodes[edit.node]
    branches = edit.branches
    splits = []
    for branch in branches:
        next_node = nodes[branch.next_node]
        arg_update = None
        if branch.arg_update is not None:
            pos, values = branch.arg_update
            args = next_node.args
            arg_update = (node.args, (*args[:pos], *values, *args[pos + len(values) :]))
        splits.append(_ForkBranchSplit(next_node, tuple(branch.source_shape), arg_update))
    pass_._apply_fork_split(node, nodes[edit.frontier], nodes[edit.producer], tuple(splits))
    for branch in branches:
        if branch.created != len(nodes):
            raise PlanMismatch(f"fork split created node {branch.created}, expected {len(nodes)}")
        nodes.append(nodes[branch.next_node].next)


_IMPURE = int(Retrace.IMPURE)
_KEEPS_VALUE = int(Retrace.KEEPS_VALUE)


def retrace_column(table: NodeTable, cache: ScanCache) -> np.ndarray:
    """Per node: fx's ``is_impure()`` (what the DCE keeps) and whether ``ArmPass`` keeps the
    node's old value on a re-trace (a quantized op without a fake kernel)."""
    from arm_accel.pipeline.passes.propagate.retrace import (
        _ops_without_quantized_fake_kernel,
        arm_keeps_value,
    )

    nodes = table.nodes
    bits = np.zeros(len(nodes), dtype=np.uint8)
    impure = cache.impure
    keeps = _ops_without_quantized_fake_kernel()
    for i, node in enumerate(nodes):
        target = node.target
        if node.op == "call_function" and not isinstance(target, torch._ops.HigherOrderOperator):
            # Purity of a call depends only on its target (the arguments matter for
            # higher-order ops alone).
            flag = impure.get(target)
            if flag is None:
                flag = impure[target] = node.is_impure()
            if arm_keeps_value(node, keeps):
                bits[i] = _KEEPS_VALUE
        else:
            flag = node.is_impure()
        if flag:
            bits[i] |= _IMPURE
    return bits


def mirror_retrace(
    graph: fx.Graph, nodes: list[fx.Node], between: _native.Between, pass_name: str
) -> None:
    """What stock's re-trace after a scan changes that the next scan reads, as the native
    model computed it: the DCE, users dicts in graph order, new shapes (``new_empty`` values,
    as stock's own edits write them; the run's closing re-trace recomputes them exactly); and
    the names and provenance it gives (:func:`mirror_names_and_provenance`)."""
    for i in between.dead:
        graph.erase_node(nodes[i])
    mirror_names_and_provenance(graph, pass_name)
    for i, order in between.users:
        d = nodes[i].users
        if set(d) != {nodes[u] for u in order}:
            raise PlanMismatch(f"scan run: users of {nodes[i].name} differ from the model")
        d.clear()
        d.update(dict.fromkeys(nodes[u] for u in order))
    for write in between.shapes:
        node = nodes[write.node]
        node.meta = {**node.meta, "val": nodes[write.base].meta["val"].new_empty(write.shape)}


@dataclasses.dataclass
class ScanRun:
    """Consecutive scans planned natively and applied. ``modified``: some scan modified the
    graph (re-trace it); ``fixed_point``: the last scan modified nothing (go on to the
    fusions); ``scans``: how many scans ran; ``retraces``: how many of them modified (stock
    re-traces after each); ``model_at_end``: no edit followed the last modelled re-trace (the
    graph holds the model's values: check them at the closing re-trace)."""

    modified: bool
    fixed_point: bool
    scans: int
    retraces: int
    model_at_end: bool = False


def run_scans(
    pass_: Any,
    graph_module: fx.GraphModule,
    name: str,
    cache: ScanCache | None = None,
    max_scans: int = 1,
    verify: Callable[[], None] | None = None,
) -> ScanRun | None:
    """Up to ``max_scans`` stock scans planned natively with stock's re-traces between them
    modelled, applied; None when the planner declined the first scan (nothing was edited: run
    stock's walk). More than one scan needs values a re-trace would leave unchanged.
    ``cache``: shared by the scans of one call. ``verify``: called before the last scan of a
    run that ends on an edit (its modelled inputs are never re-traced otherwise), to check the
    model against a re-trace. Exporter and planner failures raise (tagged stage ``plan``),
    edits that do not apply as planned raise ``PlanMismatch`` (stage ``apply``): the caller
    rolls the call back."""
    config = scan_config(pass_)
    if isinstance(config, str):
        counters.record_scan(name, config)
        logger.info("%s: scan not planned (%s); stock's walk runs it", name, config)
        return None
    direction, tosa = config
    if cache is None:
        cache = ScanCache()
    with stage("plan"):
        exported = export_scan_input(graph_module, pass_, tosa, cache)
        if isinstance(exported, str):
            counters.record_scan(name, exported)
            return None
        exported = (*exported, retrace_column(exported[0], cache))
        answer = _native.plan_propagation_run(*exported, direction, tosa, max_scans)
    if isinstance(answer, _native.Decline):
        counters.record_scan(name, answer.reason)
        logger.info(
            "%s: scan declined by the native planner (%s); stock's walk runs it",
            name,
            answer.reason,
        )
        return None
    scans, fixed_point = answer.scans, answer.fixed_point
    table = exported[0]
    nodes = table.nodes
    modified = False
    retraces = 0
    last = len(scans) - 1
    model_at_end = fixed_point or scans[last].after is not None
    with stage("apply"):
        for j, step in enumerate(scans):
            if j == last and j > 0 and not model_at_end and verify is not None:
                verify()
            apply_edits(pass_, nodes, step.edits)
            counters.record_scan(name, None)
            modified |= step.modified
            retraces += step.modified
            if step.after is not None:
                mirror_retrace(graph_module.graph, nodes, step.after, provenance_pass_name(pass_))
    counters.record_scan_run(name)
    return ScanRun(modified, fixed_point, len(scans), retraces, model_at_end)


def run_scan(
    pass_: Any, graph_module: fx.GraphModule, name: str, cache: ScanCache | None = None
) -> bool | None:
    """One stock scan planned natively and applied; its ``iteration_modified``, or None when
    the planner declined (nothing was edited: run stock's walk)."""
    run = run_scans(pass_, graph_module, name, cache, max_scans=1)
    return None if run is None else run.modified
