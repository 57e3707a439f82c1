"""``PerChannelMinMaxObserver._forward`` (the Arm quantizer's per-channel weight observer,
run on every calibration batch) with its per-channel reduction in Rust.

After the first batch, with channel axis 0 and a contiguous float32 input, stock's
``_forward`` reduces each channel's row to its minimum and maximum (``torch.aminmax``), takes
the elementwise ``torch.min``/``torch.max`` with the running extremes and copies them into the
buffers: :func:`observe` does it natively in the buffers' storage and bumps each buffer's
version as stock's ``copy_`` does. The first batch (the buffers resized from empty) and
everything else run stock's code. Why the values are stock's: design.md, "The quantization
flow".
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.autograd.graph import increment_version

from arm_accel import _native
from arm_accel.quantize.patch import (
    float32_input,
    modes_active,
    native,
    run_accelerated,
    writable_buffer,
)

#: ``stats()`` entry (also the patch table's row): one call per observed batch.
STATS_NAME = "quantize.per_channel_forward"


def decline_reason(observer: Any, x: Any) -> str | None:
    """Why ``observer._forward(x)`` runs stock's code (None: :func:`observe` may take it)."""
    if not (float32_input(x) and x.dim() >= 2 and x.is_contiguous()):
        return "input is not a contiguous float32 CPU tensor of 2 or more dimensions"
    if type(observer.ch_axis) is not int or observer.ch_axis != 0:
        return "channel axis is not 0"
    for extreme in (observer.min_val, observer.max_val):
        if not (writable_buffer(extreme) and extreme.dim() == 1):
            return "running extremes are not 1-d float32 CPU tensors"
        if extreme.numel() != x.shape[0]:
            return "running extremes are not one per channel (the first batch resizes them)"
    if modes_active() or torch.is_inference_mode_enabled():
        return "a torch function or dispatch mode is active, dynamo traces, or inference mode"
    return None


def observe(observer: Any, x: torch.Tensor) -> str | None:
    """Stock's ``_forward`` of ``x`` after the first batch, natively in the buffers (one
    :func:`decline_reason` accepts); None when done, else why not (nothing changed)."""
    min_val, max_val = observer.min_val, observer.max_val
    flat = (x.detach() if x.requires_grad else x).numpy().reshape(-1)
    outcome: str = native(_native.per_channel_minmax, flat, min_val.numpy(), max_val.numpy())
    if outcome != "updated":
        return outcome
    increment_version((min_val, max_val))  # stock's two copy_ calls
    return None


def forward(stock: Any) -> Any:
    """The ``_forward`` the patch table installs: :func:`observe`, else stock's."""

    @functools.wraps(stock)
    def _forward(self: Any, x_orig: torch.Tensor) -> torch.Tensor:
        def accelerated() -> tuple[bool, Any]:
            reason = observe(self, x_orig)
            return (True, x_orig) if reason is None else (False, reason)

        return run_accelerated(  # type: ignore[no-any-return]
            STATS_NAME,
            lambda: decline_reason(self, x_orig),
            accelerated,
            lambda: stock(self, x_orig),
        )

    return _forward


__all__ = ["STATS_NAME", "decline_reason", "forward", "observe"]
