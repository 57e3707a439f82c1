"""Accelerated ``FuseDuplicateUsersPass``.

Stock queues every node as a producer and re-queues after every fusion, rebuilding every user's
signature on each visit. Here producers are screened once (Rust-interned signature codes on
large graphs, target keys below ``NATIVE_MIN_PRODUCERS``), a revisit of an unchanged
neighbourhood that fused nothing is skipped, and signatures are compared as codes. Only no-op
visits are skipped, so the fusions happen in stock's order (design.md, "The view/permute
passes"). One re-trace when modified, none otherwise; no ``recompile()``.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import struct
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
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
from arm_accel.fxstock import GraphJournal
from arm_accel.native.table import _get_users, export_light, with_int_args, with_users
from arm_accel.pipeline.passes.base import AcceleratedPass, Decline, _stock_class
from arm_accel.pipeline.passes.kernels import no_class, run_kernel

logger = logging.getLogger("arm_accel")

# The activation may already have swapped our classes into executorch's modules: always
# derive from the stock classes.
_ArmFuse = _stock_class(__ArmFuse_maybe_swapped)
_BaseFuse = _stock_class(__BaseFuse_maybe_swapped)

#: From this many multi-user nodes on, the screen runs in Rust on interned signatures; below
#: it, by target key in Python, and visits compare token tuples encoded lazily. Chosen from
#: ``benches/fusion_passes.py`` (see ``tests/test_fusion_passes.py`` for both paths).
NATIVE_MIN_PRODUCERS = 256

# Token tags of ``signature_tokens`` (the kernel only compares streams; see rust/signature.rs).
TOK_INT, TOK_NODE, TOK_NONE, TOK_SEQ, TOK_FLOAT, TOK_KWARGS, TOK_KEY = range(7)
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_MISSING: Any = object()
_double_bits = struct.Struct("<d")
_int64 = struct.Struct("<q")


class _Opaque(Exception):  # noqa: N818 - control flow: a leaf the tokens do not model
    pass


def _leaf_tokens(value: Any, order: dict[fx.Node, int], out: list[int]) -> None:
    """Append the tokens of one normalized argument. Equal streams exactly when stock's
    ``_to_hashable(map_arg(value, node.name))`` are equal: bools and integral floats are the
    ints they equal, lists and tuples are both sequences, a node is its (unique) name."""
    kind = type(value)
    if kind is int or kind is bool:
        if not _I64_MIN <= value <= _I64_MAX:
            raise _Opaque
        out += (TOK_INT, int(value))
    elif isinstance(value, fx.Node):
        out += (TOK_NODE, order[value])
    elif value is None:
        out += (TOK_NONE, 0)
    elif kind is float:
        if math.isnan(value):
            raise _Opaque  # nan != nan
        if value.is_integer() and _I64_MIN <= value <= _I64_MAX:
            out += (TOK_INT, int(value))
        else:
            out += (TOK_FLOAT, _int64.unpack(_double_bits.pack(value))[0])
    elif isinstance(value, (list, tuple)):
        out += (TOK_SEQ, len(value))
        for v in value:
            _leaf_tokens(v, order, out)
    else:
        raise _Opaque


def signature_tokens(
    node: fx.Node, order: dict[fx.Node, int], kwarg_keys: dict[Hashable, int]
) -> list[int] | None:
    """The token stream of ``node``'s arguments (stock's normalized args, then kwargs sorted by
    ``repr`` of the key), or None if an argument holds a leaf the tokens do not model.
    ``order`` numbers the graph's nodes; ``kwarg_keys`` interns kwarg names (shared per call)."""
    out = [TOK_SEQ, len(node.args)]
    try:
        for a in node.args:
            _leaf_tokens(a, order, out)
        kwargs = node.kwargs
        out += (TOK_KWARGS, len(kwargs))
        if kwargs:
            for k, v in sorted(kwargs.items(), key=lambda item: repr(item[0])):
                out += (TOK_KEY, kwarg_keys.setdefault(k, len(kwarg_keys)))
                _leaf_tokens(v, order, out)
    except (_Opaque, KeyError, TypeError):
        return None
    return out


@dataclass
class DuplicateUsersPlan:
    """The initial sweep's producers (graph order), the graph order of every node, and the
    users' signature codes: interned ints from Rust (users it modelled, as exported), or filled
    lazily with token tuples (``lazy``; None for a user the tokens do not model), or None when a
    subclass overrides stock's signatures (then only stock's own methods answer)."""

    producers: list[fx.Node]
    order: dict[fx.Node, int]
    codes: dict[fx.Node, Hashable] | None
    lazy: bool = False


