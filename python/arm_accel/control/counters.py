"""Per-pass counters: calls, accelerated runs, fallbacks with reasons, re-traces, seconds.

The recording side, called by the accelerated passes, the re-trace engine and the edge stage.
Thread-safe; read a typed snapshot with ``arm_accel.stats()`` (:func:`snapshot`).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field

from arm_accel.control.records import PassStats, Stats

_lock = threading.Lock()


@dataclass
class _Counts:
    """The running counters of one entry; :class:`~arm_accel.control.records.PassStats` is its
    frozen snapshot (same fields)."""

    calls: int = 0
    accelerated: int = 0
    fallbacks: Counter[str] = field(default_factory=Counter)
    retraces: int = 0
    seconds: float = 0.0
    scans_native: int = 0
    scans_declined: Counter[str] = field(default_factory=Counter)
    scan_runs: int = 0
    shape_mismatches: int = 0

    def frozen(self) -> PassStats:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["fallbacks"] = dict(self.fallbacks)
        values["scans_declined"] = dict(self.scans_declined)
        return PassStats(**values)


_stats: dict[str, _Counts] = {}
# Calls recorded by the current thread, per pass, never reset: lets a caller tell whether a call
# it made recorded itself without being misled by other threads' records (GuardedCallMixin).
_thread = threading.local()
_warned: set[tuple[str, str]] = set()  # survives reset(): warn once per process


def _get(name: str) -> _Counts:
    s = _stats.get(name)
    if s is None:
        s = _stats[name] = _Counts()
    return s


def _count_in_thread(name: str, accelerated: bool) -> None:
    """One call of ``name`` in this thread's own counts."""
    mine = getattr(_thread, "calls", None)
    if mine is None:
        mine = _thread.calls = Counter()
        _thread.accelerated = Counter()
    mine[name] += 1
    _thread.accelerated[name] += int(accelerated)


def record_call(name: str, seconds: float, accelerated: bool, retraces: int = 0) -> None:
    """One finished call of pass ``name``; ``accelerated`` is False for a stock run."""
    _count_in_thread(name, accelerated)
    with _lock:
        s = _get(name)
        s.calls += 1
        s.accelerated += int(accelerated)
        s.retraces += retraces
        s.seconds += seconds


def record_calls(name: str, calls: int, accelerated: int, seconds: float) -> None:
    """``calls`` finished calls of ``name`` at once, ``accelerated`` of them accelerated (for
    entries counting many small calls, recorded once per batch)."""
    with _lock:
        s = _get(name)
        s.calls += calls
        s.accelerated += accelerated
        s.seconds += seconds


def record_call_with(
    name: str, seconds: float, served: tuple[tuple[str, int], ...], retraces: int = 0
) -> None:
    """One accelerated call of ``name`` (as :func:`record_call`) and, under the same lock,
    ``n`` calls of each ``(entry, n)`` of ``served``, all accelerated, over the same seconds
    (for a call that serves the entries of its parts at once)."""
    _count_in_thread(name, True)
    with _lock:
        s = _get(name)
        s.calls += 1
        s.accelerated += 1
        s.retraces += retraces
        s.seconds += seconds
        for entry, n in served:
            s = _get(entry)
            s.calls += n
            s.accelerated += n
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


def calls_in_this_thread(name: str) -> int:
    """Calls of ``name`` recorded by the calling thread since it started (unaffected by reset)."""
    mine = getattr(_thread, "calls", None)
    return 0 if mine is None else mine[name]


def accelerated_in_this_thread(name: str) -> int:
    """Accelerated calls of ``name`` recorded by the calling thread (unaffected by reset)."""
    mine = getattr(_thread, "accelerated", None)
    return 0 if mine is None else mine[name]


def snapshot() -> Stats:
    """Every entry recorded since the last :func:`reset`, in name order."""
    _take_imports()
    with _lock:
        return Stats({name: s.frozen() for name, s in sorted(_stats.items())})


def reset() -> None:
    _take_imports()
    with _lock:
        _stats.clear()


def _take_imports() -> None:
    """Record the imports the import hook ran in the collector's scope since the last call
    (it keeps them itself: it runs while torch is imported, before this module can be)."""
    imports = sys.modules.get("arm_accel.bootstrap.imports")
    if imports is not None:
        calls, seconds = imports.take_counted()
        if calls:
            record_calls(imports.STATS_NAME, calls, calls, seconds)
