"""The Arm passes' ``QuantArgs.quantize_value`` / ``dequantize_value`` on constant tensors, per
tensor, in Rust.

Arm passes that fold constants (``FuseConstantArgsPass``: a quantized weight dequantized, an
op applied, the result quantized again) call these helpers on whole weights; on a large
embedding the float copies torch's elementwise steps make are most of the pass's time and
memory. :func:`quantize` computes ``quantize_per_tensor``'s steps per element natively
(``rust/quantize/affine.rs``); :func:`dequantize` maps each code through a table that stock's
own ``dequantize_value`` computed for every code of the type. Why both are stock's bit for
bit: design.md, "The quantization flow".
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from arm_accel import _native
from arm_accel.quantize.patch import modes_active, native, run_accelerated

#: ``stats()`` entries (also the patch table's rows): one call per tensor.
QUANTIZE_STATS_NAME = "quantize.qargs_quantize"
DEQUANTIZE_STATS_NAME = "quantize.qargs_dequantize"

#: The code types the kernels write and read.
_CODES = (torch.int8, torch.uint8, torch.int16)
#: Zero point dtypes: stock's elementwise add casts them to float32 as ``.to(float32)`` does.
_INTEGERS = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def _plain(t: Any, dtype: torch.dtype) -> bool:
    return (
        type(t) in (torch.Tensor, torch.nn.Parameter)
        and t.dtype == dtype
        and t.device.type == "cpu"
        and t.is_contiguous()
        and t.numel() > 0
    )


def _filled(out: torch.Tensor, kernel: Callable[..., str], *args: Any) -> tuple[bool, Any]:
    """``kernel(*args, out)`` writing the fresh contiguous tensor ``out`` (flattened):
    ``(True, out)`` when it reports ``"done"``, else ``(False, why)``."""
    outcome = native(kernel, *args, out.view(-1).numpy())
    if outcome != "done":
        return False, outcome
    return True, out


def params_reason(scale: Any, zero_point: Any, qmin: Any, qmax: Any, dtype: Any) -> str | None:
    """Why a per-tensor quantization with these parameters is not modelled (None: a nonzero
    Python float scale, a Python int zero point, :func:`bounds_reason`'s bounds)."""
    if type(scale) is not float or type(zero_point) is not int:
        return "scale or zero point not a Python float / int"
    if scale == 0.0:
        return "scale 0 (stock divides by it)"
    return bounds_reason(qmin, qmax, dtype)


def bounds_reason(qmin: Any, qmax: Any, dtype: Any) -> str | None:
    """Why quantizing to ``dtype`` between ``qmin`` and ``qmax`` is not modelled (None: an
    int8/uint8/int16 code type, Python int bounds that stock's check accepts)."""
    from torch.ao.quantization.fx._decomposed import _quant_min_max_bounds_check

    if dtype not in _CODES:
        return f"dtype {dtype}"
    if type(qmin) is not int or type(qmax) is not int:
        return "qmin or qmax not a Python int"
    try:
        _quant_min_max_bounds_check(qmin, qmax, dtype)
    except (AssertionError, ValueError):
        return "qmin/qmax outside the dtype's range (stock raises)"
    return None


def input_reason(x: Any) -> str | None:
    """Why quantizing the tensor ``x`` is left to stock's ops (None: a plain contiguous float32
    CPU tensor whose quantization records no autograd node, no mode active)."""
    if modes_active():
        return "a torch function or dispatch mode is active"
    if not _plain(x, torch.float32):
        return "input is not a non-empty contiguous float32 CPU tensor"
    if torch.is_grad_enabled() and x.requires_grad:
        return "input requires grad (stock's ops record autograd nodes)"
    return None


def quantize_per_tensor(
    x: torch.Tensor, scale: float, zero_point: int, qmin: int, qmax: int, dtype: torch.dtype
) -> tuple[bool, Any]:
    """``(True, quantize_per_tensor(x, ...))`` computed natively, or ``(False, why)``: ``x``
    and the parameters passed :func:`input_reason` and :func:`params_reason`."""
    return _filled(
        torch.empty(x.shape, dtype=dtype),
        _native.quantize_per_tensor,
        x.detach().view(-1).numpy(),
        1.0 / scale,
        zero_point,
        qmin,
        qmax,
    )


def channels_reason(x: torch.Tensor, scales: Any, zero_points: Any, axis: Any) -> str | None:
    """Why ``quantize_per_channel``'s channel parameters are not modelled (None: float32 scales
    and integer zero points, 1-d on the CPU, one per channel of a non-negative ``axis``)."""
    if type(axis) is not int or not 0 <= axis < x.dim():
        return "axis out of range or negative"
    for t in (scales, zero_points):
        if type(t) is not torch.Tensor or t.device.type != "cpu" or t.dim() != 1:
            return "scales or zero points not 1-d CPU tensors"
        if t.numel() != x.shape[axis]:
            return "not one scale and zero point per channel"
        if torch.is_grad_enabled() and t.requires_grad:
            return "scales or zero points require grad (stock's ops record autograd nodes)"
    if scales.dtype != torch.float32:
        return "scales not float32"
    if zero_points.dtype not in _INTEGERS:
        return "zero points not integers"
    return None


def quantize_per_channel(
    x: torch.Tensor,
    scales: torch.Tensor,
    zero_points: torch.Tensor,
    axis: int,
    qmin: int,
    qmax: int,
    dtype: torch.dtype,
) -> tuple[bool, Any]:
    """``(True, quantize_per_channel(x, ...))`` computed natively, or ``(False, why)``: the
    inputs passed :func:`input_reason`, :func:`channels_reason` and :func:`bounds_reason`.
    The channel operands are stock's own: ``1.0 / scales`` and the zero points as float32, as
    its elementwise ops see them."""
    inv = (1.0 / scales).contiguous()
    zps = zero_points.to(torch.float32).contiguous()
    inner = 1
    for d in x.shape[axis + 1 :]:
        inner *= d
    return _filled(
        torch.empty(x.shape, dtype=dtype),
        _native.quantize_per_channel,
        x.detach().view(-1).numpy(),
        inv.numpy(),
        zps.numpy(),
        inner,
        qmin,
        qmax,
    )


def _qargs_reason(qargs: Any) -> str | None:
    if qargs.per_channel:
        return "per-channel quantization"
    return params_reason(qargs.scale, qargs.zp, qargs.qmin, qargs.qmax, qargs.dtype)


def quantize_decline(qargs: Any, x: Any) -> str | None:
    """Why ``qargs.quantize_value(x)`` runs stock's code (None: the kernel may compute it)."""
    return input_reason(x) or _qargs_reason(qargs)


def _quantize(qargs: Any, x: torch.Tensor) -> tuple[bool, Any]:
    return quantize_per_tensor(x, qargs.scale, qargs.zp, qargs.qmin, qargs.qmax, qargs.dtype)


def dequantize_decline(qargs: Any, qx: Any) -> str | None:
    """Why ``qargs.dequantize_value(qx)`` runs stock's code (None: the table gather may)."""
    if modes_active():
        return "a torch function or dispatch mode is active"
    reason = _qargs_reason(qargs)
    if reason is not None:
        return reason
    if not _plain(qx, qargs.dtype):
        return "input is not a non-empty contiguous CPU tensor of the qparams' dtype"
    if qx.numel() < 1 << torch.iinfo(qargs.dtype).bits:
        return "fewer elements than its code table"
    return None


def _dequantize(stock: Callable[..., Any], qargs: Any, qx: torch.Tensor) -> tuple[bool, Any]:
    info = torch.iinfo(qargs.dtype)
    table = stock(qargs, torch.arange(info.min, info.max + 1, dtype=qargs.dtype))
    if table.dtype != torch.float32 or not table.is_contiguous():
        return False, "stock's table is not a contiguous float32 tensor"
    return _filled(
        torch.empty(qx.shape, dtype=torch.float32),
        _native.dequantize_gather,
        qx.view(-1).numpy(),
        table.numpy(),
    )


def quantizing(stock: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """The ``quantize_value`` the patch table installs on ``QuantArgs``."""

    @functools.wraps(stock)
    def quantize_value(self: Any, x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return stock(self, x)
        return run_accelerated(
            QUANTIZE_STATS_NAME,
            lambda: quantize_decline(self, x),
            lambda: _quantize(self, x),
            lambda: stock(self, x),
        )

    return quantize_value


def dequantizing(stock: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """The ``dequantize_value`` the patch table installs on ``QuantArgs``."""

    @functools.wraps(stock)
    def dequantize_value(self: Any, qx: Any) -> Any:
        return run_accelerated(
            DEQUANTIZE_STATS_NAME,
            lambda: dequantize_decline(self, qx),
            lambda: _dequantize(stock, self, qx),
            lambda: stock(self, qx),
        )

    return dequantize_value


__all__ = [
    "DEQUANTIZE_STATS_NAME",
    "QUANTIZE_STATS_NAME",
    "dequantize_decline",
    "dequantizing",
    "quantize_decline",
    "quantizing",
]
