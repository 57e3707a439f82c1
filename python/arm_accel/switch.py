"""The global on/off switch of arm-accel, consulted by accelerated passes at call time.

Accelerated pass classes stay installed once the hook has swapped them in; whether they take the
accelerated path is decided per call by :func:`is_enabled`. When it returns False a pass must run
pure stock behaviour (:class:`arm_accel.passes.base.AcceleratedPass` does this for you).

The initial state comes from the environment variable ``ARM_ACCEL`` (``0``/``false``/``off``/``no``
turn acceleration off). Imports only ``os`` so that it is cheap.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_OFF_VALUES = frozenset({"0", "false", "off", "no"})


def env_enabled(environ: dict[str, str] | None = None) -> bool:
    """True unless ``ARM_ACCEL`` says off."""
    value = (os.environ if environ is None else environ).get("ARM_ACCEL", "1")
    return value.strip().lower() not in _OFF_VALUES


_enabled: bool = env_enabled()
_lock = threading.Lock()


def is_enabled() -> bool:
    """Whether accelerated passes should take the accelerated path right now."""
    return _enabled


def set_enabled(value: bool) -> bool:
    """Set the switch; returns the previous value."""
    global _enabled
    with _lock:
        previous, _enabled = _enabled, bool(value)
    return previous


@contextmanager
def disabled() -> Iterator[None]:
    """Run the body with acceleration off (stock behaviour), restoring the previous state."""
    previous = set_enabled(False)
    try:
        yield
    finally:
        set_enabled(previous)
