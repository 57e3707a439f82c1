"""The plan step the fusion passes share: run one kernel on an exported node table and turn
its ValueError (a table or graph it does not model) into a :class:`Decline`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from arm_accel.native.table import NodeTable
from arm_accel.pipeline.passes.base import Decline

T = TypeVar("T")


def no_class(_target: Any) -> int:
    """Classifier for kernels that read no target class."""
    return 0


def run_kernel(kernel: Callable[..., T], table: NodeTable, *args: Any) -> T:
    """``kernel(table, *args)``; a ValueError from it declines, naming the kernel."""
    try:
        return kernel(table, *args)
    except ValueError as exc:
        raise Decline(f"{getattr(kernel, '__name__', 'kernel')}: {exc}") from exc
