"""The imports of torch, executorch and torchao inside the collector's scope.

A lowering script's imports build about 490,000 objects that live as long as the process; with
CPython's thresholds the collector walks that growing heap in eight full collections (about
0.65 s of 4.3 s) and finds a few hundred objects to free. Here the outermost import of a module
of :data:`PACKAGES` in a thread (``import torch``, ``from executorch.backends.arm.quantizer
import ...``) runs inside :mod:`arm_accel.runtime.gc_scope`'s scope; the imports it makes run
inside it too. Installed by the ``.pth`` bootstrap finder on the first such import (nothing with
``ARM_ACCEL=0``); with the switch off in the importing thread the import runs as it is.
Counted in ``arm_accel.stats()`` under :data:`STATS_NAME`. Why this changes no result:
design.md, "The garbage collector during a lowering".
"""

import sys
import threading
import time

from arm_accel.bootstrap.hook import DelegatingLoader, spec_from_others
from arm_accel.runtime import gc_scope

#: The top-level packages whose imports run in the scope.
PACKAGES = frozenset({"torch", "executorch", "torchao"})
#: ``stats()`` entry: one call per outermost import run in the scope, its seconds.
STATS_NAME = "imports.collector"

#: Per thread: an outermost import of PACKAGES is being resolved or executed.
_local = threading.local()
#: The scoped imports not counted yet (how many, their seconds): the counters cannot be
#: imported while torch is (they import the patch table); ``counters.snapshot()`` takes them
#: (:func:`take_counted`).
_tally_lock = threading.Lock()
_tally: list[float] = [0, 0.0]


class _ScopedLoader(DelegatingLoader):
    """Runs the module, and every import it makes, inside the collector's scope."""

    def run(self, exec_module) -> None:  # noqa: ANN001
        start = time.perf_counter()
        _local.busy = True
        gc_scope.enter()
        try:
            exec_module()
        finally:
            gc_scope.leave()
            _local.busy = False
            with _tally_lock:
                _tally[0] += 1
                _tally[1] += time.perf_counter() - start


class ImportScopeFinder:
    """A meta-path finder that answers only for the outermost import of a module of
    :data:`PACKAGES` in a thread: the spec the other finders give, its loader wrapped."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001
        if getattr(_local, "busy", False) or fullname.partition(".")[0] not in PACKAGES:
            return None
        if not _switched_on():
            return None
        _local.busy = True
        try:
            spec = spec_from_others(self, fullname, path, target)
        finally:
            _local.busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _ScopedLoader(spec.loader, fullname)
        return spec

    def invalidate_caches(self) -> None:
        pass


def _switched_on() -> bool:
    from arm_accel.control import switch

    return switch.is_enabled()


def installed() -> "ImportScopeFinder | None":
    for finder in sys.meta_path:
        if isinstance(finder, ImportScopeFinder):
            return finder
    return None


def install() -> "ImportScopeFinder":
    """Put the finder first on ``sys.meta_path`` (idempotent); the finder."""
    finder = installed()
    if finder is None:
        finder = ImportScopeFinder()
        sys.meta_path.insert(0, finder)
    return finder


def bootstrap(fullname, path=None, target=None):  # noqa: ANN001
    """Called by the ``.pth`` bootstrap finder on the first import of a module of
    :data:`PACKAGES`: install the finder and let it answer."""
    return install().find_spec(fullname, path, target)


def take_counted() -> tuple[int, float]:
    """How many imports ran in the scope since the last call, and their seconds (for
    ``counters.snapshot()``)."""
    with _tally_lock:
        calls, seconds = int(_tally[0]), _tally[1]
        _tally[0], _tally[1] = 0, 0.0
    return calls, seconds
