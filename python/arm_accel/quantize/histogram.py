"""``HistogramObserver._non_linear_param_search`` with its bound walk in Rust.

At ``convert_pt2e`` stock walks two quantile bounds in steps of 1e-5 over the cumulative
histogram, up to 10^5 steps of 0-dim tensor operations in Python. :func:`search` is stock's
method with that walk (and each candidate's error, summed by torch) handed to the native
kernels, stock's arithmetic step for step; the accept/stop decision and everything around the
loop stay stock's code. Why the min/max are stock's: design.md, "The quantization flow".
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

import torch

from arm_accel.quantize.patch import native, run_accelerated

#: ``stats()`` entry: one call per parameter search (also the patch table's row).
STATS_NAME = "quantize.histogram_search"
#: ``stats()`` entry: one call per candidate whose error the search computed (accelerated:
#: natively; fallbacks: why torch's method computed it).
ERROR_STATS_NAME = "quantize.histogram_error"
#: The patch table's model of the candidates' error computation.
ERROR_MODEL = "torchao.histogram_error"


def decline_reason(observer: Any) -> str | None:
    """Why ``observer``'s search runs stock (None: the native walk models it)."""
    histogram = observer.histogram
    if type(histogram) is not torch.Tensor:
        return "histogram is not a plain tensor"
    if histogram.dim() != 1 or histogram.dtype != torch.float32:
        return "histogram is not a 1-d float32 tensor"
    if histogram.device.type != "cpu":
        return "histogram is not on the CPU"
    if not isinstance(observer.bins, int) or observer.bins < 1:
        return "bins is not a positive int"
    if histogram.size()[0] != observer.bins:
        return "bins mismatch"  # stock's assertion raises
    if torch._C._len_torch_function_stack() or _in_dispatch_mode():
        return "a torch function or dispatch mode is active"
    if torch.compiler.is_compiling():
        return "traced by dynamo"
    return None


def _in_dispatch_mode() -> bool:
    from torch.utils._python_dispatch import is_in_torch_dispatch_mode

    return bool(torch._C._len_torch_dispatch_stack()) or is_in_torch_dispatch_mode()


def _next_candidate(
    csum: Any, total: float, walk: tuple[float, float, int, int]
) -> tuple[float, float, int, int] | None:
    from arm_accel import _native

    return native(_native.histogram_next_candidate, csum, total, *walk)  # type: ignore[no-any-return]


class _Errors:
    """The quantization error of the search's candidates: each one's terms computed natively
    (``rust/quantize/error.rs``) into a float32 tensor summed by torch, as stock's
    ``norm.sum().item()``; torch's own method where the native terms are not modelled."""

    def __init__(self, observer: Any) -> None:
        self.observer = observer
        self.native = _native_errors(observer)
        self.calls = 0
        self.served = 0  # computed natively
        self.seconds = 0.0
        if self.native:
            self.hist = observer.histogram.detach().numpy()
            self.norm = torch.empty(observer.bins, dtype=torch.float32)
            self.norm_np = self.norm.numpy()
            self.min_val = observer.min_val.item()
            self.max_val = observer.max_val.item()

    def __call__(self, start_bin: int, end_bin: int) -> float:
        t0 = time.perf_counter()
        self.calls += 1
        try:
            return self._error(start_bin, end_bin)
        finally:
            self.seconds += time.perf_counter() - t0

    def _error(self, start_bin: int, end_bin: int) -> float:
        if self.native:
            from arm_accel import _native

            outcome = native(
                _native.histogram_error_terms,
                self.hist,
                self.min_val,
                self.max_val,
                self.observer.dst_nbins,
                start_bin,
                end_bin,
                self.norm_np,
            )
            if outcome == "filled":
                self.served += 1
                return float(self.norm.sum().item())
            if outcome == "zero":
                self.served += 1
                return 0.0
            from arm_accel.control import counters

            counters.record_decline(ERROR_STATS_NAME, outcome)
        return self.observer._compute_quantization_error(start_bin, end_bin)  # type: ignore[no-any-return]


