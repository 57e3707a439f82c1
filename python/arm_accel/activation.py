"""Turning arm-accel on: the version guard, then the declared patch table installed.

Called by the start-up hook (:mod:`arm_accel._hook`) right after
``executorch.backends.arm._passes`` has been imported, or by :func:`arm_accel.enable`.
Acceleration stays off (with one warning naming what was found) unless executorch and torch
match what we test; versions are read with :mod:`importlib.metadata`, never by import. What is
installed, and why each row of the table is or is not, is :mod:`arm_accel.patches`' business.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from arm_accel.patches import table
from arm_accel.patches.class_swap import PASSES_PACKAGE, resolve_stock

if TYPE_CHECKING:
    from arm_accel.records import Status

logger = logging.getLogger("arm_accel")

#: (distribution, accepted "major.minor[.patch]" prefixes)
SUPPORTED_VERSIONS: dict[str, tuple[str, ...]] = {
    "executorch": table.EXECUTORCH_VERSIONS,
    "torch": table.TORCH_VERSIONS,
}


@dataclass
class _State:
    """Where the activation stands."""

    #: the table was installed (possibly with every row stock)
    activated: bool = False
    reason: str = "not triggered yet"
    versions: dict[str, str | None] = field(default_factory=dict)


_lock = threading.RLock()
_warned: set[str] = set()
_state = _State()


def warn_once(key: str, message: str, *args: object) -> None:
    if key in _warned:
        return
    _warned.add(key)
    logger.warning(message, *args)


def check_versions() -> tuple[bool, dict[str, str | None]]:
    """(supported, {dist: version found or None}) read via importlib.metadata."""
    from arm_accel.patches.sources import version, version_matches

    found = {dist: version(dist) for dist in SUPPORTED_VERSIONS}
    ok = all(version_matches(found[d], accepted) for d, accepted in SUPPORTED_VERSIONS.items())
    return ok, found


def _group_summary(states: tuple[object, ...], group: str, default: str) -> str:
    """``"installed"`` when every row of ``group`` is, else the first row's reason."""
    from arm_accel.patches.model import RowState

    rows = [s for s in states if isinstance(s, RowState) and s.group == group]
    if rows and all(r.installed for r in rows):
        return "installed"
    return next((r.reason for r in rows if not r.installed), default)


def status() -> Status:
    """Where activation stands: the versions, what the table installed and why not."""
    from arm_accel import _hook, patches, switch
    from arm_accel.records import Status

    with _lock:
        rows = patches.states()
        swaps = [r for r in rows if r.group == "passes"]
        replacement = {r.name: r.replacement for g in table.GROUPS for r in g.rows}
        return Status(
            enabled=switch.is_enabled(),
            hook_installed=_hook.installed() is not None,
            activated=_state.activated,
            reason=_state.reason,
            swapped={r.row: replacement[r.row] for r in swaps if r.installed},
            skipped={r.row: r.reason for r in swaps if not r.installed and _state.activated},
            versions=dict(_state.versions),
            retrace_engine=_group_summary(rows, "retrace_engine", "not installed"),
            edge_decompositions=_group_summary(rows, "edge.decompositions", "not installed"),
            patches=rows,
            models=patches.model_states(),
        )


def on_module_loaded(name: str) -> None:
    """Hook callback: ``name`` (a watched executorch module) has just been executed."""
    if name == PASSES_PACKAGE or not _state.activated:
        activate()


def activate(force: bool = False) -> bool:
    """Install the patch table if executorch's Arm passes are loaded.

    Returns True if it ran. ``force`` skips the version guard (for experiments).
    """
    from arm_accel import patches

    with _lock:
        if _state.activated:
            return True
        if PASSES_PACKAGE not in sys.modules:
            _state.reason = "executorch.backends.arm._passes not imported yet"
            return False
        ok, found = check_versions()
        _state.versions = found
        if not ok and not force:
            _state.reason = f"unsupported versions: {found}"
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
        _state.activated = True
        _state.reason = "active"
        patches.install()
        installed = [s.row for s in patches.states() if s.installed]
        logger.info("arm_accel: %d patches installed: %s", len(installed), installed)
        return True


def stock_class(cls_or_name: type | str) -> type:
    """The original executorch class behind a (possibly swapped) Arm pass class or name.

    Tests that compare against stock must use this (or ``arm_accel.disabled()``): once the hook
    has run, ``from executorch.backends.arm._passes import X`` yields the accelerated class.
    """
    if isinstance(cls_or_name, str):
        importlib.import_module(PASSES_PACKAGE)
        found = resolve_stock(cls_or_name)
        if found is None:
            raise LookupError(cls_or_name)
        return found
    stock: type = getattr(cls_or_name, "_arm_accel_stock", cls_or_name)
    return stock


def deactivate() -> None:
    """Put every stock object back where the table replaced it."""
    from arm_accel import patches

    with _lock:
        patches.uninstall()
        _state.activated = False
        _state.reason = "deactivated"


def ensure_active(force: bool = False) -> None:
    """Activate now if executorch's Arm passes are loaded, else arm the start-up hook."""
    from arm_accel import _hook

    if not activate(force=force) and PASSES_PACKAGE not in sys.modules:
        _hook.install()
