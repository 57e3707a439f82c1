"""The Arm passes' ``QuantArgs.quantize_value`` / ``dequantize_value`` accelerated against
stock's (acceleration off) on the same tensors: dtype, shape, strides and bytes."""

from __future__ import annotations

import arm_accel
import pytest
import torch
from arm_accel.control import counters
from arm_accel.quantize import affine

pytest.importorskip("executorch.backends.arm.quantizer")  # the activation's trigger
from executorch.backends.arm._passes.quant_args import QuantArgs  # noqa: E402

CODES = (torch.int8, torch.uint8, torch.int16)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a.contiguous().view(torch.uint8).numpy().tobytes()
        == b.contiguous().view(torch.uint8).numpy().tobytes()
    )


def _accelerated(name: str) -> int:
    stat = counters.snapshot().get(name)
    return stat.accelerated if stat else 0


def _qargs(g: torch.Generator, dtype: torch.dtype) -> QuantArgs:
    info = torch.iinfo(dtype)
    lo, hi = sorted(int(v) for v in torch.randint(info.min, info.max + 1, (2,), generator=g))
    if torch.rand((), generator=g) < 0.5:
        lo, hi = info.min, info.max
    if torch.rand((), generator=g) < 0.1:
        lo, hi = hi, lo  # stock accepts qmin > qmax: clamp gives qmax
    zp = int(torch.randint(lo if lo <= hi else hi, (hi if lo <= hi else lo) + 1, (), generator=g))
    scale = float(10 ** (torch.rand((), generator=g, dtype=torch.float64) * 16 - 12))
    return QuantArgs(scale=scale, zp=zp, qmin=lo, qmax=hi, dtype=dtype)


def _values(g: torch.Generator, q: QuantArgs, n: int) -> torch.Tensor:
    """Normal values at the quantization's scale, exact ties (k + 0.5) * scale, zeros of both
    signs, infinities, huge, tiny and subnormal values, shuffled."""
    normal = torch.randn(n, generator=g) * q.scale * 200
    ties = (torch.randint(-300, 300, (n // 4,), generator=g) + 0.5) * q.scale
    special = torch.tensor(
        [0.0, -0.0, float("inf"), -float("inf"), 3e38, -3e38, 1e-45, -1e-45, 1e-39, 1.0]
    )
    x = torch.cat([normal, ties.float(), special])
    return x[torch.randperm(len(x), generator=g)]


@pytest.mark.parametrize("dtype", CODES)
def test_quantize_value_bit_for_bit(dtype: torch.dtype) -> None:
    """Random per-tensor qparams (scales 1e-12..1e4, zero points, narrow, full and inverted
    ranges) on values with ties, signed zeros, infinities, huge, tiny and subnormal values:
    the native quantization equals stock's; a NaN input declines and still equals."""
    g = torch.Generator().manual_seed(0)
    before = _accelerated(affine.QUANTIZE_STATS_NAME)
    for i in range(60):
        q = _qargs(g, dtype)
        x = _values(g, q, 2000).reshape(-1, 10 if i % 2 else 1)
        if i % 10 == 9:
            x[0, 0] = float("nan")
        with arm_accel.disabled():
            stock = q.quantize_value(x)
        ours = q.quantize_value(x)
        assert _same(ours, stock), (i, q)
    assert _accelerated(affine.QUANTIZE_STATS_NAME) - before == 54


@pytest.mark.parametrize("dtype", CODES)
def test_dequantize_value_bit_for_bit(dtype: torch.dtype) -> None:
    """Random codes of every value with random per-tensor qparams: the table gather equals
    stock's dequantization."""
    g = torch.Generator().manual_seed(1)
    info = torch.iinfo(dtype)
    before = _accelerated(affine.DEQUANTIZE_STATS_NAME)
    for i in range(20):
        q = _qargs(g, dtype)
        codes = torch.randint(info.min, info.max + 1, (70000 + i, 1), generator=g).to(dtype)
        with arm_accel.disabled():
            stock = q.dequantize_value(codes)
        ours = q.dequantize_value(codes)
        assert _same(ours, stock), (i, q)
    assert _accelerated(affine.DEQUANTIZE_STATS_NAME) - before == 20


def test_unmodelled_inputs_decline() -> None:
    """Per-channel qparams, a non-contiguous input, an input requiring grad and a dtype other
    than the qparams' are left to stock's code (same result or same exception), counted."""
    q = QuantArgs(scale=0.02, zp=3, qmin=-128, qmax=127, dtype=torch.int8)
    x = torch.randn(300, 300)
    cases = [
        (q._replace(per_channel=True, scale=[0.02] * 300, zp=[0] * 300), x),
        (q, x.t()),
        (q, x.clone().requires_grad_()),
    ]
    before = _accelerated(affine.QUANTIZE_STATS_NAME)
    for qa, value in cases:
        with arm_accel.disabled():
            stock = qa.quantize_value(value)
        assert _same(qa.quantize_value(value), stock)
    assert _accelerated(affine.QUANTIZE_STATS_NAME) == before
    codes = torch.zeros(70000, dtype=torch.uint8)
    with arm_accel.disabled(), pytest.raises(AssertionError) as stock_exc:
        q.dequantize_value(codes)
    with pytest.raises(AssertionError) as ours_exc:
        q.dequantize_value(codes)
    assert str(ours_exc.value) == str(stock_exc.value)


def test_native_kernels_reject_bad_input() -> None:
    """The native kernels raise a ValueError naming the problem on arrays of the wrong dtype,
    length or layout, and on channel parameters that do not fit the input."""
    import numpy as np
    from arm_accel import _native

    x = np.zeros(12, dtype=np.float32)
    cases = [
        (lambda: _native.quantize_per_tensor(x, 1.0, 0, -128, 127, np.zeros(11, np.int8)), "11"),
        (lambda: _native.quantize_per_tensor(x, 1.0, 0, -128, 127, np.zeros(12, np.int32)), "int8"),
        (
            lambda: _native.quantize_per_tensor(x[::2], 1.0, 0, -1, 1, np.zeros(6, np.int8)),
            "contig",
        ),
        (
            lambda: _native.quantize_per_channel(
                x, np.ones(5, np.float32), np.zeros(5, np.float32), 1, -1, 1, np.zeros(12, np.int8)
            ),
            "divide",
        ),
        (
            lambda: _native.dequantize_gather(
                np.zeros(4, np.int8), np.zeros(10, np.float32), np.zeros(4, np.float32)
            ),
            "table",
        ),
        (
            lambda: _native.dequantize_gather(
                np.zeros(4, np.int8), np.zeros(256, np.float32), np.zeros(3, np.float32)
            ),
            "length",
        ),
    ]
    for call, word in cases:
        with pytest.raises(ValueError, match=word):
            call()
