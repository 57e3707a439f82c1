"""Accelerated ``PropagateViewCopyPermute{Down,Up}Pass`` (Arm/TOSA configuration).

Same decisions as stock -- the scan, ``_propagate`` and every rule are stock's own methods --
but the whole-graph re-trace stock runs after each scan only to refresh ``meta["val"]`` is
replaced by a virtual re-trace (``arm_accel.retrace.VirtualRetracer``): DCE, recompute the
values of edited nodes and of nodes downstream of a changed value, and put every ``users`` dict
in graph order. With ``ELIDE_FUSION_RETRACES`` the re-traces the in-loop fusions end with are
virtual too. One real re-trace runs at the end, exactly where stock's last one runs, so the
returned graph module is a freshly traced one like stock's.

Declines (stock pass runs, ``stats.record_fallback``): symbolic shapes, no fake tensors. If a
virtual re-trace meets something it does not model, that step falls back to a real re-trace,
which is what stock does at that point.
"""

from __future__ import annotations

import logging
import time

from executorch.backends.arm._passes.propagate_view_copy_permute_pass import (
    PropagateViewCopyPermuteDownPass as _StockDown,
)
from executorch.backends.arm._passes.propagate_view_copy_permute_pass import (
    PropagateViewCopyPermuteUpPass as _StockUp,
)
from executorch.exir.pass_base import PassResult
from torch import fx

from arm_accel import stats
from arm_accel.retrace import (
    VirtualRetracer,
    VirtualRetraceUnsupported,
    count_retraces,
    has_symbolic_shapes,
)

logger = logging.getLogger("arm_accel")


class _AcceleratedPropagation:
    """Mixin placed before the stock Arm class; overrides ``call`` only."""

    _stock_name: str

    def call(self, graph_module: fx.GraphModule) -> PassResult:  # type: ignore[override]
        name = self._stock_name
        start = time.perf_counter()
        reason = None
        if has_symbolic_shapes(graph_module):
            reason = "symbolic shapes"
        else:
            try:
                VirtualRetracer._find_fake_mode(graph_module)
            except VirtualRetraceUnsupported as exc:
                reason = str(exc)
        with count_retraces() as retraces:
            if reason is not None:
                stats.record_fallback(name, reason)
                logger.info("%s: stock pass runs (%s)", name, reason)
                result = super().call(graph_module)  # type: ignore[misc]
            else:
                result = self._accelerated_call(graph_module)
        stats.record_call(name, time.perf_counter() - start, reason is None, retraces.count)
        return result

    # The loop is stock's ``PropagateViewCopyPermutePass.call`` with the re-traces between
    # scans made virtual.
    def _accelerated_call(self, graph_module: fx.GraphModule) -> PassResult:
        modified = False

        result = self.fuse_horizontal(graph_module)  # type: ignore[attr-defined]
        graph_module = result.graph_module
        modified |= result.modified
        result = self.fuse_vertical(graph_module)  # type: ignore[attr-defined]
        graph_module = result.graph_module
        modified |= result.modified
        if result.modified:
            # The fusion that modified ended with a re-trace; stock re-traces once more.
            graph_module = self._virtual_retrace(VirtualRetracer(graph_module))

        while True:
            tracker = VirtualRetracer(graph_module)
            iteration_modified = False
            stale_nodes: set[fx.Node] = set()
            for node in list(graph_module.graph.nodes):
                if node in stale_nodes:
                    continue
                if node.target in self._targets:  # type: ignore[attr-defined]
                    if len(node.users) == 0:
                        continue
                    if self._propagate(node, stale_nodes):  # type: ignore[attr-defined]
                        iteration_modified = True

            if iteration_modified:
                modified = True
                graph_module = self._virtual_retrace(tracker)
                continue

            result = self.fuse_horizontal(graph_module)  # type: ignore[attr-defined]
            graph_module = result.graph_module
            iteration_modified = result.modified
            result = self.fuse_vertical(graph_module)  # type: ignore[attr-defined]
            graph_module = result.graph_module
            iteration_modified |= result.modified

            modified |= iteration_modified
            if not iteration_modified:
                break

        if modified:
            graph_module = self._retrace(graph_module)  # type: ignore[attr-defined]

        return PassResult(graph_module, modified)

    def _virtual_retrace(self, tracker: VirtualRetracer) -> fx.GraphModule:
        try:
            tracker.apply()
            return tracker.graph_module
        except VirtualRetraceUnsupported as exc:
            stats.record_fallback(self._stock_name, f"virtual retrace: {exc}")
            logger.info("%s: real re-trace (%s)", self._stock_name, exc)
            return self._retrace(tracker.graph_module)  # type: ignore[attr-defined]


class PropagateViewCopyPermuteDownPass(_AcceleratedPropagation, _StockDown):
    _stock_name = "PropagateViewCopyPermuteDownPass"


class PropagateViewCopyPermuteUpPass(_AcceleratedPropagation, _StockUp):
    _stock_name = "PropagateViewCopyPermuteUpPass"


def accelerate(stock_class: type) -> type:
    """An accelerated subclass of any ``PropagateViewCopyPermutePass`` subclass (for example
    the backend-neutral ``executorch.backends.transforms`` ones)."""
    name = stock_class.__name__
    return type(name, (_AcceleratedPropagation, stock_class), {"_stock_name": name})
