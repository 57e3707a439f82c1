"""Virtual re-trace: what an ``ExportPass`` re-trace changes that later decisions read, and
nothing else.

Stock's propagation re-traces the whole graph after every scan, only to refresh ``meta["val"]``.
:class:`VirtualRetracer` reproduces incrementally what later scans and fusions read of that:
the DCE, the values of edited nodes and of those downstream of a changed value, every ``users``
dict in graph order, names and provenance (:func:`mirror_names_and_provenance`). Anything it
does not model raises ``VirtualRetraceUnsupported`` and a real re-trace runs, as stock's would.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from executorch.exir.dialects.edge._ops import EdgeOpOverload
from torch import fx
from torch._subclasses.fake_tensor import FakeTensor

from arm_accel.fxstock import freshness, names, order
from arm_accel.runtime import fake_memo, identity

_local = threading.local()


class VirtualRetraceUnsupported(Exception):
    """The graph holds something the virtual re-trace does not model."""


# ---------------------------------------------------------------------------------------------
# Re-trace counting


class RetraceCounter:
    def __init__(self) -> None:
        self.count = 0


@contextmanager
def count_retraces() -> Iterator[RetraceCounter]:
    """Count calls of ``_ExportPassBase.call`` (every ExportPass re-trace) inside the block.

    Nests: every active counter of this thread sees each re-trace.
    """
    from executorch.exir.pass_base import _ExportPassBase

    counter = RetraceCounter()
    stack: list[RetraceCounter] | None = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    if not stack and not getattr(_ExportPassBase.call, "_arm_accel_counting", False):
        original = _ExportPassBase.call

        def call(self: Any, graph_module: fx.GraphModule) -> Any:
            for c in getattr(_local, "stack", ()):
                c.count += 1
            return original(self, graph_module)

        call._arm_accel_counting = True  # type: ignore[attr-defined]
        call._arm_accel_original = original  # type: ignore[attr-defined]
        _ExportPassBase.call = call  # type: ignore[method-assign]
        installed = True
    else:
        installed = False
    stack.append(counter)
    try:
        yield counter
    finally:
        stack.remove(counter)
        if installed:
            _ExportPassBase.call = _ExportPassBase.call._arm_accel_original  # type: ignore


# ---------------------------------------------------------------------------------------------
# Virtual re-trace


def _ops_without_quantized_fake_kernel() -> set[Any]:
    from executorch.exir.dialects._ops import ops as exir_ops

    return {exir_ops.edge.aten.bmm.default, exir_ops.edge.aten.leaky_relu.default}


def arm_keeps_value(node: fx.Node, special: set[Any]) -> bool:
    """``ArmPass.call_operator`` keeps the node's old value shape on a re-trace: a quantized op
    (``special``: ``_ops_without_quantized_fake_kernel()``) without a fake kernel."""
    return node.target in special and len(node.meta.get("input_qparams", {})) > 0


def _same_tensor_meta(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return (
            a.shape == b.shape
            and a.dtype == b.dtype
            and a.stride() == b.stride()
            and a.device == b.device
        )
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same_tensor_meta(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def has_symbolic_shapes(graph_module: fx.GraphModule) -> bool:
    for node in graph_module.graph.nodes:
        val = node.meta.get("val")
        vals = val if isinstance(val, (tuple, list)) else (val,)
        for v in vals:
            if isinstance(v, torch.Tensor) and any(not isinstance(d, int) for d in v.shape):
                return True
            if isinstance(v, torch.SymInt):
                return True
    return False


#: Node kinds whose re-traced name and provenance :func:`mirror_names_and_provenance` models.
NAMED_OPS = frozenset({"placeholder", "call_function", "output"})


def unmodelled_node_kind(graph_module: fx.GraphModule) -> str | None:
    """A node kind in the graph whose re-traced name or provenance is not modelled, if any."""
    for node in graph_module.graph.nodes:
        if node.op not in NAMED_OPS:
            return node.op
    return None


def provenance_pass_name(pass_: Any) -> str:
    """The ``pass_name`` of the ``NodeSource`` records ``pass_``'s re-trace writes."""
    return f"Interpreter_{type(pass_).ExportInterpreter.__name__}"


