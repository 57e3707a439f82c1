"""arm-accel: Rust-accelerated view/permute passes for ExecuTorch's Arm backend.

Installing the wheel is enough: ``arm_accel_hook.pth`` swaps the accelerated passes in when
``executorch.backends.arm._passes`` is imported (see ``arm_accel.activation``). This module stays
import-light (it is imported at interpreter start-up by that ``.pth``): the native extension and
everything else load lazily.

Controls: env ``ARM_ACCEL=0``; :func:`enable`, :func:`disable` (process-wide default);
``with disabled():`` / ``with enabled():`` (this thread only); env ``ARM_ACCEL_STRICT=1``;
:func:`stats` for per-pass counters; :func:`status` for what the activation did.
"""

# No ``typing``/``__future__`` import here: this module is imported at interpreter start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from arm_accel import counters as stats
    from arm_accel.switch import disabled, enabled, is_enabled

    __version__: str

__all__ = [
    "__version__",
    "disable",
    "disabled",
    "enable",
    "enabled",
    "is_enabled",
    "reset_stats",
    "stats",
    "status",
]


def enable(force: bool = False) -> None:
    """Turn acceleration on: swap the accelerated passes in now if executorch's Arm passes are
    loaded, else when they are. ``force`` skips the executorch/torch version guard."""
    from arm_accel import activation, switch

    switch.set_enabled(True)
    activation.ensure_active(force=force)


def disable() -> None:
    """Turn acceleration off: swapped-in passes run pure stock behaviour from their next call
    (in every thread; inside a ``with disabled()/enabled()`` block, for that block only)."""
    from arm_accel import switch

    switch.set_enabled(False)


def reset_stats() -> None:
    from arm_accel import counters as _stats

    _stats.reset()


def status() -> "dict[str, Any]":
    """Whether the hook is installed/activated, which passes were swapped or skipped and why."""
    from arm_accel import activation

    return activation.status()


def __getattr__(name: str) -> "Any":
    if name == "stats":
        # ``arm_accel.stats`` is the stats module, made callable: ``arm_accel.stats()`` returns
        # per pass {calls, accelerated, fallbacks {reason: n}, retraces, seconds}, and
        # the recording API lives in ``arm_accel.counters``.
        import arm_accel.counters as _stats

        return _stats
    if name in ("disabled", "enabled", "is_enabled"):
        from arm_accel import switch

        value = getattr(switch, name)
        globals()[name] = value
        return value
    if name == "__version__":
        from arm_accel._native import __version__

        globals()["__version__"] = __version__
        return __version__
    raise AttributeError(f"module 'arm_accel' has no attribute {name!r}")
