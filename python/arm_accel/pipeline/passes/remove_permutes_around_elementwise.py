"""Accelerated ``RemovePermutesAroundElementwiseTosaOps``.

The walk's constant test reads one bitset per call, built in Rust from the table's CONSTANT
flags (the union of constants the Arm class builds); the scan, the walk and every rewrite are
stock's code. No ``recompile()`` before the one re-trace (none when nothing changed); no table
when the graph has no permute. Declines (stock runs): no exported program for the Arm class.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

from executorch.backends.arm._passes.remove_permutes_around_elementwise_tosa_ops import (
    RemovePermutesAroundElementwiseTosaOps as _ArmRemoveImported,
)
from executorch.backends.transforms.remove_permutes_around_elementwise_ops import (
    PERMUTE_COPY_TARGETS,
)
from executorch.backends.transforms.remove_permutes_around_elementwise_ops import (
    RemovePermutesAroundElementwiseOps as _BaseRemoveImported,
)
from executorch.exir.pass_base import PassResult
from torch import fx

from arm_accel import _native
from arm_accel.fxstock import GraphJournal
from arm_accel.native.table import call_nodes_with_targets, constant_names, export_light
from arm_accel.pipeline.passes.base import AcceleratedPass, Decline, _stock_class
from arm_accel.pipeline.passes.kernels import no_class, run_kernel
from arm_accel.runtime import eval_counter

logger = logging.getLogger("arm_accel")

_ArmRemove = _stock_class(_ArmRemoveImported)
_BaseRemove = _stock_class(_BaseRemoveImported)


class AccelRemovePermutesMixin(AcceleratedPass):
    """Constant bitset and no recompile for a ``RemovePermutesAroundElementwiseTosaOps``."""

    _accel_constants: set[fx.Node] | None = None
    accel_recompile = False  # as stock: its re-trace (or nothing) follows the edits

    def accel_plan(
        self, graph_module: fx.GraphModule
    ) -> tuple[list[fx.Node], set[fx.Node] | None, frozenset[str] | None]:
        """The permute nodes, the constant set and names (None for the transforms base class,
        whose ``_is_constant`` reads no signature). With no permute node stock's scan finds
        nothing: no constant set then."""
        arm = isinstance(self, _ArmRemove)
        ep = getattr(self, "exported_program", None)
        if arm and ep is None:
            raise Decline("no exported program")
        graph = graph_module.graph
        permutes = call_nodes_with_targets(graph, PERMUTE_COPY_TARGETS)
        if permutes is None:
            raise Decline("string permute target")
        if not arm:
            return permutes, None, None
        names = constant_names(ep)
        if not permutes:
            return permutes, None, names
        # Constants are placeholders and get_attr nodes only: export just those.
        leaves = sorted(
            [
                *graph.find_nodes(op="placeholder", sort=False),
                *graph.find_nodes(op="get_attr", sort=False),
            ]
        )
        table = export_light(graph_module, no_class, names, nodes=leaves)
        mask = run_kernel(_native.constant_mask, table)
        consts = set(itertools.compress(table.nodes, mask.tolist()))
        return permutes, consts, names

    def accel_apply(
        self,
        graph_module: fx.GraphModule,
        plan: tuple[list[fx.Node], set[fx.Node] | None, frozenset[str] | None],
        journal: GraphJournal,
    ) -> Any:
        permutes, consts, names = plan
        if names is not None:
            self._constant_input_names = set(names)  # what the Arm ``call`` sets up
        if not permutes:
            return PassResult(graph_module, False)
        # Stock's own methods edit the graph: the journal records it whole, to roll back.
        journal.checkpoint()
        self._accel_constants = consts
        try:
            return self._accel_call(graph_module, permutes)
        finally:
            self._accel_constants = None

    def _is_constant(self, node: fx.Node) -> bool:
        consts = self._accel_constants
        if consts is None:  # stock path
            return super()._is_constant(node)  # type: ignore[misc]
        # Bitset: get_attr + signature constants; then the base class's own rules.
        return node in consts or _BaseRemove._is_constant(self, node)  # type: ignore[arg-type]

    def _accel_call(self, graph_module: fx.GraphModule, permutes: list[fx.Node]) -> PassResult:
        """Stock ``RemovePermutesAroundElementwiseOps.call`` without the recompile (its number
        taken), its scan over the permute nodes only (the walks do not edit the graph)."""
        self._sq_unsq_cache.clear()
        self._interleave_cache.clear()
        subgraphs_found: list[Any] = []
        processed_nodes: set[fx.Node] = set()
        for node in permutes:
            start_permute = self.get_permutation(node)
            if start_permute is None:
                continue
            end_permute = [start_permute.index(i) for i in range(len(start_permute))]
            for user in node.users:
                if not self.is_node_permutable(user) and self._interleave_triple(user) is None:
                    continue
                subgraph = self.Subgraph(start_permute, end_permute)
                if self.visit(user, subgraph, processed_nodes):
                    subgraphs_found.append(subgraph)
                    for n in subgraph.nodes:
                        processed_nodes.add(n)

        modified = False
        for subgraph in subgraphs_found:
            if self.permute_subgraph(subgraph):
                modified = True

        if modified:
            graph_module.graph.eliminate_dead_code()
            eval_counter.take(eval_counter.RECOMPILE)  # stock recompiles here: its number
            self.note_retrace()
            return super(_BaseRemove, self).call(graph_module)  # type: ignore[misc]
        return PassResult(graph_module, False)


class RemovePermutesAroundElementwiseTosaOps(AccelRemovePermutesMixin, _ArmRemove):
    """Arm/TOSA configuration, accelerated."""

    _arm_accel_stock = _ArmRemove  # stock class without an MRO walk per call


class BaseRemovePermutesAroundElementwiseOps(AccelRemovePermutesMixin, _BaseRemove):
    """``backends.transforms`` configuration: the permute-only scan and no recompile (its
    ``_is_constant`` is stock's name rules, already O(1) per node)."""

    _arm_accel_stock = _BaseRemove  # stock class without an MRO walk per call

    accel_name = "transforms.RemovePermutesAroundElementwiseOps"