def mirror_names_and_provenance(graph: fx.Graph, pass_name: str) -> None:
    """What an ``ExportPass`` re-trace does to provenance and names, which later edits and the
    closing re-trace read. ``set_current_meta`` gives each interpreted node with meta and no
    ``from_node`` of its own ``[NodeSource(node, pass_name, CREATE)]``: the name and target it
    has now (the closing re-trace would record them after later renames and retargets). The
    re-traced graph names its nodes afresh in graph order: nodes created after it draw from that
    name space. Placeholders keep their old meta (``ExportPass.placeholder``)."""
    from torch.fx import traceback as fx_traceback

    nodes = list(graph.nodes)
    for node in nodes:
        if node.op not in NAMED_OPS:
            raise VirtualRetraceUnsupported(f"re-traced name of a {node.op} node")
    create = fx_traceback.NodeSourceAction.CREATE
    candidates: list[str] = []
    rebuilt: dict[Any, str] = {}
    for node in nodes:
        if node.op == "placeholder":
            candidates.append(node.target)
            continue
        if node.meta and "from_node" not in node.meta:
            # A new dict: edits may have given several nodes one meta object.
            source = fx_traceback.NodeSource(node, pass_name, create)
            node.meta = {**node.meta, "from_node": [source]}
        candidate = rebuilt.get(node.target)
        if candidate is None:
            candidate = rebuilt[node.target] = names.rebuilt_name_candidate(graph, node.target)
        candidates.append(candidate)
    names.rename_fresh(graph, nodes, candidates)
    identity.renew(graph)  # the re-trace's new graph: later records name it


