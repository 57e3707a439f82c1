"""Per-thread scopes: code run inside ``with scope.entered():`` sees ``scope.active()``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from arm_accel.control import counters


class ThreadScope:
    """A per-thread nesting depth (blocks nest; another thread never sees this one's)."""

    __slots__ = ("_local",)

    def __init__(self) -> None:
        self._local = threading.local()

    @contextmanager
    def entered(self) -> Iterator[None]:
        local = self._local
        local.depth = getattr(local, "depth", 0) + 1
        try:
            yield
        finally:
            local.depth -= 1

    def active(self) -> bool:
        return getattr(self._local, "depth", 0) > 0


class _Tally(threading.local):
    depth = 0
    calls = 0
    accelerated = 0


class CountedScope:
    """A per-thread block (blocks nest) that tallies the calls made in it, recorded in
    ``stats()`` under ``stats_name`` when the outermost block closes (one record per block,
    not one per call)."""

    __slots__ = ("_local", "_stats_name")

    def __init__(self, stats_name: str) -> None:
        self._local = _Tally()
        self._stats_name = stats_name

    @contextmanager
    def entered(self) -> Iterator[None]:
        local = self._local
        local.depth += 1
        try:
            yield
        finally:
            local.depth -= 1
            if local.depth == 0 and local.calls:
                counters.record_calls(self._stats_name, local.calls, local.accelerated, 0.0)
                local.calls = local.accelerated = 0

    def active(self) -> bool:
        return self._local.depth > 0

    def count(self, accelerated: bool) -> None:
        """One call made in the block (``accelerated``: by the fast path)."""
        local = self._local
        local.calls += 1
        local.accelerated += accelerated


__all__ = ["CountedScope", "ThreadScope"]