def _native_errors(observer: Any) -> bool:
    """Whether the candidates' errors can be computed natively: the observer's error method
    and ``_get_norm`` are torchao's (not overridden) and the sources modelled
    (``ERROR_MODEL``), the histogram contiguous, the range and ``dst_nbins`` plain numbers."""
    from arm_accel import patches

    defining = _defining_class()
    for name in ("_compute_quantization_error", "_get_norm"):
        if name in vars(observer) or getattr(type(observer), name) is not vars(defining)[name]:
            return False
    dst_nbins = observer.dst_nbins
    return (
        patches.holds(ERROR_MODEL)
        and observer.histogram.is_contiguous()
        and isinstance(dst_nbins, int)
        and 0 < dst_nbins < 2**32
        and observer.min_val.numel() == 1
        and observer.max_val.numel() == 1
        and type(observer.min_val) is torch.Tensor
        and type(observer.max_val) is torch.Tensor
    )


def _defining_class() -> Any:
    """torchao's ``HistogramObserver`` (the class the methods are defined on)."""
    from arm_accel.patches.sources import resolve

    return resolve("torchao.quantization.pt2e.observer:HistogramObserver")


def search(observer: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Stock's ``_non_linear_param_search`` on ``observer`` (one :func:`decline_reason`
    accepts), its bound walk run natively, its candidates' errors as :class:`_Errors`."""
    # Stock's assertion (histogram size == bins) holds: decline_reason sends a mismatch to stock.
    bin_width = (observer.max_val - observer.min_val) / observer.bins

    total = torch.sum(observer.histogram).item()
    c_sum = torch.cumsum(observer.histogram, dim=0)
    csum = c_sum.detach().numpy()

    error = _Errors(observer)
    walk = (0.0, 1.0, 0, observer.bins - 1)  # alpha, beta, start_bin, end_bin
    norm_min = math.inf
    while (found := _next_candidate(csum, total, walk)) is not None:
        norm = error(found[2], found[3])
        if norm > norm_min:
            break
        norm_min = norm
        walk = found
    start_bin, end_bin = walk[2], walk[3]
    from arm_accel.control import counters

    counters.record_calls(ERROR_STATS_NAME, error.calls, error.served, error.seconds)

    new_min = observer.min_val + bin_width * start_bin
    new_max = observer.min_val + bin_width * (end_bin + 1)
    return new_min, new_max


def dispatching(stock: Any) -> Any:
    """The method the patch table installs on the class: :func:`search` when the switch is on
    and the observer is modelled, stock's method otherwise."""

    @functools.wraps(stock)
    def _non_linear_param_search(self: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return run_accelerated(  # type: ignore[no-any-return]
            STATS_NAME,
            lambda: decline_reason(self),
            lambda: (True, search(self)),
            lambda: stock(self),
        )

    return _non_linear_param_search


def compares_in_float32() -> bool:
    """torch compares a float32 0-dim tensor with a Python float in float32 (the Python float
    rounded), as the native walk models: probed once at install."""
    half = torch.tensor(0.5, dtype=torch.float32)
    above = 0.5 + 1e-12  # above 0.5 as an f64, 0.5 as an f32
    return not bool(half < above) and bool(torch.tensor(1.0) < 1e39)


def install_check() -> str | None:
    """The patch table's check of the group: torch compares as the walk models."""
    if not compares_in_float32():
        return "torch does not compare float32 tensors with Python floats in float32"
    return None


def stock_method() -> Any:
    """torchao's own ``_non_linear_param_search`` (installed or not)."""
    from arm_accel import patches

    try:
        return patches.original(STATS_NAME)
    except KeyError:
        return vars(_defining_class())["_non_linear_param_search"]


__all__ = [
    "ERROR_MODEL",
    "ERROR_STATS_NAME",
    "STATS_NAME",
    "compares_in_float32",
    "decline_reason",
    "dispatching",
    "install_check",
    "search",
    "stock_method",
]
