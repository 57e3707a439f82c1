"""``HistogramObserver.forward`` and ``_upscale_histogram`` (calibration) with their per-batch
work in Rust.

A batch inside the observed range only adds ``torch.histc(x, bins, min_val, max_val)`` to the
histogram: :func:`observe_in_range` counts it natively with ``histc``'s own bin edges and adds
the counts in the histogram's storage, its version bumped as stock's ``copy_`` bumps it. Other
batches run stock's ``forward`` statement for statement (:func:`observe`) with ``histc``
native; :func:`upscale_histogram` is stock's re-bucketing with ``bucketize`` and ``bincount``
native. Why the histograms are stock's: design.md, "The quantization flow".
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

import numpy as np
import torch
from torch.autograd.graph import increment_version

from arm_accel import _native
from arm_accel.control import counters, switch
from arm_accel.quantize.histogram import read_state
from arm_accel.quantize.patch import (
    NativeFailed,
    float32_input,
    modes_active,
    native,
    record_native_failure,
    run_accelerated,
    run_stock,
    writable_buffer,
)

#: ``stats()`` entries (also the patch table's rows): one call per observed batch / per
#: re-bucketed histogram.
FORWARD_STATS_NAME = "quantize.histogram_forward"
UPSCALE_STATS_NAME = "quantize.histogram_upscale"
#: The patch table's model of ``reset_histogram``, which :func:`observe` inlines.
RESET_MODEL = "torchao.histogram_reset"

#: ``torch.linspace(lo, hi, steps)``'s first and last float32 values per (lo, hi, steps): the
#: edges ``histc`` bins with. Bounded: cleared when full.
_edges: dict[tuple[float, float, int], tuple[float, float]] = {}
_EDGES_MAX = 65536


def _plain_float32(t: Any) -> bool:
    return type(t) is torch.Tensor and t.dtype == torch.float32 and t.is_cpu


def _state(observer: Any) -> tuple[Any, Any, Any, Any] | None:
    """The observer's ``histogram``, ``min_val``, ``max_val`` and ``bins`` as attribute reads
    give them, or None where one is missing (stock's ``forward`` then raises its own error)."""
    try:
        histogram, min_val, max_val, bins, _ = read_state(observer)
    except AttributeError:
        return None
    return histogram, min_val, max_val, bins


def _modelled_state(observer: Any, x: Any) -> tuple[Any, Any, Any, int] | str:
    """The observer's ``histogram``, ``min_val``, ``max_val`` and ``bins`` where the native
    paths may take ``observer.forward(x)``, else why they do not."""
    if not float32_input(x):
        return "input is not a non-empty float32 CPU tensor or parameter"
    state = _state(observer)
    if state is None:
        return "observer state is not readable"
    histogram, min_val, max_val, bins = state
    if not (
        _plain_float32(histogram)
        and histogram.dim() == 1
        and histogram.is_contiguous()
        and histogram.numel() == bins
        and _plain_float32(min_val)
        and _plain_float32(max_val)
        and min_val.dim() == 0
        and max_val.dim() == 0
    ):
        return "observer state is not float32 CPU tensors of the expected shapes"
    if type(bins) is not int or not 0 < bins < 32768:
        return "bins outside 1..32767"
    if modes_active():
        return "a torch function or dispatch mode is active, or dynamo traces"
    return histogram, min_val, max_val, bins


def forward_decline_reason(observer: Any, x: Any) -> str | None:
    """Why ``observer.forward(x)`` runs stock's code (None: the native paths may take it)."""
    found = _modelled_state(observer, x)
    return found if isinstance(found, str) else None


def _histc_edges(lo: float, hi: float, bins: int) -> tuple[float, float]:
    """The first and last of the bin edges ``torch.histc(x, bins, lo, hi)`` makes."""
    key = (lo, hi, bins)
    found = _edges.get(key)
    if found is None:
        if len(_edges) >= _EDGES_MAX:
            _edges.clear()
        edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float32)
        found = _edges[key] = (edges[0].item(), edges[-1].item())
    return found


def _histc_range_edges(lo: float, hi: float, bins: int) -> tuple[float, float] | None:
    """The first and last bin edges of ``torch.histc(x, bins, lo, hi)`` for a batch ``x``
    inside ``[lo, hi]`` (the native kernel checks that), or None for a range it does not
    model. ``lo == hi``: every value is ``lo``, the extremes torch then takes from the batch,
    and torch widens them to ``(lo - 1, hi + 1)`` in double precision."""
    if lo < hi and hi - lo != math.inf:
        return _histc_edges(lo, hi, bins)
    if lo == hi and math.isfinite(lo):
        return _histc_edges(lo - 1.0, hi + 1.0, bins)
    return None


