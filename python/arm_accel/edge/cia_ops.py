"""One materialization of the C++ CompositeImplicitAutograd ops per collection.

``run_decompositions`` collects the preservable CIA ops (``torch._export.utils.
_collect_all_valid_cia_ops``) twice per call: splitting the table and materializing a
``CustomDecompTable``. The collection walks every non-aten namespace of ``torch.ops`` (86 in an
Arm lowering) and, for each, first calls ``_materialize_cpp_cia_ops``, which fetches every CIA
registration from the C++ dispatcher and touches ``torch.ops.<ns>.<op>.<overload>`` for each
(about 1,000 ops): a quarter of an accelerated DS-CNN or ResNet8 decomposition phase.

Inside :func:`collecting_once` (this thread), a collection materializes once, at its first
namespace, as stock does there; its later materializations return at once. That is exact: a
materialization only creates and caches ``torch.ops`` attributes (``_Ops`` / ``_OpNamespace``
cache what they create, so touching them again changes nothing), and what a collection runs
between two of them (listing a namespace's cached packets and their overloads, reading schemas
and dispatcher kernels) registers nothing, so each later one would fetch the same registrations
and touch attributes that are already cached. Outside the block, or while none has succeeded
yet, every call is stock's. Counted in ``arm_accel.stats()`` under :data:`STATS_NAME`, one
accelerated call per collection.
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
