"""One materialization of the C++ CompositeImplicitAutograd ops per collection.

Each ``run_decompositions`` call collects the preservable CIA ops twice, and each collection
re-materializes every C++ CIA registration (about 1,000 ``torch.ops`` attributes) at each of the
86 non-aten namespaces. Inside :func:`collecting_once` (this thread) a collection materializes
once, at its first namespace as stock does; exact because a materialization only creates and
caches ``torch.ops`` attributes and nothing in between registers an op (design.md).
"""

from __future__ import annotations

import functools
import threading
import time
from contextlib import AbstractContextManager
from typing import Any

from arm_accel.runtime.scopes import ThreadScope

#: ``stats()`` entry: one accelerated call per collection that materialized once.
STATS_NAME = "to_edge.cia_ops"
_scope = ThreadScope()
#: Per thread: ``materialized``, the state of the innermost collection.
_local = threading.local()


def collecting_once() -> AbstractContextManager[None]:
    """In this block (this thread) each collection of CIA ops materializes once."""
    return _scope.entered()


def collecting() -> bool:
    """Whether this thread is inside :func:`collecting_once` (the edge stage's calls)."""
    return _scope.active()


def collection(stock: Any) -> Any:
    """``_collect_all_valid_cia_ops``: inside :func:`collecting_once`, one scope of
    materialize-once (a nested collection gets its own)."""

    @functools.wraps(stock)
    def collect() -> Any:
        from arm_accel.control import counters

        if not _scope.active():
            return stock()
        outer = getattr(_local, "materialized", None)
        _local.materialized = False
        t0 = time.perf_counter()
        try:
            result = stock()
        finally:
            _local.materialized = outer
        counters.record_call(STATS_NAME, time.perf_counter() - t0, accelerated=True)
        return result

    return collect


def materialization(stock: Any) -> Any:
    """``_materialize_cpp_cia_ops``: a no-op after one succeeded in the same collection."""

    @functools.wraps(stock)
    def materialize() -> None:
        state = getattr(_local, "materialized", None)
        if state:
            return
        stock()
        if state is not None:  # inside a collection: the next ones have nothing to do
            _local.materialized = True

    return materialize


__all__ = [
    "STATS_NAME",
    "collecting",
    "collecting_once",
    "collection",
    "materialization",
]
