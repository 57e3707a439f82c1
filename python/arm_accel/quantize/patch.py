"""What every replaced method of the quantization layer shares: native kernel calls told apart
from stock's own code, and the per-call dispatch (switch, decline, fallback, counters). The
methods are replaced by the patch table's ``quantize.*`` rows (``arm_accel.patches.table``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from arm_accel.control import counters, switch


def thread_modes_active() -> bool:
    """A torch function or dispatch mode is active on this thread. Both mode stacks are per
    thread, and the dispatch stack's length counts the infra modes (fake, proxy, functional)
    too. ``is_in_torch_dispatch_mode()`` is not read: it is a module-level flag, which another
    thread's modes set, and which two threads' modes leaving out of order leave True for the
    rest of the process."""
    return bool(torch._C._len_torch_function_stack()) or bool(torch._C._len_torch_dispatch_stack())


def modes_active() -> bool:
    """A torch function or dispatch mode is active on this thread, or dynamo is compiling:
    torch's ops would not run their CPU kernels on the tensors as they are, so the native paths
    decline."""
    return thread_modes_active() or torch.compiler.is_compiling()


def float32_input(x: Any) -> bool:
    """``x`` is a non-empty strided float32 CPU tensor or parameter: what an observer's native
    path reads (``Parameter`` disables torch functions; stock's ``forward`` reads
    ``x.detach()``, a plain tensor)."""
    return (
        type(x) in _INPUT_TYPES
        and x.dtype == torch.float32
        and x.is_cpu
        and x.layout is torch.strided
        and x.numel() > 0
    )


_INPUT_TYPES = (torch.Tensor, torch.nn.Parameter)


def writable_buffer(t: Any) -> bool:
    """``t`` is a buffer a native path may write in its own storage where stock's code copies
    into it (``copy_``, after a ``detach_``/``resize_`` that keep it as it is): a plain
    contiguous float32 CPU tensor without grad, not a view, not an inference tensor."""
    return (
        type(t) is torch.Tensor
        and t.dtype == torch.float32
        and t.is_cpu
        and t.layout is torch.strided
        and t.is_contiguous()
        and not t.requires_grad
        and not t._is_view()
        and not t.is_inference()
    )


class NativeFailed(Exception):
    """A native kernel raised: the call starts over with stock's method."""


def native(kernel: Callable[..., Any], *args: Any) -> Any:
    """``kernel(*args)``, its exceptions (bad input, a panic) raised as :class:`NativeFailed`
    so that they are told apart from the exceptions of stock's own code around them."""
    try:
        return kernel(*args)
    except Exception as exc:
        raise NativeFailed(f"{getattr(kernel, '__name__', kernel)}: {exc!r}") from exc


def run_accelerated(
    stats_name: str,
    decline: Callable[[], str | None],
    accelerated: Callable[[], tuple[bool, Any]],
    stock: Callable[[], Any],
) -> Any:
    """One call of a replaced method: with the switch on and nothing to decline,
    ``accelerated()`` returns ``(True, result)``, or ``(False, why)`` to run ``stock()`` (what
    it left unchanged: nothing); a :class:`NativeFailed` falls back to ``stock()`` (raises
    under ``ARM_ACCEL_STRICT``). Counted in ``arm_accel.stats()`` under ``stats_name``;
    exceptions of stock's own code inside the accelerated path propagate as stock's."""
    t0 = time.perf_counter()
    if switch.is_enabled():
        reason = decline()
        if reason is None:
            fell_back = False
            try:
                done, value = accelerated()
                if done:
                    return value
                fell_back = True
                counters.record_decline(stats_name, value)
            except NativeFailed as exc:
                fell_back = True
                record_native_failure(stats_name, exc)
            finally:
                if not fell_back:
                    counters.record_call(stats_name, time.perf_counter() - t0, True)
        else:
            counters.record_decline(stats_name, reason)
    return run_stock(stats_name, stock, t0)


def record_native_failure(stats_name: str, exc: NativeFailed) -> None:
    """A native kernel's failure in ``stats_name``'s accelerated path, counted as a fallback
    (the caller then runs stock's method); under ``ARM_ACCEL_STRICT`` counted and raised."""
    if switch.strict():
        counters.record_fallback(stats_name, "strict: native kernel failed")
        raise exc
    counters.record_fallback(stats_name, f"native kernel failed: {exc}")


def run_stock(stats_name: str, stock: Callable[[], Any], start: float) -> Any:
    """``stock()``, counted under ``stats_name`` as a call not accelerated, timed from
    ``start`` (a ``time.perf_counter()`` reading)."""
    try:
        return stock()
    finally:
        counters.record_call(stats_name, time.perf_counter() - start, False)
