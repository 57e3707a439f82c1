"""The one process-wide "collect less" scope that arm-accel's collector scopes share: the
lowering's and the quantization flow's (:mod:`arm_accel.runtime.collector`) and the imports'
(:mod:`arm_accel.bootstrap.imports`). The first scope to open freezes the objects alive and
raises the oldest generation's threshold to :data:`OLD_GENERATION_THRESHOLD`; the last to close
puts both back, whichever threads opened them. Left alone with the collector disabled, or when
the process froze objects itself. Imports nothing but ``gc`` and ``threading``: the import
hook opens it while torch is being imported. Why this changes no result: design.md, "The
garbage collector during a lowering"."""

from __future__ import annotations

import gc
import threading

#: Collections of the middle generation between two full collections (CPython's default: 10).
OLD_GENERATION_THRESHOLD = 100

_lock = threading.Lock()
#: Scopes open in the process (any thread), and the thresholds the first one found (None: the
#: first one left the collector alone).
_open = [0]
_saved: list[tuple[int, int, int] | None] = [None]


def enter() -> None:
    """Open a scope (nestable, any thread)."""
    with _lock:
        if _open[0] == 0:
            _saved[0] = _begin()
        _open[0] += 1


def leave() -> None:
    """Close the scope :func:`enter` opened; the last one open restores the collector."""
    with _lock:
        _open[0] -= 1
        if _open[0] == 0 and _saved[0] is not None:
            _end(_saved[0])
            _saved[0] = None


def open_scopes() -> int:
    """How many scopes are open in the process."""
    return _open[0]


def _begin() -> tuple[int, int, int] | None:
    """Freeze and raise the threshold; the thresholds to restore, or None when left alone."""
    if not gc.isenabled() or gc.get_freeze_count():
        return None
    young, middle, old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(young, middle, max(old, OLD_GENERATION_THRESHOLD))
    return young, middle, old


def _end(thresholds: tuple[int, int, int]) -> None:
    gc.unfreeze()
    gc.set_threshold(*thresholds)


__all__ = ["OLD_GENERATION_THRESHOLD", "enter", "leave", "open_scopes"]
