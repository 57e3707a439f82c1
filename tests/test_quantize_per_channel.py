"""``PerChannelMinMaxObserver._forward`` accelerated (``arm_accel.quantize.per_channel``)
against torchao's own, on generated weight-like batches."""

from __future__ import annotations

from typing import Any

import arm_accel
import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import pytest
import torch
from arm_accel import patches
from arm_accel.control import counters
from arm_accel.quantize import per_channel
from hypothesis import given
from hypothesis import strategies as st
from support import fuzz
from torchao.quantization.pt2e.observer import PerChannelMinMaxObserver

FUZZ = fuzz.examples(ci=60, long=500)


@pytest.fixture(autouse=True)
def _installed() -> None:
    assert patches.installed("quantize.per_channel"), [
        s for s in patches.states() if s.group == "quantize.per_channel"
    ]


def _state(obs: PerChannelMinMaxObserver) -> list[Any]:
    """The running extremes' dtypes, shapes, bytes and version counters."""
    return [
        (t.dtype, tuple(t.shape), t.detach().contiguous().numpy().tobytes(), t._version)
        for t in (obs.min_val, obs.max_val)
    ]


def _outcome(obs: PerChannelMinMaxObserver, x: torch.Tensor) -> tuple[str, Any]:
    try:
        out = obs(x)
    except Exception as exc:
        return "raised", (type(exc), str(exc))
    return "ok", out is x


def _batch(shape: tuple[int, ...], kind: str, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    if kind == "zeros":  # rows of +0.0 and -0.0, some mixed
        x = torch.where(x > 0, 0.0, -0.0)
    elif kind == "some zeros":
        x = torch.where(x.abs() < 0.5, torch.where(x > 0, 0.0, -0.0), x)
    elif kind == "inf":
        x[0, 0] = float("inf")
        x[-1, -1] = -float("inf")
    elif kind == "nan":
        x.view(-1)[seed % x.numel()] = float("nan")
    elif kind == "constant":
        x = torch.full(shape, 0.25)
    elif kind == "scaled":
        x = x * 10.0 ** torch.randint(-30, 30, shape, generator=g).float()
    return x


kinds = st.sampled_from(
    ["normal"] * 4 + ["zeros", "some zeros", "inf", "nan", "constant", "scaled"]
)
shapes = st.sampled_from([(8, 16), (3, 5), (1, 7), (16, 4, 3, 3), (5, 2, 2), (64, 1)])


@FUZZ
@given(
    shape=shapes,
    batches=st.lists(st.tuples(kinds, st.integers(0, 2**16)), min_size=1, max_size=6),
    ch_axis=st.sampled_from([0, 0, 0, 1, -1]),
    layout=st.sampled_from(["plain", "plain", "parameter", "transposed"]),
)
def test_forward_identical(
    shape: tuple[int, ...], batches: list[tuple[str, int]], ch_axis: int, layout: str
) -> None:
    """Two observers fed the same batches (normal, zeros of both signs, infinities, NaN,
    constant, scaled over 60 decades; 2-d to 4-d; channel axis 0, 1 and -1; plain tensors,
    parameters and non-contiguous views), one stock, one accelerated: after every batch the
    running extremes and their version counters are identical, the return value is the input,
    or both raise the same."""
    stock_obs = PerChannelMinMaxObserver(ch_axis=ch_axis)
    ours = PerChannelMinMaxObserver(ch_axis=ch_axis)
    for kind, seed in batches:
        x = _batch(shape, kind, seed)
        if layout == "parameter":
            x = torch.nn.Parameter(x)
        elif layout == "transposed" and x.dim() >= 2:
            x = x.transpose(0, 1).contiguous().transpose(0, 1)
        with arm_accel.disabled():
            expected = _outcome(stock_obs, x)
        assert _outcome(ours, x) == expected
        assert _state(ours) == _state(stock_obs)


def test_forward_took_the_native_path() -> None:
    """Ordinary weights (a linear's and a convolution's, plain and as parameters): every batch
    after the first is reduced natively (counted), the extremes equal stock's."""
    g = torch.Generator().manual_seed(1)
    for shape in [(32, 16), (8, 4, 3, 3)]:
        xs = [torch.randn(shape, generator=g) * s for s in (1.0, 2.0, 0.5, 3.0)]
        xs.append(torch.nn.Parameter(xs[0] * 4.0))
        stock_obs, ours = PerChannelMinMaxObserver(), PerChannelMinMaxObserver()
        with arm_accel.disabled():
            for x in xs:
                stock_obs(x)
        before = counters.snapshot().get(per_channel.STATS_NAME)
        for x in xs:
            ours(x)
        after = counters.snapshot()[per_channel.STATS_NAME]
        assert _state(ours) == _state(stock_obs)
        was = before.accelerated if before is not None else 0
        assert after.accelerated - was == len(xs) - 1  # the first batch resizes: stock's


def test_native_failure_falls_back(lenient: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel failing (not strict): the batch is observed by stock's ``_forward``, the
    extremes equal a stock observer's, the failure counted; under ``ARM_ACCEL_STRICT=1`` it
    raises instead."""
    from arm_accel import _native
    from arm_accel.quantize.patch import NativeFailed

    def fail(*args: Any) -> None:
        raise ValueError("injected")

    xs = [torch.randn(6, 5), torch.randn(6, 5) * 3.0]
    stock_obs, ours = PerChannelMinMaxObserver(), PerChannelMinMaxObserver()
    with arm_accel.disabled():
        for x in xs:
            stock_obs(x)
    ours(xs[0])
    monkeypatch.setattr(_native, "per_channel_minmax", fail)
    ours(xs[1])
    assert _state(ours) == _state(stock_obs)
    reasons = counters.snapshot()[per_channel.STATS_NAME].fallbacks
    assert any(r.startswith("native kernel failed") for r in reasons), reasons
    monkeypatch.setenv("ARM_ACCEL_STRICT", "1")
    with pytest.raises(NativeFailed):
        ours(xs[1])


def test_native_api_rejects_bad_input() -> None:
    """Lengths that do not fit and read-only or non-float32 arrays raise ValueError naming
    what is wrong; the extremes are untouched."""
    import numpy as np
    from arm_accel import _native

    lo, hi = np.zeros(3, dtype=np.float32), np.ones(3, dtype=np.float32)
    cases = [
        ((np.ones(7, dtype=np.float32), lo, hi), "channels"),
        ((np.ones(6, dtype=np.float64), lo, hi), "float32"),
        ((np.ones(6, dtype=np.float32), lo, np.ones(2, dtype=np.float32)), "channels"),
        ((np.ones(6, dtype=np.float32), lo[::2], hi), "min"),
    ]
    for args, word in cases:
        with pytest.raises(ValueError, match=word):
            _native.per_channel_minmax(*args)
    assert lo.tolist() == [0.0, 0.0, 0.0] and hi.tolist() == [1.0, 1.0, 1.0]
