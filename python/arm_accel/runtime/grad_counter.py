"""Autograd's sequence counter: what fx reads a node's ``seq_nr`` from.

Every autograd node created (a fake dispatch on values requiring grad, under grad mode) takes
the next number of this thread's counter, and a node traced next records it. A re-trace that
keeps a value instead of dispatching it again moves the counter as the dispatch would have,
by the count measured when the value was dispatched (design.md, "The re-trace engine").
"""

from __future__ import annotations

import torch

#: A real leaf requiring grad: each ``alias`` of it creates one autograd node.
_leaf: torch.Tensor | None = None


def now() -> int:
    """The counter's current value."""
    return int(torch.autograd._get_sequence_nr())  # type: ignore[attr-defined]


def counting() -> bool:
    """Whether dispatches create autograd nodes here: grad mode on, inference mode off."""
    return torch.is_grad_enabled() and not torch.is_inference_mode_enabled()


def advance(count: int) -> None:
    """Move the counter by ``count`` autograd nodes (only while :func:`counting`): ``alias``
    of a real leaf, below any Python dispatch mode (a fake mode would take a real tensor)."""
    global _leaf
    if count <= 0:
        return
    if _leaf is None:
        _leaf = torch.zeros((), requires_grad=True)
    alias = torch.ops.aten.alias.default
    with torch._C._DisableTorchDispatch():
        for _ in range(count):
            alias(_leaf)


__all__ = ["advance", "counting", "now"]
