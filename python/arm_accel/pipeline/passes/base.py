"""Building blocks for accelerated passes: plan, then edit through a journal, else stock.

:class:`AcceleratedPass` touches the graph only once its plan has succeeded; an edit that fails
anyway is rolled back by the :class:`GraphJournal` and the stock pass runs on the graph it would
have received, counted in ``arm_accel.stats()`` with the reason. Why the fallback is exactly
stock's: design.md, "The view/permute passes".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import torch.fx

from arm_accel.control import counters, switch
from arm_accel.fxstock import GraphJournal
from arm_accel.runtime import eval_counter

logger = logging.getLogger("arm_accel")


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
    def _stock_recompiles_before_retrace(self) -> bool:
        """The stock class's ``_recompile_before_retrace`` (True for the ``backends.transforms``
        fusions)."""
        return bool(getattr(_stock_class(type(self)), "_recompile_before_retrace", False))

    def accel_recompile_number(self) -> None:
        """Where stock's ``call`` recompiles right before its re-trace: ours does not (the
        re-trace generates the code anew) and takes the recompile's ``<eval_with_key>`` number
        in its place."""
        if self._stock_recompiles_before_retrace():
            eval_counter.take(eval_counter.RECOMPILE)

    @property
    def _recompile_before_retrace(self) -> bool:
        """Read by stock's own ``call`` where it may recompile (a pass that runs it): switched
        off, stock's answer; else :meth:`accel_recompile_number`, and no recompile."""
        if not switch.is_enabled():
            return self._stock_recompiles_before_retrace()
        self.accel_recompile_number()
        return False

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
            numbers = eval_counter.position()
            try:
                result = self.accel_apply(graph_module, plan, journal)
                if not journal.done:
                    journal.commit(recompile=self.accel_recompile)
            except Exception as exc:
                reason = f"apply failed: {type(exc).__name__}"
                logger.debug("arm_accel: %s apply failed, rolling back", name, exc_info=True)
                if not journal.done:
                    journal.rollback()
                eval_counter.rewind(numbers)  # the stock pass takes them
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