#: Stock ``_get_target_key`` per target, kept across calls: ``str()`` of an op overload is
#: fixed for its lifetime, and stock formats it for every grouped user of every visit.
_STOCK_TARGET_KEYS: dict[Any, Hashable] = {}


def _signature_lookup(
    plan: DuplicateUsersPlan, signature_of: Callable[[fx.Node], Hashable]
) -> Callable[[list[fx.Node]], list[Hashable]]:
    """The group's signatures, one kind for the whole group: codes where every user has one
    (filled from tokens when ``plan.lazy``), else stock's own (``signature_of``, which then
    also answers for the modelled users)."""
    node_order, codes, lazy = plan.order, plan.codes, plan.lazy
    kwarg_keys: dict[Hashable, int] = {}

    def signatures(group: list[fx.Node]) -> list[Hashable]:
        if codes is not None:
            out = []
            for u in group:
                c = codes.get(u, _MISSING)
                if c is _MISSING and lazy:
                    tokens = signature_tokens(u, node_order, kwarg_keys)
                    c = codes[u] = None if tokens is None else tuple(tokens)
                if c is _MISSING or c is None:
                    break
                out.append(c)
            else:
                return out
        return [signature_of(u) for u in group]

    return signatures


def _fuse_groups(
    graph: fx.Graph,
    groups: Iterable[list[fx.Node]],
    signatures: Callable[[list[fx.Node]], list[Hashable]],
    codes: dict[fx.Node, Hashable] | None,
    bump: Callable[[fx.Node], None],
) -> list[fx.Node]:
    """One visit's fusions: in each group, every user whose signature an earlier user has is
    fused into that one; returns the user fused into, once per fusion, in order."""
    fused_into = []
    for group in groups:
        # Per group: stock's signatures hold the target key, so groups never share one.
        signature_to_user: dict[Hashable, fx.Node] = {}
        for user, signature in zip(group, signatures(group), strict=True):
            if signature is None:
                continue
            representative = signature_to_user.get(signature)
            if representative is None:
                signature_to_user[signature] = user
                continue
            if user is representative:
                continue
            _fuse_user(graph, user, representative, codes, bump)
            fused_into.append(representative)
    return fused_into


def _fuse_user(
    graph: fx.Graph,
    user: fx.Node,
    representative: fx.Node,
    codes: dict[fx.Node, Hashable] | None,
    bump: Callable[[fx.Node], None],
) -> None:
    """Stock's fusion of ``user`` into ``representative`` (its uses redirected, the node
    erased), bumping every node whose visit it could change."""
    for n in user.all_input_nodes:
        bump(n)
    consumers = list(user.users)
    user.replace_all_uses_with(representative)
    graph.erase_node(user)
    for consumer in consumers:
        if codes is not None:
            codes.pop(consumer, None)  # its arguments changed: re-encode
        for n in consumer.all_input_nodes:
            bump(n)
    bump(representative)


