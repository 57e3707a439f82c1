"""Swap ExecuTorch's stock Arm pass classes for the accelerated ones listed in
:data:`arm_accel.passes.REGISTRY`, wherever executorch looks them up.

Called by the start-up hook (:mod:`arm_accel._hook`) right after
``executorch.backends.arm._passes`` has been imported, or by :func:`arm_accel.enable`.

Where a stock class is replaced (by identity, so same-named classes elsewhere, e.g. the
``executorch.backends.transforms`` bases the Arm passes derive from, are never touched):

- its defining module and the ``executorch.backends.arm._passes`` package namespace;
- the globals of every loaded ``executorch.*`` module holding the stock class object (this covers
  ``arm_pass_manager`` and any module that did ``from ... import X``). Modules imported later get
  ours through the package namespace or the defining module.

Every replacement is journaled so :func:`deactivate` can put the stock classes back.

Import order: if a user imports one of our pass modules before executorch's Arm passes, that
module's own ``import executorch...`` triggers activation while it is still executing, so its
classes do not exist yet. Those swaps are deferred (not skipped) and completed the moment the
module's import finishes (:class:`_NotifyingSpec`).

Version guard: acceleration stays off (with one warning naming what was found) unless executorch
and torch match what we test. Versions are read with :mod:`importlib.metadata`, never by import.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import logging
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arm_accel.records import Status

logger = logging.getLogger("arm_accel")

#: (distribution, accepted "major.minor[.patch]" prefixes)
SUPPORTED_VERSIONS: dict[str, tuple[str, ...]] = {
    "executorch": ("1.5.1",),
    # 2.14.0 and 2.15.0: exactly the releases scripts/compat.sh showed identical (RESULTS.md).
    "torch": ("2.13", "2.14.0", "2.15.0"),
}
PASSES_PACKAGE = "executorch.backends.arm._passes"

_lock = threading.RLock()
_warned: set[str] = set()
_state: dict[str, Any] = {
    "activated": False,  # the swap ran (possibly with zero registry entries)
    "reason": "not triggered yet",
    "swapped": {},  # stock name -> "module:Class" of the class now installed
    "skipped": {},  # stock name -> reason
    "versions": {},
    "retrace_engine": "not installed",
}
# (module dict, attribute name, stock class, installed class) for every replacement made
_journal: list[tuple[dict[str, Any], str, type, type]] = []
# module still importing -> [(stock name, target spec, stock class)] waiting for it to finish
_pending: dict[str, list[tuple[str, str, type]]] = {}


def warn_once(key: str, message: str, *args: object) -> None:
    if key in _warned:
        return
    _warned.add(key)
    logger.warning(message, *args)


def _base_version(version: str) -> str:
    return version.split("+", 1)[0]


def _version_matches(found: str, accepted: tuple[str, ...]) -> bool:
    base = _base_version(found)
    return any(base == a or base.startswith(a + ".") for a in accepted)


def check_versions() -> tuple[bool, dict[str, str | None]]:
    """(supported, {dist: version found or None}) read via importlib.metadata."""
    from importlib import metadata

    found: dict[str, str | None] = {}
    ok = True
    for dist, accepted in SUPPORTED_VERSIONS.items():
        try:
            version: str | None = metadata.version(dist)
        except metadata.PackageNotFoundError:
            version = None
        found[dist] = version
        if version is None or not _version_matches(version, accepted):
            ok = False
    return ok, found


def status() -> Status:
    """Where activation stands: whether the swap ran, what was swapped or skipped and why."""
    from arm_accel import _hook, switch
    from arm_accel.records import Status

    with _lock:
        return Status(
            enabled=switch.is_enabled(),
            hook_installed=_hook.installed() is not None,
            activated=_state["activated"],
            reason=_state["reason"],
            swapped=dict(_state["swapped"]),
            skipped=dict(_state["skipped"]),
            versions=dict(_state["versions"]),
            retrace_engine=_state["retrace_engine"],
            edge_decompositions=_state.get("edge_decompositions", "not installed"),
            quantize=_state.get("quantize", "not installed"),
        )


def on_module_loaded(name: str) -> None:
    """Hook callback: ``name`` (a watched executorch module) has just been executed."""
    if name == PASSES_PACKAGE or not _state["activated"]:
        activate()


def _load_registry() -> dict[str, str]:
    from arm_accel import passes

    registry = getattr(passes, "REGISTRY", None) or {}
    return dict(registry)


def _resolve_target(spec: str) -> type:
    module_name, _, qualname = spec.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise TypeError(f"{spec} is not a class")
    return obj


def _resolve_stock(passes_pkg: Any, name: str) -> type | None:
    obj = getattr(passes_pkg, name, None)
    if isinstance(obj, type):
        return getattr(obj, "_arm_accel_stock", obj)  # already swapped: the original
    prefix = PASSES_PACKAGE + "."
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not mod_name.startswith(prefix):
            continue
        obj = getattr(mod, name, None)
        if isinstance(obj, type) and obj.__module__ == mod_name:
            return getattr(obj, "_arm_accel_stock", obj)
    return None


def installed_class(stock: type, accel: type, name: str) -> type:
    """The class put in place of ``stock``.

    Classes built on :class:`arm_accel.passes.base.AcceleratedPass` already honour the switch,
    record stats and fall back safely, and are installed as they are. Any other class is wrapped
    in a subclass whose ``call`` honours the switch (running ``stock.call`` when off) and records
    stats. Either way the installed class carries the stock ``__name__``/``__qualname__``, because
    the Arm pass manager matches passes by name (``_passes_required_after``).
    """
    from arm_accel.passes.base import AcceleratedPass, GuardedCallMixin

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
    if issubclass(accel, AcceleratedPass):
        bases: tuple[type, ...] = (accel,)
    else:
        bases = (GuardedCallMixin, accel)
    return type(stock.__name__, bases, attrs)


def _replace_everywhere(stock: type, new: type, passes_pkg: Any) -> int:
    """Replace ``stock`` by ``new`` in every loaded executorch module (by identity)."""
    count = 0
    seen: set[int] = set()
    modules = [passes_pkg, sys.modules.get(stock.__module__)]
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
                d[attr] = new
                _journal.append((d, attr, stock, new))
                count += 1
    return count


class _NotifyingSpec(importlib.machinery.ModuleSpec):
    """Swapped in as the ``__class__`` of a module spec whose import is under way: importlib
    clears ``spec._initializing`` when the module has finished executing (or failed), which is
    when its deferred swaps can complete."""

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name == "_initializing" and not value:
            object.__setattr__(self, "__class__", importlib.machinery.ModuleSpec)
            _complete_pending(self.name)


def _still_importing(module_name: str) -> bool:
    spec = getattr(sys.modules.get(module_name), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def _defer(name: str, spec: str, stock: type) -> bool:
    """Queue the swap of ``name`` until its target module has finished importing."""
    module_name = spec.partition(":")[0]
    module_spec = getattr(sys.modules.get(module_name), "__spec__", None)
    if not _still_importing(module_name):
        return False
    if not isinstance(module_spec, _NotifyingSpec):
        try:
            module_spec.__class__ = _NotifyingSpec
        except TypeError:
            return False
    _pending.setdefault(module_name, []).append((name, spec, stock))
    return True


def _complete_pending(module_name: str) -> None:
    with _lock:
        waiting = _pending.pop(module_name, [])
        if not _state["activated"]:
            return  # deactivated meanwhile
        passes_pkg = sys.modules.get(PASSES_PACKAGE)
        for name, spec, stock in waiting:
            _swap(name, spec, stock, passes_pkg)


def _swap(name: str, spec: str, stock: type, passes_pkg: Any) -> None:
    """Install the class ``spec`` names in place of ``stock``; record the outcome."""
    try:
        new = installed_class(stock, _resolve_target(spec), name)
    except Exception as exc:
        _state["skipped"][name] = repr(exc)
        warn_once(f"skip:{name}", "arm_accel: %s stays stock: %r", name, exc)
        return
    n = _replace_everywhere(stock, new, passes_pkg)
    _state["swapped"][name] = spec
    _state["skipped"].pop(name, None)
    logger.debug("arm_accel: %s -> %s (%d references)", name, spec, n)


def activate(force: bool = False) -> bool:
    """Swap in the registered accelerated classes if executorch's Arm passes are loaded.

    Returns True if the swap ran. ``force`` skips the version guard (for experiments).
    """
    with _lock:
        if _state["activated"]:
            return True
        passes_pkg = sys.modules.get(PASSES_PACKAGE)
        if passes_pkg is None:
            _state["reason"] = "executorch.backends.arm._passes not imported yet"
            return False
        ok, found = check_versions()
        _state["versions"] = found
        if not ok and not force:
            _state["reason"] = f"unsupported versions: {found}"
            warn_once(
                "versions",
                "arm_accel: acceleration stays off: found executorch=%s torch=%s, tested with "
                "executorch %s and torch %s",
                found.get("executorch"),
                found.get("torch"),
                "/".join(SUPPORTED_VERSIONS["executorch"]),
                ", ".join(v if v.count(".") > 1 else f"{v}.x" for v in SUPPORTED_VERSIONS["torch"]),
            )
            return False
        try:
            registry = _load_registry()
        except Exception as exc:
            _state["reason"] = f"registry import failed: {exc!r}"
            warn_once("registry", "arm_accel: cannot load the pass registry: %r", exc)
            return False
        _state.update(activated=True, reason="active", swapped={}, skipped={})
        for name, spec in registry.items():
            stock = _resolve_stock(passes_pkg, name)
            if stock is None:
                _state["skipped"][name] = f"no stock Arm pass named {name}"
                warn_once(f"skip:{name}", "arm_accel: %s stays stock: no such stock pass", name)
            elif _defer(name, spec, stock):
                _state["skipped"][name] = "pending: its module is still importing"
            else:
                _swap(name, spec, stock, passes_pkg)
        _install_retrace_engine()
        from arm_accel import collector

        try:
            collector.install()
        except Exception as exc:  # the lowering still runs, collecting as stock does
            warn_once("skip:collector", "arm_accel: the collector scope stays off: %r", exc)
        from arm_accel.edge import decompositions as edge_decompositions  # issue 17

        _state["edge_decompositions"] = edge_decompositions.install_safely()
        from arm_accel import quantize

        # The Arm quantizer module imports the passes package first, so this runs before any
        # observer of an Arm flow computes its qparams.
        _state["quantize"] = quantize.install_safely()
        logger.info(
            "arm_accel: accelerated %d Arm passes: %s",
            len(_state["swapped"]),
            sorted(_state["swapped"]),
        )
        return True


def stock_class(cls_or_name: type | str) -> type:
    """The original executorch class behind a (possibly swapped) Arm pass class or name.

    Tests that compare against stock must use this (or ``arm_accel.disabled()``): once the hook
    has run, ``from executorch.backends.arm._passes import X`` yields the accelerated class.
    """
    if isinstance(cls_or_name, str):
        pkg = importlib.import_module(PASSES_PACKAGE)
        found = _resolve_stock(pkg, cls_or_name)
        if found is None:
            raise LookupError(cls_or_name)
        return found
    return getattr(cls_or_name, "_arm_accel_stock", cls_or_name)


#: torch versions the re-trace engine was shown identical on: it models torch.fx internals
#: (the tracer's meta fields, the name space, the provenance record), so it stays stock elsewhere.
RETRACE_ENGINE_TORCH: tuple[str, ...] = ("2.13",)


def _install_retrace_engine() -> None:
    """Route the Arm pipeline's ExportPass re-traces through arm_accel.retrace_engine."""
    from arm_accel import retrace_engine

    torch_version = _state["versions"].get("torch") or ""
    if not _version_matches(torch_version, RETRACE_ENGINE_TORCH):
        _state["retrace_engine"] = f"stock: tested with torch {'/'.join(RETRACE_ENGINE_TORCH)}.x"
        return
    try:
        retrace_engine.install()
    except Exception as exc:
        _state["retrace_engine"] = f"stock: {exc!r}"
        warn_once("skip:retrace", "arm_accel: the re-trace engine stays stock: %r", exc)
    else:
        _state["retrace_engine"] = "installed"


def deactivate() -> None:
    """Put every stock class back where it was replaced."""
    from arm_accel import retrace_engine

    with _lock:
        retrace_engine.uninstall()
        _state["retrace_engine"] = "not installed"
        while _journal:
            d, attr, stock, new = _journal.pop()
            if d.get(attr) is new:
                d[attr] = stock
        _pending.clear()
        from arm_accel.edge import decompositions as edge_decompositions

        edge_decompositions.uninstall()
        from arm_accel import quantize

        quantize.uninstall()
        from arm_accel import collector

        collector.uninstall()
        _state.update(activated=False, reason="deactivated", swapped={}, skipped={})
        _state["edge_decompositions"] = "not installed"
        _state["quantize"] = "not installed"


def ensure_active(force: bool = False) -> None:
    """Activate now if executorch's Arm passes are loaded, else arm the start-up hook."""
    from arm_accel import _hook

    if not activate(force=force) and PASSES_PACKAGE not in sys.modules:
        _hook.install()
