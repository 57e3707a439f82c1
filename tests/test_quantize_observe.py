"""``HistogramObserver.forward`` and ``_upscale_histogram`` accelerated
(``arm_accel.quantize.observe``) against torchao's own, on generated calibration batches."""

from __future__ import annotations

import math
from typing import Any

import arm_accel
import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import numpy as np
import pytest
import torch
from arm_accel import patches
from arm_accel.control import counters
from arm_accel.quantize import observe
from hypothesis import given
from hypothesis import strategies as st
from support import fuzz
from torchao.quantization.pt2e.observer import HistogramObserver

FUZZ = fuzz.examples(ci=40, long=500)


@pytest.fixture(autouse=True)
def _installed() -> None:
    assert patches.installed("quantize.observe"), [
        s for s in patches.states() if s.group == "quantize.observe"
    ]


def _bits(t: torch.Tensor) -> tuple[Any, ...]:
    return (t.dtype, tuple(t.shape), t.detach().contiguous().numpy().tobytes())


def _state(obs: HistogramObserver) -> list[Any]:
    """The buffers' values, and their version counters (stock's in-place writes bump them)."""
    buffers = (obs.histogram, obs.min_val, obs.max_val)
    return [_bits(t) for t in buffers] + [t._version for t in buffers]


def _outcome(obs: HistogramObserver, x: torch.Tensor) -> tuple[str, Any]:
    try:
        out = obs(x)
    except Exception as exc:
        return "raised", (type(exc), str(exc))
    return "ok", out is x


