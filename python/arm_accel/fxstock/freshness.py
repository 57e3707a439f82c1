"""What our last re-trace of a graph left: each node's target/args/kwargs/val objects, to know
which values are still what dispatch gave (fx replaces the args containers on every edit and
passes replace ``meta["val"]``, so identity says "untouched since")."""

from __future__ import annotations

from typing import Any

import torch
from torch import fx


class Left:
    """A node's target/args/kwargs/val objects when a re-trace left it, and how many autograd
    nodes the dispatch that computed the value created (``grad_nodes``; None: not known), a
    slotted class: one is made per node per re-trace."""

    __slots__ = ("target", "args", "kwargs", "val", "grad_nodes")

    def __init__(
        self, target: Any, args: Any, kwargs: Any, val: Any, grad_nodes: int | None = None
    ) -> None:
        self.target, self.args, self.kwargs, self.val = target, args, kwargs, val
        self.grad_nodes = grad_nodes


#: The attribute of an ``fx.Graph`` holding what our last re-trace of it left. On the graph
#: itself, not in a weak-keyed table: the entries reference the nodes, which reference the
#: graph, so a table would keep every graph alive. ``Graph.__deepcopy__`` does not copy it.
_LEFT_ATTR = "_arm_accel_left"


#: The attribute holding the grad and inference modes the record's values were dispatched in.
_MODE_ATTR = "_arm_accel_left_mode"


def _mode() -> tuple[bool, bool]:
    """What a dispatch's result depends on besides its operator and inputs: grad mode (whether
    it requires grad) and inference mode."""
    return torch.is_grad_enabled(), torch.is_inference_mode_enabled()


def record(graph: fx.Graph, grad_nodes: dict[fx.Node, int] | None = None) -> None:
    """Remember each node's objects as a re-trace of the graph just left them, with the
    autograd nodes its value's dispatch created where the re-trace knows them, and the modes
    the values were dispatched in."""
    known = grad_nodes or {}
    setattr(graph, _LEFT_ATTR, {n: _left_now(n, known.get(n)) for n in graph.nodes})
    setattr(graph, _MODE_ATTR, _mode())


def _left_now(node: fx.Node, grad_nodes: int | None = None) -> Left:
    return Left(node.target, node._args, node._kwargs, node.meta.get("val"), grad_nodes)


def note_dispatched(graph: fx.Graph, nodes: list[fx.Node]) -> None:
    """These nodes' values were just fake-dispatched from their inputs' current values (the
    virtual re-trace): where a record of the graph exists, they count as left by a re-trace."""
    left = getattr(graph, _LEFT_ATTR, None)
    if left is None:
        return
    if getattr(graph, _MODE_ATTR, None) != _mode():
        setattr(graph, _LEFT_ATTR, None)  # values of two modes: keep none of them
        return
    for n in nodes:
        left[n] = _left_now(n)


def left_by(graph: fx.Graph) -> dict[fx.Node, Left]:
    """The graph's record (empty if no re-trace of ours left it, or if its values were
    dispatched in another grad or inference mode than now: dispatched again, they would
    differ in ``requires_grad``, and in the autograd nodes they create)."""
    if getattr(graph, _MODE_ATTR, None) != _mode():
        return {}
    return getattr(graph, _LEFT_ATTR, None) or {}


def left_as_is(left: dict[fx.Node, Left], node: fx.Node) -> Left | None:
    """The node's entry if the node is still as the re-trace left it, else None."""
    entry = left.get(node)
    if (
        entry is not None
        and entry.target is node.target
        and entry.args is node.args
        and entry.kwargs is node.kwargs
        and entry.val is node.meta.get("val")
    ):
        return entry
    return None


__all__ = ["Left", "left_as_is", "left_by", "note_dispatched", "record"]