class AccelFuseDuplicateUsersMixin(AcceleratedPass):
    """Screened, exact-revisit producer queue for any ``FuseDuplicateUsersPass`` (list it first)."""

    accel_recompile = False  # as stock: its re-trace (or nothing) follows the edits

    def accel_plan(self, graph_module: fx.GraphModule) -> DuplicateUsersPlan | None:
        """The screened producers (None: stock's run fuses nothing)."""
        nodes = list(graph_module.graph.nodes)
        # A visit with fewer than two users is a no-op: only these producers can fuse.
        multi = list(itertools.compress(nodes, map((2).__le__, map(len, map(_get_users, nodes)))))
        if not multi:
            return None
        order = dict(zip(nodes, range(len(nodes)), strict=True))
        stock_signatures = self._stock_signatures()
        if len(multi) < NATIVE_MIN_PRODUCERS or not stock_signatures:
            producers = self._screen_by_key(multi)
            if not producers:
                return None
            return DuplicateUsersPlan(
                producers, order, {} if stock_signatures else None, lazy=stock_signatures
            )
        subset = with_users(multi)
        table = export_light(graph_module, no_class, nodes=subset)
        keys = self._group_keys(table.targets)
        kwarg_keys: dict[Hashable, int] = {}
        rows = [
            signature_tokens(n, order, kwarg_keys) if n.op == "call_function" else []
            for n in subset
        ]
        code, candidates = run_kernel(_native.user_signatures, with_int_args(table, rows), keys)
        if not len(candidates):
            return None
        codes: dict[fx.Node, Hashable] = {
            n: c for n, c in zip(subset, code.tolist(), strict=True) if c >= 0
        }
        return DuplicateUsersPlan([subset[i] for i in candidates.tolist()], order, codes)

    def _group_keys(self, targets: list[Any]) -> np.ndarray:
        """Interned ``_get_target_key`` per target code; -1 for excluded targets."""
        interned: dict[Hashable, int] = {}
        keys = np.empty(len(targets), dtype=np.int64)
        key_of = self._target_key_cache()
        for code, target in enumerate(targets):
            if target in self._excluded_targets:
                keys[code] = -1
                continue
            try:
                keys[code] = interned.setdefault(key_of(target), len(interned))
            except TypeError as exc:  # unhashable target key
                raise Decline("unhashable target key") from exc
        return keys

    def _screen_by_key(self, multi: list[fx.Node]) -> list[fx.Node]:
        """The producers with two ``call_function`` users sharing a non-excluded target key
        (``_native.duplicate_user_candidates`` in Python, for small graphs)."""
        excluded = self._excluded_targets
        key_of = self._target_key_cache()
        out = []
        for p in multi:
            seen: set[Hashable] = set()
            for u in p.users:
                if u.op != "call_function" or u.target in excluded:
                    continue
                k = key_of(u.target)
                if k in seen:
                    out.append(p)
                    break
                seen.add(k)
        return out

    def _target_key_cache(self) -> Any:
        """``_get_target_key`` memoized: across calls for stock's, else for this call."""
        get_target_key = self._get_target_key
        stock = type(self)._get_target_key is _BaseFuse._get_target_key
        keys: dict[Any, Hashable] = _STOCK_TARGET_KEYS if stock else {}

        def key_of(target: Any) -> Hashable:
            try:
                key = keys.get(target, keys)
            except TypeError:  # unhashable target: no memo
                return get_target_key(target)
            if key is keys:
                key = keys[target] = get_target_key(target)
            return key

        return key_of

    def _stock_signatures(self) -> bool:
        """Whether grouping and signatures are stock's (else the tokens would not match them)."""
        cls = type(self)
        return not any(
            getattr(cls, m) is not getattr(_BaseFuse, m)
            for m in (
                "_get_candidate_groups",
                "_build_user_signature",
                "_get_target_key",
                "_to_hashable",
                "_map_leaf_to_key",
            )
        )

    def accel_apply(
        self, graph_module: fx.GraphModule, plan: DuplicateUsersPlan | None, journal: GraphJournal
    ) -> Any:
        if plan is None:
            return PassResult(graph_module, False)
        # Stock's own methods edit the graph: the journal records it whole, to roll back.
        journal.checkpoint()
        modified = self._fuse_all(graph_module.graph, plan)
        if modified:
            self.accel_recompile_number()
            graph_module.graph.lint()
            graph_module = super(_BaseFuse, self).call(graph_module).graph_module  # type: ignore[misc]
            self.note_retrace()
        return PassResult(graph_module, modified)

    def _fuse_all(self, graph: fx.Graph, plan: DuplicateUsersPlan) -> bool:
        """Stock's visits of the producers, in its order, fusing each group's duplicate users
        into the first; whether anything fused."""
        modified = False
        node_order = plan.order
        codes = plan.codes
        version: dict[fx.Node, int] = {}  # bumped when a node's visit could change
        noop_at: dict[fx.Node, int] = {}  # version at the end of a visit that fused nothing
        revisits: deque[fx.Node] = deque()
        # Stock's initial sweep visits every node in graph order; only the screened ones and
        # those whose users change later in the sweep can fuse. ``sweep`` holds their
        # positions; ``pending`` what is in it.
        pending = {node_order[p]: p for p in plan.producers}
        sweep = list(pending)
        heapq.heapify(sweep)
        position = -1
        sweeping = True  # stock's initial queue is not exhausted yet

        group_users, signature_of = self._accel_grouping()
        signatures = _signature_lookup(plan, signature_of)

        def bump(n: fx.Node) -> None:
            version[n] = version.get(n, 0) + 1
            pos = node_order[n]
            if sweeping and pos > position and pos not in pending:
                # Not yet reached by the initial sweep, which now visits it.
                pending[pos] = n
                heapq.heappush(sweep, pos)

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

            groups = group_users(node_order, user_nodes)
            fused_into = _fuse_groups(graph, groups, signatures, codes, bump)
            for representative in fused_into:
                revisits.append(producer)
                revisits.append(representative)
            if fused_into:
                modified = True
            else:
                noop_at[producer] = version.get(producer, 0)
        return modified

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

        excluded = self._excluded_targets
        key_of = self._target_key_cache()

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

    _arm_accel_stock = _ArmFuse  # stock class without an MRO walk per call


class BaseFuseDuplicateUsersPass(AccelFuseDuplicateUsersMixin, _BaseFuse):
    """``backends.transforms`` configuration (as the propagation passes use it), accelerated."""

    _arm_accel_stock = _BaseFuse  # stock class without an MRO walk per call

    accel_name = "transforms.FuseDuplicateUsersPass"