def observe_in_range(observer: Any, x_orig: Any) -> bool:
    """Stock's same-range ``forward`` of ``x_orig`` (most batches): ``torch.histc`` of the
    batch with the observed range's edges (for a one-value range the edges ``histc`` widens it
    to) added to the histogram natively, in its own storage. True when done and counted;
    False when not taken, nothing changed (the general path decides).

    Stock's last two calls of this path are ``histogram.detach_().resize_(shape)``, no-ops on
    the 1-d contiguous, non-view tensor without grad this path requires, and ``copy_``, whose
    version bump is kept. Why the counts are ``histc``'s: design.md, "The quantization flow".
    """
    t0 = time.perf_counter()
    state = _modelled_state(observer, x_orig)
    if isinstance(state, str):
        return False
    histogram, min_val, max_val, bins = state
    if not writable_buffer(histogram) or torch.is_inference_mode_enabled():
        return False
    lo, hi = min_val.item(), max_val.item()
    edges = _histc_range_edges(lo, hi, bins)
    if edges is None:
        return False  # uninitialized (inf, -inf), NaN or an infinite width: stock's paths
    left, right = edges
    # histc's counts do not depend on the order of the values: a flat view, or a copy
    x = (x_orig.detach() if x_orig.requires_grad else x_orig).numpy().ravel()
    outcome = native(_native.histogram_observe_in_place, x, lo, hi, left, right, histogram.numpy())
    if outcome != "added":
        return False
    increment_version(histogram)  # stock's copy_
    counters.record_call(FORWARD_STATS_NAME, time.perf_counter() - t0, True)
    return True


def histc(x: Any, lo: float, hi: float, bins: int) -> torch.Tensor | str:
    """``torch.histc(x, bins, min=lo, max=hi)`` of the flat float32 array ``x``, all of whose
    values are finite and inside ``[lo, hi]``, ``lo < hi``; or why it is not modelled."""
    edges = _histc_range_edges(lo, hi, bins)
    if edges is None:
        return "histc of a range that is empty, not finite or of infinite width"
    left, right = edges
    counts = torch.empty(bins, dtype=torch.float32)
    zeros = np.zeros(bins, dtype=np.float32)
    outcome: str = native(_native.histogram_observe, x, lo, hi, left, right, zeros, counts.numpy())
    return counts if outcome == "added" else outcome


def _reset_modelled(observer: Any) -> bool:
    """``observer.reset_histogram`` is torchao's, the source modelled (``RESET_MODEL``)."""
    from arm_accel import patches
    from arm_accel.patches.sources import resolve

    stock = vars(resolve("torchao.quantization.pt2e.observer:HistogramObserver"))["reset_histogram"]
    return (
        "reset_histogram" not in vars(observer)
        and type(observer).reset_histogram is stock
        and patches.holds(RESET_MODEL)
    )


def observe(observer: Any, x_orig: torch.Tensor) -> str | None:
    """Stock's ``forward`` of ``x_orig`` with its ``torch.histc`` native: every other
    operation is stock's, in stock's order (the first batch's ``reset_histogram`` inlined,
    where it is the source modelled); None when done, else why not (nothing changed)."""
    x = x_orig.detach()
    x_min, x_max = torch.aminmax(x)
    lo, hi = x_min.item(), x_max.item()
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "an infinite or NaN value"  # stock warns and drops infinities
    flat = x.contiguous().view(-1).numpy()
    bins = observer.bins
    current_min, current_max = observer.min_val, observer.max_val
    if observer.min_val == float("inf") or observer.max_val == float("-inf"):
        if not _reset_modelled(observer):
            return "reset_histogram is not the source modelled"
        first = histc(flat, lo, hi, bins)
        if isinstance(first, str):
            return first
        # reset_histogram(x, x_min, x_max)
        observer.min_val.resize_(x_min.shape)
        observer.min_val.copy_(x_min)
        observer.max_val.resize_(x_max.shape)
        observer.max_val.copy_(x_max)
        assert x_min.numel() == 1 and x_max.numel() == 1, "histogram min/max values must be scalar."
        observer.histogram.detach_().resize_(first.shape)
        observer.histogram.copy_(first)
        return None
    new_min = torch.min(current_min, x_min)
    new_max = torch.max(current_max, x_max)
    new_min, new_max = new_min.detach(), new_max.detach()
    update_histogram = histc(flat, new_min.item(), new_max.item(), bins)
    if isinstance(update_histogram, str):
        return update_histogram
    if new_min == current_min and new_max == current_max:
        combined_histogram = observer.histogram + update_histogram
        observer.histogram.detach_().resize_(combined_histogram.shape)
        observer.histogram.copy_(combined_histogram)
    else:
        combined_histogram = observer._combine_histograms(
            observer.histogram, current_min, current_max, update_histogram, new_min, new_max
        )
        observer.histogram.detach_().resize_(combined_histogram.shape)
        observer.histogram.copy_(combined_histogram)
        observer.min_val.detach_().resize_(new_min.shape)
        observer.min_val.copy_(new_min)
        observer.max_val.detach_().resize_(new_max.shape)
        observer.max_val.copy_(new_max)
    return None


