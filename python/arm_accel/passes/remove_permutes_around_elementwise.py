"""Accelerated ``RemovePermutesAroundElementwiseTosaOps`` (issue 3).

The walk (``visit``) asks ``_is_constant`` about every input it reaches. Here constant
membership is one bitset per call, built in Rust from the table's CONSTANT flags (get_attr nodes
and the graph signature's parameters, buffers and lifted constants, the same union the Arm
class builds); the stock name-prefix and ``full`` rules still apply on top. The scan, the walk
and every rewrite are stock's code; the difference is the end: stock calls
``GraphModule.recompile()`` before its re-trace, which the re-trace does not need, so this
class hands off to the one ``ExportPass`` re-trace directly (none when nothing changed).

Declines (stock runs): no exported program (stock would fail on it too).
"""

from __future__ import annotations

import logging
from typing import Any

from executorch.backends.arm._passes.remove_permutes_around_elementwise_tosa_ops import (
    RemovePermutesAroundElementwiseTosaOps as _ArmRemoveImported,
)
from executorch.backends.transforms.remove_permutes_around_elementwise_ops import (
    RemovePermutesAroundElementwiseOps as _BaseRemoveImported,
)
from executorch.backends.transforms.remove_permutes_around_elementwise_ops import (
    is_permute_copy,
)
from executorch.exir.pass_base import PassResult
from torch import fx

from arm_accel import _native
from arm_accel.passes.base import AcceleratedPass, Decline, GraphJournal, _stock_class
from arm_accel.table import constant_names, export_table

logger = logging.getLogger("arm_accel")

_ArmRemove = _stock_class(_ArmRemoveImported)
_BaseRemove = _stock_class(_BaseRemoveImported)


def _no_class(_target: Any) -> int:
    return 0


class AccelRemovePermutesMixin(AcceleratedPass):
    """Constant bitset and no recompile for a ``RemovePermutesAroundElementwiseTosaOps``."""

    _accel_constants: set[fx.Node] | None = None

    def accel_plan(self, graph_module: fx.GraphModule) -> tuple[set[fx.Node], frozenset[str]]:
        ep = getattr(self, "exported_program", None)
        if ep is None:
            raise Decline("no exported program")
        names = constant_names(ep)
        table = export_table(graph_module, names, classifier=_no_class)
        try:
            mask = _native.constant_mask(table)
        except ValueError as exc:
            raise Decline(f"constant_mask: {exc}") from exc
        consts = {n for n, m in zip(table.nodes, mask.tolist(), strict=True) if m}
        return consts, names

    def accel_apply(
        self,
        graph_module: fx.GraphModule,
        plan: tuple[set[fx.Node], frozenset[str]],
        journal: GraphJournal,
    ) -> Any:
        journal.commit(recompile=False)
        consts, names = plan
        self._constant_input_names = set(names)  # what the Arm ``call`` sets up
        self._accel_constants = consts
        try:
            return self._accel_call(graph_module)
        finally:
            self._accel_constants = None

    def _is_constant(self, node: fx.Node) -> bool:
        consts = self._accel_constants
        if consts is None:  # stock path
            return super()._is_constant(node)  # type: ignore[misc]
        # Bitset: get_attr + signature constants; then the base class's own rules.
        return node in consts or _BaseRemove._is_constant(self, node)  # type: ignore[arg-type]

    def _accel_call(self, graph_module: fx.GraphModule) -> PassResult:
        """Stock ``RemovePermutesAroundElementwiseOps.call`` without the recompile."""
        self._sq_unsq_cache.clear()
        self._interleave_cache.clear()
        subgraphs_found: list[Any] = []
        processed_nodes: set[fx.Node] = set()
        for node in graph_module.graph.nodes:
            if not is_permute_copy(node):
                continue
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
            self.note_retrace()
            return super(_BaseRemove, self).call(graph_module)  # type: ignore[misc]
        return PassResult(graph_module, False)


class RemovePermutesAroundElementwiseTosaOps(AccelRemovePermutesMixin, _ArmRemove):
    """Arm/TOSA configuration, accelerated."""
