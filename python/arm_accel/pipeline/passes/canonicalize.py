"""Accelerated ``CanonicalizeViewCopyPermutePass``.

Stock collects the linear view/permute chains with ``list.pop(0)`` and ``list.remove``, which is
quadratic in the number of view/permute nodes. Here the chains come from one Rust scan over the
node table (``_native.collect_chains``): the same chains, in the same order. The per-chain
fuse/swap logic is stock's own code, run unchanged on those chains, followed by stock's single
``ExportPass``/``ArmPass`` re-trace when something changed (none otherwise). No
``GraphModule.recompile()``.

:class:`AccelCanonicalizeMixin` works on top of the transforms base class (which the stock
propagation passes instantiate internally) and of the Arm subclass; both variants are defined
here. Chain collection does not read shapes, so symbolic dims need no decline; a graph that stock
would reject (a node that would join two chains) declines and runs stock, which then reports it.
"""

from __future__ import annotations

import logging
from typing import Any

from executorch.backends.arm._passes.canonicalize_view_copy_permute_pass import (
    CanonicalizeViewCopyPermutePass as __ArmCanonicalize_maybe_swapped,
)
from executorch.backends.transforms.canonicalize_view_copy_permute_pass import (
    CanonicalizeViewCopyPermutePass as __BaseCanonicalize_maybe_swapped,
)
from executorch.exir.pass_base import PassResult
from torch import fx

from arm_accel import _native
from arm_accel.fxstock import GraphJournal
from arm_accel.native.table import Cls, call_nodes_with_targets, export_light, with_users
from arm_accel.pipeline.passes.base import AcceleratedPass, Decline, _stock_class
from arm_accel.pipeline.passes.kernels import run_kernel

logger = logging.getLogger("arm_accel")

# The activation may already have swapped our classes into executorch's modules: always
# derive from the stock classes.
_ArmCanonicalize = _stock_class(__ArmCanonicalize_maybe_swapped)
_BaseCanonicalize = _stock_class(__BaseCanonicalize_maybe_swapped)

_MEMBER = int(Cls.PERMUTE | Cls.VIEW)


def chain_classifier(view_target: Any, permute_targets: frozenset[Any]) -> Any:
    """Classifier marking exactly the targets ``_collect_chains`` treats as chain members."""

    def classify(target: Any) -> int:
        bits = 0
        if target in permute_targets:
            bits |= Cls.PERMUTE
        if target == view_target:
            bits |= Cls.VIEW
        return int(bits)

    return classify


#: Below this many chain members the walk runs in Python (same O(M) algorithm as the Rust
#: kernel): exporting even the members' induced subgraph costs more than walking them, and
#: stock's quadratic ``pop(0)``/``remove`` is still negligible there.
NATIVE_MIN_MEMBERS = 512


def _chains_small(members: list[fx.Node], targets: set[Any]) -> list[list[fx.Node]]:
    """``_native.collect_chains`` in Python, for few members. Raises :class:`Decline`."""
    taken: set[fx.Node] = set()
    chains: list[list[fx.Node]] = []
    for node in members:
        if node in taken:
            continue
        taken.add(node)
        chain = [node]
        current = node
        while len(current.users) == 1:
            user = next(iter(current.users))
            if user.target not in targets:
                break
            if user in taken:
                raise Decline("collect_chains: a node would join two view/permute chains")
            taken.add(user)
            chain.append(user)
            current = user
        chains.append(chain)
    return chains


def collect_chains(
    graph_module: fx.GraphModule, view_target: Any, permute_targets: frozenset[Any]
) -> list[list[fx.Node]]:
    """Stock ``_collect_chains`` result, computed in Rust. Raises :class:`Decline`.

    The members come from the graph's (op, target) index; with none there are no chains and
    no table at all. Otherwise only the members and their users are exported (the subgraph
    they induce): the chain walk reads nothing else.
    """
    targets = {view_target} | set(permute_targets)
    members = call_nodes_with_targets(graph_module.graph, targets)
    if members is None:
        raise Decline("string target among the view/permute targets")
    if not members:
        return []
    if len(members) < NATIVE_MIN_MEMBERS:
        return _chains_small(members, targets)
    table = export_light(
        graph_module,
        chain_classifier(view_target, permute_targets),
        nodes=with_users(members),
    )
    ptr, ids = run_kernel(_native.collect_chains, table, _MEMBER)
    nodes = table.nodes
    flat = [nodes[i] for i in ids.tolist()]
    bounds = ptr.tolist()
    return [flat[bounds[k] : bounds[k + 1]] for k in range(len(bounds) - 1)]


class AccelCanonicalizeMixin(AcceleratedPass):
    """Rust chain collection for any ``CanonicalizeViewCopyPermutePass`` (list it first)."""

    accel_recompile = False  # as stock: its re-trace (or nothing) follows the edits
    _accel_chains: list[list[fx.Node]] | None = None

    def accel_plan(self, graph_module: fx.GraphModule) -> list[list[fx.Node]]:
        return collect_chains(graph_module, self._VIEW_TARGET, self._permute_targets)

    def accel_apply(
        self, graph_module: fx.GraphModule, plan: list[list[fx.Node]], journal: GraphJournal
    ) -> Any:
        if not plan:
            return PassResult(graph_module, False)  # no chains: stock's loop has nothing to do
        # Stock's own methods edit the graph: the journal records it whole, to roll back.
        journal.checkpoint()
        self._accel_chains = plan
        try:
            result = self.stock_call(graph_module)
        finally:
            self._accel_chains = None
        if result.modified:
            self.note_retrace()
        return result

    def _collect_chains(self, graph_module: fx.GraphModule) -> list[list[fx.Node]]:
        chains = self._accel_chains
        if chains is None:  # stock path (fallback, switch off)
            return super()._collect_chains(graph_module)  # type: ignore[misc]
        self._accel_chains = None
        return chains


class CanonicalizeViewCopyPermutePass(AccelCanonicalizeMixin, _ArmCanonicalize):
    """Arm configuration, accelerated."""

    _arm_accel_stock = _ArmCanonicalize  # stock class without an MRO walk per call


class BaseCanonicalizeViewCopyPermutePass(AccelCanonicalizeMixin, _BaseCanonicalize):
    """``backends.transforms`` configuration (as the propagation passes use it), accelerated."""

    _arm_accel_stock = _BaseCanonicalize  # stock class without an MRO walk per call

    accel_name = "transforms.CanonicalizeViewCopyPermutePass"
