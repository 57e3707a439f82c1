"""arm-accel: faster lowering for ExecuTorch's Arm backend, output identical to stock.

Installing the wheel is enough: ``arm_accel_hook.pth`` swaps the accelerated passes, the
pipeline-wide re-trace and the decomposition replay in when ``executorch.backends.arm._passes``
is imported (see ``arm_accel.bootstrap.activation``). This module stays
import-light (it is imported at interpreter start-up by that ``.pth``): the native extension and
everything else load lazily.

Controls: env ``ARM_ACCEL=0``; :func:`enable`, :func:`disable` (process-wide default);
``with disabled():`` / ``with enabled():`` (this thread only); env ``ARM_ACCEL_STRICT=1``;
:func:`stats` for per-pass counters; :func:`status` for what the activation did.
"""

# No ``typing``/``__future__`` import here: this module is imported at interpreter start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from arm_accel.control.records import PassStats, Stats, Status
    from arm_accel.control.switch import disabled, enabled, is_enabled

    __version__: str

__all__ = [
    "PassStats",
    "Stats",
    "Status",
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
    from arm_accel.bootstrap import activation
    from arm_accel.control import switch

    switch.set_enabled(True)
    activation.ensure_active(force=force)


def disable() -> None:
    """Turn acceleration off: swapped-in passes run pure stock behaviour from their next call
    (in every thread; inside a ``with disabled()/enabled()`` block, for that block only)."""
    from arm_accel.control import switch

    switch.set_enabled(False)


def reset_stats() -> None:
    """Clear every :func:`stats` entry (the recording starts over)."""
    from arm_accel.control import counters

    counters.reset()


def stats() -> "Stats":
    """Per entry (an accelerated pass by its stock name, ``"<Pass>.retrace"``, ``"to_edge.*"``)
    the calls, accelerated runs, fallbacks by reason, re-traces and seconds recorded since the
    last :func:`reset_stats`; ``.as_dict()`` for JSON."""
    from arm_accel.control import counters

    return counters.snapshot()


def status() -> "Status":
    """Whether the hook is installed/activated, which passes were swapped or skipped and why;
    ``.as_dict()`` for JSON."""
    from arm_accel.bootstrap import activation

    return activation.status()


_LAZY = {
    "disabled": "arm_accel.control.switch",
    "enabled": "arm_accel.control.switch",
    "is_enabled": "arm_accel.control.switch",
    "PassStats": "arm_accel.control.records",
    "Stats": "arm_accel.control.records",
    "Status": "arm_accel.control.records",
    "__version__": "arm_accel._native",
}


if not TYPE_CHECKING:  # hidden from type checkers, so a misspelt name is an error there

    def __getattr__(name: str) -> "object":
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'arm_accel' has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
