"""Accelerated ``FuseDuplicateUsersPass`` (issue 3).

Stock queues every node as a producer, and re-queues the producer and the surviving user after
every single fusion, without dedup; each visit groups the producer's users by target and builds
a signature of every grouped user. Here:

- Rust screens the producers once (``_native.duplicate_user_candidates``): a visit can only fuse
  when two ``call_function`` users share a non-excluded target key (stock's ``str(target)``), so
  the initial pass over the queue visits only those producers, plus any node that has since
  become a fused representative (the only way a node gains users).
- Revisits keep stock's queue order, but a queued producer whose neighbourhood has not changed
  since a visit of it that fused nothing is skipped: that visit would see the same users, the
  same arguments, and fuse nothing again. Every edit bumps a version on the nodes whose visit it
  can affect (the inputs of the erased user, of each rewired consumer, and the representative).

Both rules only skip visits that are no-ops in stock, so the fusions happen in stock's order
and the graph equals stock's. The grouping and signatures are stock's own methods. One
``ExportPass``/``ArmPass`` re-trace when modified, none otherwise; no ``recompile()``.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections import deque
from collections.abc import Hashable
from typing import Any

import numpy as np
from executorch.backends.arm._passes.fuse_duplicate_users_pass import (
    FuseDuplicateUsersPass as __ArmFuse_maybe_swapped,
)
from executorch.backends.transforms.fuse_duplicate_users_pass import (
    FuseDuplicateUsersPass as __BaseFuse_maybe_swapped,
)
from executorch.exir.pass_base import PassResult
from torch import fx
from torch.fx.node import map_arg

from arm_accel import _native
from arm_accel.passes.base import AcceleratedPass, Decline, GraphJournal, _stock_class
from arm_accel.table import _get_users, export_light, with_users

logger = logging.getLogger("arm_accel")

# The activation may already have swapped our classes into executorch's modules: always
# derive from the stock classes.
_ArmFuse = _stock_class(__ArmFuse_maybe_swapped)
_BaseFuse = _stock_class(__BaseFuse_maybe_swapped)


def _no_class(_target: Any) -> int:
    return 0


class AccelFuseDuplicateUsersMixin(AcceleratedPass):
    """Screened, exact-revisit producer queue for any ``FuseDuplicateUsersPass`` (list it first)."""

    _recompile_before_retrace = False

    def accel_plan(self, graph_module: fx.GraphModule) -> list[fx.Node]:
        """The screened producers, in graph order (empty: stock's run fuses nothing)."""
        nodes = list(graph_module.graph.nodes)
        # A visit with fewer than two users is a no-op: only these producers can fuse.
        multi = list(itertools.compress(nodes, map((2).__le__, map(len, map(_get_users, nodes)))))
        if not multi:
            return []
        table = export_light(graph_module, _no_class, nodes=with_users(multi))
        interned: dict[Hashable, int] = {}
        keys = np.empty(len(table.targets), dtype=np.int64)
        for code, target in enumerate(table.targets):
            if target in self._excluded_targets:
                keys[code] = -1
                continue
            try:
                key = self._get_target_key(target)
                keys[code] = interned.setdefault(key, len(interned))
            except TypeError as exc:  # unhashable target key
                raise Decline("unhashable target key") from exc
        try:
            candidates = _native.duplicate_user_candidates(table, keys)
        except ValueError as exc:
            raise Decline(f"duplicate_user_candidates: {exc}") from exc
        sub = table.nodes
        return [sub[i] for i in candidates.tolist()]

    def accel_apply(
        self, graph_module: fx.GraphModule, plan: list[fx.Node], journal: GraphJournal
    ) -> Any:
        # Edits go straight through fx, in stock's order; nothing to journal.
        journal.commit(recompile=False)
        if not plan:
            return PassResult(graph_module, False)
        graph = graph_module.graph
        modified = False

        node_order = {node: index for index, node in enumerate(graph.nodes)}
        version: dict[fx.Node, int] = {}  # bumped when a node's visit could change
        noop_at: dict[fx.Node, int] = {}  # version at the end of a visit that fused nothing
        revisits: deque[fx.Node] = deque()
        # Stock's initial sweep visits every node in graph order; only the screened ones and
        # those that become a representative later in the sweep (the only way to gain users)
        # can fuse. ``sweep`` holds their positions; ``pending`` what is in it.
        pending = {node_order[p]: p for p in plan}
        sweep = list(pending)
        heapq.heapify(sweep)
        position = -1
        sweeping = True  # stock's initial queue is not exhausted yet

        group_users, signature_of = self._accel_grouping()

        def bump(n: fx.Node) -> None:
            version[n] = version.get(n, 0) + 1

        while True:
            if sweep:
                position = heapq.heappop(sweep)
                producer = pending.pop(position)
            elif revisits:
                sweeping = False
                producer = revisits.popleft()
                if noop_at.get(producer, -1) == version.get(producer, 0):
                    continue  # unchanged since a visit that fused nothing
            else:
                break

            if producer.graph is None:
                continue
            user_nodes = list(producer.users)
            if len(user_nodes) < 2:
                noop_at[producer] = version.get(producer, 0)
                continue

            candidate_groups = group_users(node_order, user_nodes)
            fused_here = False
            signature_to_user: dict[tuple[Hashable, ...], fx.Node] = {}
            for group in candidate_groups:
                for user in group:
                    signature = signature_of(user)
                    if signature is None:
                        continue
                    representative = signature_to_user.get(signature)
                    if representative is None:
                        signature_to_user[signature] = user
                        continue
                    if user is representative:
                        continue

                    for n in user.all_input_nodes:
                        bump(n)
                    for consumer in user.users:
                        for n in consumer.all_input_nodes:
                            bump(n)
                    bump(representative)
                    user.replace_all_uses_with(representative)
                    graph.erase_node(user)
                    rep_pos = node_order[representative]
                    if sweeping and rep_pos > position and rep_pos not in pending:
                        # Not yet reached by the initial sweep, which now visits it.
                        pending[rep_pos] = representative
                        heapq.heappush(sweep, rep_pos)
                    modified = True
                    fused_here = True

                    revisits.append(producer)
                    revisits.append(representative)
            if not fused_here:
                noop_at[producer] = version.get(producer, 0)

        if modified:
            graph_module.graph.lint()
            graph_module = super(_BaseFuse, self).call(graph_module).graph_module  # type: ignore[misc]
            self.note_retrace()
        return PassResult(graph_module, modified)

    def _accel_grouping(self) -> tuple[Any, Any]:
        """Stock ``_get_candidate_groups`` and ``_build_user_signature``, with the target key
        (``str(target)`` for op overloads, formatted on every call in stock) computed once per
        target and call. Stock's own methods when a subclass overrides any of them."""
        cls = type(self)
        if any(
            getattr(cls, m) is not getattr(_BaseFuse, m)
            for m in ("_get_candidate_groups", "_build_user_signature", "_get_target_key")
        ):
            return self._get_candidate_groups, self._build_user_signature

        keys: dict[Any, Hashable] = {}
        excluded = self._excluded_targets
        get_target_key = self._get_target_key

        def key_of(target: Any) -> Hashable:
            key = keys.get(target, keys)
            if key is keys:
                key = keys[target] = get_target_key(target)
            return key

        def group_users(
            node_order: dict[fx.Node, int], user_nodes: list[fx.Node]
        ) -> list[list[fx.Node]]:
            users_by_target: dict[tuple[str, Hashable], list[fx.Node]] = {}
            for user in user_nodes:
                if user.graph is None or user.op != "call_function":
                    continue
                if user.target in excluded:
                    continue
                users_by_target.setdefault((user.op, key_of(user.target)), []).append(user)
            return [
                sorted(group, key=node_order.__getitem__)
                for group in users_by_target.values()
                if len(group) > 1
            ]

        to_hashable = self._to_hashable
        leaf = self._map_leaf_to_key

        def signature_of(node: fx.Node) -> tuple[Hashable, ...] | None:
            try:
                normalized_args = to_hashable(map_arg(node.args, leaf))
                normalized_kwargs = to_hashable(
                    {k: map_arg(v, leaf) for k, v in node.kwargs.items()}
                )
            except TypeError:
                return None
            return (node.op, key_of(node.target), normalized_args, normalized_kwargs)

        return group_users, signature_of


class FuseDuplicateUsersPass(AccelFuseDuplicateUsersMixin, _ArmFuse):
    """Arm/TOSA configuration (RESCALE excluded), accelerated."""


class BaseFuseDuplicateUsersPass(AccelFuseDuplicateUsersMixin, _BaseFuse):
    """``backends.transforms`` configuration (as the propagation passes use it), accelerated."""

    accel_name = "transforms.FuseDuplicateUsersPass"
