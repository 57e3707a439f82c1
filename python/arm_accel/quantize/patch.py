"""One replaced method of a torchao class: pinned to the source digest of the method it models,
installed on the class (so every instance and subclass not overriding it gets it), journaled
so that uninstalling puts torchao's method back."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class NativeFailed(Exception):
    """A native kernel raised: the call starts over with stock's method."""


def native(kernel: Callable[..., Any], *args: Any) -> Any:
    """``kernel(*args)``, its exceptions (bad input, a panic) raised as :class:`NativeFailed`
    so that they are told apart from the exceptions of stock's own code around them."""
    try:
        return kernel(*args)
    except Exception as exc:
        raise NativeFailed(f"{getattr(kernel, '__name__', kernel)}: {exc!r}") from exc


def run_accelerated(
    stats_name: str,
    decline: Callable[[], str | None],
    accelerated: Callable[[], tuple[bool, Any]],
    stock: Callable[[], Any],
) -> Any:
    """One call of a replaced method: with the switch on and nothing to decline,
    ``accelerated()`` returns ``(True, result)``, or ``(False, why)`` to run ``stock()`` (what
    it left unchanged: nothing); a :class:`NativeFailed` falls back to ``stock()`` (raises
    under ``ARM_ACCEL_STRICT``). Counted in ``arm_accel.stats()`` under ``stats_name``;
    exceptions of stock's own code inside the accelerated path propagate as stock's."""
    import time

    from arm_accel import counters, switch

    t0 = time.perf_counter()
    if switch.is_enabled():
        reason = decline()
        if reason is None:
            fell_back = False
            try:
                done, value = accelerated()
                if done:
                    return value
                fell_back = True
                counters.record_decline(stats_name, value)
            except NativeFailed as exc:
                fell_back = True
                if switch.strict():
                    counters.record_fallback(stats_name, "strict: native kernel failed")
                    raise
                counters.record_fallback(stats_name, f"native kernel failed: {exc}")
            finally:
                if not fell_back:
                    counters.record_call(stats_name, time.perf_counter() - t0, True)
        else:
            counters.record_decline(stats_name, reason)
    try:
        return stock()
    finally:
        counters.record_call(stats_name, time.perf_counter() - t0, False)


@dataclass
class SourcePin:
    """A method modelled without being replaced (its body inlined by ours): holds for a class
    whose method is the one defined at ``module:cls`` and has the source digest ``digest``."""

    module: str
    cls: str
    method: str
    digest: str
    _checked: dict[Any, bool] = field(default_factory=dict, repr=False)

    def holds(self, owner: type) -> bool:
        from arm_accel.retrace_engine.passthrough import source_digest

        method = getattr(owner, self.method, None)
        found = self._checked.get(method)
        if found is None:
            defining = getattr(importlib.import_module(self.module), self.cls)
            found = vars(defining).get(self.method) is method and (
                source_digest(method) == self.digest
            )
            self._checked[method] = found
        return found


@dataclass
class MethodPatch:
    """``module:cls.method`` replaced by ``make(stock)`` where its source digest is ``digest``."""

    module: str
    cls: str
    method: str
    digest: str
    make: Callable[[Any], Any]
    _installed: dict[str, Any] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def name(self) -> str:
        return f"{self.module}.{self.cls}.{self.method}"

    def owner(self) -> type:
        owner = getattr(importlib.import_module(self.module), self.cls)
        assert isinstance(owner, type)
        return owner

    def install(self) -> None:
        """Put ours in place (idempotent). Raises ImportError, replacing nothing, where the
        method is not the source modelled."""
        from arm_accel.retrace_engine.passthrough import source_digest

        with self._lock:
            if self._installed:
                return
            owner = self.owner()
            stock = vars(owner)[self.method]
            if source_digest(stock) != self.digest:
                raise ImportError(f"{self.name} is not the source modelled")
            ours = self.make(stock)
            setattr(owner, self.method, ours)
            self._installed.update(owner=owner, stock=stock, ours=ours)

    def uninstall(self) -> None:
        """Put torchao's method back (only where ours is still there)."""
        with self._lock:
            if not self._installed:
                return
            owner = self._installed["owner"]
            if vars(owner).get(self.method) is self._installed["ours"]:
                setattr(owner, self.method, self._installed["stock"])
            self._installed.clear()

    def installed(self) -> bool:
        return bool(self._installed)

    def stock(self) -> Any:
        """torchao's own method (installed or not)."""
        if self._installed:
            return self._installed["stock"]
        return vars(self.owner())[self.method]
