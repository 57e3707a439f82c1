"""One materialization of the C++ CompositeImplicitAutograd ops per collection (issue 17).

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

from arm_accel.scopes import ThreadScope

#: ``stats()`` entry: one accelerated call per collection that materialized once.
STATS_NAME = "to_edge.cia_ops"
#: The source digests (``passthrough.source_digest``) of the ``torch._export.utils`` functions
#: the argument above was read from, one per source read (torch 2.13; 2.14.0 and 2.15.0 differ
#: only in ``_check_valid_to_preserve``'s return annotation): with another source nothing is
#: wrapped.
MODELLED_SOURCES: dict[str, tuple[str, ...]] = {
    "_collect_all_valid_cia_ops": ("1d09a99ea79bd377",),
    "_collect_all_valid_cia_ops_for_namespace": ("c26d5cd619830773",),
    "_materialize_cpp_cia_ops": ("51472f6b4e2c3782",),
    "_is_preservable_cia_op": ("00d78e92c3d6d9f6",),
    "_check_valid_to_preserve": ("a225772212a823aa", "7f73a8adc723629a"),
    "_is_cia_op": ("4588c37719fb8356",),
}
#: The modules that bind ``_collect_all_valid_cia_ops`` by name (``from ... import``).
COLLECTION_MODULES = (
    "torch._export.utils",
    "torch.export.exported_program",
    "torch.export.decomp_utils",
)

_scope = ThreadScope()
#: Per thread: ``materialized``, the state of the innermost collection.
_local = threading.local()
_lock = threading.Lock()
_installed: dict[str, Any] = {}


def collecting_once() -> AbstractContextManager[None]:
    """In this block (this thread) each collection of CIA ops materializes once."""
    return _scope.entered()


def collecting() -> bool:
    """Whether this thread is inside :func:`collecting_once` (the edge stage's calls)."""
    return _scope.active()


def _collection(stock: Any) -> Any:
    """``_collect_all_valid_cia_ops``: inside :func:`collecting_once`, one scope of
    materialize-once (a nested collection gets its own)."""

    @functools.wraps(stock)
    def collect() -> Any:
        from arm_accel import counters

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


def _materialization(stock: Any) -> Any:
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


def install() -> None:
    """Wrap the collection (in every module binding it) and the materialization (idempotent).
    Raises ImportError, wrapping nothing, where torch's functions are not the ones modelled."""
    import importlib

    from arm_accel.retrace_engine.passthrough import source_digest

    with _lock:
        if _installed:
            return
        utils: Any = importlib.import_module("torch._export.utils")
        for name, digests in MODELLED_SOURCES.items():
            if source_digest(getattr(utils, name, None)) not in digests:
                raise ImportError(f"torch._export.utils.{name} is not the source modelled")
        stock_collect = utils._collect_all_valid_cia_ops
        stock_materialize = utils._materialize_cpp_cia_ops
        modules: list[Any] = [importlib.import_module(m) for m in COLLECTION_MODULES]
        ours_collect = _collection(stock_collect)
        ours_materialize = _materialization(stock_materialize)
        for module in modules:
            if module._collect_all_valid_cia_ops is not stock_collect:
                raise ImportError(f"{module.__name__} binds another _collect_all_valid_cia_ops")
        for module in modules:
            module._collect_all_valid_cia_ops = ours_collect
        utils._materialize_cpp_cia_ops = ours_materialize
        _installed.update(
            modules=modules,
            utils=utils,
            collect=(stock_collect, ours_collect),
            materialize=(stock_materialize, ours_materialize),
        )


def uninstall() -> None:
    """Put stock's functions back (only where ours are still installed)."""
    with _lock:
        if not _installed:
            return
        stock_collect, ours_collect = _installed["collect"]
        for module in _installed["modules"]:
            if module._collect_all_valid_cia_ops is ours_collect:
                module._collect_all_valid_cia_ops = stock_collect
        stock_materialize, ours_materialize = _installed["materialize"]
        utils = _installed["utils"]
        if utils._materialize_cpp_cia_ops is ours_materialize:
            utils._materialize_cpp_cia_ops = stock_materialize
        _installed.clear()


def installed() -> bool:
    return bool(_installed)


__all__ = [
    "COLLECTION_MODULES",
    "MODELLED_SOURCES",
    "STATS_NAME",
    "collecting",
    "collecting_once",
    "install",
    "installed",
    "uninstall",
]
