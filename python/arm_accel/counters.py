"""Per-pass counters: calls, accelerated runs, fallbacks with reasons, re-traces, seconds.

Thread-safe; read a snapshot with ``arm_accel.stats()`` (this module is callable).
"""

from __future__ import annotations

import sys
import threading
import types
from collections import Counter
from dataclasses import dataclass, field

_lock = threading.Lock()


@dataclass
class PassStats:
    calls: int = 0
    accelerated: int = 0
    fallbacks: Counter[str] = field(default_factory=Counter)
    retraces: int = 0
    seconds: float = 0.0
    #: Propagation scans decided by the native planner, and the ones it declined, by reason.
    scans_native: int = 0
    scans_declined: Counter[str] = field(default_factory=Counter)
    #: Runs of natively planned scans (the re-trace between a run's scans modelled), and the
    #: values, dead nodes and users orders the model got wrong (checked against a virtual
    #: re-trace on every run that read modelled values; each such run falls back; should stay 0).
    scan_runs: int = 0
    shape_mismatches: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "calls": self.calls,
            "accelerated": self.accelerated,
            "fallbacks": dict(self.fallbacks),
            "retraces": self.retraces,
            "seconds": self.seconds,
            "scans_native": self.scans_native,
            "scans_declined": dict(self.scans_declined),
            "scan_runs": self.scan_runs,
            "shape_mismatches": self.shape_mismatches,
        }


_stats: dict[str, PassStats] = {}
# Calls recorded by the current thread, per pass, never reset: lets a caller tell whether a call
# it made recorded itself without being misled by other threads' records (GuardedCallMixin).
_thread = threading.local()
_warned: set[tuple[str, str]] = set()  # survives reset(): warn once per process


def _get(name: str) -> PassStats:
    s = _stats.get(name)
    if s is None:
        s = _stats[name] = PassStats()
    return s


def record_call(name: str, seconds: float, accelerated: bool, retraces: int = 0) -> None:
    """One finished call of pass ``name``; ``accelerated`` is False for a stock run."""
    mine = getattr(_thread, "calls", None)
    if mine is None:
        mine = _thread.calls = Counter()
        _thread.accelerated = Counter()
    mine[name] += 1
    _thread.accelerated[name] += int(accelerated)
    with _lock:
        s = _get(name)
        s.calls += 1
        s.accelerated += int(accelerated)
        s.retraces += retraces
        s.seconds += seconds


def record_fallback(name: str, reason: str) -> None:
    """The accelerated path declined (or failed) and the stock pass ran instead.

    Logs one warning per (pass, reason) on the ``arm_accel`` logger.
    """
    with _lock:
        s = _get(name)
        first = s.fallbacks[reason] == 0 and (name, reason) not in _warned
        s.fallbacks[reason] += 1
        if first:
            _warned.add((name, reason))
    if first:
        import logging

        logging.getLogger("arm_accel").warning(
            "arm_accel: %s fell back to the stock pass: %s", name, reason
        )


def record_decline(name: str, reason: str) -> None:
    """Like :func:`record_fallback` for a decline by design (a case not modelled, known before
    anything ran): counted with its reason, logged at debug level only."""
    with _lock:
        _get(name).fallbacks[reason] += 1
    import logging

    logging.getLogger("arm_accel").debug("arm_accel: %s runs stock: %s", name, reason)


def record_scan(name: str, declined: str | None) -> None:
    """One propagation scan of pass ``name``: planned natively (``declined`` None) or declined
    with that reason (stock's walk ran it)."""
    with _lock:
        s = _get(name)
        if declined is None:
            s.scans_native += 1
        else:
            s.scans_declined[declined] += 1


def record_scan_run(name: str) -> None:
    """One run of consecutive natively planned scans of pass ``name``."""
    with _lock:
        _get(name).scan_runs += 1


def record_shape_mismatch(name: str, count: int) -> None:
    """``count`` values the between-scan model predicted differently from the re-trace."""
    with _lock:
        _get(name).shape_mismatches += count


def calls_of(name: str) -> int:
    """Calls recorded so far for ``name`` (0 if none)."""
    with _lock:
        s = _stats.get(name)
        return 0 if s is None else s.calls


def calls_in_this_thread(name: str) -> int:
    """Calls of ``name`` recorded by the calling thread since it started (unaffected by reset)."""
    mine = getattr(_thread, "calls", None)
    return 0 if mine is None else mine[name]


def accelerated_in_this_thread(name: str) -> int:
    """Accelerated calls of ``name`` recorded by the calling thread (unaffected by reset)."""
    mine = getattr(_thread, "accelerated", None)
    return 0 if mine is None else mine[name]


def snapshot() -> dict[str, dict[str, object]]:
    with _lock:
        return {name: s.as_dict() for name, s in sorted(_stats.items())}


def reset() -> None:
    with _lock:
        _stats.clear()


class _CallableModule(types.ModuleType):
    """``arm_accel.stats()`` is ``arm_accel.stats.snapshot()``."""

    def __call__(self) -> dict[str, dict[str, object]]:
        return snapshot()


sys.modules[__name__].__class__ = _CallableModule
