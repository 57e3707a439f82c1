"""``arm_accel.runtime.stack_entry`` -- the last two entries of ``traceback.format_stack()``
without formatting the whole stack -- against ``traceback.format_stack`` itself, called from the
same line of the same frame."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable

import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import pytest
from arm_accel.control import counters, switch
from arm_accel.runtime import stack_entry

Format = Callable[[], list[str]]


def recursing_caller(n: int, fmt: Format) -> list[str]:
    """``n`` frames of this function at one line, the last calling ``fmt`` from that line."""
    return formatted(fmt) if n == 0 else recursing_caller(n - 1, fmt)


def formatted(fmt: Format) -> list[str]:
    return fmt()


def recursing_formatter(n: int, fmt: Format) -> list[str]:
    """``n + 1`` frames of this function at one line, the last calling ``fmt`` there."""
    return fmt() if n == 0 else recursing_formatter(n - 1, fmt)


def last_two(shape: Callable[[int, Format], list[str]], n: int) -> tuple[list[str], list[str]]:
    return shape(n, stack_entry.format_stack)[-2:], shape(n, traceback.format_stack)[-2:]


@pytest.mark.parametrize("n", range(7))
@pytest.mark.parametrize("shape", [recursing_caller, recursing_formatter])
def test_last_two_entries_are_stocks(shape: Callable[[int, Format], list[str]], n: int) -> None:
    """The last two entries equal stock's for runs of 1-7 identical frames at the caller's and
    at the formatting frame's position (stock collapses runs of more than three into a
    ``[Previous line repeated ...]`` entry: there the whole stack is formatted, counted); the
    shorter runs took the fast path."""
    counters.reset()
    ours, stock = last_two(shape, n)
    assert ours == stock
    entry = counters.snapshot()[stack_entry.STATS_NAME]
    collapsed = n + 1 > 3
    assert entry.accelerated == (0 if collapsed else 1), entry
    if collapsed:
        assert any("repeated" in line for line in stock)
        assert dict(entry.fallbacks) == {"repeated frames at the end of the stack": 1}


def test_traceback_limit_and_switch_run_stock(monkeypatch: pytest.MonkeyPatch) -> None:
    """``sys.tracebacklimit`` set, or acceleration off: the whole stack as stock formats it
    (not only its last two entries)."""
    monkeypatch.setattr(sys, "tracebacklimit", 3, raising=False)
    counters.reset()
    ours, stock = formatted(stack_entry.format_stack), formatted(traceback.format_stack)
    assert len(ours) == len(stock) == 3 and ours[:-1] == stock[:-1]
    monkeypatch.delattr(sys, "tracebacklimit")
    with switch.disabled():
        ours, stock = formatted(stack_entry.format_stack), formatted(traceback.format_stack)
    assert len(ours) == len(stock) > 2
    assert dict(counters.snapshot()[stack_entry.STATS_NAME].fallbacks) == {
        "sys.tracebacklimit is set": 1
    }


def test_installed_in_the_pinned_modules_only() -> None:
    """With the engine installed both Arm modules see the shim (their ``traceback`` is ours,
    everything but ``format_stack`` the module's own); other modules keep ``traceback``."""
    from executorch.backends.arm._passes import arm_pass, arm_pass_utils
    from executorch.exir import pass_base

    for module in (arm_pass, arm_pass_utils):
        assert isinstance(module.traceback, stack_entry._Traceback)
        assert module.traceback.format_stack is stack_entry.format_stack
        assert module.traceback.extract_stack is traceback.extract_stack
    assert pass_base.traceback is traceback
