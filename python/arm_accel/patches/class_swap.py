"""Putting an accelerated pass class wherever executorch looks the stock class up.

By identity (same-named classes elsewhere, e.g. the ``backends.transforms`` bases the Arm
passes derive from, are never touched): the stock class's defining module, the
``executorch.backends.arm._passes`` namespace and the globals of every loaded ``executorch``
module holding it (``arm_pass_manager``, ``from ... import X``). Modules imported later get ours
through the package namespace or the defining module.

If the replacement's own module is still importing (a user imported one of our pass modules
before executorch's Arm passes, which triggered the activation), the swap waits until that
import finishes (:class:`_NotifyingSpec`).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from collections.abc import Callable
from typing import Any

PASSES_PACKAGE = "executorch.backends.arm._passes"

#: (owner module, attribute, stock class, installed class) -> None: records one replacement
Record = Callable[[Any, str, type, type], None]


def resolve_stock(name: str) -> type | None:
    """The stock Arm pass class ``name`` (the original, if already swapped)."""
    passes_pkg = sys.modules.get(PASSES_PACKAGE)
    obj = getattr(passes_pkg, name, None)
    if isinstance(obj, type):
        return getattr(obj, "_arm_accel_stock", obj)
    prefix = PASSES_PACKAGE + "."
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not mod_name.startswith(prefix):
            continue
        obj = getattr(mod, name, None)
        if isinstance(obj, type) and obj.__module__ == mod_name:
            return getattr(obj, "_arm_accel_stock", obj)
    return None


def installed_class(stock: type, accel: type, name: str) -> type:
    """The class put in place of ``stock``: ``accel`` under the stock ``__name__`` and
    ``__qualname__`` (the Arm pass manager matches passes by name). A class not built on
    ``AcceleratedPass`` is wrapped with ``GuardedCallMixin`` (switch, stats)."""
    from arm_accel.pipeline.passes.base import AcceleratedPass, GuardedCallMixin

    if not issubclass(accel, stock):
        raise TypeError(f"{accel.__module__}.{accel.__qualname__} does not subclass {name}")
    attrs: dict[str, Any] = {
        "__module__": stock.__module__,
        "__qualname__": stock.__qualname__,
        "__doc__": accel.__doc__ or stock.__doc__,
        "_arm_accel_stock": stock,
        "_arm_accel_name": name,
        "_arm_accel_impl": accel,
    }
    bases: tuple[type, ...] = (
        (accel,) if issubclass(accel, AcceleratedPass) else (GuardedCallMixin, accel)
    )
    return type(stock.__name__, bases, attrs)


def replace_everywhere(stock: type, new: type, record: Record) -> int:
    """Replace ``stock`` by ``new`` in every loaded executorch module (by identity)."""
    count = 0
    seen: set[int] = set()
    modules = [sys.modules.get(PASSES_PACKAGE), sys.modules.get(stock.__module__)]
    modules += [m for n, m in list(sys.modules.items()) if n.startswith("executorch.")]
    for mod in modules:
        if mod is None or id(mod) in seen:
            continue
        seen.add(id(mod))
        d = getattr(mod, "__dict__", None)
        if not isinstance(d, dict):
            continue
        for attr, value in list(d.items()):
            if value is stock:
                record(mod, attr, stock, new)
                count += 1
    return count


def swap(name: str, replacement: str, stock: type, record: Record) -> None:
    """Install ``replacement`` (``"module:Class"``) in place of ``stock``; raises on failure."""
    module_name, _, qualname = replacement.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise TypeError(f"{replacement} is not a class")
    replace_everywhere(stock, installed_class(stock, obj, name), record)


class _NotifyingSpec(importlib.machinery.ModuleSpec):
    """Swapped in as the ``__class__`` of a module spec whose import is under way: importlib
    clears ``spec._initializing`` when the module has finished executing (or failed), which is
    when its deferred swaps can complete."""

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name == "_initializing" and not value:
            object.__setattr__(self, "__class__", importlib.machinery.ModuleSpec)
            callbacks = _pending.pop(self.name, [])
            for callback in callbacks:
                callback()


# module still importing -> the swaps waiting for it
_pending: dict[str, list[Callable[[], None]]] = {}


def _initializing(module_name: str) -> Any:
    spec = getattr(sys.modules.get(module_name), "__spec__", None)
    return spec if getattr(spec, "_initializing", False) else None


def defer(replacement: str, callback: Callable[[], None]) -> bool:
    """Run ``callback`` once the module it waits for has finished importing (True), or do
    nothing (False) when none is importing. It waits for ``replacement``'s module, else for a
    module of the same package (its first three components) whose import is under way: that
    import triggered the activation, and ``replacement``'s module may import names from it."""
    module_name = replacement.partition(":")[0]
    package = ".".join(module_name.split(".")[:3]) + "."
    waiting = [module_name] + sorted(
        n for n in list(sys.modules) if n.startswith(package) and n != module_name
    )
    found = next(((n, spec) for n in waiting if (spec := _initializing(n)) is not None), None)
    if found is None:
        return False
    name, module_spec = found
    if not isinstance(module_spec, _NotifyingSpec):
        try:
            module_spec.__class__ = _NotifyingSpec
        except TypeError:
            return False
    _pending.setdefault(name, []).append(callback)
    return True


def cancel_pending() -> None:
    _pending.clear()


__all__ = [
    "PASSES_PACKAGE",
    "cancel_pending",
    "defer",
    "installed_class",
    "replace_everywhere",
    "resolve_stock",
    "swap",
]