def _batch(kind: str, scale: float, offset: float, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = {
        "normal": lambda: torch.randn(n, generator=g),
        "uniform": lambda: torch.rand(n, generator=g),
        "heavy": lambda: torch.tan(math.pi * (torch.rand(n, generator=g) - 0.5)),
        "constant": lambda: torch.full((n,), 1.0),
        "zeros": lambda: torch.zeros(n),
        "signed zeros": lambda: torch.tensor([0.0, -0.0] * n)[:n],
        "inf": lambda: torch.where(torch.rand(n, generator=g) < 0.1, math.inf, 1.0),
        "nan": lambda: torch.where(torch.rand(n, generator=g) < 0.1, math.nan, 1.0),
    }[kind]()
    return (x * scale + offset).to(torch.float32)


batches = st.lists(
    st.tuples(
        st.sampled_from(["normal"] * 4 + ["uniform", "heavy", "constant", "zeros", "signed zeros"]),
        st.sampled_from([1e-30, 1e-3, 1.0, 0.9, 1.1, 1e3, 1e30, 1e38]),
        st.sampled_from([0.0, 1.0, -3.0, 1e6]),
        st.integers(1, 3000),
        st.integers(0, 2**16),
        st.sampled_from(["flat", "2d", "strided", "parameter"]),
    ),
    min_size=1,
    max_size=12,
)


def _shaped(x: torch.Tensor, shape: str) -> torch.Tensor:
    """The batch flat, as a 2-d tensor, as a non-contiguous view, or as a parameter (the Arm
    quantizer observes some weights with a ``HistogramObserver``)."""
    if shape == "parameter":
        return torch.nn.Parameter(x)
    if shape == "2d" and x.numel() % 2 == 0:
        return x.view(2, -1)
    if shape == "strided" and x.numel() >= 2:
        return x[::2]
    return x


@FUZZ
@given(
    data=batches,
    tail=st.sampled_from([None, "inf", "nan"]),
    bins=st.sampled_from([2048, 256, 37, 1]),
    upsample=st.sampled_from([16, 1, 3]),
)
def test_forward_identical(
    data: list[tuple[Any, ...]], tail: str | None, bins: int, upsample: int
) -> None:
    """Two observers fed the same batches (normal, uniform, heavy-tailed, constant, zeros of
    both signs; tiny to huge scales; flat, 2-d, strided and parameters; a last batch with
    infinities or NaN), one stock, one accelerated: after every batch the histogram, min_val,
    max_val and their version counters are identical, the return value is the input, or both
    raise the same."""
    stock_obs = HistogramObserver(bins=bins)
    ours = HistogramObserver(bins=bins)
    stock_obs.upsample_rate = ours.upsample_rate = upsample
    xs = [_shaped(_batch(*d[:5]), d[5]) for d in data]
    if tail is not None:
        xs.append(_batch(tail, 1.0, 0.0, 64, 1))
    for x in xs:
        with arm_accel.disabled():
            expected = _outcome(stock_obs, x)
        got = _outcome(ours, x)
        assert got == expected
        assert _state(ours) == _state(stock_obs)


@pytest.mark.parametrize("bins", [2048, 37, 1])
def test_one_value_range_identical(bins: int) -> None:
    """An observer that has seen a single value ``c`` (its range ``[c, c]``) fed more batches
    of ``c`` (``histc`` then widens the range to ``(c - 1, c + 1)``), signed zeros among them:
    stock's and the accelerated observer's histograms and version counters are bit-identical.
    Every batch is counted as accelerated where ``c - 1`` and ``c + 1`` stay apart in float32;
    where they round to one value (``|c| >= 2^24``) the batches run stock's code."""
    apart = [0.0, -0.0, 1.0, -1.0, 0.5, 3.3, -7.25, 1e-30, -5e-30, 1e6, -1.6e7]
    together = [3e7, 1e20, 3e38]
    for c in apart + together:
        stock_obs, ours = HistogramObserver(bins=bins), HistogramObserver(bins=bins)
        xs = [torch.full((n,), c) for n in (5, 1, 300)] + [torch.tensor([c, -c][: 1 + (c == 0)])]
        with arm_accel.disabled():
            for x in xs:
                stock_obs(x)
        before = counters.snapshot().get(observe.FORWARD_STATS_NAME)
        for x in xs:
            ours(x)
        after = counters.snapshot()[observe.FORWARD_STATS_NAME]
        assert _state(ours) == _state(stock_obs), c
        was = before.accelerated if before is not None else 0
        assert after.accelerated - was == (len(xs) if c in apart else 0), c


def test_in_place_declines_leave_the_histogram() -> None:
    """Batches the in-place path declines (a value outside the range, a NaN) leave the
    observer as stock's general path leaves it: the states equal stock's after each."""
    g = torch.Generator().manual_seed(3)
    first = torch.randn(500, generator=g)
    later = [first * 0.5, torch.tensor([0.0, 100.0]), first * 0.25, torch.tensor([0.1, math.nan])]
    stock_obs, ours = HistogramObserver(), HistogramObserver()
    for x in [first, *later]:
        with arm_accel.disabled():
            expected = _outcome(stock_obs, x)
        assert _outcome(ours, x) == expected
        assert _state(ours) == _state(stock_obs)


def test_forward_took_the_native_path() -> None:
    """Every batch is observed natively: the first (the histogram's reset), those inside the
    observed range, and growing ones (stock's forward with a native histc and upscale); the
    results equal stock's. The last batch is a parameter."""
    stock_obs, ours = HistogramObserver(), HistogramObserver()
    g = torch.Generator().manual_seed(0)
    batches = [torch.randn(1000, generator=g) * s for s in (1.0, 0.5, 0.7, 2.0, 1.5)]
    batches.append(torch.nn.Parameter(batches[0] * 0.5))
    with arm_accel.disabled():
        for x in batches:
            stock_obs(x)
    before = counters.snapshot()
    for x in batches:
        ours(x)
    after = counters.snapshot()
    assert _state(ours) == _state(stock_obs)

    def delta(name: str, field: str) -> int:
        was = getattr(before[name], field) if name in before else 0
        return int(getattr(after[name], field)) - was

    assert delta(observe.FORWARD_STATS_NAME, "accelerated") == len(batches)
    assert delta(observe.FORWARD_STATS_NAME, "calls") == len(batches)
    assert delta(observe.UPSCALE_STATS_NAME, "accelerated") >= 1


bounds = st.sampled_from([-1e30, -5.0, -1.0, -0.0, 0.0, 1e-30, 1.0, 3.0, 1e30, math.nan, math.inf])


@FUZZ
@given(
    counts=st.lists(st.floats(0, 1e6, width=32), min_size=1, max_size=64),
    seed=st.integers(0, 2**16),
    lo=bounds,
    hi=bounds,
    grow=st.tuples(st.floats(0, 10), st.floats(0, 10)),
    bins=st.sampled_from([2048, 256, 37]),
    upsample=st.sampled_from([16, 1, 3]),
)
def test_upscale_identical(
    counts: list[float],
    seed: int,
    lo: float,
    hi: float,
    grow: tuple[float, float],
    bins: int,
    upsample: int,
) -> None:
    """``_upscale_histogram`` of random histograms from a range into a wider one (and into
    empty, reversed, NaN and infinite ranges): stock's result and ours are bit-identical, or
    both raise the same."""
    obs = HistogramObserver(bins=bins)
    obs.upsample_rate = upsample
    rng = np.random.default_rng(seed)
    hist = np.zeros(bins, dtype=np.float32)
    hist[rng.integers(0, bins, len(counts))] = np.array(counts, dtype=np.float32)
    args = [
        torch.from_numpy(hist),
        torch.tensor(lo),
        torch.tensor(hi),
        torch.tensor(lo - grow[0]),
        torch.tensor(hi + grow[1]),
    ]

    def run() -> tuple[str, Any]:
        try:
            return "ok", _bits(obs._upscale_histogram(*args))
        except Exception as exc:
            return "raised", (type(exc), str(exc))

    with arm_accel.disabled():
        expected = run()
    assert run() == expected


def test_native_failure_falls_back(lenient: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-place kernel failing on a same-range batch (not strict): the batch is observed
    by stock's ``forward``, the observer's state equal to a stock observer's, the failure
    counted; under ``ARM_ACCEL_STRICT=1`` it raises instead."""
    from arm_accel import _native
    from arm_accel.quantize.patch import NativeFailed

    def fail(*args: Any) -> None:
        raise ValueError("injected")

    g = torch.Generator().manual_seed(5)
    first = torch.randn(400, generator=g)
    stock_obs, ours = HistogramObserver(), HistogramObserver()
    with arm_accel.disabled():
        stock_obs(first)
        stock_obs(first * 0.5)
    ours(first)
    monkeypatch.setattr(_native, "histogram_observe_in_place", fail)
    ours(first * 0.5)
    assert _state(ours) == _state(stock_obs)
    reasons = counters.snapshot()[observe.FORWARD_STATS_NAME].fallbacks
    assert any(r.startswith("native kernel failed") for r in reasons), reasons
    monkeypatch.setenv("ARM_ACCEL_STRICT", "1")
    with pytest.raises(NativeFailed):
        ours(first * 0.5)


def test_forward_reads_state_as_attributes() -> None:
    """Observers whose state attribute reads do not find in ``_buffers`` (an instance
    attribute shadowing ``max_val``; a subclass whose ``__getattr__`` redirects ``min_val``)
    observe batches as stock's ``forward`` does: the same outcome and state as a stock
    observer built the same way, after each batch."""

    class Redirecting(HistogramObserver):
        def __getattr__(self, name: str) -> Any:
            if name == "min_val" and vars(self).get("redirect") is not None:
                return vars(self)["redirect"]
            return super().__getattr__(name)

    def shadowed() -> HistogramObserver:
        obs = HistogramObserver()
        vars(obs)["max_val"] = torch.tensor(float("-inf"))
        return obs

    def redirecting() -> HistogramObserver:
        obs = Redirecting()
        vars(obs)["redirect"] = torch.tensor(float("inf"))
        return obs

    g = torch.Generator().manual_seed(7)
    xs = [torch.randn(300, generator=g) * s for s in (1.0, 0.5, 2.0, 0.25)]
    for build in (shadowed, redirecting):
        stock_obs, ours = build(), build()
        for x in xs:
            with arm_accel.disabled():
                expected = _outcome(stock_obs, x)
            assert _outcome(ours, x) == expected
            assert _state(ours) == _state(stock_obs)


class _CountingMode(torch.utils._python_dispatch.TorchDispatchMode):
    """A dispatch mode on this thread: every op goes through it."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops += 1
        return func(*args, **(kwargs or {}))


def test_modes_read_per_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The native paths read this thread's mode stacks: with torch's module-level "in a
    dispatch mode" flag left True (as another thread's modes leave it) and no mode here, the
    batches and the parameter search run natively and equal stock's; under a dispatch mode
    active on this thread they run stock's code, every op seen by the mode."""
    from arm_accel.quantize import histogram
    from torch.utils import _python_dispatch

    g = torch.Generator().manual_seed(11)
    batches = [torch.randn(300, generator=g) * s for s in (1.0, 0.5, 2.0)]
    stock_obs, ours, moded = HistogramObserver(), HistogramObserver(), HistogramObserver()
    with arm_accel.disabled():
        for x in batches:
            stock_obs(x)
        want = [_bits(t) for t in stock_obs._non_linear_param_search()]

    monkeypatch.setattr(_python_dispatch, "_is_in_torch_dispatch_mode", True)
    before = counters.snapshot()
    for x in batches:
        ours(x)
    assert [_bits(t) for t in ours._non_linear_param_search()] == want
    after = counters.snapshot()
    for name in (observe.FORWARD_STATS_NAME, histogram.STATS_NAME):
        done = before[name].accelerated if name in before else 0
        assert after[name].accelerated > done, name
    assert _state(ours) == _state(stock_obs)

    mode = _CountingMode()
    with mode:
        for x in batches:
            moded(x)
        got = [_bits(t) for t in moded._non_linear_param_search()]
    assert got == want and mode.ops > 0
    reasons = counters.snapshot()[observe.FORWARD_STATS_NAME].fallbacks
    assert any("dispatch mode" in r for r in reasons), reasons