def forward(stock: Any) -> Any:
    """The ``forward`` the patch table installs: natively observed batches, else stock's."""

    @functools.wraps(stock)
    def observer_forward(self: Any, x_orig: torch.Tensor) -> torch.Tensor:
        if switch.is_enabled():
            try:
                if observe_in_range(self, x_orig):
                    return x_orig
            except NativeFailed as exc:
                record_native_failure(FORWARD_STATS_NAME, exc)
                return run_stock(
                    FORWARD_STATS_NAME, lambda: stock(self, x_orig), time.perf_counter()
                )

        def accelerated() -> tuple[bool, Any]:
            reason = observe(self, x_orig)
            return (True, x_orig) if reason is None else (False, reason)

        return run_accelerated(  # type: ignore[no-any-return]
            FORWARD_STATS_NAME,
            lambda: forward_decline_reason(self, x_orig),
            accelerated,
            lambda: stock(self, x_orig),
        )

    return observer_forward


def upscale_decline_reason(observer: Any, histogram: Any, *bounds: Any) -> str | None:
    """Why ``observer._upscale_histogram`` runs stock's code (None: native bucketing)."""
    if not (_plain_float32(histogram) and histogram.dim() == 1 and histogram.is_contiguous()):
        return "histogram is not a contiguous 1-d float32 CPU tensor"
    if not all(_plain_float32(b) and b.dim() == 0 for b in bounds):
        return "range bounds are not 0-dim float32 CPU tensors"
    bins, upsample = observer.bins, observer.upsample_rate
    if not (isinstance(bins, int) and isinstance(upsample, int) and bins >= 1 and upsample >= 1):
        return "bins or upsample_rate is not a positive int"
    if histogram.numel() != bins:
        return "histogram length is not bins"  # stock's bincount raises
    if modes_active():
        return "a torch function or dispatch mode is active, or dynamo traces"
    return None


def upscale_histogram(
    observer: Any,
    histogram: torch.Tensor,
    orig_min: torch.Tensor,
    orig_max: torch.Tensor,
    update_min: torch.Tensor,
    update_max: torch.Tensor,
) -> torch.Tensor:
    """Stock's ``_upscale_histogram`` with its ``repeat_interleave``, ``bucketize`` and
    ``bincount`` native; the mid points and boundaries are stock's expressions."""
    from arm_accel import _native

    bins, upsample = observer.bins, observer.upsample_rate
    bin_size = (orig_max - orig_min) / (bins * upsample)
    mid_points_histogram = (
        torch.linspace(orig_min, orig_max, bins * upsample + 1, device=orig_min.device)[:-1].to(
            histogram.device
        )
        + 0.5 * bin_size
    )
    boundaries_new_histogram = torch.linspace(
        update_min, update_max, bins + 1, device=update_min.device
    ).to(histogram.device)
    update_histogram = torch.empty(bins, dtype=torch.float32)
    native(
        _native.histogram_upscale,
        histogram.detach().numpy(),
        upsample,
        mid_points_histogram.numpy(),
        boundaries_new_histogram.numpy(),
        update_histogram.numpy(),
    )
    return update_histogram


def upscale(stock: Any) -> Any:
    """The ``_upscale_histogram`` the patch table installs: native bucketing, else stock's."""

    @functools.wraps(stock)
    def _upscale_histogram(
        self: Any,
        histogram: torch.Tensor,
        orig_min: torch.Tensor,
        orig_max: torch.Tensor,
        update_min: torch.Tensor,
        update_max: torch.Tensor,
    ) -> torch.Tensor:
        args = (histogram, orig_min, orig_max, update_min, update_max)
        return run_accelerated(  # type: ignore[no-any-return]
            UPSCALE_STATS_NAME,
            lambda: upscale_decline_reason(self, *args),
            lambda: (True, upscale_histogram(self, *args)),
            lambda: stock(self, *args),
        )

    return _upscale_histogram


__all__ = [
    "FORWARD_STATS_NAME",
    "RESET_MODEL",
    "UPSCALE_STATS_NAME",
    "forward",
    "forward_decline_reason",
    "histc",
    "observe",
    "observe_in_range",
    "upscale",
    "upscale_decline_reason",
    "upscale_histogram",
]