class VirtualRetracer:
    """Tracks edits between two points and replays what a re-trace would change."""

    def __init__(self, graph_module: fx.GraphModule, *, full: bool = False) -> None:
        #: Recompute every value, as a real re-trace does (needed once per pass call: the input
        #: may hold stale values, which a real re-trace would refresh and later decisions read).
        self.full = full
        self.graph_module = graph_module
        self.fake_mode = self._find_fake_mode(graph_module)
        self._special = _ops_without_quantized_fake_kernel()
        self._arm_pass = True
        #: Shape mismatches found by the last ``apply(check=True)``.
        self.mismatches = 0
        self.snapshot()

    @staticmethod
    def _find_fake_mode(graph_module: fx.GraphModule) -> Any:
        for node in graph_module.graph.nodes:
            val = node.meta.get("val")
            if isinstance(val, FakeTensor):
                return val.fake_mode
        raise VirtualRetraceUnsupported("no fake tensor in graph")

    def snapshot(self) -> None:
        # fx replaces the args/kwargs containers on every edit; a pass that writes a new
        # meta["val"] (fork split, fusions) replaces the value: all three are compared by
        # identity.
        self._seen: dict[fx.Node, tuple[Any, Any, Any]] = {
            node: (node.args, node.kwargs, node.meta.get("val"))
            for node in self.graph_module.graph.nodes
        }

    def _fake_val(self, node: Any) -> Any:
        """``_compute_val``, with any fake-run error turned into a decline (the real re-trace
        raises too, or knows better: let it run)."""
        try:
            return self._compute_val(node)
        except VirtualRetraceUnsupported:
            raise
        except Exception as exc:
            raise VirtualRetraceUnsupported(
                f"fake run of {node.target} failed: {type(exc).__name__}"
            ) from exc

    def _compute_val(self, node: fx.Node) -> Any:
        target = node.target
        if node.op != "call_function":
            raise VirtualRetraceUnsupported(f"edited {node.op} node")

        def data(n: fx.Node) -> Any:
            if "val" not in n.meta:
                raise VirtualRetraceUnsupported(f"input {n.op} without val")
            return n.meta["val"]

        args = fx.node.map_arg(node.args, data)
        kwargs = fx.node.map_arg(node.kwargs, data)
        if target == operator.getitem:
            value, key = args
            return value[key]
        if not isinstance(
            target, (EdgeOpOverload, torch._ops.OpOverload, torch._ops.OpOverloadPacket)
        ):
            raise VirtualRetraceUnsupported(f"edited node with target {target}")
        if self._arm_pass and arm_keeps_value(node, self._special):
            # ArmPass.call_operator: no quantized fake kernel; keeps the old val's shape.
            old_val = node.meta["val"]
            output_qparams = node.meta.get("output_qparams", {})
            dtype = (
                next(iter(output_qparams.values())).dtype
                if len(output_qparams) > 0
                else old_val.dtype
            )
            return torch.empty_like(old_val, dtype=dtype)
        return target(*args, **kwargs)

    @contextmanager
    def _faking(self) -> Iterator[None]:
        """The graph's fake mode (accepting real tensors, as a re-trace's fake runs do) and
        the python dispatcher; the mode's memo serves the quantize/dequantize and TOSA calls
        (:func:`fake_memo.dispatching`, as in the engine's re-traces)."""
        from torch._dispatch.python import enable_python_dispatcher

        fake_mode = self.fake_mode
        prev_allow = fake_mode.allow_non_fake_inputs
        fake_mode.allow_non_fake_inputs = True
        try:
            with fake_mode, enable_python_dispatcher(), fake_memo.dispatching():
                yield
        finally:
            fake_mode.allow_non_fake_inputs = prev_allow

    def stale_nodes(self) -> list[fx.Node]:
        """Nodes whose ``meta["val"]`` a re-trace would change, given their inputs' values
        (quantized ops without a fake kernel excepted: ``apply`` always recomputes those).

        A real re-trace fixes every stale value; an incremental one only those downstream of
        an edit. So this must be empty before incremental re-traces can stand in for real ones.
        Raises ``VirtualRetraceUnsupported`` for what it cannot compute."""
        stale = []
        with self._faking():
            for node in self.graph_module.graph.nodes:
                if node.op != "call_function" or node.target in self._special:
                    continue
                new_val = self._fake_val(node)
                if not _same_tensor_meta(node.meta.get("val"), new_val):
                    stale.append(node)
        return stale

    def apply(
        self,
        *,
        pass_name: str = "Interpreter_ExportInterpreter",
        prologue: bool = True,
        arm_pass: bool = True,
        check: bool = False,
    ) -> int:
        """Refresh vals of edited nodes and downstream, order users. Returns the number of
        recomputed nodes.

        ``prologue``: DCE and lint first, as the propagation pass's ``_retrace`` does. A bare
        ``ExportPass.call`` (the closing re-trace of a fusion) does neither: it re-creates dead
        nodes too, and so must we keep them (they are users later decisions count).
        ``arm_pass``: the re-tracing pass is an ``ArmPass`` (its ``call_operator`` keeps the old
        shape for quantized ops without a fake kernel); a plain ``ExportPass`` fake-runs them.
        ``pass_name``: of the provenance the re-trace records (:func:`provenance_pass_name`;
        the default is ``ExportPass``'s).
        ``check``: count in ``self.mismatches`` what the graph held that the re-trace changes
        -- nodes the DCE erases, recomputed values whose shape, dtype or strides differ from
        the value they had, users dicts not in graph order (the between-scan model claims to
        have written all three as the re-trace leaves them).
        """
        graph = self.graph_module.graph
        self.mismatches = 0
        if prologue:
            self._prologue(graph, check)
        mirror_names_and_provenance(graph, pass_name)
        self._arm_pass = arm_pass
        nodes = list(graph.nodes)
        with self._faking():
            recomputed, dispatched = self._refresh_values(nodes, check)
        # What dispatch gives for these args: a later in-place re-trace may keep it.
        freshness.note_dispatched(graph, dispatched)
        self._order_users(nodes, check)
        self.snapshot()
        return recomputed

    def _prologue(self, graph: fx.Graph, check: bool) -> None:
        """The propagation pass's ``_retrace`` prologue: DCE and lint (with ``check``, the
        erased nodes count as mismatches)."""
        before = len(graph.nodes) if check else 0
        graph.eliminate_dead_code()
        graph.lint()
        if check:
            self.mismatches += before - len(graph.nodes)

    def _refresh_values(self, nodes: list[fx.Node], check: bool) -> tuple[int, list[fx.Node]]:
        """Recompute (under ``_faking``) the vals of the nodes edited since the snapshot, those
        reading a changed value and the quantized ops without a fake kernel; returns how many
        were recomputed and those whose val dispatch gave."""
        seen = self._seen
        changed: set[fx.Node] = set()
        dispatched: list[fx.Node] = []
        recomputed = 0
        for node in nodes:
            if node.op in ("placeholder", "get_attr"):
                if node not in seen:
                    raise VirtualRetraceUnsupported(f"new {node.op}")
                continue
            if node.op == "output":
                continue
            old = seen.get(node)
            edited = (
                self.full
                or old is None
                or old[0] is not node.args
                or old[1] is not node.kwargs
                or old[2] is not node.meta.get("val")
            )
            # Quantized ops without a fake kernel get their val from ``ArmPass`` and
            # from ``ExportPass`` by different rules: always recompute them.
            special = node.target in self._special
            if not edited and not special and not any(i in changed for i in node._input_nodes):
                continue
            old_val = node.meta.get("val")
            new_val = self._fake_val(node)
            recomputed += 1
            if not isinstance(new_val, FakeTensor) and isinstance(new_val, torch.Tensor):
                raise VirtualRetraceUnsupported("non-fake tensor result")
            node.meta["val"] = new_val
            if not special:
                dispatched.append(node)
            # Downstream values were computed from the snapshot's value, whatever an
            # edit wrote since: compare with that.
            if old is None or not _same_tensor_meta(old[2], new_val):
                changed.add(node)
            if check and not _same_tensor_meta(old_val, new_val):
                self.mismatches += 1
        return recomputed, dispatched

    def _order_users(self, nodes: list[fx.Node], check: bool) -> None:
        """Every users dict in graph order, as the re-trace builds them (with ``check``, each
        one that was not counts as a mismatch)."""
        before_users = [list(node.users) for node in nodes] if check else []
        order.order_users(nodes)
        if check:
            self.mismatches += sum(
                old != list(node.users) for old, node in zip(before_users, nodes, strict=True)
            )
