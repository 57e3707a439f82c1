"""The on/off switch of arm-accel, asked by every accelerated path at call time.

:func:`is_enabled`: a process-wide default from ``ARM_ACCEL`` (``0``/``false``/``off``/``no``
turn acceleration off), overridden for the current thread (context) by ``with disabled():`` /
``with enabled():``, so one thread's block never switches another thread's lowering.
:func:`strict` (``ARM_ACCEL_STRICT=1``) makes an unexpected failure of the accelerated path
raise instead of falling back; declines still fall back. Standard library only, so it is cheap.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

_OFF_VALUES = frozenset({"0", "false", "off", "no"})


def env_enabled(environ: dict[str, str] | None = None) -> bool:
    """True unless ``ARM_ACCEL`` says off."""
    value = (os.environ if environ is None else environ).get("ARM_ACCEL", "1")
    return value.strip().lower() not in _OFF_VALUES


_default: bool = env_enabled()
_lock = threading.Lock()
# Per context (a new thread starts with none): a one-element list, so set_enabled can change
# the innermost block's value without a token.
_override: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "arm_accel_enabled", default=None
)


def is_enabled() -> bool:
    """Whether accelerated passes should take the accelerated path right now, in this thread."""
    cell = _override.get()
    return _default if cell is None else cell[0]


def set_enabled(value: bool) -> bool:
    """Set the switch of the innermost ``disabled()``/``enabled()`` block of this context, or the
    process-wide default outside any; returns the previous value."""
    global _default
    cell = _override.get()
    if cell is not None:
        previous, cell[0] = cell[0], bool(value)
        return previous
    with _lock:
        previous, _default = _default, bool(value)
    return previous


@contextmanager
def _scoped(value: bool) -> Iterator[None]:
    token = _override.set([value])
    try:
        yield
    finally:
        _override.reset(token)


def disabled() -> AbstractContextManager[None]:
    """Run the body with acceleration off (stock behaviour) in this thread only."""
    return _scoped(False)


def enabled() -> AbstractContextManager[None]:
    """Run the body with acceleration on in this thread only."""
    return _scoped(True)


def strict() -> bool:
    """``ARM_ACCEL_STRICT=1``: unexpected failures of the accelerated path raise."""
    return os.environ.get("ARM_ACCEL_STRICT", "").strip().lower() in ("1", "true", "on", "yes")
