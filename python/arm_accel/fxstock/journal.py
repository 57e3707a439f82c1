"""The one journal: every edit to a graph before its commit, undone by ``rollback`` to the graph
as it came -- nodes, args, targets, meta, each node's users order, the ``find_nodes`` index's
order and the name space -- so that the stock code that runs next sees the very graph it would
have seen. The accelerated passes and the in-place re-trace both edit through it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from torch import fx

from arm_accel.fxstock import names
from arm_accel.runtime import identity

_MISSING = object()


class GraphJournal:
    """Applies graph edits and remembers how to undo them.

    Edits through its methods are undone exactly; ``checkpoint()`` covers edits made any other
    way (stock's own edit methods, fx's DCE, a virtual re-trace). ``erase`` is deferred to
    ``commit()`` (checked first, so commit cannot fail half-way), which also recompiles."""

    def __init__(self, graph_module: fx.GraphModule) -> None:
        self.graph_module = graph_module
        self.graph = graph_module.graph
        self.created: list[fx.Node] = []
        self._names: names.NameState | None = None
        self._args: list[tuple[fx.Node, Any, Any]] = []
        self._targets: list[tuple[fx.Node, Any]] = []
        self._meta_keys: list[tuple[dict[str, Any], str, Any]] = []
        self._metas: dict[fx.Node, dict[str, Any]] = {}
        self._moves: list[tuple[fx.Node, fx.Node]] = []
        # Undoing an edit through fx appends where the edit removed: a node whose args are set
        # back lands at the end of its inputs' users, and any node fx sets an attribute of at
        # the end of its find_nodes bucket. The first edit touching each saves those orders.
        self._users: dict[fx.Node, list[fx.Node]] = {}
        self._buckets: dict[tuple[str, Any], list[fx.Node]] = {}
        self._undo: list[Callable[[], None]] = []
        self._to_erase: list[fx.Node] = []
        self._checkpoint: list[tuple[Any, ...]] | None = None
        self._identity = 0  # the graph's renewals at the checkpoint
        self.done = False

    # -- what an edit saves first ----------------------------------------------------------
    def save_names(self) -> None:
        """Save the name space (once): creating nodes consumes names."""
        if self._names is None:
            self._names = names.save(self.graph)

    def _save_users(self, nodes: Iterable[fx.Node]) -> None:
        for node in nodes:
            if node not in self._users:
                self._users[node] = list(node.users)

    def _save_bucket(self, node: fx.Node) -> None:
        table = self.graph._find_nodes_lookup_table
        key = table._key(node)
        if key not in self._buckets:
            self._buckets[key] = list(table.table.get(key, ()))

    # -- node creation ---------------------------------------------------------------------
    def create_node(
        self,
        op: str,
        target: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        name: str | None = None,
        before: fx.Node | None = None,
        after: fx.Node | None = None,
        meta: dict[str, Any] | None = None,
    ) -> fx.Node:
        """Create a node before ``before`` / after ``after`` (default: the graph's insert point)."""
        self.save_names()
        inputs: list[fx.Node] = []
        fx.node.map_arg((args, kwargs), inputs.append)
        self._save_users(inputs)
        if before is not None:
            with self.graph.inserting_before(before):
                node = self.graph.create_node(op, target, args, kwargs, name)
        elif after is not None:
            with self.graph.inserting_after(after):
                node = self.graph.create_node(op, target, args, kwargs, name)
        else:
            node = self.graph.create_node(op, target, args, kwargs, name)
        self.created.append(node)
        if meta:
            node.meta.update(meta)
        return node

    def call_function(
        self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None, **where: Any
    ) -> fx.Node:
        return self.create_node("call_function", target, args, kwargs, **where)

    def track_created(self, node: fx.Node) -> None:
        """A node created some other way (after :meth:`save_names`): erased by ``rollback``."""
        self.created.append(node)

    # -- edits of existing nodes -----------------------------------------------------------
    def _record(self, node: fx.Node, new_inputs: Iterable[fx.Node]) -> None:
        """Save what setting the node's args changes: the args, the users order of its inputs
        before and after, its find_nodes entry."""
        self._args.append((node, node.args, node.kwargs))
        self._save_users(node._input_nodes)
        self._save_users(new_inputs)
        self._save_bucket(node)

    def set_args(self, node: fx.Node, args: Any = None, kwargs: Any = None) -> None:
        """Set the node's args and/or kwargs (None: unchanged)."""
        new_args = node.args if args is None else tuple(args)
        new_kwargs = node.kwargs if kwargs is None else kwargs
        new_inputs: list[fx.Node] = []
        fx.node.map_arg((new_args, new_kwargs), new_inputs.append)
        self._record(node, new_inputs)
        node.args, node.kwargs = new_args, new_kwargs

    def replace_input(self, node: fx.Node, old: fx.Node, new: fx.Node) -> None:
        self._record(node, (new,))
        node.replace_input_with(old, new)

    def replace_all_uses_with(
        self,
        old: fx.Node,
        new: fx.Node,
        delete_user_cb: Callable[[fx.Node], bool] | None = None,
    ) -> list[fx.Node]:
        """``Node.replace_all_uses_with``, journaled."""
        for user in old.users:
            if delete_user_cb is None or delete_user_cb(user):
                self._record(user, (new,))
        return old.replace_all_uses_with(new, delete_user_cb or (lambda _: True))

    def set_target(self, node: fx.Node, target: Any) -> None:
        self._targets.append((node, node.target))
        self._save_bucket(node)
        node.target = target  # fx updates its find_nodes index

    def set_meta(self, node: fx.Node, key: str, value: Any) -> None:
        """Set one meta key (in the node's meta dict: undone in that dict, even if the node
        has been given another since)."""
        self._meta_keys.append((node.meta, key, node.meta.get(key, _MISSING)))
        node.meta[key] = value

    def replace_meta(self, node: fx.Node, meta: dict[str, Any]) -> None:
        """Give the node another meta dict. Not ``node.meta = meta``: fx would re-file the node
        in the graph's find_nodes index on every write."""
        self._metas.setdefault(node, node.meta)
        object.__setattr__(node, "meta", meta)

    def move_before(self, node: fx.Node, anchor: fx.Node) -> None:
        self._moves.append((node, node.prev))
        self._save_bucket(node)
        anchor.prepend(node)

    def move_after(self, node: fx.Node, anchor: fx.Node) -> None:
        self._moves.append((node, node.prev))
        self._save_bucket(node)
        anchor.append(node)

    def erase(self, node: fx.Node) -> None:
        """Erase ``node`` at commit (it must have no users left by then, other than erased ones)."""
        self._to_erase.append(node)

    def on_undo(self, fn: Callable[[], None]) -> None:
        """Register the undo of an edit made some other way (e.g. a new attribute on the module)."""
        self._undo.append(fn)

    def checkpoint(self) -> None:
        """Record the whole graph as it is now, for edits made outside the journal: ``rollback``
        then restores every node recorded here -- order, name, op, target, args, kwargs, meta,
        users order -- revives the erased ones and erases every node created since.
        O(nodes), once per journal."""
        self.save_names()
        self._checkpoint = [
            (n, n.name, n.args, n.kwargs, n.meta, dict(n.meta), list(n.users), n.op, n.target)
            for n in self.graph.nodes
        ]
        self._identity = identity.mark(self.graph)

    # -- outcome ---------------------------------------------------------------------------
    def commit(self, *, lint: bool = False, recompile: bool = True) -> None:
        doomed = {n for n in self._to_erase if not n._erased}
        for node in doomed:
            extra = [u for u in node.users if u not in doomed]
            if extra:
                raise RuntimeError(f"cannot erase {node.name}: still used by {extra}")
        if lint:
            self.graph.lint()
        # Erase users before producers: reverse graph order.
        if doomed:
            for node in reversed(list(self.graph.nodes)):
                if node in doomed:
                    self.graph.erase_node(node)
        self.done = True
        self._undo.clear()
        if recompile:
            self.graph_module.recompile()

    def rollback(self) -> None:
        """Undo every edit and put the name space back; raise if some undo failed (after
        trying all of them)."""
        if self.done:
            raise RuntimeError("journal already committed")
        errors: list[Exception] = []
        steps: list[Callable[[], None]] = [*reversed(self._undo)]
        if self._checkpoint is not None:
            # The checkpoint covers every journaled graph edit too.
            saved = self._checkpoint
            steps.append(lambda: self._restore_checkpoint(saved))
        else:
            steps += [self._undo_moves, self._undo_edits, self._erase_created, self._put_orders]
        for step in steps:
            try:
                step()
            except Exception as exc:  # keep undoing the rest
                errors.append(exc)
        if self._names is not None:
            names.restore(self.graph, self._names)
        self._undo.clear()
        self._to_erase.clear()
        self._checkpoint = None
        self.done = True
        if errors:
            raise RuntimeError(f"rollback incomplete: {errors!r}")

    def _restore_checkpoint(self, saved: list[tuple[Any, ...]]) -> None:
        _restore_nodes(self.graph, saved)
        identity.restore(self.graph, self._identity)  # re-traces since made no new graph after all
        self.graph_module.recompile()

    def _undo_moves(self) -> None:
        for node, prev in reversed(self._moves):
            prev.append(node)

    def _undo_edits(self) -> None:
        for node, args, kwargs in reversed(self._args):
            node.args, node.kwargs = args, kwargs
        for node, target in reversed(self._targets):
            node.target = target
        for meta, key, old in reversed(self._meta_keys):
            if old is _MISSING:
                meta.pop(key, None)
            else:
                meta[key] = old
        for node, meta in self._metas.items():
            object.__setattr__(node, "meta", meta)  # as replace_meta wrote it: no re-filing

    def _erase_created(self) -> None:
        for node in reversed(self.created):
            if not node._erased:
                self.graph.erase_node(node)

    def _put_orders(self) -> None:
        for node, users in self._users.items():
            node.users.clear()
            node.users.update((u, None) for u in users if not u._erased)
        table = self.graph._find_nodes_lookup_table.table
        for key, bucket in self._buckets.items():
            table[key] = {n: None for n in bucket if not n._erased}


def _restore_nodes(graph: fx.Graph, saved: list[tuple[Any, ...]]) -> None:
    """Put every recorded node back as :meth:`GraphJournal.checkpoint` saw it."""
    kept = {entry[0] for entry in saved}
    created = [n for n in graph.nodes if n not in kept]
    for node in created:  # detach first: new nodes may use each other
        node.args, node.kwargs = (), {}
    for node, *_ in saved:
        if node._erased:  # back into the graph; its place is set by the relink below
            node._prev = node._next = node  # erase_node leaves stale neighbours
            node._erased = False
            graph._len += 1
            graph._find_nodes_lookup_table.insert(node)
    for node, _name, args, kwargs, *_ in saved:
        if node.args is not args or node.kwargs is not kwargs:
            node.args, node.kwargs = args, kwargs
    for node in created:
        graph.erase_node(node)
    order = [entry[0] for entry in saved]
    if list(graph.nodes) != order:
        root = graph._root
        for node in order:
            root.prepend(node)  # appends at the end, in recorded order
    for node, name, _args, _kwargs, meta, meta_items, users, op, target in saved:
        if node.op != op or node.target is not target:  # stock edits retarget in place
            node.op, node.target = op, target  # (fx updates its find_nodes index)
        node.name = name
        meta.clear()  # values may be tensors: restore rather than compare
        meta.update(meta_items)
        node.meta = meta
        if list(node.users) != users:
            node.users.clear()
            node.users.update(dict.fromkeys(users))


__all__ = ["GraphJournal"]
