"""The garbage collector during the stages arm-accel serves.

Each full collection walks the whole live heap (programs, graphs, torch's modules): about 4 s of
an accelerated llama8 lowering, 0.3-0.9 s per collection of a ``llama4`` script. Inside
:func:`collecting_less` the process-wide scope of :mod:`arm_accel.runtime.gc_scope` is open
(the objects alive on entry frozen, the oldest generation's threshold raised to
:data:`OLD_GENERATION_THRESHOLD`; the last scope to close puts both back). Its scopes: the
lowering (:func:`lowering`: the edge stage, ``to_backend``, the Arm pipeline),
``torch.export``, ``to_executorch`` and the quantization flow's steps. Off with acceleration,
with the collector disabled, or when the process froze objects itself (design.md, "The garbage
collector during a lowering").
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from arm_accel.control import switch
from arm_accel.runtime import gc_scope
from arm_accel.runtime.gc_scope import OLD_GENERATION_THRESHOLD
from arm_accel.runtime.scopes import ThreadScope

#: This thread is inside a lowering's scope (other accelerations ask, see in_lowering).
_thread_scope = ThreadScope()


def in_lowering() -> bool:
    """Whether this thread runs inside :func:`lowering` (the edge stage, ``to_backend``, the
    Arm pipeline) with acceleration on."""
    return _thread_scope.active()


@contextmanager
def collecting_less() -> Iterator[None]:
    """Collect less while this block runs (see the module docstring); nestable, any thread."""
    if not switch.is_enabled():
        yield
        return
    gc_scope.enter()
    try:
        yield
    finally:
        gc_scope.leave()


@contextmanager
def lowering() -> Iterator[None]:
    """:func:`collecting_less`, this thread marked as lowering (:func:`in_lowering`)."""
    if not switch.is_enabled():
        yield
        return
    with collecting_less(), _thread_scope.entered():
        yield


def _in_scope(stock: Any, scope: Any) -> Any:
    """``stock`` run inside ``scope()``."""

    @functools.wraps(stock)
    def call(*args: Any, **kwargs: Any) -> Any:
        with scope():
            return stock(*args, **kwargs)

    return call


def scoped(stock: Any) -> Any:
    """``EdgeProgramManager.to_backend`` (partitioning, the Arm pipeline in the backend's
    preprocess, serialization) in :func:`lowering`'s scope (the patch table's
    ``collector.to_backend`` row); the edge stage and ``ArmPassManager._transform`` open their
    own scopes where arm-accel already wraps them."""
    return _in_scope(stock, lowering)


def collecting(stock: Any) -> Any:
    """``stock`` (``torch.export``'s ``_export``, ``EdgeProgramManager.to_executorch``, the
    quantization flow's steps) in :func:`collecting_less`'s scope, not marked as lowering (the
    ``collector.export``, ``collector.to_executorch`` and ``collector.quantize`` rows)."""
    return _in_scope(stock, collecting_less)


__all__ = [
    "OLD_GENERATION_THRESHOLD",
    "collecting",
    "collecting_less",
    "in_lowering",
    "lowering",
    "scoped",
]
