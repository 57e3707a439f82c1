"""One propagation scan decided in Rust (``rust/propagate.rs``), applied here with stock's edits.

Stock's scan is ``for node in graph order: skip stale; if target in _targets and has users:
_propagate(node, stale)``. ``run_scan`` exports the graph to the node table plus the planner's
own columns (per-target pass configuration, per-node special dtype and argument form), asks the
native planner for the scan's ordered edit list, and applies it: ``args`` rewrites exactly as
stock builds them and ``_move_node`` moves through the pass's own (stock) method. When the
planner declines -- an argument form the table does not carry, a rule not ported yet, a place
where stock raises -- nothing was edited and the caller runs stock's walk for that scan.

Only passes whose decision methods are exactly stock's (the Arm TOSA configuration or the
backend-neutral one) are planned: a subclass overriding a rule declines every scan.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import numpy as np
from executorch.backends.arm._passes import propagate_view_copy_permute_pass as _arm
from executorch.backends.transforms import propagate_view_copy_permute_pass as _generic
from executorch.exir.dialects._ops import ops as exir_ops
from torch import fx

from arm_accel import _native, stats
from arm_accel.passes.base import _stock_class
from arm_accel.table import Cls, NodeTable, export_table, is_pointwise

#: Plan scans natively; False runs stock's walk for every scan (for benchmarks and tests).
ENABLED = True


class Form(enum.IntFlag):
    """Per-node argument-form bits; mirrors ``propagate::form``."""

    EXACT = 1 << 0
    DIM_SCALAR = 1 << 1
    KEEPDIM_POSITIONAL_TRUE = 1 << 2
    RESCALE_PER_TENSOR_ARGS = 1 << 3


class Extra(enum.IntFlag):
    """Per-target planner bits; mirrors ``propagate::extra``."""

    SCAN_TARGET = 1 << 0
    VIEW_COPY = 1 << 1
    ARG_UPDATE = 1 << 2


SPECIAL_INT48 = 1

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
    "_maybe_split_upwards_cat_fanout",
    "_move_node",
    "_mark_stale_region",
    "_mark_downstream_nodes_stale",
    "_dim_arg",
)
_UP_RULES = ("_maybe_swap_reduction_view_args", "_maybe_swap_slice_view_args", "_map_slice_dim")
_DOWN_RULES = ("_plan_fork_split", "_can_split_through_elementwise")
_TOSA_RULES = ("_is_per_tensor_rescale", "_node_or_inputs_are_int48")


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


def arg_form(node: fx.Node, cls: int) -> int:
    """The ``Form`` bits of one node's args (what the table's integer encoding leaves out)."""
    args, kwargs = node.args, node.kwargs
    f = Form(0)
    head = len(args) >= 1 and isinstance(args[0], fx.Node)
    if cls & (Cls.PERMUTE | Cls.VIEW):
        if head and len(args) == 2 and not kwargs and _is_int_seq(args[1]):
            f |= Form.EXACT
    elif cls & Cls.REDUCTION:
        if len(args) >= 2 and _is_int(args[1]):
            f |= Form.DIM_SCALAR
        if len(args) > 2 and args[2] is True:
            f |= Form.KEEPDIM_POSITIONAL_TRUE
        keep = args[2] if len(args) > 2 else kwargs.get("keepdim")
        if (
            head
            and len(args) >= 2
            and (_is_int(args[1]) or _is_int_seq(args[1]))
            and "dim" not in kwargs
            and (keep is None or isinstance(keep, bool))
        ):
            f |= Form.EXACT
    elif cls & Cls.SLICE:
        if head and 4 <= len(args) <= 5 and not kwargs and all(map(_is_int, args[1:])):
            f |= Form.EXACT | Form.DIM_SCALAR
    if cls & Cls.TOSA_RESCALE and len(args) >= 3:
        scales = args[2]
        if not isinstance(scales, Sequence) or len(scales) == 1:
            f |= Form.RESCALE_PER_TENSOR_ARGS
    return int(f)


def _special_key() -> tuple[str, Any]:
    from executorch.backends.arm.tosa.mapping import TosaSpecialDtype

    return TosaSpecialDtype.meta_key(), TosaSpecialDtype.INT48


def export_scan_input(
    graph_module: fx.GraphModule, pass_: Any, tosa: bool
) -> tuple[NodeTable, np.ndarray, np.ndarray, np.ndarray]:
    """The node table and the planner's columns: (table, target_extra, special, form)."""
    table = export_table(graph_module, classifier=_classifier(pass_, tosa))
    extra = np.zeros(len(table.targets), dtype=np.uint32)
    for code, target in enumerate(table.targets):
        bits = Extra(0)
        if target in pass_._targets:
            bits |= Extra.SCAN_TARGET
        if target == pass_._VIEW_TARGET:
            bits |= Extra.VIEW_COPY
        if target in pass_._ARG_UPDATE_TARGETS:
            bits |= Extra.ARG_UPDATE
        extra[code] = bits
    key, int48 = _special_key()
    codes: dict[Any, int] = {None: 0, int48: SPECIAL_INT48}
    n = len(table)
    special = np.zeros(n, dtype=np.int32)
    form = np.zeros(n, dtype=np.uint32)
    classes = table.target_class
    for i, node in enumerate(table.nodes):
        value = node.meta.get(key)
        if value is not None:
            code = codes.get(value)
            if code is None:
                code = codes[value] = len(codes)
            special[i] = code
        t = table.target[i]
        if t >= 0 and classes[t]:
            form[i] = arg_form(node, int(classes[t]))
    return table, extra, special, form


def apply_edits(pass_: Any, nodes: Sequence[fx.Node], edits: Sequence[tuple[Any, ...]]) -> None:
    """Apply a planned scan's edits in order, as stock makes them."""
    for edit in edits:
        if edit[0] == "args":
            _, i, pos, values = edit
            node = nodes[i]
            args = node.args
            node.args = (*args[:pos], *values, *args[pos + len(values) :])
        else:
            _, i, frontier, previous = edit
            pass_._move_node(nodes[i], nodes[frontier], nodes[previous])


def run_scan(pass_: Any, graph_module: fx.GraphModule, name: str) -> bool | None:
    """One stock scan planned natively and applied; its ``iteration_modified``, or None when
    the planner declined (nothing was edited: run stock's walk)."""
    if not ENABLED:
        return None
    config = scan_config(pass_)
    if isinstance(config, str):
        stats.record_scan(name, config)
        return None
    direction, tosa = config
    table, extra, special, form = export_scan_input(graph_module, pass_, tosa)
    answer = _native.plan_propagation_scan(table, extra, special, form, direction, tosa)
    if answer[0] == "decline":
        stats.record_scan(name, answer[1])
        return None
    _, modified, edits = answer
    apply_edits(pass_, table.nodes, edits)
    stats.record_scan(name, None)
    return bool(modified)
