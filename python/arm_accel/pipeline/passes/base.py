"""Building blocks for accelerated passes: plan, then edit through a journal, else stock.

:class:`AcceleratedPass` touches the graph only once its plan has succeeded; an edit that fails
anyway is rolled back by the :class:`GraphJournal` and the stock pass runs on the graph it would
have received, counted in ``arm_accel.stats()`` with the reason. Why the fallback is exactly
stock's: design.md, "The view/permute passes".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import torch.fx

from arm_accel.control import counters, switch
from arm_accel.runtime import identity

logger = logging.getLogger("arm_accel")

_MISSING = object()


class Decline(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised by ``accel_plan`` to run the stock pass instead; the message is the reason."""


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Tag an exception leaving the block with the stage it failed in (the innermost wins)."""
    try:
        yield
    except Exception as exc:
        if getattr(exc, "_arm_accel_stage", None) is None:
            exc._arm_accel_stage = name  # type: ignore[attr-defined]
        raise


class GraphJournal:
    """Applies graph edits and remembers how to undo them.

    Everything an ``accel_apply`` does to the graph goes through here. ``rollback()`` undoes the
    edits in reverse order and restores the graph's name counters, so the stock pass then produces
    the very same node names it would have produced on the untouched graph. ``erase`` is deferred to
    ``commit()`` (checked first, so commit cannot fail half-way), which also recompiles.
    """

    def __init__(self, graph_module: torch.fx.GraphModule) -> None:
        self.graph_module = graph_module
        self.graph = graph_module.graph
        self._undo: list[Callable[[], None]] = []
        self._to_erase: list[torch.fx.Node] = []
        self._namespace: tuple[Any, ...] | None = None
        self._checkpoint: list[tuple[Any, ...]] | None = None
        self._identity = 0  # the graph's renewals at the checkpoint
        self.done = False

    # -- node creation ---------------------------------------------------------------------
    def _snapshot_names(self) -> None:
        if self._namespace is None:
            ns = self.graph._graph_namespace
            self._namespace = (dict(ns._obj_to_name), set(ns._used_names), dict(ns._base_count))

    def create_node(
        self,
        op: str,
        target: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        name: str | None = None,
        before: torch.fx.Node | None = None,
        after: torch.fx.Node | None = None,
        meta: dict[str, Any] | None = None,
    ) -> torch.fx.Node:
        """Create a node before ``before`` / after ``after`` (default: the graph's insert point)."""
        self._snapshot_names()
        if before is not None:
            ctx = self.graph.inserting_before(before)
        elif after is not None:
            ctx = self.graph.inserting_after(after)
        else:
            ctx = None
        if ctx is None:
            node = self.graph.create_node(op, target, args, kwargs, name)
        else:
            with ctx:
                node = self.graph.create_node(op, target, args, kwargs, name)
        self._undo.append(lambda: self._erase_now(node))
        if meta:
            node.meta.update(meta)
        return node

    def call_function(
        self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None, **where: Any
    ) -> torch.fx.Node:
        return self.create_node("call_function", target, args, kwargs, **where)

    def _erase_now(self, node: torch.fx.Node) -> None:
        if not node._erased:
            self.graph.erase_node(node)

    # -- edits of existing nodes -----------------------------------------------------------
    def set_args(
        self,
        node: torch.fx.Node,
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        old_args, old_kwargs = node.args, node.kwargs

        def undo() -> None:
            node.args, node.kwargs = old_args, old_kwargs

        self._undo.append(undo)
        if args is not None:
            node.args = tuple(args)
        if kwargs is not None:
            node.kwargs = dict(kwargs)

    def replace_input(self, node: torch.fx.Node, old: torch.fx.Node, new: torch.fx.Node) -> None:
        self.set_args(node, node.args, node.kwargs)  # record, then edit in place
        node.replace_input_with(old, new)

    def replace_all_uses_with(
        self,
        old: torch.fx.Node,
        new: torch.fx.Node,
        delete_user_cb: Callable[[torch.fx.Node], bool] | None = None,
    ) -> list[torch.fx.Node]:
        users = [u for u in old.users if delete_user_cb is None or delete_user_cb(u)]
        for user in users:
            self.set_args(user, user.args, user.kwargs)
        return old.replace_all_uses_with(new, delete_user_cb or (lambda _: True))

    def set_meta(self, node: torch.fx.Node, key: str, value: Any) -> None:
        old = node.meta.get(key, _MISSING)

        def undo() -> None:
            if old is _MISSING:
                node.meta.pop(key, None)
            else:
                node.meta[key] = old

        self._undo.append(undo)
        node.meta[key] = value

    def move_before(self, node: torch.fx.Node, anchor: torch.fx.Node) -> None:
        prev = node.prev
        self._undo.append(lambda: prev.append(node))
        anchor.prepend(node)

    def move_after(self, node: torch.fx.Node, anchor: torch.fx.Node) -> None:
        prev = node.prev
        self._undo.append(lambda: prev.append(node))
        anchor.append(node)

    def erase(self, node: torch.fx.Node) -> None:
        """Erase ``node`` at commit (it must have no users left by then, other than erased ones)."""
        self._to_erase.append(node)

    def on_undo(self, fn: Callable[[], None]) -> None:
        """Register the undo of an edit made some other way (e.g. a new attribute on the module)."""
        self._undo.append(fn)

    def checkpoint(self) -> None:
        """Record the whole graph as it is now, for edits made outside the journal (stock's own
        edit methods, fx's DCE, a virtual re-trace, nested passes): ``rollback`` then restores
        every node recorded here -- order, name, op, target, args, kwargs, meta, users order --
        revives the erased ones and erases every node created since. O(nodes), once per
        journal."""
        self._snapshot_names()
        self._checkpoint = [
            (n, n.name, n.args, n.kwargs, n.meta, dict(n.meta), list(n.users), n.op, n.target)
            for n in self.graph.nodes
        ]
        self._identity = identity.mark(self.graph)

    def _restore_checkpoint(self, saved: list[tuple[Any, ...]]) -> None:
        graph = self.graph
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
        identity.restore(graph, self._identity)  # re-traces since made no new graph after all
        self.graph_module.recompile()

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
        """Undo every edit, newest first, and restore the node-name counters."""
        if self.done:
            raise RuntimeError("journal already committed")
        errors: list[Exception] = []
        if self._checkpoint is not None:
            # The checkpoint covers every journaled edit too; undo closures of nodes it erases
            # would only find them erased already.
            self._undo.clear()
            try:
                self._restore_checkpoint(self._checkpoint)
            except Exception as exc:
                errors.append(exc)
            self._checkpoint = None
        while self._undo:
            fn = self._undo.pop()
            try:
                fn()
            except Exception as exc:  # keep undoing the rest
                errors.append(exc)
        if self._namespace is not None:
            ns = self.graph._graph_namespace
            obj_to_name, used, base = self._namespace
            ns._obj_to_name.clear()
            ns._obj_to_name.update(obj_to_name)
            ns._used_names.clear()
            ns._used_names.update(used)
            ns._base_count.clear()
            ns._base_count.update(base)
        self._to_erase.clear()
        self.done = True
        if errors:
            raise RuntimeError(f"rollback incomplete: {errors!r}")


def _stock_class(cls: type) -> type:
    stock = cls.__dict__.get("_arm_accel_stock") or getattr(cls, "_arm_accel_stock", None)
    if stock is not None:
        return stock
    for klass in cls.__mro__:
        if isinstance(klass, type) and not issubclass(klass, (AcceleratedPass, GuardedCallMixin)):
            return klass
    raise TypeError(f"{cls.__qualname__} has no stock base class")


def _stats_name(obj: Any) -> str:
    cls = type(obj)
    name = getattr(cls, "_arm_accel_name", None) or getattr(cls, "accel_name", None)
    return name or _stock_class(cls).__name__


class AcceleratedPass:
    """Mixin for accelerated passes; list it first among the bases.

    ``class AcceleratedFooPass(AcceleratedPass, FooPass)`` defines ``accel_plan`` (reads the
    graph, plans; ``raise Decline(reason)`` runs stock) and ``accel_apply`` (edits only through
    the journal), and is declared as a ``ClassSwap`` row of the patch table's ``passes`` group.
    ``call`` runs stock when the switch is off; otherwise plans (a decline or an exception: stock
    on the untouched graph), applies and commits (an exception: rollback, then stock; re-raised
    under ``ARM_ACCEL_STRICT=1``), and counts calls, fallbacks, re-traces and seconds under the
    stock class name. Helpers take new names (``accel_*``) so the stock methods ``call`` relies
    on stay stock's.
    """

    #: Stats key; defaults to the stock class name.
    accel_name: ClassVar[str | None] = None
    #: Whether the driver recompiles when it commits (passes that re-trace or recompile
    #: themselves, as their stock ``call`` does, say False).
    accel_recompile: ClassVar[bool] = True
    #: ``accel_apply`` re-traces (if at all) as its last edit, inside the journal's transaction:
    #: the re-trace engine may run it in place (``retrace_engine.RETRACE_LAST``).
    _arm_accel_retrace_last: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        owner = next(k for k in cls.__mro__ if "call" in k.__dict__)
        if not issubclass(owner, AcceleratedPass):
            raise TypeError(
                f"{cls.__qualname__}: list AcceleratedPass before the stock pass in the bases"
            )

    # -- to implement ----------------------------------------------------------------------
    def accel_plan(self, graph_module: torch.fx.GraphModule) -> Any:
        """Compute the edits without touching the graph; raise :class:`Decline` to fall back."""
        raise Decline("no accelerated implementation")

    def accel_apply(
        self, graph_module: torch.fx.GraphModule, plan: Any, journal: GraphJournal
    ) -> Any:
        """Apply ``plan`` through ``journal``; return the pass result (as the stock ``call``)."""
        raise NotImplementedError

    # -- helpers ---------------------------------------------------------------------------
    def note_retrace(self, n: int = 1) -> None:
        """Count a re-trace (e.g. an ExportPass retrace) of the current call in the stats."""
        self._accel_retraces = getattr(self, "_accel_retraces", 0) + n

    def stock_call(self, graph_module: torch.fx.GraphModule) -> Any:
        """The stock pass's ``call`` on this instance."""
        return _stock_class(type(self)).call(self, graph_module)

    # -- driver ----------------------------------------------------------------------------
    def call(self, graph_module: torch.fx.GraphModule) -> Any:
        name = _stats_name(self)
        t0 = time.perf_counter()
        self._accel_retraces = 0
        if not switch.is_enabled():
            try:
                return self.stock_call(graph_module)
            finally:
                counters.record_call(name, time.perf_counter() - t0, False, self._accel_retraces)

        reason: str
        try:
            plan = self.accel_plan(graph_module)
        except Decline as exc:
            reason = str(exc) or "declined"
        except Exception as exc:
            reason = f"plan failed: {type(exc).__name__}"
            logger.debug("arm_accel: %s plan failed", name, exc_info=True)
            if switch.strict():
                counters.record_fallback(name, f"strict: {reason}")
                raise
        else:
            journal = GraphJournal(graph_module)
            try:
                result = self.accel_apply(graph_module, plan, journal)
                if not journal.done:
                    journal.commit(recompile=self.accel_recompile)
            except Exception as exc:
                reason = f"apply failed: {type(exc).__name__}"
                logger.debug("arm_accel: %s apply failed, rolling back", name, exc_info=True)
                if not journal.done:
                    journal.rollback()
                if switch.strict():
                    counters.record_fallback(name, f"strict: {reason}")
                    raise
            else:
                counters.record_call(name, time.perf_counter() - t0, True, self._accel_retraces)
                return result
        if reason.startswith(("plan failed", "apply failed")):
            counters.record_fallback(name, reason)
        else:  # a decline by design: counted, not logged as a warning
            counters.record_decline(name, reason)
        try:
            return self.stock_call(graph_module)
        finally:
            counters.record_call(name, time.perf_counter() - t0, False, self._accel_retraces)


class GuardedCallMixin:
    """Put by the activation in front of registered classes that are not AcceleratedPass: runs
    ``stock.call`` when the switch is off, and records a call in the stats if the class did not."""

    _arm_accel_stock: ClassVar[type]
    _arm_accel_name: ClassVar[str]
    #: Only wraps the stock ``call``: its re-trace may run in place (``RETRACE_LAST``).
    _arm_accel_retrace_last: ClassVar[bool] = True

    def call(self, graph_module: torch.fx.GraphModule) -> Any:
        name = _stats_name(self)
        t0 = time.perf_counter()
        if not switch.is_enabled():
            try:
                return _stock_class(type(self)).call(self, graph_module)
            finally:
                counters.record_call(name, time.perf_counter() - t0, False)
        # Count this thread's records only: another thread's call of the same pass in between
        # must not make this one look recorded.
        before = counters.calls_in_this_thread(name)
        result = super().call(graph_module)  # type: ignore[misc]
        if counters.calls_in_this_thread(name) == before:
            counters.record_call(name, time.perf_counter() - t0, True)
        return result
